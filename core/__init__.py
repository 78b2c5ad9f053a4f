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
