"""Training, evaluation, equivariance measurement and safe saving/loading of the networks."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..backend import in_blocks
from .groups import Group, rotate_images
from .modelfile import load_model, save_model  # noqa: F401 - part of this module's API
from .models import build_model, count_parameters, model_group

log = logging.getLogger(__name__)

__all__ = [
    "TrainResult",
    "evaluate",
    "group_angles",
    "invariance_error",
    "invariance_errors",
    "load_model",
    "offgroup_angles",
    "pick_device",
    "save_learning_curve",
    "save_model",
    "set_seed",
    "train_model",
]


def pick_device(device: str = "auto") -> torch.device:
    """``"auto"`` is CUDA when PyTorch sees a GPU, else CPU; ``"cuda"`` without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: PyTorch sees no CUDA device here")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    return torch.device(device)


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))  # noqa: NPY002 - the global generator third-party code draws from


@dataclass
class TrainResult:
    """What :func:`train_model` measured (written to ``metrics.json``)."""

    model: str
    data: str
    test_accuracy: float
    test_error: float
    parameters: int
    epochs: int
    seed: int
    device: str
    train_seconds: float
    invariance_error_90: float
    invariance_error_group: float | None
    history: list = field(default_factory=list)
    invariance_error_offgroup: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def _batches(n, batch, rng=None):
    order = rng.permutation(n) if rng is not None else np.arange(n)
    for s in range(0, n, batch):
        yield order[s:s + batch]


@torch.no_grad()
def predict_logits(model, x: np.ndarray | torch.Tensor, *, device="cpu", batch=256) -> torch.Tensor:
    """Logits of ``(n, S, S)`` images (eval mode), on the CPU.

    A batch that runs out of device memory (``torch.OutOfMemoryError``: a group self-attention
    network's attention over 16 rotations holds ~180 MB per image and layer) is redone in halves,
    down to one image, and the smaller batch is kept for the rest (:func:`iastudio.core.backend.in_blocks`);
    the logits do not change.
    """
    model.eval()
    x = torch.as_tensor(x, dtype=torch.float32)
    out: dict = {}

    def work(lo, hi):
        out[lo] = model(x[lo:hi].unsqueeze(1).to(device)).float().cpu()

    in_blocks(len(x), batch, work, xp=np, what="network evaluation")
    return torch.cat([out[lo] for lo in sorted(out)]) if out else torch.zeros(0)


