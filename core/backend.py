"""Array backend selection: one code path over NumPy or CuPy.

The engine is written against an array module ``xp`` that is either
:mod:`numpy` or :mod:`cupy`.  :func:`get_backend` picks one; ``"auto"`` takes
CuPy only when a CUDA device really works and otherwise falls back to NumPy.

Running out of GPU memory inside a stage is handled by :func:`in_blocks`: the
failed block is retried with half as many items (and every temporary block
inside it halved too, :func:`block_elements`) until a floor, and only then
the rest of the stage runs on the CPU, with a log line and a
:class:`GpuFallbackWarning`.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import warnings
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from .extras import missing_extra
from .options import check

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "DeviceOutOfMemory",
    "GpuFallbackWarning",
    "array_module",
    "blas_threads",
    "block_elements",
    "cpu_count",
    "fft_module",
    "get_backend",
    "in_blocks",
    "is_out_of_memory",
    "ndimage_module",
    "set_threads",
    "threads",
    "to_host",
    "use_threads",
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
        return missing_extra("CuPy", extra="gpu")
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
    """Return ``a`` as a NumPy array on the host (copying from the GPU if needed).

    Parameters
    ----------
    a : array_like
        A NumPy or CuPy array, or anything :func:`numpy.asarray` takes.
    dtype : data-type, optional
        The result's type (default: ``a``'s).

    Returns
    -------
    numpy.ndarray
        ``a`` on the host; ``a`` itself when it is already a NumPy array of that type.
    """
    if array_module(a) is not np:
        a = a.get()
    return np.asarray(a, dtype=dtype)


def fft_module(xp: ModuleType):
    """FFT functions for ``xp``: :mod:`scipy.fft` on every CPU core for NumPy, :mod:`cupy.fft` for CuPy.

    For NumPy the transforms (``fft2``, ``rfft2``, ``irfft2``, ...) run batched
    on :func:`threads` threads (SciPy's ``workers=``; one inside a worker of
    the engine's pool, which already fills the cores); anything
    else (``fftshift``, ``next_fast_len``) is :mod:`scipy.fft`'s own.
    """
    if xp is np:
        return _threaded_scipy_fft()
    return xp.fft


_TRANSFORMS = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn")
_SCIPY_FFT = None


def cpu_count() -> int:
    """CPU cores this process may run on."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_THREADS = None  # set_threads(): the engine's thread count; None follows the machine (cpu_count)
_THREADS_LOCK = threading.Lock()
_WORKER = threading.local()


def threads() -> int:
    """Threads the engine's CPU work runs on: :func:`set_threads`'s count, else :func:`cpu_count`.

    Examples
    --------
    >>> with use_threads(1):
    ...     threads()
    1
    """
    return _THREADS if _THREADS is not None else cpu_count()


def set_threads(n: int | None) -> int | None:
    """Run the engine's CPU work on ``n`` threads (``None``: one per core); returns the previous setting.

    Parameters
    ----------
    n : int or None
        At least 1; ``None`` follows the machine (:func:`cpu_count`).  It sets
        the warp's thread pool (:func:`iastudio.core.warp.parallel_map`), the
        FFTs' ``workers=`` and the nearest-neighbour search for the whole
        process.

    Returns
    -------
    int or None
        The setting before this call.
    """
    global _THREADS
    if n is not None:
        n = check("threads", int(n))  # the limits declared for --threads
    with _THREADS_LOCK:
        previous, _THREADS = _THREADS, n
    return previous


@contextlib.contextmanager
def use_threads(n: int | None):
    """:func:`set_threads` ``n`` inside the block, the previous setting after it (``None``: no change).

    Parameters
    ----------
    n : int or None
        Threads for the engine's CPU work inside the block.

    Yields
    ------
    None
        Control, with ``n`` threads set.
    """
    if n is None:
        yield
        return
    previous = set_threads(n)
    try:
        yield
    finally:
        set_threads(previous)


_BLAS = None  # threadpoolctl's controller of the loaded BLAS libraries (made on first use)
_BLAS_LOCK = threading.Lock()
_BLAS_HELD: list = []  # the limits of the blas_threads blocks now open, in any thread
_BLAS_ORIGINAL = None  # the limiter that restores the counts from before the first open block


@contextlib.contextmanager
def blas_threads(n: int):
    """BLAS / LAPACK (OpenBLAS, MKL) on at most ``n`` threads inside the block.

    The engine parallelises over blocks of work itself (:func:`iastudio.core.warp.parallel_map`);
    a BLAS call inside each block that starts its own threads too puts more busy threads on
    the cores than there are cores, and OpenBLAS's waiting threads spin: on a 2-core CPU with
    other work running, a 250 x 250 ``eigh`` took 0.16 s on two BLAS threads and 0.008 s on one,
    and the read-out of 1,000 particle images spent 23 s in such calls (a whole run against the
    code without this limit: ``benchmarks/bench_threads.py --kind particles``).  Uses threadpoolctl
    (a scikit-learn dependency); where it is missing, nothing changes.

    OpenBLAS built with its own threads (NumPy's and SciPy's wheels) has one limit for the whole
    process, so there blocks that open and close in different threads at different times are
    counted: while any block is open the smallest limit of the open blocks holds, and the counts
    from before the first block come back when the last one closes (a block closing first does
    not lift another thread's limit).  Each change is made by the thread that opens or closes a
    block, which takes control of the limit from threadpoolctl first (threadpoolctl lets one
    thread at a time set OpenBLAS's shared pool and ignores the others).  Where a loaded library
    limits each thread on its own (MKL, OpenMP builds), each block sets and restores its own
    thread's limit.

    Parameters
    ----------
    n : int
        At most this many BLAS threads (>= 1).

    Yields
    ------
    None
        Control, with the limit set; the previous counts are restored after it.

    Examples
    --------
    >>> with blas_threads(1):
    ...     pass
    """
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scikit-learn requires it
        yield
        return
    n = max(1, int(n))
    with _BLAS_LOCK:
        controller = _blas_controller(ThreadpoolController)
    if not _process_wide(controller):  # per-thread limits: this thread's own, set and restored here
        with controller.limit(limits=n, user_api="blas"):
            yield
        return
    _blas_enter(n, ThreadpoolController)
    try:
        yield
    finally:
        _blas_leave(n)


def _process_wide(controller) -> bool:
    """Whether every loaded BLAS keeps one thread limit for the whole process (OpenBLAS without OpenMP)."""
    return all(lib.internal_api == "openblas" and getattr(lib, "threading_layer", None) != "openmp"
               for lib in controller.lib_controllers if lib.user_api == "blas")


def _blas_controller(make):
    """threadpoolctl's controller; made again only after new imports (finding the libraries takes ~10 ms)."""
    global _BLAS
    import sys

    if _BLAS is None or _BLAS[0] != len(sys.modules):
        _BLAS = (len(sys.modules), make())
    return _BLAS[1]


def _take_blas_control() -> None:
    """Make the calling thread the one whose limits threadpoolctl applies to OpenBLAS (3.8 and later)."""
    from threadpoolctl import OpenBLASController

    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


def _blas_enter(n: int, make) -> None:
    global _BLAS_ORIGINAL
    with _BLAS_LOCK:
        controller = _blas_controller(make)
        _take_blas_control()
        if not _BLAS_HELD:
            _BLAS_ORIGINAL = controller.limit(limits=n, user_api="blas")
        elif n < min(_BLAS_HELD):
            controller.limit(limits=n, user_api="blas")
        _BLAS_HELD.append(n)


def _blas_leave(n: int) -> None:
    global _BLAS_ORIGINAL
    with _BLAS_LOCK:
        _BLAS_HELD.remove(n)
        _take_blas_control()
        if not _BLAS_HELD:
            _BLAS_ORIGINAL.restore_original_limits()
            _BLAS_ORIGINAL = None
        elif min(_BLAS_HELD) > n:
            _BLAS[1].limit(limits=min(_BLAS_HELD), user_api="blas")


def in_worker() -> bool:
    """True in a thread of the engine's pool (:func:`iastudio.core.warp.parallel_map`): its work runs on one thread."""
    return getattr(_WORKER, "active", False)


@contextlib.contextmanager
def as_worker():
    """Mark the calling thread as a worker of the engine's pool inside the block."""
    before = in_worker()
    _WORKER.active = True
    try:
        yield
    finally:
        _WORKER.active = before


def _workers() -> int:
    """FFT workers for a call now: one inside a pool worker (the pool already fills the cores), else :func:`threads`."""
    return 1 if in_worker() else threads()


def _threaded_scipy_fft():
    global _SCIPY_FFT
    if _SCIPY_FFT is None:
        import scipy.fft

        def threaded(fn):
            def call(*args, **kwargs):
                kwargs.setdefault("workers", _workers())
                return fn(*args, **kwargs)

            call.__name__, call.__doc__ = fn.__name__, fn.__doc__
            return call

        ns = {name: getattr(scipy.fft, name) for name in dir(scipy.fft) if not name.startswith("_")}
        ns.update({name: threaded(getattr(scipy.fft, name)) for name in _TRANSFORMS})
        _SCIPY_FFT = ModuleType("scipy_fft_threaded", "scipy.fft with workers= set to the engine's thread count")
        _SCIPY_FFT.__dict__.update(ns)
    return _SCIPY_FFT


def ndimage_module(xp: ModuleType):
    """:mod:`scipy.ndimage` for NumPy, :mod:`cupyx.scipy.ndimage` for CuPy."""
    if xp is np:
        import scipy.ndimage

        return scipy.ndimage
    import cupyx.scipy.ndimage

    return cupyx.scipy.ndimage


# ---------------------------------------------------------------- out of memory


class DeviceOutOfMemory(MemoryError):
    """The device ran out of memory.

    The one error class the stages treat as "out of memory" besides CuPy's
    own (:func:`is_out_of_memory`); raised when even the smallest block fails
    and no CPU fall-back is possible, and usable to simulate the condition.
    """


class GpuFallbackWarning(RuntimeWarning):
    """A stage left the GPU for the CPU (out of memory even with small blocks)."""


_SCALE = contextvars.ContextVar("iastudio_block_scale", default=1.0)


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` means the GPU ran out of memory.

    :class:`DeviceOutOfMemory`, ``cupy.cuda.memory.OutOfMemoryError``, and
    CUDA / cuFFT / cuBLAS / cuSOLVER errors that report a failed allocation, and
    PyTorch's ``torch.OutOfMemoryError`` (the networks' evaluation uses :func:`in_blocks` too).
    A host :class:`MemoryError` is not (smaller GPU blocks would not help).
    """
    if isinstance(exc, DeviceOutOfMemory):
        return True
    mod = type(exc).__module__ or ""
    if mod == "torch" and type(exc).__name__ == "OutOfMemoryError":
        return True
    if not (mod.startswith("cupy") or mod.startswith("cupy_backends")):
        return False
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc)
    return any(s in text for s in ("MemoryAllocation", "ALLOC_FAILED", "out of memory", "OUT_OF_MEMORY"))


_GPU_REFERENCE_BYTES = 20 << 30  # a card of this much memory (or less) takes the stages' ``gpu`` block sizes
_GPU_MAX_SCALE = 4
_GPU_SCALE = None


def _gpu_scale(xp) -> float:
    """How many times the stages' ``gpu`` block sizes this card takes: its memory over 20 GB, from 1 to 4."""
    global _GPU_SCALE
    if _GPU_SCALE is None:
        try:
            total = xp.cuda.Device().mem_info[1]
        except Exception:  # noqa: BLE001 - no figure: the plain sizes
            total = 0
        _GPU_SCALE = float(min(_GPU_MAX_SCALE, max(1.0, total / _GPU_REFERENCE_BYTES)))
    return _GPU_SCALE


def block_elements(cpu: int, gpu: int, xp) -> int:
    """Elements per temporary block: ``cpu``, or ``gpu`` times :func:`_gpu_scale` (a larger card, fewer launches).

    Scaled down inside a retry of :func:`in_blocks` after running out of GPU memory.
    """
    base = cpu if xp is np else gpu * _gpu_scale(xp)
    return max(1, int(base * _SCALE.get()))


@contextlib.contextmanager
def _scaled(factor: float):
    token = _SCALE.set(_SCALE.get() * factor)
    try:
        yield
    finally:
        _SCALE.reset(token)


def free_device_memory(xp) -> None:
    """Give CuPy's cached blocks back to the device (a no-op for NumPy)."""
    if xp is np:
        return
    with contextlib.suppress(Exception):
        xp.get_default_memory_pool().free_all_blocks()


def in_blocks(n: int, size: int, work, *, xp, what: str, minimum: int = 1, on_cpu=None) -> None:
    """Call ``work(lo, hi)`` over ``range(n)`` in blocks, smaller ones after running out of memory.

    Parameters
    ----------
    n : int
        Items to process.
    size : int
        Items per block to start with.
    work : callable(lo, hi)
        Processes items ``lo .. hi - 1`` and stores its results; a block that
        raises is redone, so it must not leave partial results that matter.
    xp : module
        The array module of the data (CuPy's memory pool is freed before a retry).
    what : str
        Named in the log lines, e.g. ``"invariant similarity"``.
    minimum : int
        Below this many items a block is not halved again.
    on_cpu : callable(lo, hi), optional
        Does the same as ``work`` on the CPU.  Used for the remaining items
        when even a block of ``minimum`` items runs out of memory (logged,
        and a :class:`GpuFallbackWarning`); without it that error is raised
        as :class:`DeviceOutOfMemory`.

    Notes
    -----
    After an out-of-memory error the block size is halved and stays halved,
    and every temporary block inside ``work`` that is sized by
    :func:`block_elements` is scaled down by the same factor.
    """
    lo, start, cpu = 0, max(1, int(size)), False
    size = start
    while lo < n:
        hi = min(n, lo + size)
        if cpu:
            hi = min(n, lo + start)  # the CPU takes the original blocks
            on_cpu(lo, hi)
            lo = hi
            continue
        try:
            with _scaled(size / start):
                work(lo, hi)
            lo = hi
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            free_device_memory(xp)
            if size > minimum:
                size = max(minimum, size // 2)
                log.warning("%s: out of GPU memory; retrying with blocks of %d", what, size)
                continue
            if on_cpu is None:
                raise DeviceOutOfMemory(f"{what}: out of GPU memory even with blocks of {size}") from exc
            message = (f"{what}: out of GPU memory even with blocks of {size}; "
                       f"continuing on the CPU (NumPy) for the rest of this stage")
            log.warning(message)
            warnings.warn(message, GpuFallbackWarning, stacklevel=2)
            cpu = True
