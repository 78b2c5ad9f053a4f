import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core import se2
from iastudio.core.warp import keys_kernel, keys_kernel_derivative, warp
from tests.conftest import smooth_blob

WARP = sys.modules["iastudio.core.warp"]


@pytest.fixture(params=["compiled", "array"], autouse=True)
def warp_code(request, monkeypatch):
    """Every test here runs on both codes of the warp: Numba's compiled loop and the NumPy array code."""
    if request.param == "compiled":
        pytest.importorskip("numba")
        if WARP._compiled() is None:
            pytest.fail("Numba is installed but the compiled warp was not taken (see the log)")
    else:
        monkeypatch.setattr(WARP, "_KERNEL", False)
    return request.param


def test_keys_kernel_interpolates_samples():
    assert keys_kernel(np.array(0.0)) == 1.0
    np.testing.assert_allclose(keys_kernel(np.array([-2.0, -1.0, 1.0, 2.0, 2.5, -3.0])), 0.0, rtol=1e-5, atol=1e-8)


def test_keys_partition_of_unity_and_linear_ramp():
    f = np.linspace(0, 1, 37)
    taps = np.stack([keys_kernel(f + 1), keys_kernel(f), keys_kernel(f - 1), keys_kernel(f - 2)])
    np.testing.assert_allclose(taps.sum(0), 1.0, rtol=1e-5, atol=1e-8)
    # reproduces a ramp: sum_k k phi(x - k) = x
    ks = np.array([-1, 0, 1, 2])[:, None]
    np.testing.assert_allclose((taps * ks).sum(0), f, rtol=1e-5, atol=1e-8)


def test_keys_derivative_matches_finite_differences():
    s = np.linspace(-2.4, 2.4, 97) + 1e-3
    h = 1e-6
    fd = (keys_kernel(s + h) - keys_kernel(s - h)) / (2 * h)
    np.testing.assert_allclose(keys_kernel_derivative(s), fd, atol=1e-6, rtol=1e-5)


def test_not_a_bspline():
    # a cubic B-spline (scipy order=3) would smooth a sample; Keys reproduces it exactly
    img = np.zeros((1, 9, 9))
    img[0, 4, 4] = 1.0
    assert warp(img, np.zeros((1, 3)))[0, 4, 4] == pytest.approx(1.0)


def test_rot90_and_integer_shift_known_answers():
    img = smooth_blob(33, seed=1)[None]
    for k in (1, 2, 3):
        out = warp(img, np.array([[k * np.pi / 2, 0.0, 0.0]]))[0]
        options = [np.rot90(img[0], j) for j in (1, 2, 3)]
        errs = [np.abs(out[3:-3, 3:-3] - o[3:-3, 3:-3]).max() for o in options]
        assert min(errs) < 1e-9
    out = warp(img, np.array([[0.0, 3.0, -2.0]]))[0]  # samples at (r - 2, c + 3)
    expected = np.roll(np.roll(img[0], 2, axis=0), -3, axis=1)
    assert np.abs(out[4:-4, 4:-4] - expected[4:-4, 4:-4]).max() < 1e-12


def test_rot90_direction_is_consistent():
    img = smooth_blob(33, seed=1)[None]
    a = warp(img, np.array([[np.pi / 2, 0, 0]]))[0]
    b = warp(img, np.array([[-np.pi / 2, 0, 0]]))[0]
    assert np.abs(a - b).max() > 0.1  # the two directions differ
    assert np.abs(warp(a[None], np.array([[-np.pi / 2, 0, 0]]))[0] - img[0])[3:-3, 3:-3].max() < 1e-9


def test_transform_then_inverse_returns_the_image():
    img = smooth_blob(48, seed=3)[None]
    p = np.array([[1.1, 2.5, -1.5]])
    back = warp(warp(img, p), se2.invert(p))[0]
    # two cubic interpolations: a small, smooth loss only
    assert np.linalg.norm(back - img[0]) / np.linalg.norm(img[0]) < 0.02
    assert np.abs(back - img[0]).max() < 0.05


