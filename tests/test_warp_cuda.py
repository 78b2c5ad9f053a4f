"""The CUDA Keys warp (``core/warp_cuda.py``).

Without a GPU its source is compiled for the CPU (a C++ compiler and four
lines of shim stand in for CUDA's thread indices: one "thread" walks every
output pixel) and must give the compiled CPU loop's answer; on a GPU the
kernel itself must give it, and the engine must use it.
"""
import ctypes
import shutil
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.warp import warp
from iastudio.core.warp_cuda import SOURCE
from iastudio.core.warp_kernel import keys_warp as numba_warp

warp_module = sys.modules["iastudio.core.warp"]

SHIM = r"""
#include <cmath>
struct ia_dim { unsigned x; };
static const ia_dim blockIdx = {0}, blockDim = {1}, threadIdx = {0}, gridDim = {1};
#define __device__
#define __forceinline__ inline
#define __global__
using std::floor;
using std::fabs;
using std::nan;
"""


@pytest.fixture(scope="module")
def cpu_build(tmp_path_factory):
    """The kernel source built as a CPU library (no contraction into FMAs, as on the GPU)."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the CUDA source for the CPU")
    folder = tmp_path_factory.mktemp("warp_cuda")
    (folder / "k.cpp").write_text(SHIM + SOURCE)
    lib = folder / "k.so"
    subprocess.run([cxx, "-O2", "-ffp-contract=off", "-shared", "-fPIC", str(folder / "k.cpp"), "-o", str(lib)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def _on_cpu(lib, images, params, index, gradient=True):
    """Run the kernel's source on the CPU: ``(out, grad)`` as the GPU would write them."""
    images = np.ascontiguousarray(images)
    b, (h, w) = params.shape[0], images.shape[1:]
    params = np.ascontiguousarray(params, dtype=np.float64)
    trig = np.ascontiguousarray(np.stack([np.cos(params[:, 0]), np.sin(params[:, 0])], axis=1))
    index = np.ascontiguousarray(index, dtype=np.int64)
    out = np.full((b, h, w), np.nan, images.dtype)  # poisoned: every element must be written
    grad = np.full((b, 3, h, w), np.nan, images.dtype)
    fn = lib.keys_warp_f32 if images.dtype == np.float32 else lib.keys_warp_f64
    ptr = [a.ctypes.data_as(ctypes.c_void_p) for a in (images, params, trig, index, out, grad)]
    fn(*ptr, ctypes.c_longlong(b * h * w), ctypes.c_longlong(images.shape[0]), ctypes.c_int(h), ctypes.c_int(w),
       ctypes.c_int(int(gradient)))
    return out, grad


def _case(rng, n=3, h=13, w=11, b=40, dtype=np.float32):
    images = rng.random((n, h, w)).astype(dtype)
    params = np.column_stack([rng.uniform(-4, 4, b), rng.uniform(-6, 6, b), rng.uniform(-6, 6, b)])
    params[0] = (0.0, 0.0, 0.0)
    params[1] = (0.2, 1e12, 0.0)  # far outside: zeros
    params[2] = (np.pi / 2, 0.5, -0.25)
    return images, params, rng.integers(0, n, b)


def _numba(images, params, index):
    pad = warp_module._PAD
    padded = np.pad(images, [(0, 0), (pad, pad), (pad, pad)])
    out = np.empty((params.shape[0], *images.shape[1:]), images.dtype)
    grad = np.empty((params.shape[0], 3, *images.shape[1:]), images.dtype)
    numba_warp(padded, params, index, out, grad, True)
    return out, grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_source_gives_the_compiled_loops_answer(cpu_build, dtype):
    images, params, index = _case(np.random.default_rng(1), dtype=dtype)
    got = _on_cpu(cpu_build, images, params, index)
    want = _numba(images, params, index)
    for g, x in zip(got, want):
        assert not np.isnan(g).any()
        assert_allclose(g, x, rtol=1e-6, atol=1e-6 * np.abs(x).max())
    assert_allclose(got[0][1], 0.0)  # far outside
    # the array code, too (it rounds its coordinates to the images' dtype: looser)
    arr = warp_module._warp_blocks
    out, grad = np.empty_like(got[0]), np.empty_like(got[1])
    arr(images, params, index, out, grad, kernel=None, parallel=False, xp=np)
    assert_allclose(got[0], out, atol=2e-4 * np.abs(out).max())
    assert_allclose(got[1], grad, atol=2e-3 * np.abs(grad).max())


def test_cuda_source_writes_nan_for_an_index_outside_the_images(cpu_build):
    images, params, _ = _case(np.random.default_rng(4), n=2, b=4)
    out, grad = _on_cpu(cpu_build, images, params, np.array([0, 2, -1, 1]))
    assert np.isnan(out[[1, 2]]).all()
    assert np.isnan(grad[[1, 2]]).all()
    want = _numba(images, params[[0, 3]], np.array([0, 1]))
    assert_allclose(out[[0, 3]], want[0], rtol=1e-6)
    assert_allclose(grad[[0, 3]], want[1], rtol=1e-6, atol=1e-6 * np.abs(want[1]).max())


def test_cuda_source_warps_a_quarter_turn_exactly(cpu_build):
    img = np.arange(7 * 7, dtype=np.float32).reshape(1, 7, 7)
    out, _grad = _on_cpu(cpu_build, img, np.array([[np.pi / 2, 0.0, 0.0]]), np.array([0]))
    # a quarter turn about the centre samples the pixel grid exactly: the image's pixels, turned
    assert_allclose(out[0], np.rot90(img[0], k=1), atol=1e-4)
    only_value, _ = _on_cpu(cpu_build, img, np.array([[np.pi / 2, 0.0, 0.0]]), np.array([0]), gradient=False)
    assert_allclose(only_value, out)
    assert np.isnan(_[0]).all()  # no gradient asked: not written


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_kernel_gives_the_compiled_loops_answer(dtype, gpu):
    b = gpu
    assert warp_module._cuda() is not None, warp_module.describe_gpu_code()
    images, params, index = _case(np.random.default_rng(2), b=500, h=32, w=29, dtype=dtype)
    out, grad = warp(b.asarray(images), b.asarray(params), index=b.asarray(index), gradient=True)
    want = _numba(images, params, index)
    for g, x in zip((out.get(), grad.get()), want):
        assert_allclose(g, x, rtol=1e-6, atol=1e-6 * np.abs(x).max())
    bad = warp(b.asarray(images), b.asarray(params[:2]), index=b.asarray([0, images.shape[0]])).get()
    assert np.isfinite(bad[0]).all()
    assert np.isnan(bad[1]).all()
    # colour: each channel as an image of its own; a strided out is written too
    rgb = np.stack([images, 2 * images, images[:, ::-1]], axis=-1)
    o = b.xp.empty((params.shape[0] * 2, *rgb.shape[1:]), dtype)[::2]
    warp(b.asarray(rgb), b.asarray(params), index=b.asarray(index), out=o)
    for c in range(3):
        assert_allclose(o.get()[..., c], _numba(np.ascontiguousarray(rgb[..., c]), params, index)[0],
                        rtol=1e-6, atol=1e-6 * np.abs(rgb).max())
