"""Warping images by SE(2) transforms with the Keys cubic-convolution kernel.

``warp(v, tau)[p] = sum_kl v[k, l] phi(tau(p)_0 - k) phi(tau(p)_1 - l)``, with
``phi`` the Keys (1981) kernel, ``a = -0.5``, zero outside ``|s| < 2`` and zero
outside the image.  This is the paper's interpolation (§2.1); note that
``scipy.ndimage.map_coordinates(order=3)`` is a cubic *B-spline*, a different
kernel.  :func:`warp` also returns the analytic derivative of the warped image
with respect to the transform parameters ``(theta, tx, ty)`` (chain rule
through the kernel derivative), which the invariant similarity and the
invariant mean use for their gradient steps.
"""
from __future__ import annotations

import logging
import os
import threading

import numpy as np

from .backend import array_module, as_worker, blas_threads, block_elements, in_worker, threads
from .keys import KEYS_A, PAD

__all__ = [
    "KEYS_A",
    "describe_code",
    "describe_gpu_code",
    "keys_kernel",
    "keys_kernel_derivative",
    "parallel_map",
    "prepare",
    "support_radii",
    "warp",
    "warp_residuals",
]

_PAD = PAD  # zero border; a tap index is clipped into it when it falls far outside
_CHUNK_ELEMENTS = 1 << 17  # output pixels per vectorised block when blocks run on several cores
_SINGLE_CHUNK_ELEMENTS = 1 << 15  # on one core: smaller blocks, whose temporaries stay in the CPU cache
_KERNEL_ELEMENTS = 1 << 16  # output pixels per call of the compiled loop (no temporaries: small blocks balance cores)
_GPU_CHUNK_ELEMENTS = 1 << 23  # on a GPU: big blocks, few kernel launches (~0.7 GB of temporaries)


def _inner(s):  # |s| <= 1
    a = KEYS_A
    return ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0


def _inner_d(s):
    a = KEYS_A
    return (3.0 * (a + 2.0) * s - 2.0 * (a + 3.0)) * s


def _outer(s):  # 1 < |s| < 2
    a = KEYS_A
    return ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a


def _outer_d(s):
    a = KEYS_A
    return (3.0 * a * s - 10.0 * a) * s + 8.0 * a


def keys_kernel(s):
    """The Keys cubic-convolution kernel ``phi(s)`` with ``a = -0.5``.

    Parameters
    ----------
    s : array_like
        Distances in pixels.

    Returns
    -------
    ndarray
        ``phi(s)``: 1 at 0, 0 at the other integers, 0 for ``|s| >= 2``.
    """
    xp = array_module(s)
    t = xp.abs(xp.asarray(s, dtype=float))
    return xp.where(t <= 1, _inner(t), xp.where(t < 2, _outer(t), 0.0))


def keys_kernel_derivative(s):
    """The derivative ``phi'(s)`` of :func:`keys_kernel`."""
    xp = array_module(s)
    s = xp.asarray(s, dtype=float)
    t = xp.abs(s)
    return xp.sign(s) * xp.where(t <= 1, _inner_d(t), xp.where(t < 2, _outer_d(t), 0.0))


def _tap_weights(f, gradient):
    """Weights of the 4 taps ``floor(x) - 1 .. floor(x) + 2`` for fraction ``f``.

    The same kernel as :func:`keys_kernel` at ``1 + f, f, 1 - f, 2 - f``,
    factored for speed: ``phi(1 + f) = a f (1 - f)^2`` on the outer branch.
    Each weight is built in place in its own array (few temporaries).
    """
    a = KEYS_A
    g = 1.0 - f
    ff = f * f
    gg = g * g
    w = (_times(f * gg, a), _inner_fg(f, ff), _inner_fg(g, gg), _times(g * ff, a))
    if not gradient:
        return w, None
    d1 = _inner_d(f)
    d2 = _inner_d(g)
    d2 *= -1.0
    d0 = g - 2.0 * f
    d0 *= g
    d3 = 2.0 * g - f
    d3 *= f
    return w, (_times(d0, a), d1, d2, _times(d3, a))


def _times(x, c):
    x *= c
    return x


def _inner_fg(f, ff):
    a = KEYS_A
    out = (a + 2.0) * f
    out -= a + 3.0
    out *= ff
    out += 1.0
    return out


