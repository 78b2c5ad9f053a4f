"""Project files (``.iaproj``): one zip of a JSON manifest and ``.npy`` arrays.

Never pickle: arrays are plain ``.npy`` (numbers only) and everything else is
JSON.  A SciPy sparse array (W and the distances of a pruned run above 2,000
images) is stored as its CSR components, each a plain ``.npy`` entry
(``<name>.data``, ``.indices``, ``.indptr``, ``.shape``), and rebuilt as the
same type (``csr_matrix`` or ``csr_array``) on loading.  Writes are atomic
(:mod:`iastudio.core.atomic`: a temporary file in the same folder, then a
rename), so a crash never leaves half a project behind.

Projects come from other people, so :func:`load_project` treats the file as
untrusted: it refuses anything that is not a regular file before opening it
(a FIFO would block), bounds every read (the zip directory, the manifest —
:data:`MAX_MANIFEST_BYTES`, nesting :data:`MAX_JSON_DEPTH` — and each array,
whose header must match the shape the manifest implies before its data is
read, streamed, never more than :func:`inflated_limit` in all), checks types,
shapes, value ranges and cross-consistency (for a sparse array: 1-D integer
``indices`` / ``indptr``, ``indptr`` of length n + 1 rising from 0 to the
number of stored values, column indices in range and sorted without repeats
in each row, finite values, shape n x n), and raises only
:class:`ProjectError` with a plain reason.

File names are stored as JSON strings.  A name that is not valid UTF-8 (legal
on Linux) is kept with Python's ``surrogateescape`` convention: each byte
that is not UTF-8 becomes U+DC80..U+DCFF, written as a ``\\udcXX`` escape, so
``os.fsencode(path)`` gives back the original bytes.

A project holds the image paths and true labels, the files skipped, the
working size, the per-image transforms the user applied, the run parameters,
the run's history (W, means, distances and labels per iteration, enough to
replay the animation), the result, the clusters with their names after the
user's edits, each image's CTF parameters when it came from a RELION STAR
file (``arrays/ctf.npy``, for phase flipping), a denoised run's class averages
of the images before denoising (``arrays/undenoised_means.npy``: the images
before denoising are not kept, so they could not be made again), and —
optionally, by default —
the preprocessed working images, so the project opens even when the original
files have moved.
"""
from __future__ import annotations

import io
import json
import math
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._version import __version__
from .atomic import atomic_write, remove_stale_temporaries
from .attention import RESULT_ARRAYS, Stage
from .clusterbook import UNASSIGNED, ClusterBook
from .clustering import KChoice
from .regular import open_regular

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "HISTORY_ARRAYS",
    "MAX_FRAMES",
    "MAX_IMAGES",
    "MAX_JSON_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_SIDE",
    "RECORDED_STAGES",
    "Project",
    "ProjectError",
    "history_entry",
    "inflated_limit",
    "load_project",
    "open_regular",
    "save_project",
]

FORMAT = "invariant-attention-studio project"
FORMAT_VERSION = 2
"""The newest format this version reads.  A project is written with the oldest
format that holds it: 1 without sparse arrays, 2 with them (an older reader
then refuses it as "made by a newer version" instead of misreading it)."""
_RESULT_KEYS = RESULT_ARRAYS  # the stored arrays of a RunResult: RunResult.arrays() / RunResult.from_arrays()
HISTORY_ARRAYS = ("weights", "means", "distances", "labels")
"""The arrays of each step of :attr:`Project.history` (see :func:`history_entry`)."""
_FRAME_KEYS = HISTORY_ARRAYS
_STAGES = tuple(Stage)
_SPARSE_RESULT = ("weights", "input_distances", "final_distances")  # the (n, n) arrays that may be sparse
_SPARSE_FRAME = ("weights", "distances")
_SPARSE_PARTS = ("data", "indices", "indptr", "shape")
_SPARSE_TYPES = ("csr_matrix", "csr_array")

MAX_IMAGES = 100_000
"""Most images a project may declare."""
MAX_MANIFEST_BYTES = 8 * 2**20
"""Largest manifest read (8 MiB: about 40 000 images with long paths)."""
MAX_JSON_DEPTH = 12
"""Deepest nesting of lists and objects in the manifest."""
MAX_FRAMES = 10_000
"""Most run-history frames."""
MAX_SIDE = 4096
"""Largest side of an embedded image or mean."""
_MAX_MEMBERS = (4 + len(_RESULT_KEYS) + len(_FRAME_KEYS) * MAX_FRAMES + 16  # a sparse array is 4 entries, not 1
                + (len(_SPARSE_PARTS) - 1) * (len(_SPARSE_RESULT) + len(_SPARSE_FRAME) * MAX_FRAMES))
