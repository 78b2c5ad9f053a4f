import builtins

import numpy as np
import pytest

from iastudio.core import backend as bk


def test_numpy_backend():
    b = bk.get_backend("numpy")
    assert b.name == "numpy"
    assert b.xp is np
    assert b.device == "CPU"
    assert b.describe() == "numpy (CPU)"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend"):
        bk.get_backend("tpu")


@pytest.mark.parametrize("exc", [ImportError("no cupy"), RuntimeError("cudaErrorNoDevice")])
def test_auto_falls_back_to_numpy(monkeypatch, exc):
    def fail():
        raise exc

    monkeypatch.setattr(bk, "_probe_cupy", fail)
    b = bk.get_backend("auto")
    assert b.name == "numpy"
    assert b.fallback_reason
    with pytest.raises(bk.BackendUnavailableError, match="GPU backend is not available"):
        bk.get_backend("cupy")


def test_auto_without_cupy_installed(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    b = bk.get_backend("auto")
    assert b.name == "numpy"
    assert "not installed" in b.fallback_reason


def test_to_host_and_modules():
    a = np.arange(3.0)
    assert isinstance(bk.to_host(a), np.ndarray)
    assert np.array_equal(bk.to_host(a), a)
    assert bk.array_module(a) is np
    import scipy.fft
    import scipy.ndimage

    fft = bk.fft_module(np)
    x = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    assert np.array_equal(fft.rfft2(x, s=(12, 12), axes=(1, 2)), scipy.fft.rfft2(x, s=(12, 12), axes=(1, 2)))
    assert fft.next_fast_len is scipy.fft.next_fast_len
    assert fft.fftshift is scipy.fft.fftshift
    assert bk.ndimage_module(np) is scipy.ndimage


def test_fft_workers_follow_the_thread_count(monkeypatch):
    import scipy.fft

    seen = []
    monkeypatch.setattr(scipy.fft, "rfft2", lambda *a, workers=None, **k: seen.append(workers))
    monkeypatch.setattr(bk, "_SCIPY_FFT", None)  # rebuilt around the spy
    fft = bk.fft_module(np)
    fft.rfft2(np.zeros((2, 4, 4)))  # every core
    with bk.use_threads(3):
        fft.rfft2(np.zeros((2, 4, 4)))
        with bk.as_worker():  # inside the engine's pool: one thread each
            fft.rfft2(np.zeros((2, 4, 4)))
    fft.rfft2(np.zeros((2, 4, 4)), workers=2)  # a caller's own choice wins
    assert seen == [bk.cpu_count(), 3, 1, 2]


@pytest.mark.gpu
def test_cupy_warp_matches_numpy(gpu):
    from iastudio.core.warp import warp
    from tests.conftest import smooth_blob

    b = gpu
    img = smooth_blob(32)[None].astype(np.float32)
    p = np.array([[0.7, 1.3, -2.1], [-2.0, 0.2, 0.4]])
    o_np, g_np = warp(np.repeat(img, 2, 0), p, gradient=True)
    o_cp, g_cp = warp(b.asarray(np.repeat(img, 2, 0)), b.asarray(p), gradient=True)
    np.testing.assert_allclose(bk.to_host(o_cp), o_np, rtol=1e-5, atol=1e-5 * np.abs(o_np).max())
    np.testing.assert_allclose(bk.to_host(g_cp), g_np, rtol=1e-5, atol=1e-5 * np.abs(g_np).max())


@pytest.mark.gpu
def test_cupy_distances_match_numpy(shape_images, gpu):
    from iastudio.core.similarity import invariant_distances

    b = gpu
    imgs = shape_images.astype(np.float32)
    d_np = invariant_distances(imgs).distances
    d_cp = invariant_distances(b.asarray(imgs)).distances
    np.testing.assert_allclose(d_cp, d_np, rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_cupy_polar_spectra_match_numpy(shape_images, gpu):
    from iastudio.core.similarity import _polar_spectra

    b = gpu
    imgs = np.concatenate([shape_images, shape_images[:, ::-1]]).astype(np.float32)
    q_np = _polar_spectra(imgs, 72, np)
    q_cp = bk.to_host(_polar_spectra(b.asarray(imgs), 72, b.xp))  # many images per call on a GPU
    np.testing.assert_allclose(q_cp, q_np, rtol=1e-4, atol=1e-5 * np.abs(q_np).max())


@pytest.mark.parametrize(("gib", "scale"), [(8, 1.0), (24, 1.2), (40, 2.0), (80, 4.0), (141, 4.0), (None, 1.0)])
def test_gpu_blocks_grow_with_the_cards_memory(monkeypatch, gib, scale):
    from types import SimpleNamespace

    def device():
        if gib is None:
            raise RuntimeError("no figure")
        return SimpleNamespace(mem_info=(0, gib << 30))

    fake = SimpleNamespace(cuda=SimpleNamespace(Device=device))
    monkeypatch.setattr(bk, "_GPU_SCALE", None)
    assert bk.block_elements(1000, 1 << 20, fake) == int((1 << 20) * scale)
    assert bk.block_elements(1000, 1 << 20, np) == 1000  # the CPU's sizes do not depend on a card
    monkeypatch.setattr(bk, "_GPU_SCALE", None)  # the next test looks its card up again