@pytest.mark.parametrize("param", [0, 1, 2])
def test_derivative_matches_central_differences(param):
    img = smooth_blob(32, seed=4)[None]
    p = np.array([[0.37, 1.3, -0.8]])
    _, grad = warp(img, p, gradient=True)
    h = 1e-5
    dp = np.zeros((1, 3))
    dp[0, param] = h
    fd = (warp(img, p + dp) - warp(img, p - dp)) / (2 * h)
    rel = np.linalg.norm(grad[0, param] - fd[0]) / np.linalg.norm(fd[0])
    assert rel < 1e-3


def test_batch_index_and_broadcast():
    imgs = np.stack([smooth_blob(24, seed=s) for s in range(3)])
    p = se2.random_transforms(5, rotation_range=180, shift_range=2, seed=0)
    idx = np.array([2, 0, 1, 2, 0])
    out = warp(imgs, p, index=idx)
    for k in range(5):
        np.testing.assert_allclose(out[k], warp(imgs[idx[k]][None], p[k][None])[0], rtol=1e-5, atol=1e-8)
    one = warp(imgs[:1], p)  # one image, many transforms
    assert one.shape == (5, 24, 24)
    single = warp(imgs[:1], p[0])
    assert single.shape == (24, 24)


def test_a_few_of_many_sources_warp_as_alone():
    imgs = np.stack([smooth_blob(20, seed=s) for s in range(20)]).astype(np.float32)
    p = se2.random_transforms(3, rotation_range=180, shift_range=2, seed=4)
    idx = np.array([17, 3, 17])  # 2 of 20 sources: only those are padded
    out, grad = warp(imgs, p, index=idx, gradient=True)
    for k in range(3):
        alone = warp(imgs[idx[k]][None], p[k], gradient=True)
        np.testing.assert_array_equal(out[k], alone[0])
        np.testing.assert_array_equal(grad[k], alone[1])
    colour = np.stack([imgs, imgs[::-1]], axis=-1)
    np.testing.assert_array_equal(warp(colour, p, index=idx)[..., 1], warp(imgs[::-1], p, index=idx))


def test_colour_channels_warp_like_gray():
    imgs = np.stack([smooth_blob(24, seed=s) for s in range(3)], axis=-1)[None]
    p = np.array([[0.5, 1.0, 0.5]])
    out, grad = warp(imgs, p, gradient=True)
    assert out.shape == (1, 24, 24, 3)
    assert grad.shape == (1, 3, 24, 24, 3)
    for c in range(3):
        np.testing.assert_allclose(out[0, ..., c], warp(imgs[..., c], p)[0], rtol=1e-5, atol=1e-8)


def test_far_outside_is_zero_and_float32_kept():
    img = smooth_blob(16).astype(np.float32)[None]
    out = warp(img, np.array([[0.0, 500.0, -500.0]]))
    assert out.dtype == np.float32
    assert np.all(out == 0)