_MAX_DIRECTORY_BYTES = 64 * 2**20
_MAX_HEADER = 4096
_MAX_CONTAINERS = 500_000  # lists and objects in the manifest (skipped files and history frames are objects)
_MIN_BUDGET = 256 * 2**20
_RATIO = 20
_MAX_BUDGET = 8 * 2**30


def inflated_limit(file_size: int) -> int:
    """Most bytes of array data a project of ``file_size`` bytes may inflate to.

    ``max(256 MiB, 20 x file_size)``, at most 8 GiB: real projects compress
    3-4 times overall (measured on the demos; 7-14 times for their most
    compressible member), a zip bomb a thousand times.
    """
    return int(min(_MAX_BUDGET, max(_MIN_BUDGET, _RATIO * int(file_size))))


class ProjectError(ValueError):
    """A project file cannot be read; the message says why, in plain words."""


@dataclass
class Project:
    """Everything a session needs to come back to its work.

    Attributes
    ----------
    paths, labels, skipped : list
        As in :class:`iastudio.core.imageset.ImageSet`.
    size : int
        Working size (longest side, px).
    transforms : ndarray (n, 3)
        Transforms applied to the images before the run (canvas px).
    base : ndarray (n, S, S[, C]) or None
        The preprocessed originals (embedded working images).
    scale, offset : ndarray or None
        Canvas geometry, to report transforms in original pixels.
    parameters : dict
        Run settings.
    clusters : ClusterBook or None
        Clusters and names, edits included.
    history : list of dict
        Per recorded step: ``iteration``, ``stage`` (a :class:`~iastudio.core.attention.Stage`
        once loaded) and arrays ``weights``,
        ``means``, ``distances``, ``labels`` (``weights`` and ``distances``
        may be SciPy sparse: a pruned run above 2,000 images).
    result : dict of ndarray
        :data:`iastudio.core.attention.RESULT_ARRAYS`: ``cluster_means``,
        ``image_transforms``, ``scores``, ``weights``, ``input_distances``,
        ``final_distances``, ``run_labels`` (any may be absent), as
        :meth:`RunResult.arrays` gives them (the weights and distances may
        be SciPy sparse).
    edits : list of str
        What the user did, in order (the undo history's texts).
    ka_labels : ndarray (n,) of int or None
        Kernel attention's clusters of the same images (a finished IA run's
        comparison); None in projects saved without it.
    ctf : ndarray (n, 7) or None
        Each image's CTF parameters from the RELION STAR file that listed it
        (:func:`~iastudio.core.particle_ctf.ctf_to_array`: defocus, voltage,
        spherical aberration, amplitude contrast, pixel size, defocus V,
        astigmatism angle; a row of NaN: none); None when no image came from a
        STAR file.  Projects saved before astigmatism was read hold ``(n, 5)``
        (no defocus V or angle) and open as they are.
    undenoised_means : ndarray (k, S, S[, C]) or None
        A run that denoised its images: the class averages of the images
        before denoising at the run's poses (:func:`iastudio.core.frames.undenoised_means`),
        one per cluster of the result's ``cluster_means``; None otherwise and
        in projects saved without them.
    """

    paths: list
    labels: list
    skipped: list = field(default_factory=list)
    size: int = 64
    transforms: np.ndarray | None = None
    base: np.ndarray | None = None
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None
    parameters: dict = field(default_factory=dict)
    clusters: ClusterBook | None = None
    history: list = field(default_factory=list)
    result: dict = field(default_factory=dict)
    edits: list = field(default_factory=list)
    ka_labels: np.ndarray | None = None
    ctf: np.ndarray | None = None
    undenoised_means: np.ndarray | None = None
    app_version: str = __version__

    @property
    def n(self) -> int:
        return len(self.paths)

    def missing_originals(self) -> list[str]:
        """Original files that are no longer where they were (demo images never are)."""
        from .stacks import source_file  # an image of a stack, "stack.mrcs#17": the stack's file

        return [p for p in self.paths if not str(p).startswith("demo:") and not source_file(p).exists()]


RECORDED_STAGES = (Stage.SIMILARITY, Stage.ITERATION, Stage.DONE)
"""The snapshots a project's run history keeps (enough to replay the run; not every mean step)."""


def run_record(result) -> dict:
    """What a project's ``parameters`` keep of a finished run besides its arrays.

    Parameters
    ----------
    result : RunResult or None

    Returns
    -------
    dict
        ``beta_used`` (the global β used, or its equivalent), ``k_choice``
        (:meth:`KChoice.as_dict`, or None) and ``run_notes`` (what the run
        decided on its own, e.g. where it stopped); empty without a result.
    """
    if result is None:
        return {}
    return {"beta_used": float(result.beta),
            "k_choice": None if result.k_choice is None else result.k_choice.as_dict(),
            "run_notes": [str(note) for note in result.notes]}