def evaluate(model, x, y, *, device="cpu", batch=256) -> tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` on ``(n, S, S)`` images."""
    logits = predict_logits(model, x, device=device, batch=batch)
    y = torch.as_tensor(y)
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


@torch.no_grad()
def invariance_errors(model, x, *, angles, device="cpu", batch=256, background: float = 0.0) -> list[float]:
    """Per angle, the mean relative change of the logits under rotation: ``|z(g x) - z(x)| / |z(x)|``.

    Parameters
    ----------
    model : torch.nn.Module
    x : array, shape (n, S, S)
    angles : sequence of float
        Radians; multiples of 90 degrees are exact pixel permutations, others bilinear.
    background : float
        The value of an empty pixel: the corners a rotation uncovers get it (0 for images in ``[0, 1]``,
        :attr:`~iastudio.core.nets.data.Dataset.background` for standardised ones).

    Returns
    -------
    list of float
        One mean over the images per angle.
    """
    x = torch.as_tensor(x, dtype=torch.float32)
    z = predict_logits(model, x, device=device, batch=batch)
    errs = []
    for a in angles:
        xr = rotate_images(x - background, float(a)) + background
        zr = predict_logits(model, xr, device=device, batch=batch)
        errs.append(((zr - z).norm(dim=1) / z.norm(dim=1).clamp_min(1e-12)).mean().item())
    return errs


def invariance_error(model, x, *, angles, device="cpu", batch=256, background: float = 0.0) -> float:
    """:func:`invariance_errors` averaged over the angles (0 without angles)."""
    errs = invariance_errors(model, x, angles=angles, device=device, batch=batch, background=background)
    return float(np.mean(errs)) if errs else 0.0


def group_angles(group: Group) -> list[float]:
    """The non-trivial rotation angles of the group."""
    return [2 * math.pi * k / group.n_rot for k in range(1, group.n_rot)]


def offgroup_angles(group: Group) -> list[float]:
    """Angles halfway between neighbouring rotations of the group (of p4 for groups with fewer than 4)."""
    n = max(group.n_rot, 4)
    return [math.pi * (2 * k + 1) / n for k in range(n)]


def _train_epoch(model, opt, xtr, ytr, *, batch, rng, dev, done, total, on_batch, should_stop):
    """One epoch of :func:`train_model`: ``(summed loss, correct, seen, batches done, stopped)``."""
    model.train()
    tot_loss, tot_correct, seen, stopped = 0.0, 0, 0, False
    for idx in _batches(len(xtr), batch, rng):
        xb, yb = xtr[idx].unsqueeze(1).to(dev), ytr[idx].to(dev)
        opt.zero_grad(set_to_none=True)
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        loss.backward()
        opt.step()
        tot_loss += float(loss.detach()) * len(idx)
        tot_correct += int((logits.argmax(1) == yb).sum())
        seen += len(idx)
        done += 1
        if on_batch is not None:
            on_batch(done, total)
        if should_stop is not None and should_stop():
            stopped = True
            break
    return tot_loss, tot_correct, seen, done, stopped


def train_model(name: str, data, *, epochs: int = 10, batch: int = 64, lr: float = 1e-3, weight_decay: float = 1e-4,
                seed: int = 0, device: str = "auto", model_options=None, on_epoch=None, on_batch=None,
                should_stop=None, eval_subset: int | None = None, invariance: bool = True):
    """Train a model by name on a :class:`~iastudio.core.nets.data.Dataset` (Adam, cross-entropy, seed 001 B.2).

    Parameters
    ----------
    name : str
        One of :data:`iastudio.core.nets.models.MODELS`.
    data : Dataset
    epochs, batch : int
    lr, weight_decay : float
    seed : int
        Seeds initialisation and batch order.
    device : {"auto", "cpu", "cuda"}
    model_options : dict, optional
        Passed to :func:`build_model` (e.g. ``channels``).
    on_epoch : callable, optional
        ``on_epoch(record)`` after each epoch with ``{"epoch", "train_loss", "train_accuracy",
        "test_loss", "test_accuracy", "seconds"}``.
    on_batch : callable, optional
        ``on_batch(done, total)`` after each batch.
    should_stop : callable, optional
        Returns True to stop after the current batch.
    eval_subset : int, optional
        Measure the invariance error on at most this many test images.
    invariance : bool
        False skips the three invariance measures (they are NaN / None in the result): for networks whose
        forward pass is too slow to repeat under every angle (GSA-R8 ... R16 on a CPU).

    Returns
    -------
    model, TrainResult
    """
    from .data import check_dataset

    check_dataset(data, source=data.name or "the data")  # NaN images or an empty set: refused before training
    dev = pick_device(device)
    set_seed(seed)
    model = build_model(name, n_classes=len(data.classes), **(model_options or {})).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    rng = np.random.default_rng(seed)
    xtr = torch.as_tensor(data.x_train, dtype=torch.float32)
    ytr = torch.as_tensor(data.y_train)
    n_batches = math.ceil(len(xtr) / batch)
    history, t0, done, stopped = [], time.perf_counter(), 0, False
    for epoch in range(1, epochs + 1):
        tot_loss, tot_correct, seen, done, stopped = _train_epoch(
            model, opt, xtr, ytr, batch=batch, rng=rng, dev=dev, done=done, total=n_batches * epochs,
            on_batch=on_batch, should_stop=should_stop)
        test_acc, test_loss = evaluate(model, data.x_test, data.y_test, device=dev)
        rec = {"epoch": epoch, "train_loss": tot_loss / max(seen, 1), "train_accuracy": tot_correct / max(seen, 1),
               "test_loss": test_loss, "test_accuracy": test_acc, "seconds": time.perf_counter() - t0}
        history.append(rec)
        if on_epoch is not None:
            on_epoch(rec)
        if stopped:
            break
    seconds = time.perf_counter() - t0
    xs = data.x_test[:eval_subset] if eval_subset else data.x_test
    group = model_group(name)
    bg = getattr(data, "background", 0.0)
    err90, errg, erro = float("nan"), None, None
    if invariance:
        err90 = invariance_error(model, xs, angles=[math.pi / 2, math.pi, 3 * math.pi / 2], device=dev,
                                 background=bg)
        own = [a for a in group_angles(group) if abs(a / (math.pi / 2) - round(a / (math.pi / 2))) > 1e-9]
        errg = invariance_error(model, xs, angles=own, device=dev, background=bg) if own else None
        erro = invariance_error(model, xs, angles=offgroup_angles(group), device=dev, background=bg)
    last = history[-1] if history else {"test_accuracy": float("nan")}
    result = TrainResult(name, data.name, last["test_accuracy"], 1.0 - last["test_accuracy"],
                         count_parameters(model), len(history), seed, str(dev), seconds, err90, errg, history, erro)
    return model.cpu().eval(), result


def save_learning_curve(history, path, *, title: str = "") -> bool:
    """Loss and accuracy per epoch as a PNG (a bare matplotlib Figure: the Agg renderer, no pyplot, no GUI).

    Returns False (and writes nothing) when matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False

    fig = Figure(figsize=(8, 3.2), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    ep = [r["epoch"] for r in history]
    ax1.plot(ep, [r["train_loss"] for r in history], "o-", label="train")
    ax1.plot(ep, [r["test_loss"] for r in history], "s-", label="test")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("cross-entropy")
    ax1.legend()
    ax2.plot(ep, [100 * r["train_accuracy"] for r in history], "o-", label="train")
    ax2.plot(ep, [100 * r["test_accuracy"] for r in history], "s-", label="test")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("accuracy (%)")
    ax2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    return True
