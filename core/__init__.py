"""Invariant Attention: clustering images regardless of rotation and shift.

The algorithms, with no Qt: arrays in, arrays out (NumPy or CuPy).
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

try:  # the version is written once, in pyproject.toml; installs (and the bundle) carry it as metadata
    __version__ = _installed_version("invariant-attention-studio")
except PackageNotFoundError:  # a source tree used without installing
    __version__ = "0+unknown"

from .attention import AttentionRun, RunResult, RunState, Settings, Snapshot, Stage  # noqa: E402
from .backend import get_backend, set_threads, to_host, use_threads  # noqa: E402
from .demos import DEMO_NAMES, load_demo  # noqa: E402
from .imageset import ImageSet, NoUsableImagesError, load_images  # noqa: E402
from .invariant_mean import invariant_means  # noqa: E402
from .preprocess import Canvas, preprocess  # noqa: E402
from .similarity import invariant_distances  # noqa: E402
from .warp import warp  # noqa: E402
from .weights import attention_weights, auto_beta  # noqa: E402

__all__ = [
    "__version__",
    "AttentionRun",
    "RunResult",
    "Settings",
    "Snapshot",
    "Stage",
    "RunState",
    "get_backend",
    "to_host",
    "set_threads",
    "use_threads",
    "DEMO_NAMES",
    "load_demo",
    "ImageSet",
    "NoUsableImagesError",
    "load_images",
    "invariant_means",
    "Canvas",
    "preprocess",
    "invariant_distances",
    "warp",
    "attention_weights",
    "auto_beta",
]