def history_entry(snapshot) -> dict:
    """One step of :attr:`Project.history` from a :class:`~iastudio.core.attention.Snapshot`.

    Returns
    -------
    dict
        ``iteration``, ``stage`` and the arrays ``weights``, ``means``,
        ``distances``, ``labels`` (the snapshot's own, not copies).
    """
    entry = {"iteration": snapshot.iteration, "stage": Stage(snapshot.stage)}
    entry.update({key: getattr(snapshot, key) for key in HISTORY_ARRAYS})
    return entry


def _npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _csr_parts(arr) -> tuple[dict, str]:
    """The CSR components of a SciPy sparse array (canonical: sorted, no repeated entries) and its type."""
    import scipy.sparse as sp

    kind = "csr_array" if isinstance(arr, sp.sparray) else "csr_matrix"
    csr = arr.tocsr()
    if not csr.has_canonical_format:
        csr = csr.copy()  # never change the caller's array
        csr.sum_duplicates()
    return {"data": csr.data, "indices": csr.indices, "indptr": csr.indptr,
            "shape": np.asarray(csr.shape, dtype=np.int64)}, kind


def _json_bytes(data) -> bytes:
    """JSON as UTF-8; lone surrogates (non-UTF-8 file-name bytes) become ``\\udcXX`` escapes."""
    return json.dumps(data, indent=1, ensure_ascii=False).encode("utf-8", "backslashreplace")


def save_project(path, project: Project, *, embed: bool = True) -> Path:
    """Write ``project`` to ``path`` atomically.

    Parameters
    ----------
    path : str or Path
        The ``.iaproj`` file.
    project : Project
    embed : bool
        Store the preprocessed working images too (the project then opens
        when the originals have moved).

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        When an array other than W or the distances is SciPy sparse.

    Notes
    -----
    Temporary files that killed saves left beside ``path`` are removed first
    (:func:`iastudio.core.atomic.remove_stale_temporaries`).  SciPy sparse
    weights and distances are written as their CSR components (``data``,
    ``indices``, ``indptr``, ``shape``: plain ``.npy`` entries, listed in the
    manifest's ``sparse`` with their type), and the project as format
    version 2; a project without sparse arrays stays version 1.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, name=path.name)
    arrays, sparse, frames = _project_arrays(project, embed=embed)
    manifest = _manifest(project, arrays, sparse, frames)
    with atomic_write(path) as fh:  # noqa: SIM117 - the file, then the zip in it
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            zf.writestr("manifest.json", _json_bytes(manifest))
            for name, arr in arrays.items():
                zf.writestr(f"arrays/{name}.npy", _npy_bytes(arr))
    return path


def _project_arrays(project: Project, *, embed: bool) -> tuple[dict, dict, list]:
    """The arrays :func:`save_project` writes, by entry name; the sparse ones' types; the history's frames."""
    import scipy.sparse as sp

    arrays: dict[str, np.ndarray] = {}
    sparse: dict[str, str] = {}

    def put(key: str, arr, may_be_sparse: bool) -> None:
        if not sp.issparse(arr):
            arrays[key] = arr
            return
        if not may_be_sparse:
            raise ValueError(f"the array '{key}' cannot be stored sparse")
        parts, sparse[key] = _csr_parts(arr)
        for part, values in parts.items():
            arrays[f"{key}.{part}"] = values

    arrays["transforms"] = np.zeros((project.n, 3)) if project.transforms is None else project.transforms
    if embed and project.base is not None:
        arrays["base"] = project.base.astype(np.float32)
    for key in ("scale", "offset"):
        if getattr(project, key) is not None:
            arrays[key] = getattr(project, key)
    if project.ka_labels is not None:
        arrays["ka_labels"] = np.asarray(project.ka_labels, dtype=np.int64)
    if project.undenoised_means is not None:
        arrays["undenoised_means"] = np.asarray(project.undenoised_means, dtype=np.float32)
    if project.ctf is not None:
        arrays["ctf"] = np.asarray(project.ctf, dtype=np.float64)
    for key, arr in project.result.items():
        if arr is not None and key in _RESULT_KEYS:
            put(f"result/{key}", arr, key in _SPARSE_RESULT)
    frames = []
    for k, fr in enumerate(project.history):
        frames.append({"iteration": int(fr["iteration"]), "stage": str(fr["stage"])})
        for key in _FRAME_KEYS:
            if fr.get(key) is not None:
                put(f"history/{k:04d}_{key}", fr[key], key in _SPARSE_FRAME)
    return arrays, sparse, frames


def _manifest(project: Project, arrays: dict, sparse: dict, frames: list) -> dict:
    """The ``manifest.json`` of a project whose arrays are ``arrays`` (see :func:`_project_arrays`)."""
    manifest = {
        "format": FORMAT,
        "format_version": 2 if sparse else 1,
        "app_version": __version__,
        "n_images": project.n,
        "paths": [str(p) for p in project.paths],
        "labels": list(project.labels),
        "skipped": list(project.skipped),
        "size": int(project.size),
        "embedded_images": "base" in arrays,
        "parameters": project.parameters,
        "clusters": project.clusters.to_json() if project.clusters is not None else None,
        "history": frames,
        "edits": list(project.edits),
        "arrays": sorted(arrays),
    }
    if sparse:
        manifest["sparse"] = dict(sorted(sparse.items()))
    return manifest


# ---------------------------------------------------------------------------------------------- loading
def _cluster_key(key, limit: int) -> bool:
    """A cluster name's key is a cluster id in ASCII decimal, as written ("3"; not "03", "٣", "+3" or "-1"),
    below ``limit``."""
    return (isinstance(key, str) and 0 < len(key) <= 12 and key.isascii() and key.isdigit()
            and key == str(int(key)) and int(key) < limit)


def _check_directory(fh, size: int, name: str) -> None:
    """Bound the zip's central directory (entries and bytes) before zipfile parses it."""
    tail = min(size, 65536 + 22)
    fh.seek(size - tail)
    data = fh.read(tail)
    at = data.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(data):
        return  # zipfile gives the precise reason
    entries, cd_size = struct.unpack("<xxxxxxxxxxHI", data[at:at + 16])
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:  # zip64: the real numbers are in the zip64 record
        loc = data.rfind(b"PK\x06\x07", 0, at)
        if loc >= 0 and loc + 20 <= len(data):
            (rec_off,) = struct.unpack("<Q", data[loc + 8:loc + 16])
            if rec_off + 56 <= size:
                fh.seek(rec_off)
                rec = fh.read(56)
                if rec[:4] == b"PK\x06\x06":
                    entries, cd_size = struct.unpack("<QQ", rec[32:48])
    if entries > _MAX_MEMBERS or cd_size > _MAX_DIRECTORY_BYTES:
        raise ProjectError(f"{name}: refused: the zip directory is too large ({entries} entries, {cd_size} bytes)")
    fh.seek(0)


