"""Running out of GPU memory: smaller blocks first, then the CPU, with a log line and a warning.

Without a GPU the condition is injected: a chunk function raises the error class
the stages treat as out of memory (CuPy's ``OutOfMemoryError`` where CuPy is
installed, else :class:`iastudio.core.backend.DeviceOutOfMemory`).
"""
import logging

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core import backend as bk
from iastudio.core import se2
from iastudio.core.warp import warp


def _oom_class():
    try:
        import cupy

        return cupy.cuda.memory.OutOfMemoryError
    except ImportError:
        return bk.DeviceOutOfMemory


def _oom():
    cls = _oom_class()
    if cls is bk.DeviceOutOfMemory:
        return cls("injected")
    return cls(1 << 40, 0)  # cupy's signature: (size, total)


def test_the_error_classes_counted_as_out_of_memory():
    assert bk.is_out_of_memory(_oom())
    assert bk.is_out_of_memory(bk.DeviceOutOfMemory("x"))
    fake = type("OutOfMemoryError", (Exception,), {"__module__": "cupy.cuda.memory"})
    assert bk.is_out_of_memory(fake("out of memory allocating 1 GB"))
    cufft = type("CuFFTError", (RuntimeError,), {"__module__": "cupy.cuda.cufft"})
    assert bk.is_out_of_memory(cufft("CUFFT_ALLOC_FAILED"))
    assert not bk.is_out_of_memory(cufft("CUFFT_INVALID_PLAN"))
    assert not bk.is_out_of_memory(MemoryError())  # host memory: smaller GPU blocks would not help
    assert not bk.is_out_of_memory(ValueError("out of memory"))
    torch_oom = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})  # as torch.OutOfMemoryError
    assert bk.is_out_of_memory(torch_oom("CUDA out of memory"))
    assert not bk.is_out_of_memory(type("AcceleratorError", (RuntimeError,), {"__module__": "torch"})("x"))


def test_blocks_halve_after_out_of_memory_and_every_item_is_done_once(caplog):
    sizes, done = [], []

    def work(lo, hi):
        sizes.append(hi - lo)
        if hi - lo > 3:
            raise _oom()
        done.extend(range(lo, hi))

    with caplog.at_level(logging.WARNING, logger="iastudio.core.backend"):
        bk.in_blocks(10, 10, work, xp=np, what="test stage")
    assert sizes == [10, 5, 2, 2, 2, 2, 2]  # halved twice, then kept small
    assert done == list(range(10))
    assert "test stage: out of GPU memory; retrying with blocks of 5" in caplog.text


def test_temporary_blocks_shrink_with_the_retry():
    seen = []

    def work(lo, hi):
        seen.append(bk.block_elements(1024, 4096, np))
        if hi - lo > 4:
            raise _oom()

    bk.in_blocks(8, 8, work, xp=np, what="x")
    assert seen == [1024, 512, 512]
    assert bk.block_elements(1024, 4096, np) == 1024  # back to normal outside


def test_the_cpu_takes_over_below_the_floor(caplog):
    cpu = []

    def work(lo, hi):
        raise _oom()

    with caplog.at_level(logging.WARNING), pytest.warns(bk.GpuFallbackWarning, match="continuing on the CPU"):
        bk.in_blocks(40, 16, work, xp=np, what="invariant mean", minimum=4, on_cpu=lambda lo, hi: cpu.append((lo, hi)))
    assert cpu == [(0, 16), (16, 32), (32, 40)]  # the original block size on the CPU
    assert "out of GPU memory even with blocks of 4; continuing on the CPU" in caplog.text
    with pytest.raises(bk.DeviceOutOfMemory, match="even with blocks of 4"):
        bk.in_blocks(40, 16, work, xp=np, what="invariant mean", minimum=4)


def test_other_errors_are_not_retried():
    calls = []

    def work(lo, hi):
        calls.append(hi - lo)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        bk.in_blocks(10, 10, work, xp=np, what="x")
    assert calls == [10]


@pytest.fixture(scope="module")
def six(shape_images):
    tau = se2.random_transforms(6, rotation_range=180, shift_range=4, seed=5)
    return warp(np.repeat(shape_images, 2, axis=0), tau).astype(np.float32)


