"""The engine's thread count: the setting, the pool that follows it, and results that do not depend on it."""
import json
import threading

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from iastudio.core import backend as bk
from iastudio.core.attention import AttentionRun
from iastudio.core.cli import main
from iastudio.core.demos import load_demo
from iastudio.core.invariant_mean import invariant_means
from iastudio.core.preprocess import preprocess
from iastudio.core.similarity import invariant_distances
from iastudio.core.warp import parallel_map


@pytest.fixture(scope="module")
def digits():
    return preprocess(load_demo("digits", seed=1).images, size=24).images


def test_the_count_follows_the_machine_unless_set():
    assert bk.threads() == bk.cpu_count()
    with bk.use_threads(3):
        assert bk.threads() == 3
        with bk.use_threads(None):  # None: no change
            assert bk.threads() == 3
    assert bk.threads() == bk.cpu_count()
    previous = bk.set_threads(5)
    try:
        assert previous is None
        assert bk.threads() == 5
    finally:
        bk.set_threads(previous)
    with pytest.raises(ValueError, match="at least 1"):
        bk.set_threads(0)


def test_parallel_map_runs_on_as_many_threads_as_set():
    caller = threading.get_ident()
    with bk.use_threads(1):  # one thread: everything in the caller
        assert set(parallel_map(lambda _: threading.get_ident(), range(6))) == {caller}
    # three threads: three items meet at a barrier of three (it breaks after 10 s with fewer threads)
    barrier = threading.Barrier(3, timeout=10)

    def meet(_):
        barrier.wait()
        return threading.get_ident(), bk.in_worker(), bk._workers()

    with bk.use_threads(3):
        seen = parallel_map(meet, range(3))
    assert len({ident for ident, _, _ in seen}) == 3
    assert caller not in {ident for ident, _, _ in seen}
    # a worker knows it is one, and its FFTs take one thread (the pool fills the cores)
    assert all(worker and workers == 1 for _, worker, workers in seen)
    assert not bk.in_worker()
    with bk.use_threads(3):
        assert bk._workers() == 3


def test_distances_and_means_do_not_depend_on_the_thread_count(digits):
    x = digits[:24]
    rows, cols = np.triu_indices(24, 1)
    some = (rows[::3], cols[::3])
    runs = []
    for n in (1, 3):
        with bk.use_threads(n):
            full = invariant_distances(x)
            pruned = invariant_distances(x, pairs=some)
            w = np.exp(-full.distances ** 2)
            means = invariant_means(x, w / w.sum(0), full.transforms, steps=3)
        runs.append((full, pruned, means))
    (f1, p1, m1), (f3, p3, m3) = runs
    assert_array_equal(f1.distances, f3.distances)
    assert_array_equal(f1.transforms, f3.transforms)
    assert_array_equal(p1.distances.toarray(), p3.distances.toarray())
    assert_array_equal(p1.pair_transforms, p3.pair_transforms)
    assert_array_equal(m1.means, m3.means)
    assert_array_equal(m1.params, m3.params)


def test_a_run_on_one_thread_equals_a_run_on_several(digits):
    x = digits[:30]
    results = [AttentionRun(x, backend="numpy", iterations=1, threads=n).run() for n in (1, 2)]
    assert_array_equal(results[0].labels, results[1].labels)
    assert_array_equal(results[0].final_distances, results[1].final_distances)
    assert_array_equal(results[0].cluster_means, results[1].cluster_means)
    assert bk.threads() == bk.cpu_count()  # the run's setting holds only while it steps