def warp(images, params, *, index=None, gradient=False, parallel=True, out=None):
    """Warp a batch of images by a batch of SE(2) transforms: ``v o tau``.

    Parameters
    ----------
    images : ndarray, shape (N, H, W) or (N, H, W, C)
        Source images (NumPy or CuPy).  Outside the image the value is 0.
    params : ndarray, shape (B, 3) or (3,)
        Transforms ``(theta [rad], tx [px], ty [px])`` about the canvas centre
        (see :mod:`iastudio.core.se2`).
    index : ndarray of int, shape (B,), optional
        Which source image each transform applies to.  Defaults to
        ``arange(B)`` when ``N == B`` and to image 0 for every transform when
        ``N == 1``.  Lets one image be warped by many transforms without
        copying it.  An index outside ``[0, N)`` raises ``IndexError`` on
        NumPy; on CuPy the CUDA kernel makes that output NaN instead (a check
        on the host would wait for the GPU at every warp).
    gradient : bool
        Also return the derivative with respect to ``(theta, tx, ty)``.
    parallel : bool
        Spread the blocks over the CPU cores (the shared warp pool).  ``False``
        warps in the calling thread: for small display work in the GUI thread,
        which must not queue behind a running computation's blocks.
    out : ndarray, or (ndarray, ndarray) with ``gradient=True``, optional
        Where to write (e.g. views into a cache; saves a copy): ``(B, ...)``
        as below, ``B = 1`` for a single transform, the returned dtype.

    Returns
    -------
    out : ndarray, shape (B, H, W[, C])
        The warped images, in the dtype of ``images``.
    grad : ndarray, shape (B, 3, H, W[, C])
        Only with ``gradient=True``: ``d out / d (theta, tx, ty)``.

    Notes
    -----
    Each output pixel reads a 4x4 neighbourhood: on NumPy arrays in one
    compiled loop (:mod:`iastudio.core.warp_kernel`, when Numba is installed),
    on CuPy arrays in one CUDA kernel (:mod:`iastudio.core.warp_cuda`),
    otherwise by 16 vectorised gathers; the batch is processed in blocks (on
    every core) so memory stays bounded for any ``B``.
    """
    xp = array_module(images)
    images = xp.asarray(images)
    if images.ndim not in (3, 4):
        raise ValueError(f"images must be (N, H, W) or (N, H, W, C), got shape {images.shape}")
    dtype = images.dtype if images.dtype in (np.float32, np.float64) else np.float64
    params = xp.asarray(params, dtype=np.float64)
    single = params.ndim == 1
    params = params.reshape(-1, 3)
    b = params.shape[0]
    index = _source_index(index, images.shape[0], b, xp)
    out, grad = _outputs(out, gradient, (b, *images.shape[1:]), dtype, xp)
    kernel = _compiled() if xp is np else _cuda()
    if kernel is not None and xp is not np:  # the CUDA kernel reads the sources as they are: no padded copy
        images = images.astype(dtype, copy=False)
        if images.ndim == 4:
            _channels_compiled(images, params, index, out, grad, parallel)
        else:
            _cuda_warp(kernel, images, params, index, out, grad)
        return _returned(out, grad, single, gradient)
    images, index = _used_sources(images, index, xp)
    images = images.astype(dtype, copy=False)
    if kernel is not None and images.ndim == 4:  # colour: each channel as an image of its own
        _channels_compiled(images, params, index, out, grad, parallel)
    else:
        _warp_blocks(images, params, index, out, grad, kernel=kernel, parallel=parallel, xp=xp)
    return _returned(out, grad, single, gradient)


