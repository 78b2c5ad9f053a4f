"""Invariant Attention: clustering images regardless of rotation and shift.

The algorithms, with no Qt: arrays in, arrays out (NumPy or CuPy).
"""
from __future__ import annotations

from ._version import __version__
from .attention import AttentionRun, RunResult, RunState, Settings, Snapshot, Stage
from .backend import get_backend, set_threads, to_host, use_threads
from .demos import DEMO_NAMES, load_demo
from .imageset import ImageSet, NoUsableImagesError, load_images
from .invariant_mean import invariant_means
from .preprocess import Canvas, preprocess
from .similarity import invariant_distances
from .warp import warp
from .weights import attention_weights, auto_beta

__all__ = [
    "DEMO_NAMES",
    "AttentionRun",
    "Canvas",
    "ImageSet",
    "NoUsableImagesError",
    "RunResult",
    "RunState",
    "Settings",
    "Snapshot",
    "Stage",
    "__version__",
    "attention_weights",
    "auto_beta",
    "get_backend",
    "invariant_distances",
    "invariant_means",
    "load_demo",
    "load_images",
    "preprocess",
    "set_threads",
    "to_host",
    "use_threads",
    "warp",
]