def test_similarity_retries_halved_chunks_with_the_same_result(six, monkeypatch):
    import iastudio.core.similarity as cs

    whole = cs.invariant_distances(six)
    real = cs._Aligner.align
    sizes, temp = [], []

    def flaky(self, rows, cols, progress=lambda f: None):
        sizes.append(len(rows))
        temp.append(cs._block(np))
        if len(rows) > 4:
            raise _oom()
        return real(self, rows, cols, progress)

    monkeypatch.setattr(cs._Aligner, "align", flaky)
    monkeypatch.setattr(cs, "_MIN_PAIRS", 2)
    seen = []
    chunked = cs.invariant_distances(six, on_progress=seen.append)
    assert sizes == [15, 7, 3, 3, 3, 3, 3]  # 15 pairs: halved to 7, then 3, then kept
    assert temp[0] == cs._BLOCK
    assert temp[1] == cs._BLOCK * 7 // 15
    assert temp[2] == cs._BLOCK * 3 // 15
    assert_allclose(chunked.distances, whole.distances, atol=1e-6)
    assert_allclose(chunked.transforms, whole.transforms, atol=1e-6)
    assert seen[-1] == 1.0


def test_mean_stage_retries_halved_blocks_with_the_same_result(monkeypatch):
    import iastudio.core.invariant_mean as cm
    from iastudio.core.demos import load_demo
    from iastudio.core.preprocess import preprocess
    from iastudio.core.similarity import invariant_distances
    from iastudio.core.weights import attention_weights

    x = preprocess(load_demo("digits", seed=0).images, size=24).images[::2]  # 20 images
    sim = invariant_distances(x)
    w, _ = attention_weights(sim.distances)
    w = w.astype(np.float32)
    monkeypatch.setattr(cm, "_BLOCK", 64 * 24 * 24)  # 64 entries per block
    monkeypatch.setattr(cm, "threads", lambda: 1)  # a block is not split over the threads
    plain = cm.invariant_means(x, w, sim.transforms, steps=3, mass=0.999)
    real = cm._update_block
    sizes, ok = [], []

    def flaky(images, target, src, *args, **kwargs):
        sizes.append(len(src))
        if len(src) > 20:
            raise _oom()
        ok.append(len(src))
        return real(images, target, src, *args, **kwargs)

    monkeypatch.setattr(cm, "_update_block", flaky)
    retried = cm.invariant_means(x, w, sim.transforms, steps=3, mass=0.999)
    assert sizes[:3] == [64, 32, 16]
    assert max(ok) == 16
    assert_allclose(retried.params, plain.params, rtol=0, atol=1e-5)  # float32 sums of the means in other blocks
    assert_allclose(retried.means, plain.means, rtol=0, atol=1e-6)
    assert_allclose(retried.objective[-1], plain.objective[-1], rtol=1e-6)
    # with no way out on the CPU (these are NumPy arrays already) the error is a clear one
    monkeypatch.setattr(cm, "_update_block", lambda *a, **k: (_ for _ in ()).throw(_oom()))
    with pytest.raises(bk.DeviceOutOfMemory, match="invariant mean: out of GPU memory even with blocks of 16"):
        cm.invariant_means(x, w, sim.transforms, steps=1, mass=0.999)


@pytest.mark.gpu
def test_gpu_similarity_falls_back_to_the_cpu_with_a_warning(six, monkeypatch):
    try:
        b = bk.get_backend("cupy")
    except bk.BackendUnavailableError as exc:
        pytest.skip(f"no GPU: {exc}")
    import iastudio.core.similarity as cs

    host = cs.invariant_distances(six)
    real = cs._Aligner.align

    def no_room(self, rows, cols, progress=lambda f: None):
        if self.xp is not np:
            raise _oom()
        return real(self, rows, cols, progress)

    monkeypatch.setattr(cs._Aligner, "align", no_room)
    with pytest.warns(bk.GpuFallbackWarning):
        res = cs.invariant_distances(b.asarray(six))
    assert_allclose(res.distances, host.distances, atol=1e-6)
