"""Model files: ``model.pt`` (a plain state dict of tensors) and ``model.json`` beside it (how to rebuild it).

Reading one runs no code and allocates nothing the file merely claims: ``model.json`` is read only
if it is a regular file of at most :data:`MAX_INFO_BYTES`, every field is checked against its type
and range (:func:`check_model_info`), and the model is built only once its size is known to be
within :data:`MAX_PARAMETERS` (from a bound on its options, :func:`weights_bound`, or else counted on
PyTorch's ``meta`` device); ``model.pt`` is opened only if it is a regular file (a FIFO would block),
must be PyTorch's zip format whose members add up to no more than the model's own tensors (a
decompression bomb is refused from the zip directory), is unpickled with ``weights_only=True``, and
each tensor must have the model's own name, shape and dtype and finite values.  Every refusal is a
``ValueError`` naming the file and the reason.
"""
from __future__ import annotations

import json
import logging
import math
import zipfile
from numbers import Integral, Real
from pathlib import Path

import torch

from ..regular import open_regular
from .models import _SPECS, MODELS, build_model

log = logging.getLogger(__name__)

__all__ = ["MAX_INFO_BYTES", "MAX_PARAMETERS", "OPTION_LIMITS", "check_model_info", "load_model",
           "read_model_info", "save_model", "weights_bound"]

MAX_INFO_BYTES = 64 * 1024  # model.json
MAX_PARAMETERS = 25_000_000  # 100 MB of float32 weights: over 150x the largest preset (a-p4mcnn, 145,176)
MAX_CLASSES = 100_000
_ZIP_SLACK = 1 << 20  # the pickle and the zip's own records, beyond the tensors' bytes
# option -> (smallest, largest, whole number); which model family takes it
OPTION_LIMITS = {"channels": (1, 1024, True), "layers": (1, 32, True), "blocks": (1, 16, True),
                 "heads": (1, 32, True), "head_dim": (1, 256, True), "size": (1, 15, True),
                 "dropout": (0.0, 0.99, False)}
_FAMILY_OPTIONS = {"cnn": {"channels", "layers", "dropout"},
                   "gsa": {"channels", "blocks", "heads", "head_dim", "size", "dropout"},
                   "paper-cnn": {"channels", "dropout"},  # the papers' 7-layer backbone: its depth is the paper's
                   "paper-gsa": {"channels", "heads", "head_dim", "size", "dropout"}}  # 5 blocks, as the paper


def save_model(model, path, *, name: str, n_classes: int, options=None) -> None:
    """Save a plain state dict (tensors only) and, beside it, ``model.json`` with how to rebuild it."""
    path = Path(path)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
    path.with_suffix(".json").write_text(json.dumps({"model": name, "n_classes": n_classes,
                                                     "options": options or {}}, indent=2))


def read_model_info(path) -> dict:
    """Read ``model.json``: ``{"model", "n_classes", "options"}``, checked by :func:`check_model_info`.

    Raises
    ------
    ValueError
        Naming the file: not a regular file, too big, not UTF-8, not JSON, or a field out of bounds.
    """
    path = Path(path)
    fh, size = open_regular(path, what="a model description", error=ValueError)
    with fh:
        if size > MAX_INFO_BYTES:
            raise ValueError(f"{path}: too big for a model description ({size} bytes; at most {MAX_INFO_BYTES})")
        raw = fh.read(MAX_INFO_BYTES + 1)
    if len(raw) > MAX_INFO_BYTES:
        raise ValueError(f"{path}: too big for a model description (over {MAX_INFO_BYTES} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a model description (not UTF-8 text)") from None
    try:
        info = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not a model description (not JSON: {str(exc)[:80]})") from None
    if not isinstance(info, dict):
        raise ValueError(f"{path}: not a model description (a JSON {type(info).__name__}, not an object)")
    if "model" not in info or "n_classes" not in info:
        missing = [k for k in ("model", "n_classes") if k not in info]
        raise ValueError(f"{path}: not a model description (no {' or '.join(map(repr, missing))})")
    unknown = sorted(set(info) - {"model", "n_classes", "options"})
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(repr(k)[:40] for k in unknown[:5])}")
    return check_model_info(info["model"], info["n_classes"], info.get("options", {}), source=path)


