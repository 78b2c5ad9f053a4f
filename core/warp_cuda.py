"""The Keys warp as one CUDA kernel over the output pixels (CuPy).

:func:`iastudio.core.warp.warp` uses this on CuPy arrays; the array code in
:mod:`iastudio.core.warp` is the fall-back.  It is the GPU twin of the compiled
CPU loop (:mod:`iastudio.core.warp_kernel`): one thread per output pixel reads
the 4x4 taps around its sampled point once for the value and both
derivatives, keeps the coordinates and the sums in double precision, and
writes the value (and the three derivatives) in the images' dtype.  The array
code instead builds 16 gathered arrays and about forty temporaries per block,
which on a GPU is bound by memory traffic and kernel launches.

The kernel reads the images as they are (no zero-padded copy): a tap outside
the image reads 0, which is what the padded border gives the other codes.  It
is compiled with ``--fmad=false``, so every product and sum is rounded as the
CPU loop rounds it and the two agree to the images' rounding.
"""
from __future__ import annotations

import numpy as np

from .keys import KEYS_A

__all__ = ["SOURCE", "keys_warp"]

SOURCE = r"""
#define KEYS_A (KEYS_A_VALUE)

template <typename T>
__device__ __forceinline__ double tap(const T* __restrict__ img, long long k, long long l, int h, int w) {
    return (k >= 0 && k < h && l >= 0 && l < w) ? (double)img[k * w + l] : 0.0;
}

__device__ __forceinline__ void weights4(double f, double* wt) {
    const double a = KEYS_A;
    const double g = 1.0 - f;
    wt[0] = a * f * g * g;
    wt[1] = ((a + 2.0) * f - (a + 3.0)) * f * f + 1.0;
    wt[2] = ((a + 2.0) * g - (a + 3.0)) * g * g + 1.0;
    wt[3] = a * g * f * f;
}

__device__ __forceinline__ void derivatives4(double f, double* dw) {
    const double a = KEYS_A;
    const double g = 1.0 - f;
    dw[0] = a * (g - 2.0 * f) * g;
    dw[1] = (3.0 * (a + 2.0) * f - 2.0 * (a + 3.0)) * f;
    dw[2] = -((3.0 * (a + 2.0) * g - 2.0 * (a + 3.0)) * g);
    dw[3] = a * (2.0 * g - f) * f;
}

template <typename T>
__device__ __forceinline__ double dot4(const T* __restrict__ img, long long k, long long l0, const double* wt,
                                       int h, int w) {
    return wt[0] * tap(img, k, l0, h, w) + wt[1] * tap(img, k, l0 + 1, h, w)
           + wt[2] * tap(img, k, l0 + 2, h, w) + wt[3] * tap(img, k, l0 + 3, h, w);
}

/* out[b] = images[index[b]] o params[b], grad[b] = d out[b] / d (theta, tx, ty); trig[b] = (cos, sin) theta. */
template <typename T>
__device__ void keys_warp(const T* __restrict__ images, const double* __restrict__ params,
                          const double* __restrict__ trig, const long long* __restrict__ index,
                          T* __restrict__ out, T* __restrict__ grad, long long total, long long n_src,
                          int h, int w, int gradient) {
    const long long hw = (long long)h * w;
    const double mid_r = (h - 1) / 2.0, mid_c = (w - 1) / 2.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long b = i / hw;
        const long long pix = i - b * hw;
        const int y = (int)(pix / w), x = (int)(pix - (long long)y * w);
        const long long src = index[b];
        T* g = grad + 3 * b * hw + pix;
        if (src < 0 || src >= n_src) {  /* no such image: NaN, never a read outside the images */
            out[i] = (T)nan("");
            if (gradient) g[0] = g[hw] = g[2 * hw] = (T)nan("");
            continue;
        }
        const T* __restrict__ img = images + src * hw;
        const double cs = trig[2 * b], sn = trig[2 * b + 1];
        const double r = y - mid_r, c = x - mid_c;
        const double row = cs * r + sn * c + mid_r + params[3 * b + 2];
        const double col = -sn * r + cs * c + mid_c + params[3 * b + 1];
        const double r_floor = floor(row), c_floor = floor(col);
        const double fr = row - r_floor, fc = col - c_floor;
        /* a point far outside (NaN and huge shifts included) reads only zeros */
        const long long r0 = fabs(row) < 1e9 ? (long long)r_floor - 1 : -8;
        const long long c0 = fabs(col) < 1e9 ? (long long)c_floor - 1 : -8;
        double wr[4], wc[4], s[4];
        weights4(fr, wr);
        weights4(fc, wc);
        for (int k = 0; k < 4; ++k) s[k] = dot4(img, r0 + k, c0, wc, h, w);
        out[i] = (T)(wr[0] * s[0] + wr[1] * s[1] + wr[2] * s[2] + wr[3] * s[3]);
        if (gradient) {
            double dr[4], dc[4];
            derivatives4(fr, dr);
            derivatives4(fc, dc);
            const double g_r = dr[0] * s[0] + dr[1] * s[1] + dr[2] * s[2] + dr[3] * s[3];
            const double g_c = wr[0] * dot4(img, r0, c0, dc, h, w) + wr[1] * dot4(img, r0 + 1, c0, dc, h, w)
                               + wr[2] * dot4(img, r0 + 2, c0, dc, h, w) + wr[3] * dot4(img, r0 + 3, c0, dc, h, w);
            g[0] = (T)(g_r * (-sn * r + cs * c) + g_c * (-cs * r - sn * c));
            g[hw] = (T)g_c;
            g[2 * hw] = (T)g_r;
        }
    }
}

extern "C" __global__ void keys_warp_f32(const float* images, const double* params, const double* trig,
                                         const long long* index, float* out, float* grad, long long total,
                                         long long n_src, int h, int w, int gradient) {
    keys_warp<float>(images, params, trig, index, out, grad, total, n_src, h, w, gradient);
}

extern "C" __global__ void keys_warp_f64(const double* images, const double* params, const double* trig,
                                         const long long* index, double* out, double* grad, long long total,
                                         long long n_src, int h, int w, int gradient) {
    keys_warp<double>(images, params, trig, index, out, grad, total, n_src, h, w, gradient);
}
""".replace("KEYS_A_VALUE", repr(KEYS_A))