def _read_bounded(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, name: str, what: str) -> bytes:
    if info.file_size > limit:
        raise ProjectError(f"{name}: refused: {what} would inflate to {info.file_size} bytes "
                           f"(more than the {limit} allowed)")
    with zf.open(info) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ProjectError(f"{name}: refused: {what} inflates beyond {limit} bytes")
    return data


def _json_shape_ok(obj, depth_limit: int, container_limit: int) -> str | None:
    """Why the parsed manifest is too deep or has too many lists/objects, or None (level by level)."""
    level = [obj] if isinstance(obj, (list, dict)) else []
    depth = count = 0
    while level:
        depth += 1
        count += len(level)
        if depth > depth_limit:
            return f"nested more than {depth_limit} deep"
        if count > container_limit:
            return f"more than {container_limit} lists and objects"
        nxt = []
        for item in level:
            nxt.extend(v for v in (item.values() if isinstance(item, dict) else item) if isinstance(v, (list, dict)))
        level = nxt
    return None


def load_project(path, *, max_bytes: int | None = None) -> Project:
    """Read a ``.iaproj`` file, which may come from anyone.

    Parameters
    ----------
    path : str or Path
    max_bytes : int, optional
        Most bytes all arrays together may inflate to; default
        :func:`inflated_limit` of the file's size.  Raise it to open a
        legitimate project refused as too large.

    Returns
    -------
    Project
        Validated: every array has the shape, type and value range the
        manifest implies, labels and clusters are consistent with the images.

    Raises
    ------
    ProjectError
        For any content that cannot be used — not a regular file, not a
        project, truncated or corrupted, too large (a zip bomb), or
        inconsistent — with the reason in plain words.  No other exception
        escapes for any file content.
    """
    path = Path(path)
    name = path.name or str(path)
    fh, size = open_regular(path, what="a project file", error=ProjectError)
    try:
        with fh:
            _check_directory(fh, size, name)
            with zipfile.ZipFile(fh) as zf:
                try:
                    info = zf.getinfo("manifest.json")
                except KeyError:
                    raise ProjectError(f"{name}: not a project (no manifest)") from None
                raw = _read_bounded(zf, info, MAX_MANIFEST_BYTES, name, "the manifest")
                if raw.count(b"{") + raw.count(b"[") > _MAX_CONTAINERS:  # before parsing: bounds its memory
                    raise ProjectError(f"{name}: refused: the manifest has more than {_MAX_CONTAINERS} lists "
                                       "and objects")
                try:
                    manifest = json.loads(raw.decode("utf-8"))
                except RecursionError:
                    raise ProjectError(f"{name}: refused: the manifest is nested too deeply") from None
                if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                    raise ProjectError(f"{name}: not an Invariant Attention Studio project")
                why = _json_shape_ok(manifest, MAX_JSON_DEPTH, _MAX_CONTAINERS)
                if why:
                    raise ProjectError(f"{name}: refused: the manifest is {why}")
                version = manifest.get("format_version", 0)
                if not isinstance(version, int) or isinstance(version, bool) or version < 0:
                    raise ProjectError(f"{name}: the manifest is corrupted (format_version)")
                if version > FORMAT_VERSION:
                    raise ProjectError(f"{name}: made by a newer version ({str(manifest.get('app_version'))[:40]})")
                meta = _Manifest(name, manifest)
                arrays = _read_arrays(zf, meta, inflated_limit(size) if max_bytes is None else int(max_bytes))
    except ProjectError:
        raise
    except zipfile.BadZipFile as exc:
        raise ProjectError(f"{name}: the file is truncated or corrupted ({_short(exc)})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ProjectError(f"{name}: the manifest is corrupted") from None
    except MemoryError:
        raise ProjectError(f"{name}: refused: not enough memory to read it") from None
    except RecursionError:
        raise ProjectError(f"{name}: refused: nested too deeply") from None
    except (ValueError, OSError, EOFError, zlib.error, NotImplementedError, struct.error, TypeError,
            OverflowError, KeyError, IndexError, AttributeError, RuntimeError, LookupError) as exc:
        raise ProjectError(f"{name}: the file is truncated or corrupted ({_short(exc)})") from None
    try:
        return meta.build(arrays)
    except ProjectError:
        raise
    except Exception as exc:  # noqa: BLE001 - any content problem is a ProjectError
        raise ProjectError(f"{name}: the manifest is incomplete or inconsistent ({_short(exc)})") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Manifest:
    """The validated manifest, and the array shapes it implies."""

    def __init__(self, name: str, m: dict):
        self.name = name
        self.n, self.paths, self.labels, self.skipped, self.size = self._images(m)
        self.params = self._parameters(m)
        self.edits, self.frames = self._history(m)
        self.names, self.sparse = self._arrays(m, self.frames)
        self.clusters = self._clusters(m, self.n)
        self.version = str(m.get("app_version", ""))[:100]

    def _images(self, m: dict) -> tuple:
        """``(n, paths, labels, skipped, size)``, checked."""
        bad = self._bad
        paths = m.get("paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) and 0 < len(p) <= 4096 and "\x00" not in p
                                                  for p in paths):
            bad("'paths' must be a list of file names")
        n = len(paths)
        if not 1 <= n <= MAX_IMAGES:
            bad(f"it holds {n} images (1 to {MAX_IMAGES} allowed)")
        declared = m.get("n_images", n)
        if not _is_int(declared) or declared != n:
            bad(f"'n_images' ({str(declared)[:20]}) does not match the {n} paths")
        labels = m.get("labels")
        labels = [None] * n if labels is None else labels
        if not isinstance(labels, list) or len(labels) != n or not all(
                lab is None or (isinstance(lab, str) and len(lab) <= 4096) for lab in labels):
            bad("labels do not match the images")
        skipped = m.get("skipped", [])
        if not isinstance(skipped, list) or len(skipped) > 10 * MAX_IMAGES or not all(
                isinstance(s, dict) and isinstance(s.get("path"), str) and isinstance(s.get("reason"), str)
                for s in skipped):
            bad("the list of skipped files is malformed")
        size = m.get("size", 64)
        if not _is_int(size) or not 2 <= size <= MAX_SIDE:
            bad(f"working size {str(size)[:20]} is out of range")
        return n, paths, labels, skipped, size

    def _parameters(self, m: dict) -> dict:
        """The run's parameters, with the values the app reads back checked."""
        bad = self._bad
        params = m.get("parameters") or {}
        if not isinstance(params, dict):
            bad("'parameters' is not an object")
        beta_used = params.get("beta_used")
        if beta_used is not None and (not isinstance(beta_used, (int, float)) or isinstance(beta_used, bool)
                                      or not (math.isfinite(beta_used) and 0 < beta_used < 1e300)):
            bad("'beta_used' is not a positive number")
        notes = params.get("run_notes", [])
        if not isinstance(notes, list) or len(notes) > 100 or not all(isinstance(t, str) and len(t) <= 4000
                                                                         for t in notes):
            bad("'run_notes' must be a list of texts")
        if params.get("k_choice") is not None:
            try:
                KChoice.from_dict(params["k_choice"])
            except ValueError:
                bad("'k_choice' is malformed")
        return params

    def _history(self, m: dict) -> tuple[list, list]:
        """``(edits, frames)``: the names of the cluster edits and the run history's frames, checked."""
        bad = self._bad
        edits = m.get("edits", [])
        if not isinstance(edits, list) or not all(isinstance(e, str) for e in edits):
            bad("'edits' must be a list of texts")
        history = m.get("history", [])
        if not isinstance(history, list) or len(history) > MAX_FRAMES:
            bad("the run history is malformed or too long")
        frames = []
        for fr in history:
            if not isinstance(fr, dict) or not _is_int(fr.get("iteration")) or not 0 <= fr["iteration"] <= 10**6 \
                    or fr.get("stage") not in _STAGES:
                bad("a run-history frame is malformed")
            frames.append({"iteration": int(fr["iteration"]), "stage": Stage(fr["stage"])})
        return edits, frames

    def _arrays(self, m: dict, frames: list) -> tuple[list, dict]:
        """``(names, sparse)``: the arrays listed (each one allowed) and the sparse ones' types."""
        bad = self._bad
        names = m.get("arrays", [])
        if not isinstance(names, list) or not all(isinstance(a, str) for a in names) or len(set(names)) != len(names):
            bad("the list of arrays is malformed")
        allowed = {"transforms", "base", "scale", "offset", "ka_labels", "ctf", "undenoised_means"} | {
            f"result/{k}" for k in _RESULT_KEYS} | {
            f"history/{k:04d}_{key}" for k in range(len(frames)) for key in _FRAME_KEYS}
        sparse = m.get("sparse", {})
        may_be_sparse = {f"result/{k}" for k in _SPARSE_RESULT} | {
            f"history/{k:04d}_{key}" for k in range(len(frames)) for key in _SPARSE_FRAME}
        if not isinstance(sparse, dict) or not all(k in may_be_sparse and isinstance(v, str) and v in _SPARSE_TYPES
                                                   for k, v in sparse.items()):
            bad("the list of sparse arrays is malformed")
        if sparse and m.get("format_version", 0) < 2:
            bad("sparse arrays in a project of format version 1")
        allowed = (allowed - set(sparse)) | {f"{k}.{part}" for k in sparse for part in _SPARSE_PARTS}
        unknown = [a for a in names if a not in allowed]
        if unknown:
            bad(f"unexpected array '{unknown[0][:60]}'")
        listed = set(names)
        for key in sparse:
            lacking = [part for part in _SPARSE_PARTS if f"{key}.{part}" not in listed]
            if lacking:
                bad(f"the sparse array '{key}' lacks its {lacking[0]}")
        return names, sparse

    def _clusters(self, m: dict, n: int):
        """The clusters' JSON (checked against ``n`` images), or None."""
        bad = self._bad
        c = m.get("clusters")
        if c is not None:
            if not isinstance(c, dict) or not isinstance(c.get("labels"), list) or len(c["labels"]) != n:
                bad("the clusters do not match the images")
            limit = 10 * n + 1000
            if not all(_is_int(x) and (x == UNASSIGNED or 0 <= x < limit) for x in c["labels"]):
                bad("a cluster id is out of range")
            nm = c.get("names", {})
            if not isinstance(nm, dict) or not all(
                    isinstance(v, str) and len(v) <= 1000 and _cluster_key(k, limit) for k, v in nm.items()):
                bad("the cluster names are malformed")
        return c

    def _bad(self, why: str):
        raise ProjectError(f"{self.name}: inconsistent contents ({why})")

    def spec(self, key: str):
        """``(shape pattern, dtype kinds)``: ints are fixed, "S" the side, "k" a count <= n, "C" channels,
        "nnz" the stored values of a sparse array (<= n * n)."""
        n = self.n
        part = key.rpartition(".")[2] if "." in key else ""
        if part:  # a component of a sparse (n, n) array, in CSR form
            return {"data": (("nnz",), "f"), "indices": (("nnz",), "iu"), "indptr": ((n + 1,), "iu"),
                    "shape": ((2,), "iu")}[part]
        img = ("k", "S", "S", "C")
        table = {"transforms": ((n, 3), "f"), "base": ((n, "S", "S", "C"), "f"), "scale": ((n,), "f"),
                 "offset": ((n, 2), "f"), "cluster_means": (img, "f"), "image_transforms": ((n, 3), "f"),
                 "scores": ((n,), "f"), "weights": ((n, n), "f"), "input_distances": ((n, n), "f"),
                 "final_distances": ((n, n), "f"), "run_labels": ((n,), "iu"),
                 "ka_labels": ((n,), "iu"), "ctf": ((n, (5, 7)), "f"), "means": ((n, "S", "S", "C"), "f"),
                 "undenoised_means": (img, "f"),
                 "distances": ((n, n), "f"), "labels": ((n,), "iu")}
        return table[key.split("/")[-1].split("_", 1)[-1] if key.startswith("history/") else key.split("/")[-1]]

    def build(self, arrays: dict) -> Project:
        n = self.n
        bad = self._bad
        for key, kind in self.sparse.items():
            arrays[key] = _csr_from_parts({part: arrays.pop(f"{key}.{part}") for part in _SPARSE_PARTS},
                                          kind=kind, n=n, key=key, bad=bad)
        for key, arr in arrays.items():
            short = key.split("/")[-1]
            if key in self.sparse:
                continue  # checked by _csr_from_parts
            if arr.dtype.kind == "f" and short not in ("scores", "ctf") and not np.isfinite(arr).all():
                bad(f"'{key}' holds NaN or infinite values")
            if short.endswith("labels") and arr.size and (arr.min() < 0 or arr.max() >= n):
                bad(f"'{key}' holds a cluster number out of range")
        scale = arrays.get("scale")
        if scale is not None and not (scale > 0).all():
            bad("'scale' must be positive")
        if arrays.get("ctf") is not None:
            from .particle_ctf import ctf_from_array

            try:
                ctf_from_array(arrays["ctf"])
            except ValueError as exc:
                bad(f"'ctf': {exc}")
        for k, fr in enumerate(self.frames):
            for key in _FRAME_KEYS:
                fr[key] = arrays.get(f"history/{k:04d}_{key}")
            if fr["distances"] is None or fr["labels"] is None:
                bad(f"run-history frame {k} lacks its distances or labels")
        result = {k[len("result/"):]: v for k, v in arrays.items() if k.startswith("result/")}
        if ("run_labels" in result and "cluster_means" in result
                and result["cluster_means"].shape[0] != int(result["run_labels"].max()) + 1):
            bad("the cluster means do not match the run's clusters")
        und = arrays.get("undenoised_means")
        if und is not None and und.shape != getattr(result.get("cluster_means"), "shape", None):
            bad("the class averages before denoising do not match the run's cluster means")
        book = None
        if self.clusters is not None:
            book = ClusterBook.from_json(self.clusters, n)
        return Project(
            paths=list(self.paths), labels=list(self.labels), skipped=list(self.skipped), size=self.size,
            transforms=np.asarray(arrays.get("transforms", np.zeros((n, 3))), dtype=float),
            base=arrays.get("base"), scale=scale, offset=arrays.get("offset"), parameters=dict(self.params),
            clusters=book, history=self.frames, result=result, edits=list(self.edits), app_version=self.version,
            ka_labels=arrays.get("ka_labels"), ctf=arrays.get("ctf"), undenoised_means=und,
        )


def _csr_from_parts(parts: dict, *, kind: str, n: int, key: str, bad):
    """A CSR ``csr_matrix`` / ``csr_array`` (``kind``) of shape (n, n) from its checked components.

    ``parts`` are the 1-D arrays ``data``, ``indices``, ``indptr`` and ``shape``
    as read (types and lengths already match their spec); ``bad(reason)``
    raises the :class:`ProjectError`.  Nothing reaches SciPy before the
    components are proven consistent.
    """
    import scipy.sparse as sp

    data, indices, indptr, shape = (parts[p] for p in _SPARSE_PARTS)
    if [int(x) for x in shape] != [n, n]:
        bad(f"the sparse array '{key}' has shape {tuple(int(x) for x in shape)}, which does not match the "
            f"{n} images")
    nnz = data.size
    if indices.size != nnz:
        bad(f"the sparse array '{key}' has {indices.size} column indices for {nnz} values")
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        bad(f"the sparse array '{key}' has row pointers that do not run from 0 to its {nnz} values")
    if (indptr[1:] < indptr[:-1]).any():
        bad(f"the sparse array '{key}' has decreasing row pointers")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= n):
        bad(f"the sparse array '{key}' has a column index out of range")
    ptr = indptr.astype(np.int64)  # every value is now in 0 .. nnz
    cols = indices.astype(np.int64)
    row_start = np.zeros(nnz, dtype=bool)
    row_start[ptr[(ptr > 0) & (ptr < nnz)]] = True  # entries that begin a row
    if (~row_start[1:] & (np.diff(cols) <= 0)).any():
        bad(f"the sparse array '{key}' has unsorted or repeated column indices in a row")
    if not np.isfinite(data).all():
        bad(f"'{key}' holds NaN or infinite values")
    index = np.int32 if max(n, nnz) < 2**31 else np.int64
    cls = sp.csr_array if kind == "csr_array" else sp.csr_matrix
    values = data.astype(np.float32 if data.dtype.itemsize < 4 else data.dtype.newbyteorder("="), copy=False)
    out = cls((values, cols.astype(index), ptr.astype(index)), shape=(n, n))
    out.has_canonical_format = True  # proven above: sorted, no repeats
    return out


