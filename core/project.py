"""Project files (``.iaproj``): one zip of a JSON manifest and ``.npy`` arrays.

Never pickle: arrays are read with ``np.load(..., allow_pickle=False)`` and
everything else is JSON.  Writes are atomic (a temporary file in the same
folder, then a rename), so a crash never leaves half a project behind.

A project holds the image paths and true labels, the files skipped, the
working size, the per-image transforms the user applied, the run parameters,
the run's history (W, means, distances and labels per iteration, enough to
replay the animation), the result, the clusters with their names after the
user's edits, and — optionally, by default — the preprocessed working images,
so the project opens even when the original files have moved.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from .clusterbook import ClusterBook

__all__ = ["FORMAT", "FORMAT_VERSION", "Project", "ProjectError", "save_project", "load_project"]

FORMAT = "invariant-attention-studio project"
FORMAT_VERSION = 1
_RESULT_KEYS = ("cluster_means", "image_transforms", "scores", "weights", "input_distances",
                "final_distances", "run_labels")
_FRAME_KEYS = ("weights", "means", "distances", "labels")


class ProjectError(ValueError):
    """A project file cannot be read; the message says why, in plain words."""


@dataclass
class Project:
    """Everything a session needs to come back to its work.

    Attributes
    ----------
    paths, labels, skipped : list
        As in :class:`core.imageset.ImageSet`.
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
        Per recorded step: ``iteration``, ``stage`` and arrays ``weights``,
        ``means``, ``distances``, ``labels``.
    result : dict of ndarray
        ``cluster_means``, ``image_transforms``, ``scores``, ``weights``,
        ``input_distances``, ``final_distances``, ``run_labels`` (any may be absent).
    edits : list of str
        What the user did, in order (the undo history's texts).
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
    app_version: str = __version__

    @property
    def n(self) -> int:
        return len(self.paths)

    def missing_originals(self) -> list[str]:
        """Original files that are no longer where they were (demo images never are)."""
        return [p for p in self.paths if not str(p).startswith("demo:") and not Path(p).exists()]


def _npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


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
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    n = project.n
    arrays["transforms"] = np.zeros((n, 3)) if project.transforms is None else project.transforms
    if embed and project.base is not None:
        arrays["base"] = project.base.astype(np.float32)
    for key in ("scale", "offset"):
        if getattr(project, key) is not None:
            arrays[key] = getattr(project, key)
    for key, arr in project.result.items():
        if arr is not None and key in _RESULT_KEYS:
            arrays[f"result/{key}"] = arr
    frames = []
    for k, fr in enumerate(project.history):
        frames.append({"iteration": int(fr["iteration"]), "stage": str(fr["stage"])})
        for key in _FRAME_KEYS:
            if fr.get(key) is not None:
                arrays[f"history/{k:04d}_{key}"] = fr[key]
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "app_version": __version__,
        "n_images": n,
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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            zf.writestr("manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False))
            for name, arr in arrays.items():
                zf.writestr(f"arrays/{name}.npy", _npy_bytes(arr))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_project(path) -> Project:
    """Read a ``.iaproj`` file.

    Raises
    ------
    ProjectError
        Not a project, truncated or corrupted, or inconsistent — with the reason.
    """
    path = Path(path)
    if not path.exists():
        raise ProjectError(f"{path}: the file does not exist")
    try:
        with zipfile.ZipFile(path) as zf:
            try:
                manifest = json.loads(zf.read("manifest.json").decode("utf-8"))
            except KeyError:
                raise ProjectError(f"{path.name}: not a project (no manifest)") from None
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise ProjectError(f"{path.name}: not an Invariant Attention Studio project")
            if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
                raise ProjectError(f"{path.name}: made by a newer version ({manifest.get('app_version')})")
            arrays = {}
            for name in manifest.get("arrays", []):
                try:
                    with zf.open(f"arrays/{name}.npy") as fh:
                        arrays[name] = np.load(io.BytesIO(fh.read()), allow_pickle=False)
                except KeyError:
                    raise ProjectError(f"{path.name}: the array '{name}' is missing") from None
    except ProjectError:
        raise
    except zipfile.BadZipFile as exc:
        raise ProjectError(f"{path.name}: the file is truncated or corrupted ({exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ProjectError(f"{path.name}: the manifest is corrupted") from None
    except (ValueError, OSError, EOFError, zlib.error) as exc:
        raise ProjectError(f"{path.name}: the file is truncated or corrupted ({exc})") from None
    return _build(path, manifest, arrays)


def _build(path: Path, manifest: dict, arrays: dict) -> Project:
    try:
        paths = [str(p) for p in manifest["paths"]]
        n = len(paths)
        labels = list(manifest.get("labels") or [None] * n)
        transforms = np.asarray(arrays.get("transforms", np.zeros((n, 3))), dtype=float)
        if len(labels) != n or transforms.shape != (n, 3):
            raise ProjectError(f"{path.name}: inconsistent contents (labels or transforms do not match the images)")
        base = arrays.get("base")
        if base is not None and base.shape[0] != n:
            raise ProjectError(f"{path.name}: inconsistent contents (embedded images)")
        clusters = manifest.get("clusters")
        book = ClusterBook.from_json(clusters, n) if clusters else None
        history = []
        for k, fr in enumerate(manifest.get("history", [])):
            item = {"iteration": int(fr["iteration"]), "stage": str(fr["stage"])}
            for key in _FRAME_KEYS:
                item[key] = arrays.get(f"history/{k:04d}_{key}")
            history.append(item)
        result = {k[len("result/"):]: v for k, v in arrays.items() if k.startswith("result/")}
        return Project(
            paths=paths, labels=labels, skipped=list(manifest.get("skipped", [])),
            size=int(manifest.get("size", 64)), transforms=transforms, base=base,
            scale=arrays.get("scale"), offset=arrays.get("offset"),
            parameters=dict(manifest.get("parameters") or {}), clusters=book, history=history,
            result=result, edits=list(manifest.get("edits", [])),
            app_version=str(manifest.get("app_version", "")),
        )
    except ProjectError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ProjectError(f"{path.name}: the manifest is incomplete or inconsistent ({exc})") from None