def check_model_info(name, n_classes, options=None, *, source="the model") -> dict:
    """Check a model's name, class count and options before anything is built.

    Parameters
    ----------
    name : str
        One of ``MODELS``.
    n_classes : int
        1 to :data:`MAX_CLASSES`.
    options : dict, optional
        Only the options of the model's family, each a number within :data:`OPTION_LIMITS`.
    source : str or Path, optional
        Named in the messages.

    Returns
    -------
    dict
        ``{"model": name, "n_classes": int, "options": dict}``.

    Raises
    ------
    ValueError
        Naming ``source`` and the field.
    """
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"{source}: unknown model {str(name)[:40]!r}; one of {', '.join(MODELS)}")
    if isinstance(n_classes, bool) or not isinstance(n_classes, Integral) or not 1 <= n_classes <= MAX_CLASSES:
        raise ValueError(f"{source}: n_classes must be a whole number from 1 to {MAX_CLASSES}, "
                         f"got {repr(n_classes)[:40]}")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"{source}: options must be an object, got a {type(options).__name__}")
    allowed = _FAMILY_OPTIONS[_SPECS[name][0]]
    checked = {}
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"{source}: unknown option {str(key)[:40]!r} for {name} "
                             f"(it takes {', '.join(sorted(allowed))})")
        lo, hi, whole = OPTION_LIMITS[key]
        number = not isinstance(value, bool) and isinstance(value, Integral if whole else Real)
        if not number or not math.isfinite(value) or not lo <= value <= hi:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{source}: option {key!r} must be {kind} from {lo} to {hi}, got {repr(value)[:40]}")
        if key == "size" and value % 2 == 0:
            raise ValueError(f"{source}: option 'size' must be odd (a neighbourhood has a centre), got {value}")
        checked[key] = int(value) if whole else float(value)
    return {"model": name, "n_classes": int(n_classes), "options": checked}


def weights_bound(info) -> int:
    """An upper bound of the number of weights (parameters and buffers) of the model ``info`` describes.

    Computed from the options alone (nothing is built): per layer or block, the largest tensors each
    module of :mod:`~iastudio.core.nets.gconv`, :mod:`~iastudio.core.nets.attentive` and
    :mod:`~iastudio.core.nets.gsa` makes, doubled for margin (``tests/test_model_file.py`` checks
    it against every model's real count).
    """
    family, group, width, _ = _SPECS[info["model"]]
    o = info["options"]
    n, c, k = group.order, int(o.get("channels", width)), info["n_classes"]
    if family == "cnn":
        per = 13 * n * c * c + 200 * n + 10 * c  # the group conv, its attention or the input attention, the norm
        layers = int(o.get("layers", 5)) + 1
    elif family == "paper-cnn":  # six 3x3 group convs and a 4x4 one, attention per output channel on each
        per = 16 * n * c * max(c, k) + 4 * n * c * c + 200 * n + 10 * c
        layers = 7
    elif family == "paper-gsa":  # 5 residual blocks: attention, a pointwise MLP, relative positions
        heads = int(o.get("heads", 9))
        dim = int(o.get("head_dim", 0)) or max(c // 2, 1)
        size = int(o.get("size", 5))
        per = (4 * c + 17 + size * size) * heads * dim + 8 * c * c + 3 * c + 64
        layers = 6
    else:
        heads, dim = int(o.get("heads", 4)), int(o.get("head_dim", 4))
        per = (4 * c + 17 + n * n) * heads * dim + 3 * c + 64  # q, k, v, out, the encodings, the norm
        layers = int(o.get("blocks", 2)) + 1
    return 2 * (layers * per + (c + 1) * k + 100)


def _expected_state(info, source):
    """The model, built only once its size is known to be within :data:`MAX_PARAMETERS`, and its own
    tensors (names, shapes, dtypes).

    When the cheap bound (:func:`weights_bound`) exceeds the limit, the model is first built on the
    ``meta`` device (no memory; slower) and counted exactly.
    """
    if weights_bound(info) > MAX_PARAMETERS:
        with torch.device("meta"):
            ghost = build_model(info["model"], n_classes=info["n_classes"], **info["options"])
        count = sum(v.numel() for v in ghost.state_dict().values())
        if count > MAX_PARAMETERS:
            raise ValueError(f"{source}: the model would have {count:,} weights (at most {MAX_PARAMETERS:,})")
    model = build_model(info["model"], n_classes=info["n_classes"], **info["options"])
    return model, model.state_dict()


def _check_zip(fh, size, expected, path):
    """PyTorch's zip format, whose members add up to no more than the model's tensors (+ the pickle)."""
    limit = sum(v.numel() * v.element_size() for v in expected.values()) + _ZIP_SLACK
    if size > limit + _ZIP_SLACK:
        raise ValueError(f"{path}: {size:,} bytes, too big for model weights of {limit - _ZIP_SLACK:,} bytes")
    try:
        with zipfile.ZipFile(fh) as zf:
            members = zf.infolist()
    except Exception:  # noqa: BLE001 - a damaged zip directory raises many kinds (BadZipFile, NotImplementedError…)
        raise ValueError(f"{path}: not a PyTorch model file (not its zip format: truncated, or another kind of file)"
                         ) from None
    if len(members) > len(expected) + 16:
        raise ValueError(f"{path}: {len(members)} records, too many for this model's {len(expected)} tensors")
    declared = sum(m.file_size for m in members)
    if declared > limit:
        raise ValueError(f"{path}: its records unpack to {declared:,} bytes, more than this model's "
                         f"weights ({limit - _ZIP_SLACK:,} bytes); refused")
    fh.seek(0)


def _check_state(state, expected, path, name):
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: not a state dict of tensors")
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    if missing or extra:
        what = (f"missing {', '.join(map(str, missing[:3]))}" if missing
                else f"unexpected {', '.join(str(k)[:40] for k in extra[:3])}")
        raise ValueError(f"{path}: weights do not fit model {name!r} ({what})")
    for key, want in expected.items():
        got = state[key]
        if got.layout != torch.strided or got.is_quantized or got.device.type != "cpu":
            raise ValueError(f"{path}: {key} is not a plain tensor")
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"{path}: weights do not fit model {name!r} "
                             f"({key} is {tuple(got.shape)}, the model's is {tuple(want.shape)})")
        if got.dtype != want.dtype:
            raise ValueError(f"{path}: {key} is {got.dtype}, the model's is {want.dtype}")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise ValueError(f"{path}: {key} holds NaN or infinite values")