def _read_npy_header(fh, key: str, name: str):
    magic = fh.read(8)
    if len(magic) != 8 or magic[:6] != b"\x93NUMPY":
        raise ProjectError(f"{name}: the array '{key}' is not a plain .npy array")
    major = magic[6]
    if major == 1:
        (hlen,) = struct.unpack("<H", fh.read(2))
    elif major in (2, 3):
        (hlen,) = struct.unpack("<I", fh.read(4))
    else:
        raise ProjectError(f"{name}: the array '{key}' has an unknown .npy version {major}")
    if hlen > _MAX_HEADER:
        raise ProjectError(f"{name}: the array '{key}' has an oversized header")
    text = fh.read(hlen).decode("latin1" if major < 3 else "utf-8")
    import ast

    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ProjectError(f"{name}: the array '{key}' has a corrupted header") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"} \
            or not isinstance(d["descr"], str) or not isinstance(d["fortran_order"], bool) \
            or not isinstance(d["shape"], tuple) or not all(_is_int(x) and x >= 0 for x in d["shape"]):
        raise ProjectError(f"{name}: the array '{key}' has a corrupted header")
    try:
        dtype = np.dtype(d["descr"])
    except (TypeError, ValueError):
        raise ProjectError(f"{name}: the array '{key}' has an unknown type") from None
    return dtype, d["shape"], d["fortran_order"]