def test_parallel_map_keeps_the_order_nests_and_raises():
    from iastudio.core.warp import parallel_map

    wmod = WARP
    assert parallel_map(lambda x: x * x, range(7)) == [0, 1, 4, 9, 16, 25, 36]
    # inside a worker the warp and a nested map run on that thread (no deadlock on the pool)
    img = np.random.default_rng(0).random((2, 16, 16)).astype(np.float32)
    tau = np.array([[0.3, 1.0, -0.5], [-0.2, 0.0, 0.7]])
    want = warp(img, tau)
    got = parallel_map(lambda k: (wmod._in_worker(), parallel_map(lambda j: j + k, range(3)), warp(img, tau)),
                       range(4))
    for k, (inside, nested, out) in enumerate(got):
        assert nested == [k, k + 1, k + 2]
        np.testing.assert_array_equal(out, want)
        assert inside or wmod._pool() is None
    with pytest.raises(ZeroDivisionError):
        parallel_map(lambda x: 1 // x, [1, 0, 2])


def test_out_receives_the_result_in_place_and_a_wrong_one_is_refused():
    imgs = np.stack([smooth_blob(24, seed=s) for s in range(3)]).astype(np.float32)
    p = se2.random_transforms(5, rotation_range=180, shift_range=2, seed=1)
    idx = np.array([2, 0, 1, 2, 0])
    want, want_grad = warp(imgs, p, index=idx, gradient=True)
    cache = np.full((7, 24, 24), np.nan, np.float32), np.full((7, 3, 24, 24), np.nan, np.float32)
    got, got_grad = warp(imgs, p, index=idx, gradient=True, out=(cache[0][1:6], cache[1][1:6]))
    assert np.shares_memory(got, cache[0])
    assert np.shares_memory(got_grad, cache[1])
    np.testing.assert_allclose(cache[0][1:6], want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(cache[1][1:6], want_grad, rtol=1e-6, atol=1e-8)
    assert np.isnan(cache[0][[0, 6]]).all()  # nothing written outside the given rows
    plain = np.empty((5, 24, 24), np.float32)
    np.testing.assert_allclose(warp(imgs, p, index=idx, out=plain), want, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="out"):
        warp(imgs, p, index=idx, out=np.empty((5, 24, 24), np.float64))  # float32 images: float32 out
    with pytest.raises(ValueError, match="out"):
        warp(imgs, p, index=idx, gradient=True, out=(plain, np.empty((5, 2, 24, 24), np.float32)))
    plain.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # on either code, before anything is written
        warp(imgs, p, index=idx, out=plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_loop_and_the_array_code_agree(dtype, monkeypatch, warp_code):
    if warp_code != "compiled":
        pytest.skip("compares the two codes once")
    rng = np.random.default_rng(5)
    imgs = np.stack([smooth_blob(40, seed=s) for s in range(6)]).astype(dtype)
    p = se2.random_transforms(500, rotation_range=180, shift_range=25, seed=2)  # many taps off the image
    idx = rng.integers(0, 6, 500)
    got, got_grad = warp(imgs, p, index=idx, gradient=True)  # several blocks, on every core
    monkeypatch.setattr(WARP, "_KERNEL", False)
    want, want_grad = warp(imgs, p, index=idx, gradient=True)
    assert got.dtype == want.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())
    np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=10 * tol * np.abs(want_grad).max())
    assert (got == 0).any()
    assert (got != 0).sum() > 0.3 * got.size


def test_colour_in_chunks_agrees_with_the_array_code(monkeypatch, warp_code):
    if warp_code != "compiled":
        pytest.skip("compares the two codes once")
    imgs = np.stack([smooth_blob(40, seed=s) for s in range(6)], axis=-1).reshape(2, 40, 40, 3).astype(np.float32)
    p = se2.random_transforms(300, rotation_range=180, shift_range=5, seed=3)  # more than one chunk of the loop
    idx = np.random.default_rng(1).integers(0, 2, 300)
    got = warp(imgs, p, index=idx, gradient=True)
    monkeypatch.setattr(WARP, "_KERNEL", False)
    want = warp(imgs, p, index=idx, gradient=True)
    for a, b, tol in zip(got, want, (1e-5, 1e-4)):  # d/dtheta: the coordinates' rounding times the lever arm
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())


def test_the_loop_compiles_without_a_writable_cache(compiled_once):
    """A read-only install (no folder for Numba's cache): the loop is compiled in the process instead."""
    out = _fresh_python(
        "import numba.core.caching as c, numpy as np, importlib\n"
        "def read_only(self): raise PermissionError('read-only')\n"
        "c._CacheLocator.ensure_cache_path = read_only\n"
        "w = importlib.import_module('iastudio.core.warp')\n"
        "print(w.warp(np.ones((1, 8, 8)), np.zeros(3)).sum() > 0, w.describe_code())\n")
    assert out.strip().startswith("True compiled loop (Numba"), out


@pytest.fixture
def compiled_once(warp_code):
    """Run a fresh-interpreter test once (under the compiled loop), not once per warp code."""
    if warp_code != "compiled":
        pytest.skip("once")