def load_model(path, *, name: str | None = None, n_classes: int | None = None, options=None):
    """Load weights saved by :func:`save_model` with ``torch.load(weights_only=True)``: no code is run.

    Parameters
    ----------
    path : str or Path
        ``model.pt``; ``model.json`` beside it gives what is not passed here.
    name, n_classes, options : optional
        The model (see :func:`~iastudio.core.nets.models.build_model`), checked as ``model.json`` is.

    Returns
    -------
    torch.nn.Module
        In eval mode, on the CPU.

    Raises
    ------
    ValueError
        Naming the file, when it is not a state dict of tensors for this model, or ``model.json``
        is not a model description within bounds (see the module's description).
    """
    path = Path(path)
    meta = path.with_suffix(".json")
    info = {}
    if name is None or n_classes is None:
        try:
            present = meta.exists() or meta.is_symlink()
        except OSError:
            present = True  # open_regular says why
        if present:
            info = read_model_info(meta)
    name = name if name is not None else info.get("model")
    if name is None:
        raise ValueError(f"{path}: the model name is unknown (no {meta.name} beside it)")
    n_classes = n_classes if n_classes is not None else info.get("n_classes", 10)
    options = options if options is not None else info.get("options", {})
    source = meta if info else path  # where the model's description came from
    info = check_model_info(name, n_classes, options, source=source)
    fh, size = open_regular(path, what="a model file", error=ValueError)
    try:
        model, expected = _expected_state(info, source)
    except BaseException:
        fh.close()
        raise
    with fh:
        _check_zip(fh, size, expected, path)
        try:
            state = torch.load(fh, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a state dict"
            log.info("refused %s: %s", path, exc)
            raise ValueError(f"{path}: not a saved state dict of plain tensors; refused, nothing in it was run"
                             ) from None
    _check_state(state, expected, path, name)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not fit model {name!r} ({str(exc).splitlines()[0]})") from None
    return model.eval()
