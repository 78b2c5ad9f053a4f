"""Array backend selection: one code path over NumPy or CuPy.

The engine is written against an array module ``xp`` that is either
:mod:`numpy` or :mod:`cupy`.  :func:`get_backend` picks one; ``"auto"`` takes
CuPy only when a CUDA device really works and otherwise falls back to NumPy.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

import numpy as np

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "get_backend",
    "array_module",
    "to_host",
    "fft_module",
    "ndimage_module",
]

log = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "numpy", "cupy")


class BackendUnavailableError(RuntimeError):
    """Raised when the requested backend cannot be used on this machine."""


@dataclass(frozen=True)
class Backend:
    """The array module in use and a description of the device.

    Attributes
    ----------
    name : str
        ``"numpy"`` or ``"cupy"``.
    xp : module
        The array module (:mod:`numpy` or :mod:`cupy`).
    device : str
        Human-readable device name (``"CPU"`` or the GPU's name).
    fallback_reason : str or None
        Why ``"auto"`` did not choose the GPU, if it did not.
    """

    name: str
    xp: ModuleType
    device: str
    fallback_reason: str | None = None

    def asarray(self, a, dtype=None):
        """Move ``a`` to this backend's device (a no-op when already there)."""
        return self.xp.asarray(a, dtype=dtype)

    def describe(self) -> str:
        """One line such as ``"numpy (CPU)"``."""
        return f"{self.name} ({self.device})"


def _probe_cupy():
    """Return ``(cupy, device_name)`` or raise the reason CuPy cannot be used."""
    import cupy  # ImportError when not installed

    n = cupy.cuda.runtime.getDeviceCount()  # CUDARuntimeError without a driver
    if n < 1:
        raise RuntimeError("no CUDA device found")
    # A real round trip: some broken installs fail only at the first kernel.
    x = cupy.arange(8, dtype=cupy.float32)
    if float((x * 2).sum()) != 56.0:
        raise RuntimeError("CUDA device returned a wrong result")
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props.get("name", b"GPU")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return cupy, str(name)


def get_backend(name: str = "auto") -> Backend:
    """Choose the array backend.

    Parameters
    ----------
    name : {"auto", "numpy", "cupy"}
        ``"auto"`` takes CuPy when it is installed and a CUDA device works,
        otherwise NumPy.  ``"numpy"`` always works.  ``"cupy"`` raises
        :class:`BackendUnavailableError` when no working GPU is found.

    Returns
    -------
    Backend
    """
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name == "numpy":
        return Backend("numpy", np, "CPU")
    try:
        cupy, device = _probe_cupy()
    except (ImportError, RuntimeError, OSError) as exc:
        # cupy.cuda.runtime.CUDARuntimeError is a RuntimeError subclass.
        reason = _reason(exc)
        if name == "cupy":
            raise BackendUnavailableError(f"the GPU backend is not available: {reason}") from exc
        log.info("GPU backend not used: %s", reason)
        return Backend("numpy", np, "CPU", fallback_reason=reason)
    return Backend("cupy", cupy, device)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return "CuPy is not installed (pip install 'invariant-attention-studio[gpu]')"
    text = str(exc).strip() or type(exc).__name__
    return f"no working CUDA device ({text})"


def array_module(a) -> ModuleType:
    """The array module (:mod:`numpy` or :mod:`cupy`) that owns ``a``."""
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy
    return np


def to_host(a, dtype=None) -> np.ndarray:
    """Return ``a`` as a NumPy array on the host (copying from the GPU if needed)."""
    if array_module(a) is not np:
        a = a.get()
    return np.asarray(a, dtype=dtype)


def fft_module(xp: ModuleType):
    """FFT functions for ``xp``: :mod:`scipy.fft` for NumPy, :mod:`cupy.fft` for CuPy."""
    if xp is np:
        import scipy.fft

        return scipy.fft
    return xp.fft


def ndimage_module(xp: ModuleType):
    """:mod:`scipy.ndimage` for NumPy, :mod:`cupyx.scipy.ndimage` for CuPy."""
    if xp is np:
        import scipy.ndimage

        return scipy.ndimage
    import cupyx.scipy.ndimage

    return cupyx.scipy.ndimage