def _fresh_python(script: str) -> str:
    """Standard output of ``script`` run in a new interpreter (nothing set up yet); fails the test if it fails."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_an_index_outside_the_images_is_refused_and_nan_stays_nan():
    imgs = np.stack([smooth_blob(16, seed=s) for s in range(2)])
    for bad in ([0, 2], [-1, 0]):
        with pytest.raises(IndexError, match=r"\[0, 2\)"):
            warp(imgs, np.zeros((2, 3)), index=np.array(bad))
    out = warp(imgs, np.array([[np.nan, 0.0, 0.0], [0.0, 1e15, -1e15]]), index=np.array([0, 1]))
    assert np.isnan(out[0]).all()
    assert np.all(out[1] == 0)


def test_the_array_code_takes_over_when_the_compiled_loop_is_off_or_wrong(monkeypatch, caplog):
    pytest.importorskip("numba")
    kernel_module = sys.modules["iastudio.core.warp_kernel"]
    img = smooth_blob(24, seed=1)[None]
    p = np.array([[0.4, 1.5, -0.5]])
    monkeypatch.setattr(WARP, "_KERNEL", False)
    monkeypatch.setattr(WARP, "_WHY_NOT", WARP._WHY_NOT)  # put back afterwards
    want = warp(img, p)
    monkeypatch.setattr(WARP, "_KERNEL", None)
    assert WARP.describe_code().startswith("compiled loop (Numba ")
    assert "at the first warp" in WARP.describe_code()
    monkeypatch.setenv("IASTUDIO_WARP", "numpy")
    assert WARP.describe_code() == "NumPy array code (IASTUDIO_WARP=numpy)"
    assert WARP._compiled() is None
    assert WARP.describe_code() == "NumPy array code (IASTUDIO_WARP=numpy)"
    monkeypatch.delenv("IASTUDIO_WARP")
    monkeypatch.setattr(WARP, "_KERNEL", None)
    monkeypatch.setattr(kernel_module, "keys_warp", lambda padded, params, index, out, grad, gradient: out.fill(0))
    with caplog.at_level("WARNING", logger="iastudio.core.warp"):
        assert WARP._compiled() is None
    assert "disagrees with the array code" in caplog.text
    assert WARP.describe_code() == "NumPy array code (the compiled loop failed its check: see the log)"
    np.testing.assert_allclose(warp(img, p), want, rtol=1e-12)
    monkeypatch.setitem(sys.modules, "iastudio.core.warp_kernel", None)  # as without Numba: the import fails
    monkeypatch.setattr(WARP, "_KERNEL", None)
    assert WARP._compiled() is None
    assert WARP.describe_code() == "NumPy array code (Numba is not installed)"
    np.testing.assert_allclose(warp(img, p), want, rtol=1e-12)


def test_prepare_sets_the_loop_up_before_the_first_warp(compiled_once):
    """``prepare`` does the first warp's set-up (compile or cache load, and the check) ahead of it."""
    out = _fresh_python(
        "import importlib\n"
        "w = importlib.import_module('iastudio.core.warp')\n"
        "before = w.describe_code()\n"
        "print(before, '|', w.prepare(), '|', callable(w._KERNEL))\n")
    before, after, ready = (part.strip() for part in out.split("|"))
    assert before.endswith("at the first warp)")
    assert after.startswith("compiled loop (Numba ")
    assert "first warp" not in after
    assert ready == "True"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_warp_residuals_are_the_warped_images_distances_and_normal_equations(dtype, warp_code):
    """Summed as it samples (compiled) or from the warp (array code): the same squares, J J^T and J r."""
    from iastudio.core.gauss_newton import gauss_newton_metric
    from iastudio.core.warp import warp_residuals

    assert (WARP._residual_kernel() is not None) == (warp_code == "compiled")  # it passed its own check

    rng = np.random.default_rng(8)
    imgs = np.stack([smooth_blob(30, seed=s) for s in range(5)]).astype(dtype)
    p = se2.random_transforms(300, rotation_range=180, shift_range=12, seed=4)
    idx, tidx = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    out, grad = warp(imgs, p, index=idx, gradient=True)
    r = (out - imgs[tidx]).astype(np.float64)
    want_f = (r**2).sum(axis=(1, 2))
    want_jr = np.einsum("eipq,epq->ei", grad.astype(np.float64), r)
    f = warp_residuals(imgs, p, imgs, index=idx, target_index=tidx)
    f2, metric, jr = warp_residuals(imgs, p, imgs, index=idx, target_index=tidx, moments=True)
    assert f.dtype == metric.dtype == jr.dtype == np.float64
    assert_allclose(f, want_f, rtol=1e-5)
    # each pixel's value in the images' precision (float32: the two loops may round it differently)
    assert_allclose(f2, f, rtol=1e-12 if dtype == np.float64 else 1e-7)
    assert_allclose(metric, gauss_newton_metric(grad.astype(np.float64)), rtol=1e-4, atol=1e-6 * np.abs(metric).max())
    assert_allclose(jr, want_jr, rtol=1e-4, atol=1e-5 * np.abs(want_jr).max())
    assert_allclose(metric, np.transpose(metric, (0, 2, 1)))