def warp_residuals(images, params, targets, *, index=None, target_index=None, moments=False, parallel=True,
                   support=None):
    """How far each warped image is from its target: ``||v_index o tau - targets[target_index]||^2``.

    What the invariant similarity reads of a warp (its residuals, and the
    Gauss-Newton steps of its refinement), without keeping the warped images:
    on NumPy greyscale images one compiled loop
    (:func:`iastudio.core.warp_kernel.keys_residuals`) sums the squares (and
    the normal equations) as it samples, in double precision; elsewhere (CuPy,
    colour, no Numba) :func:`warp` and array sums, whose products are
    single-precision (the two agree to about 1e-6 relative).

    Parameters
    ----------
    images : ndarray, shape (N, H, W) or (N, H, W, C)
        Sources (NumPy or CuPy).
    params : ndarray, shape (B, 3)
        Transforms ``(theta, tx, ty)``, one per entry.
    targets : ndarray, shape (M, H, W[, C])
        Targets, the same dtype and canvas as ``images`` (may be ``images``).
    index, target_index : ndarray of int, shape (B,), optional
        Source and target of each entry (as :func:`warp`'s ``index``).
    moments : bool
        Also return the Gauss-Newton normal equations of each entry.
    parallel : bool
        As :func:`warp`.
    support : tuple of two ndarrays, optional
        :func:`support_radii` of ``images`` and of ``targets``.  The compiled loop then
        skips the pixels where the warped source and the target are both zero (without
        ``moments``; with them it cost more than it saved): with images cleared outside a
        disk (the preprocessing's object frame) about a fifth of a 48 px canvas.  The sums
        are the same (to their rounding).

    Returns
    -------
    f : ndarray, shape (B,), float64
        The squared residuals.
    metric : ndarray, shape (B, 3, 3), float64
        Only with ``moments``: ``J J^T``, ``J`` the derivative of the warped image by
        ``(theta, tx, ty)`` (:func:`iastudio.core.gauss_newton.gauss_newton_metric`).
    jr : ndarray, shape (B, 3), float64
        Only with ``moments``: ``J r``, ``r`` the residual image.

    Examples
    --------
    >>> img = np.zeros((1, 9, 9)); img[0, 4, 5] = 1.0
    >>> f = warp_residuals(img, np.array([[0.0, 0.0, 0.0], [np.pi, 0.0, 0.0]]), img)
    >>> np.round(f, 6).tolist()  # the identity: 0; half a turn moves the pixel to (4, 3)
    [0.0, 2.0]
    """
    xp = array_module(images)
    images, targets = xp.asarray(images), xp.asarray(targets)
    params = xp.asarray(params, dtype=np.float64).reshape(-1, 3)
    b = params.shape[0]
    index = _source_index(index, images.shape[0], b, xp)
    target_index = _source_index(target_index, targets.shape[0], b, xp)
    kernel = _residual_kernel() if xp is np and images.ndim == 3 else None
    if kernel is None:
        return _array_residuals(images, params, targets, index, target_index, moments, parallel)
    src_reach, tgt_reach = _reaches(support, index, target_index, b)
    images, index = _used_sources(images, index, xp)
    dtype = images.dtype if images.dtype in (np.float32, np.float64) else np.float64
    padded = np.pad(images.astype(dtype, copy=False), [(0, 0), (_PAD, _PAD), (_PAD, _PAD)])
    targets = np.ascontiguousarray(targets, dtype=dtype)
    f = np.empty(b)
    sums = np.empty((b if moments else 0, 9))
    step = max(1, _KERNEL_ELEMENTS // int(np.prod(images.shape[1:3])))

    def block(lo):
        hi = min(b, lo + step)
        kernel(padded, params[lo:hi], index[lo:hi], targets, target_index[lo:hi], f[lo:hi],
               sums[lo:hi] if moments else sums, moments, src_reach[lo:hi], tgt_reach[lo:hi])

    _run_blocks(block, range(0, b, step), parallel, np)
    return (f, *_normal_equations(sums)) if moments else f


def _normal_equations(sums):
    """``(J J^T, J r)`` from the compiled loop's sums (upper triangle, then ``J r``)."""
    metric = np.empty((sums.shape[0], 3, 3))
    for k, (i, j) in enumerate(((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))):
        metric[:, i, j] = metric[:, j, i] = sums[:, k]
    return metric, sums[:, 6:].copy()


def support_radii(images) -> np.ndarray:
    """How far from the canvas centre each image reaches: the largest distance of a nonzero pixel.

    Parameters
    ----------
    images : ndarray, shape (N, H, W)
        NumPy.

    Returns
    -------
    ndarray, shape (N,), float64
        Distance (px) from ``((H - 1) / 2, (W - 1) / 2)``; ``-1`` for an image of zeros.

    Examples
    --------
    >>> img = np.zeros((2, 5, 5)); img[0, 2, 4] = 1.0; img[0, 2, 2] = 3.0
    >>> support_radii(img).tolist()
    [2.0, -1.0]
    """
    n, h, w = images.shape
    r2 = (np.arange(h)[:, None] - (h - 1) / 2.0) ** 2 + (np.arange(w)[None, :] - (w - 1) / 2.0) ** 2
    out = np.full(n, -1.0)
    nonzero = (images != 0).reshape(n, -1)
    some = nonzero.any(axis=1)
    out[some] = np.sqrt(np.where(nonzero[some], r2.ravel(), -1.0).max(axis=1))
    return out


_TAP_REACH = 2.0 * np.sqrt(2.0)  # a sampled point's taps lie within this of it (4 x 4 taps, |offset| <= 2 each way)
_REACH_MARGIN = 0.01  # px: far above the coordinates' rounding


def _reaches(support, index, target_index, b):
    """Per entry: how far from the centre its warped source and its target can be nonzero (``inf``: anywhere)."""
    if support is None:
        return np.full(b, np.inf), np.full(b, np.inf)
    source, target = (np.asarray(s, dtype=np.float64) for s in support)
    return source[index] + (_TAP_REACH + _REACH_MARGIN), target[target_index] + _REACH_MARGIN


def _array_residuals(images, params, targets, index, target_index, moments, parallel):
    """:func:`warp_residuals` by :func:`warp` and array sums (CuPy, colour images, no compiled loop)."""
    from .gauss_newton import gauss_newton_metric

    xp = array_module(images)
    b = params.shape[0]
    if moments:
        out, grad = warp(images, params, index=index, gradient=True, parallel=parallel)
    else:
        out = warp(images, params, index=index, parallel=parallel)
    flat = (out - targets[target_index]).reshape(b, -1)
    f = xp.sum(flat * flat, axis=1, dtype=np.float64)  # squares rounded, sums in float64
    if not moments:
        return f
    jr = xp.matmul(grad.reshape(b, 3, -1), flat[..., None])[..., 0].astype(np.float64)
    return f, gauss_newton_metric(grad), jr


def _run_blocks(block, starts, parallel, xp):
    """``block(lo)`` for each start: on every core where the pool has several (NumPy, not inside a worker)."""
    threaded = xp is np and parallel and not _in_worker()
    pool = _pool() if threaded and len(starts) > 1 else None
    if pool is None:
        for lo in starts:
            block(lo)
    else:  # NumPy (and the compiled loops) release the GIL: blocks run on every core
        list(pool.map(block, starts))


def _used_sources(images, index, xp):
    """Only the source images the transforms use, and the index into them.

    The warp pads its sources (a copy): a call that warps a few of many images
    (a block of pairs out of thousands of images) then copies those few, not
    all of them, so its cost does not grow with the size of the set.
    """
    n_src = images.shape[0]
    if n_src <= 1 or index.shape[0] >= 4 * n_src:  # most sources are used: nothing to gain
        return images, index
    used = xp.unique(index)
    if 2 * int(used.shape[0]) > n_src:
        return images, index
    return images[used], xp.searchsorted(used, index)


def _warp_blocks(images, params, index, out, grad, *, kernel, parallel, xp):
    """Fill ``out`` (and ``grad``) block by block, on every core when there are several."""
    n_src, h, w = images.shape[:3]
    b = params.shape[0]
    pad_width = [(0, 0), (_PAD, _PAD), (_PAD, _PAD)] + [(0, 0)] * (images.ndim - 3)
    padded = xp.pad(images, pad_width)
    hp, wp = h + 2 * _PAD, w + 2 * _PAD
    flat = padded.reshape((n_src * hp * wp, *images.shape[3:]))
    # several cores: big blocks (small NumPy calls would queue on the GIL); one core: cache-sized blocks
    several = xp is np and _pool() is not None  # this call or its callers run on several cores
    cpu_block = _CHUNK_ELEMENTS if several else _SINGLE_CHUNK_ELEMENTS
    step = max(1, block_elements(_KERNEL_ELEMENTS if kernel else cpu_block, _GPU_CHUNK_ELEMENTS, xp) // (h * w))
    rr = xp.arange(h, dtype=images.dtype)[:, None] - (h - 1) / 2.0
    cc = xp.arange(w, dtype=images.dtype)[None, :] - (w - 1) / 2.0
    no_grad = xp.empty((0, 3, h, w), dtype=images.dtype)

    def block(lo):
        hi = min(b, lo + step)
        if kernel is not None:
            kernel(padded, params[lo:hi], index[lo:hi], out[lo:hi], no_grad if grad is None else grad[lo:hi],
                   grad is not None)
            return
        _warp_block(flat, params[lo:hi], index[lo:hi], rr, cc, h, w, hp, wp, images.dtype, xp, out[lo:hi],
                    None if grad is None else grad[lo:hi])

    _run_blocks(block, range(0, b, step), parallel, xp)


def _returned(out, grad, single, gradient):
    if single:
        out = out[0]
        grad = grad[0] if gradient else None
    return (out, grad) if gradient else out


_KERNEL = None  # the compiled loop once looked up; False: not available
_OFF = "IASTUDIO_WARP=numpy"  # why the array code is used ...
_NO_NUMBA = "Numba is not installed"
_FAILED = "the compiled loop failed its check: see the log"
_WHY_NOT = ""  # why the array code is used, once looked up
_KERNEL_LOCK = threading.Lock()
_log = logging.getLogger(__name__)


def _compiled():
    """:func:`iastudio.core.warp_kernel.keys_warp`, or None (no Numba, or ``IASTUDIO_WARP=numpy``).

    Looked up once; the first use compiles it (or loads Numba's cache).  If it
    cannot be compiled, or disagrees with the array code on a small known
    case, the array code is used instead and the reason is logged.
    """
    global _KERNEL, _WHY_NOT
    if _KERNEL is None:
        with _KERNEL_LOCK:  # one look-up, and no call uses the array code while another compiles
            if _KERNEL is None and _switched_off():
                _KERNEL, _WHY_NOT = False, _OFF
            elif _KERNEL is None:
                _KERNEL = _checked_kernel() or False
    return _KERNEL or None


_RESIDUAL_KERNEL = None  # the compiled residual loop once looked up; False: not available


def _residual_kernel():
    """:func:`iastudio.core.warp_kernel.keys_residuals` once it agrees with the array sums on a small case; else None.

    Only where the compiled warp is used (:func:`_compiled`); a failed check is logged and the
    array sums are used.
    """
    if _compiled() is None:  # (outside the lock: it takes the lock itself)
        return None
    return _residual_loop()


def _residual_loop():
    """The residual loop, looked up (and checked) once; None where it failed its check."""
    global _RESIDUAL_KERNEL
    if _RESIDUAL_KERNEL is None:
        with _KERNEL_LOCK:
            if _RESIDUAL_KERNEL is None:
                _RESIDUAL_KERNEL = _checked_residual_kernel() or False
    return _RESIDUAL_KERNEL or None


def _checked_residual_kernel():
    try:
        from .warp_kernel import keys_residuals

        rng = np.random.default_rng(0)
        images = rng.random((3, 9, 8)).astype(np.float32)
        params = np.array([[0.3, 0.5, -1.2], [2.0, -0.7, 0.4], [-1.0, 0.0, 0.0]])
        index, target = np.array([0, 1, 2]), np.array([1, 2, 0])
        padded = np.pad(images, [(0, 0), (_PAD, _PAD), (_PAD, _PAD)])
        f, sums = np.empty(3), np.empty((3, 9))
        keys_residuals(padded, params, index, images, target, f, sums, True, *_reaches(None, index, target, 3))
        out, grad = _outputs(None, True, (3, 9, 8), np.float32, np)
        _warp_blocks(images, params, index, out, grad, kernel=None, parallel=False, xp=np)  # the array code
        from .gauss_newton import gauss_newton_metric

        r = (out - images[target]).reshape(3, -1)
        want_f, want_m = (r.astype(np.float64) ** 2).sum(axis=1), gauss_newton_metric(grad)
        want_g = np.einsum("eip,ep->ei", grad.reshape(3, 3, -1), r)
        got_m = sums[:, [0, 1, 2, 1, 3, 4, 2, 4, 5]].reshape(3, 3, 3)
        if not (np.allclose(f, want_f, rtol=1e-4) and np.allclose(got_m, want_m, rtol=1e-3, atol=1e-6)
                and np.allclose(sums[:, 6:], want_g, rtol=1e-3, atol=1e-6)):
            raise ValueError("the compiled residual loop disagrees with the array sums")
        return keys_residuals
    except Exception as exc:  # compiling or the check failed: the array sums do the work
        _log.warning("warp: the residuals use the array sums (%s: %s)", type(exc).__name__, exc)
        return None


def prepare() -> str:
    """Set up the code that warps NumPy images now, rather than at the first warp.

    The first warp compiles the loops of :mod:`iastudio.core.warp_kernel`
    (or loads them from Numba's cache: 0.3 to 1.5 s) and checks them; any other
    warp that starts meanwhile waits for it.  An application calls this on a
    background thread when it starts, so that the first warp it makes in
    front of the user (e.g. aligning two images the user clicked) does not
    pause.  Safe to call from any thread, any number of times.

    Returns
    -------
    str
        :func:`describe_code` once it is set up.
    """
    if _compiled() is not None:
        _residual_loop()
    return describe_code()


def describe_code() -> str:
    """Which code warps NumPy images, in words (e.g. for an About box); compiles nothing.

    Returns
    -------
    str
        ``"compiled loop (Numba 0.68.1)"`` (``", at the first warp"`` added
        before it is first used), or ``"NumPy array code (why)"``.
    """
    from importlib.util import find_spec

    if _KERNEL is None:  # not looked up yet
        if _switched_off():
            return f"NumPy array code ({_OFF})"
        if find_spec("numba") is None:
            return f"NumPy array code ({_NO_NUMBA})"
        return f"compiled loop ({_numba_version()}, at the first warp)"
    if _KERNEL is False:
        return f"NumPy array code ({_WHY_NOT})"
    return f"compiled loop ({_numba_version()})"


def _numba_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"Numba {version('numba')}"
    except PackageNotFoundError:
        return "Numba"


def _switched_off() -> bool:
    return os.environ.get("IASTUDIO_WARP", "").strip().lower() == "numpy"


def _check(run, xp, what):
    """Raise unless ``run(images, params, index, out, grad)`` gives the array code's answer on a small known case."""
    rng = np.random.default_rng(0)
    images = xp.asarray(rng.random((2, 9, 7), dtype=np.float32))
    params = xp.asarray([[0.3, 0.7, -1.2], [-2.0, 3.5, 0.25], [0.1, 1e12, 0.0]])  # the last: far outside
    index = xp.asarray([0, 1, 1])
    got, want = ((xp.empty((3, 9, 7), np.float32), xp.empty((3, 3, 9, 7), np.float32)) for _ in range(2))
    run(images, params, index, *got)
    _warp_blocks(images, params, index, *want, kernel=None, parallel=False, xp=xp)
    if not (bool(xp.allclose(got[0], want[0], atol=1e-4)) and bool(xp.allclose(got[1], want[1], atol=1e-3))):
        raise ValueError(f"the {what} disagrees with the array code")


def _checked_kernel():
    """The compiled loop, once it gives the array code's answer on a small known case; else None (logged)."""
    global _WHY_NOT
    try:
        from .warp_kernel import keys_warp

        _check(lambda *a: _warp_blocks(*a, kernel=keys_warp, parallel=False, xp=np), np, "compiled Keys warp")
        return keys_warp
    except ImportError as exc:  # no Numba (e.g. the installer's app): the array code does the work
        _log.info("warp: the array code is used (%s)", exc)
        _WHY_NOT = _NO_NUMBA
    except Exception as exc:  # Numba cannot set the loop up or compile it here, or the loop is wrong
        _log.warning("warp: the array code is used (%s: %s)", type(exc).__name__, exc)
        _WHY_NOT = _FAILED
    return None


def _channels_compiled(images, params, index, out, grad, parallel):
    """Colour images through the compiled loop or the CUDA kernel: channel ``c`` of source ``i`` is plane ``i * C + c``.

    The transforms go in chunks, so the channel-first results stay bounded (``_CHUNK_ELEMENTS`` each).
    """
    xp = array_module(images)
    n, h, w, c = images.shape
    planes = xp.ascontiguousarray(xp.moveaxis(images, 3, 1)).reshape(n * c, h, w)
    chunk = max(1, block_elements(8 * _CHUNK_ELEMENTS, _GPU_CHUNK_ELEMENTS, xp) // (h * w * c))
    for lo in range(0, params.shape[0], chunk):
        hi = min(params.shape[0], lo + chunk)
        result = warp(planes, xp.repeat(params[lo:hi], c, axis=0), gradient=grad is not None, parallel=parallel,
                      index=(index[lo:hi, None] * c + xp.arange(c)).reshape(-1))
        if grad is None:
            out[lo:hi] = xp.moveaxis(result.reshape(hi - lo, c, h, w), 1, 3)
            continue
        out[lo:hi] = xp.moveaxis(result[0].reshape(hi - lo, c, h, w), 1, 3)
        grad[lo:hi] = xp.moveaxis(result[1].reshape(hi - lo, c, 3, h, w), 1, 4)


_CUDA = None  # the CUDA kernel once looked up; False: not available
_CUDA_OFF = "IASTUDIO_CUDA_WARP=off"
_CUDA_WHY_NOT = ""


def _cuda():
    """:func:`iastudio.core.warp_cuda.keys_warp`, or None (``IASTUDIO_CUDA_WARP=off``, or it failed its check).

    Looked up once, at the first warp of CuPy arrays: the kernel is compiled
    (NVRTC; CuPy caches it on disk) and must give the array code's answer on
    a small known case on the device; otherwise the array code is used and
    the reason is logged.
    """
    global _CUDA, _CUDA_WHY_NOT
    if _CUDA is None:
        with _KERNEL_LOCK:
            if _CUDA is None and _cuda_switched_off():
                _CUDA, _CUDA_WHY_NOT = False, _CUDA_OFF
            elif _CUDA is None:
                _CUDA = _checked_cuda() or False
    return _CUDA or None


def _cuda_switched_off() -> bool:
    return os.environ.get("IASTUDIO_CUDA_WARP", "").strip().lower() in ("off", "0", "no")


def _checked_cuda():
    """The CUDA kernel, once it gives the array code's answer on a small known case; else None (logged)."""
    global _CUDA_WHY_NOT
    try:
        import cupy

        from .warp_cuda import keys_warp

        _check(keys_warp, cupy, "CUDA Keys warp")
        return keys_warp
    except Exception as exc:  # no compiler for this card, a driver too old, or the kernel is wrong
        _log.warning("warp: the CuPy array code is used (%s: %s)", type(exc).__name__, exc)
        _CUDA_WHY_NOT = "the CUDA kernel failed its check: see the log"
    return None


def _cuda_warp(kernel, images, params, index, out, grad):
    """The CUDA kernel into ``out`` / ``grad`` (through contiguous temporaries where they are views with gaps)."""
    xp = array_module(images)
    o = out if out.flags.c_contiguous else xp.empty(out.shape, out.dtype)
    g = None if grad is None else grad if grad.flags.c_contiguous else xp.empty(grad.shape, grad.dtype)
    kernel(images, params, index, o, g)
    if o is not out:
        out[...] = o
    if g is not None and g is not grad:
        grad[...] = g


def describe_gpu_code() -> str:
    """Which code warps CuPy images, in words; compiles nothing.

    Returns
    -------
    str
        ``"CUDA kernel"`` (``", at the first warp"`` added before it is first
        used), or ``"CuPy array code (why)"``.
    """
    if _CUDA is None:
        if _cuda_switched_off():
            return f"CuPy array code ({_CUDA_OFF})"
        return "CUDA kernel, at the first warp"
    return "CUDA kernel" if _CUDA else f"CuPy array code ({_CUDA_WHY_NOT})"


def _outputs(out, gradient, shape, dtype, xp):
    """``(out, grad)`` to write into: the caller's (checked) or new; ``grad`` is None without ``gradient``."""
    if out is None:
        return xp.empty(shape, dtype=dtype), xp.empty((shape[0], 3, *shape[1:]), dtype=dtype) if gradient else None
    given = tuple(out) if gradient else (out,)
    wanted = [shape, (shape[0], 3, *shape[1:])][:len(given)]
    if len(given) != (2 if gradient else 1) or any(a.shape != s or a.dtype != dtype for a, s in zip(given, wanted)):
        raise ValueError("out does not match the result's shape and dtype")
    if not all(getattr(getattr(a, "flags", None), "writeable", True) for a in given):
        raise ValueError("out is read-only")
    return given[0], given[1] if gradient else None


def _source_index(index, n_src, b, xp):
    """The source image of each of ``b`` transforms (see :func:`warp`'s ``index``)."""
    if index is None:
        if n_src == b:
            return xp.arange(b)
        if n_src == 1:
            return xp.zeros(b, dtype=np.int64)
        raise ValueError(f"{b} transforms for {n_src} images: pass index=")
    index = xp.asarray(index, dtype=np.int64).reshape(-1)
    if index.shape[0] != b:
        raise ValueError("index must have one entry per transform")
    if xp is np and b and (index.min() < 0 or index.max() >= n_src):  # the compiled loop does not check
        # (a check on a GPU would wait for it at every warp: the CUDA kernel writes NaN for such an index)
        raise IndexError(f"index must lie in [0, {n_src}): the source images")
    return index


_POOLS = {}  # thread count -> its pool
_POOLS_LOCK = threading.Lock()


def _in_worker() -> bool:
    return in_worker()


def parallel_map(fn, items) -> list:
    """``[fn(x) for x in items]`` with the items spread over the engine's threads (NumPy work).

    Results come back in the order of ``items``.  Inside ``fn`` the warp and
    the FFTs run on its own thread (no nested use of the pool); with one
    thread (:func:`iastudio.core.backend.threads`), inside a worker already,
    or for fewer than two items it is a plain loop.  An exception raised by
    ``fn`` is raised here.
    """
    items = list(items)
    pool = _pool()
    if pool is None or _in_worker() or len(items) < 2:
        return [fn(x) for x in items]

    def run(x):
        with as_worker():
            return fn(x)

    with blas_threads(1):  # the pool is the parallelism: BLAS inside its blocks on one thread each
        return list(pool.map(run, items))


def _pool():
    """A thread pool of :func:`iastudio.core.backend.threads` workers (None for one thread)."""
    from concurrent.futures import ThreadPoolExecutor

    n = threads()
    if n < 2:
        return None
    with _POOLS_LOCK:
        if n not in _POOLS:
            _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="ia-warp")
        return _POOLS[n]


def _warp_block(flat, params, index, rr, cc, h, w, hp, wp, dtype, xp, out, grad):
    gradient = grad is not None
    # cos and sin of the float64 angle, then rounded: the same on every device
    cos = xp.cos(params[:, 0]).astype(dtype)[:, None, None]
    sin = xp.sin(params[:, 0]).astype(dtype)[:, None, None]
    tx = params[:, 1].astype(dtype)[:, None, None]
    ty = params[:, 2].astype(dtype)[:, None, None]
    rows = cos * rr + sin * cc + ((h - 1) / 2.0) + ty
    cols = -sin * rr + cos * cc + ((w - 1) / 2.0) + tx
    r_floor = xp.floor(rows)
    c_floor = xp.floor(cols)
    rows -= r_floor  # now the fractions
    cols -= c_floor
    wr, dwr = _tap_weights(rows, gradient)
    wc, dwc = _tap_weights(cols, gradient)
    r0 = xp.clip(r_floor.astype(np.int64) - 1, -_PAD, h) + _PAD
    c0 = xp.clip(c_floor.astype(np.int64) - 1, -_PAD, w) + _PAD
    base = index[:, None, None] * (hp * wp) + r0 * wp + c0
    extra = flat.ndim - 1  # channel axes
    if extra:
        expand = (Ellipsis,) + (None,) * extra
        wr = [x[expand] for x in wr]
        wc = [x[expand] for x in wc]
        if gradient:
            dwr = [x[expand] for x in dwr]
            dwc = [x[expand] for x in dwc]
    # sums accumulate in place, in the order phi_0 v_0 + phi_1 v_1 + ...
    acc = g_r = g_c = None
    for k in range(4):
        row = drow = None
        for c in range(4):
            v = xp.take(flat[k * wp + c :], base, axis=0)
            row = _accumulate(row, wc[c] * v)
            if gradient:
                v *= dwc[c]
                drow = _accumulate(drow, v)
        acc = _accumulate(acc, wr[k] * row)
        if gradient:
            row *= dwr[k]
            g_r = _accumulate(g_r, row)
            drow *= wr[k]
            g_c = _accumulate(g_c, drow)
    out[...] = acc
    if not gradient:
        return
    if extra:
        cos, sin = cos[expand], sin[expand]
        rr = rr[expand]
        cc = cc[expand]
    d_rows_d_theta = -sin * rr + cos * cc
    d_cols_d_theta = -cos * rr - sin * cc
    grad[:, 0] = g_r * d_rows_d_theta + g_c * d_cols_d_theta
    grad[:, 1] = g_c
    grad[:, 2] = g_r


def _accumulate(total, term):
    if total is None:
        return term
    total += term
    return total