def test_a_run_uses_its_thread_count_while_it_steps(digits, monkeypatch):
    import iastudio.core.run_steps as run_steps

    seen = []
    real = run_steps.invariant_distances

    def spy(*args, **kwargs):
        seen.append(bk.threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(run_steps, "invariant_distances", spy)
    AttentionRun(digits[:12], backend="numpy", iterations=1, threads=3).run()
    assert seen
    assert set(seen) == {3}
    with pytest.raises(ValueError, match="threads must be at least 1"):
        AttentionRun(digits[:12], threads=0)
    assert AttentionRun(digits[:12], threads=2).on_backend("numpy").threads == 2


def test_cli_threads_option(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))
    with pytest.raises(SystemExit) as info:
        main(["demo:shapes", "--threads", "0", "--out", str(tmp_path / "bad"), "--quiet"])
    assert info.value.code == 2
    out = tmp_path / "o"
    assert main(["demo:shapes", "--threads", "1", "--size", "24", "--iterations", "1", "--out", str(out),
                 "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["threads"] == 1
    assert bk.threads() == bk.cpu_count()


def test_reading_clusters_does_not_queue_behind_the_engines_pool(digits):
    # the window re-reads clusters on its own thread while a run may fill the engine's pool
    from iastudio.core import clustering
    from iastudio.core.warp import _pool

    d = invariant_distances(digits[:24]).distances
    calls = []
    clustering_done = threading.Event()
    release = threading.Event()

    def read():
        calls.append(clustering.read_clusters(d, k="auto"))
        clustering_done.set()

    with bk.use_threads(2):
        busy = [_pool().submit(release.wait, 30) for _ in range(2)]  # both workers held
        try:
            reader = threading.Thread(target=read)
            reader.start()
            finished = clustering_done.wait(20)
        finally:
            release.set()
            for f in busy:
                f.result()
            reader.join()
    assert finished
    assert calls
    assert_array_equal(calls[0][0], clustering.read_clusters(d, k="auto")[0])


def _blas_counts():
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_blas_threads_limits_every_loaded_blas_and_restores_it():
    pytest.importorskip("threadpoolctl")
    import scipy.linalg  # noqa: F401 - SciPy's own BLAS is loaded too
    from threadpoolctl import threadpool_limits

    from iastudio.core.backend import blas_threads

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_counts()
        assert len(before) >= 1
        with blas_threads(1):
            assert _blas_counts() == [1] * len(before)
        assert _blas_counts() == before


def test_blas_threads_blocks_in_two_threads_that_close_out_of_order():
    # thread A opens, thread B opens, A closes (B's limit must hold), B closes (the counts come back)
    pytest.importorskip("threadpoolctl")
    import threading

    from threadpoolctl import threadpool_limits

    from iastudio.core.backend import blas_threads

    a_open, b_open, a_closed, b_may_close = (threading.Event() for _ in range(4))
    seen = {}

    def a():
        with blas_threads(1):
            a_open.set()
            b_open.wait(10)
        a_closed.set()

    def b():
        a_open.wait(10)
        with blas_threads(1):
            b_open.set()
            a_closed.wait(10)
            seen["after a closed"] = _blas_counts()
            b_may_close.wait(10)

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_counts()
        ta, tb = threading.Thread(target=a), threading.Thread(target=b)
        ta.start()
        tb.start()
        ta.join(10)
        b_may_close.set()
        tb.join(10)
        after = _blas_counts()
    assert seen["after a closed"] == [1] * len(before)
    assert after == before


def test_blas_threads_nested_smaller_limit_then_the_outer_one_again():
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_limits

    from iastudio.core.backend import blas_threads

    with threadpool_limits(limits=3, user_api="blas"):
        before = _blas_counts()
        with blas_threads(2):
            assert set(_blas_counts()) == {2}
            with blas_threads(1):
                assert set(_blas_counts()) == {1}
            assert set(_blas_counts()) == {2}
        assert _blas_counts() == before


def test_blas_threads_on_a_library_that_limits_each_thread_sets_and_restores_its_own(monkeypatch):
    # MKL or an OpenMP build limit the calling thread only: no shared count, each block its own limit
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_limits

    from iastudio.core import backend
    from iastudio.core.backend import blas_threads

    monkeypatch.setattr(backend, "_process_wide", lambda controller: False)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_counts()
        with blas_threads(1):
            assert _blas_counts() == [1] * len(before)
            assert backend._BLAS_HELD == []  # the shared count is for process-wide pools only
        assert _blas_counts() == before


def test_numpys_openblas_is_recognised_as_one_pool_for_the_process():
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import ThreadpoolController

    from iastudio.core.backend import _process_wide

    controller = ThreadpoolController()
    layers = {getattr(lib, "threading_layer", None) for lib in controller.lib_controllers
              if lib.user_api == "blas" and lib.internal_api == "openblas"}
    if layers != {"pthreads"}:
        pytest.skip(f"this NumPy's BLAS is not OpenBLAS on pthreads ({layers})")
    assert _process_wide(controller)


def test_the_engine_pool_runs_blas_on_one_thread_per_worker():
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_limits

    from iastudio.core.backend import use_threads
    from iastudio.core.warp import parallel_map

    with threadpool_limits(limits=2, user_api="blas"), use_threads(2):
        inside = parallel_map(lambda _: _blas_counts(), range(4))
        after = _blas_counts()
    assert all(set(counts) == {1} for counts in inside)
    assert set(after) == {2}