def test_support_radii_are_the_farthest_nonzero_pixel():
    from iastudio.core.warp import support_radii

    imgs = np.zeros((3, 9, 8))
    imgs[0, 4, 3] = 2.0  # 0.5 px left of the centre (4, 3.5)
    imgs[1, 0, 0] = -1.0  # a corner
    imgs[1, 4, 4] = 1.0
    assert_allclose(support_radii(imgs), [0.5, np.hypot(4.0, 3.5), -1.0])


@pytest.mark.parametrize("moments", [False, True])
def test_residuals_skipping_the_empty_pixels_are_the_same(moments, warp_code):
    """Images cleared outside a disk (as the object frame leaves them): given their support, the loop skips
    pixels where both are zero and sums the same, whatever the transform (far shifts, NaN)."""
    from iastudio.core.warp import support_radii, warp_residuals

    rng = np.random.default_rng(3)
    h = 32
    imgs = np.stack([smooth_blob(h, seed=s) for s in range(6)]).astype(np.float32)
    rr = np.hypot(*np.meshgrid(np.arange(h) - (h - 1) / 2, np.arange(h) - (h - 1) / 2, indexing="ij"))
    for k, radius in enumerate([14.0, 14.0, 9.0, 15.5, 5.0, 14.0]):
        imgs[k][rr > radius] = 0.0
    imgs[5] = 0.0  # blank
    p = se2.random_transforms(400, rotation_range=180, shift_range=10, seed=5)
    p[:3] = [[np.nan, 0.0, 0.0], [0.3, 40.0, 0.0], [1.0, -1e15, 3.0]]
    idx, tidx = rng.integers(0, 6, 400), rng.integers(0, 6, 400)
    radii = support_radii(imgs)
    assert radii[5] == -1.0
    assert 13.5 < radii[0] <= 14.0
    assert 4.5 < radii[4] <= 5.0
    want = warp_residuals(imgs, p, imgs, index=idx, target_index=tidx, moments=moments)
    got = warp_residuals(imgs, p, imgs, index=idx, target_index=tidx, moments=moments, support=(radii, radii))
    for g, w in zip((got,) if not moments else got, (want,) if not moments else want):
        assert np.isnan(g[0]).all()
        assert np.isnan(w[0]).all()
        assert_allclose(g[1:], w[1:], rtol=1e-12, atol=1e-12 * np.abs(w[1:]).max())
    if warp_code == "compiled":  # the array code reads no support; the loop skips what a support too small leaves
        short = warp_residuals(imgs, p, imgs, index=idx, target_index=tidx, support=(radii * 0.5, radii * 0.5))
        assert np.abs(short[1:] - (want[0] if moments else want)[1:]).max() > 1e-3