def _read_arrays(zf: zipfile.ZipFile, meta: _Manifest, budget: int) -> dict:
    name = meta.name
    used = 0
    arrays: dict[str, np.ndarray] = {}
    dims: dict[str, int] = {}
    order = sorted(meta.names, key=lambda a: (a != "base", a))  # the base image fixes S and C first
    for key in order:
        try:
            info = zf.getinfo(f"arrays/{key}.npy")
        except KeyError:
            raise ProjectError(f"{name}: the array '{key}' is missing") from None
        if info.file_size > budget - used + _MAX_HEADER:
            raise ProjectError(f"{name}: refused: the arrays would inflate to more than {budget} bytes "
                               f"(a zip bomb or a damaged file)")
        pattern, kinds = meta.spec(key)
        with zf.open(info) as fh:
            dtype, shape, fortran = _read_npy_header(fh, key, name)
            if dtype.kind not in kinds or dtype.fields is not None or dtype.shape != () or dtype.itemsize > 8:
                raise ProjectError(f"{name}: the array '{key}' has the wrong type ({dtype.str})")
            _match(shape, pattern, dims, meta, key)
            nbytes = math.prod(shape) * dtype.itemsize
            used += nbytes
            if used > budget:
                raise ProjectError(f"{name}: refused: the arrays would inflate to more than {budget} bytes "
                                   f"(a zip bomb or a damaged file)")
            buf = bytearray(nbytes)
            view = memoryview(buf)
            got = 0
            while got < nbytes:  # in pieces: ZipExtFile.read(n) would hold ~2 copies
                piece = fh.read(min(1 << 20, nbytes - got))
                if not piece:
                    raise ProjectError(f"{name}: the array '{key}' is truncated")
                view[got:got + len(piece)] = piece
                got += len(piece)
            if fh.read(1):
                raise ProjectError(f"{name}: the array '{key}' has trailing data")
        arr = np.frombuffer(buf, dtype=dtype, count=math.prod(shape))
        arrays[key] = arr.reshape(shape, order="F" if fortran else "C")
    return arrays


def _match(shape, pattern, dims, meta, key):
    """Check ``shape`` against ``pattern``; "S", "k", "C" must agree across arrays."""
    if len(pattern) == 4 and pattern[-1] == "C" and len(shape) == 3:
        pattern = pattern[:3]
    ok = len(shape) == len(pattern)
    for got, want in zip(shape, pattern) if ok else ():
        if _is_int(want):
            ok = ok and got == want
        elif isinstance(want, tuple):  # one of these sizes (ctf: 7 columns, 5 in older projects)
            ok = ok and got in want
        elif want == "C":
            ok = ok and got == 3 and dims.setdefault("C", 3) == 3
        elif want == "k":
            ok = ok and 1 <= got <= meta.n
        elif want == "nnz":
            ok = ok and 0 <= got <= meta.n * meta.n
        elif want == "S":
            ok = ok and 2 <= got <= MAX_SIDE and dims.setdefault("S", got) == got
    if ok and len(shape) == 3 and len(pattern) == 3 and dims.setdefault("C", 0) != 0:
        ok = False  # gray here, colour elsewhere
    if not ok:
        raise ProjectError(f"{meta.name}: inconsistent contents (the array '{key}' has shape {tuple(shape)}, "
                           f"which does not match the {meta.n} images)")