OPTIONS = ("--fmad=false",)
_THREADS = 256
_MAX_BLOCKS = 1 << 20  # the loop strides over the rest
_MODULE = None


def _module():
    global _MODULE
    if _MODULE is None:
        import cupy

        _MODULE = cupy.RawModule(code=SOURCE, options=OPTIONS)
    return _MODULE


def keys_warp(images, params, index, out, grad):
    """Warp ``images[index[b]]`` by ``params[b]`` into ``out[b]`` (and ``grad[b]``) on the GPU.

    Parameters
    ----------
    images : cupy.ndarray, shape (N, H, W), float32 or float64
        The sources (any strides; a C-contiguous copy is made where needed).
    params : cupy.ndarray, shape (B, 3)
        ``(theta, tx, ty)`` per output (see :mod:`iastudio.core.se2`).
    index : cupy.ndarray of int, shape (B,)
        Source of each output; an output whose index is not in ``[0, N)`` is
        NaN (checked on the device: no synchronisation, no read outside the images).
    out : cupy.ndarray, shape (B, H, W), C-contiguous, the dtype of ``images``
    grad : cupy.ndarray, shape (B, 3, H, W), C-contiguous, or None
        Written when given.
    """
    import cupy

    images = cupy.ascontiguousarray(images)
    b = int(params.shape[0])
    if b == 0:
        return
    h, w = int(images.shape[1]), int(images.shape[2])
    params = cupy.ascontiguousarray(params, dtype=np.float64)
    trig = cupy.ascontiguousarray(cupy.stack([cupy.cos(params[:, 0]), cupy.sin(params[:, 0])], axis=1))
    index = cupy.ascontiguousarray(index, dtype=np.int64)
    name = "keys_warp_f32" if images.dtype == np.float32 else "keys_warp_f64"
    total = b * h * w
    blocks = min(_MAX_BLOCKS, -(-total // _THREADS))
    _module().get_function(name)((blocks,), (_THREADS,), (
        images, params, trig, index, out, out if grad is None else grad, np.int64(total), np.int64(images.shape[0]),
        np.int32(h), np.int32(w), np.int32(grad is not None)))
