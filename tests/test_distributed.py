"""Dask: a real scheduler and two worker processes on 127.0.0.1 give the single-process results."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

pytest.importorskip("distributed")

from iastudio.core.attention import AttentionRun  # noqa: E402
from iastudio.core.cli import main  # noqa: E402
from iastudio.core.demos import load_demo  # noqa: E402
from iastudio.core.distributed import DaskUnavailableError, close, connect, map_chunks  # noqa: E402
from iastudio.core.preprocess import preprocess  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _dask_cmd(*args):
    exe = Path(sys.executable).parent / "dask"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "dask", *args]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``dask scheduler`` + two ``dask worker`` processes, as a user would start them."""
    tmp = tmp_path_factory.mktemp("dask")
    sched_file = tmp / "scheduler.json"
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)  # the workers import core (and this module's helper) from here
    procs = [subprocess.Popen(_dask_cmd("scheduler", "--host", "127.0.0.1", "--port", "0",
                                        "--dashboard-address", ":0", "--scheduler-file", str(sched_file)),
                              cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.time() + 60
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert sched_file.exists(), "the scheduler did not start"
        for _ in range(2):
            procs.append(subprocess.Popen(_dask_cmd("worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                                                    "--host", "127.0.0.1", "--dashboard-address", ":0"),
                                          cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        import json

        address = json.loads(sched_file.read_text())["address"]
        client = connect(address, timeout=30)
        client.wait_for_workers(2, timeout=60)
        yield address, client
        close(client)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def images():
    s = load_demo("shapes", seed=0)
    return preprocess(s.images, size=32).images[::2]  # 9 images, 3 shapes


@pytest.mark.parametrize("neighbors", ["all", 4])
def test_cluster_run_equals_a_local_run(cluster, images, neighbors):
    _, client = cluster
    opts = dict(backend="numpy", iterations=2, neighbors=neighbors)
    local = AttentionRun(images, **opts).run()
    remote = AttentionRun(images, client=client, **opts).run()
    assert len(client.scheduler_info()["workers"]) == 2
    assert_array_equal(remote.labels, local.labels)
    assert_allclose(remote.input_distances, local.input_distances, atol=1e-5)
    assert_allclose(remote.final_distances, local.final_distances, atol=1e-5)
    assert_allclose(remote.cluster_means, local.cluster_means, atol=1e-5)


def test_cli_with_dask_address(cluster, tmp_path):
    address, _ = cluster
    out = tmp_path / "o"
    assert main(["demo:shapes", "--size", "32", "--iterations", "1", "--quiet", "--out", str(out),
                 "--dask", address]) == 0
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["parameters"]["dask"] == address
    assert summary["metrics"]["ari"] == 1.0


def test_nothing_at_the_address_is_a_plain_error(capsys):
    t0 = time.perf_counter()
    with pytest.raises(DaskUnavailableError, match=r"127\.0\.0\.1:9"):
        connect("tcp://127.0.0.1:9", timeout=2)
    assert main(["demo:shapes", "--quiet", "--dask", "tcp://127.0.0.1:9"]) == 2
    assert time.perf_counter() - t0 < 25  # 10 s for the CLI at most, plus the API's 2 s
    err = capsys.readouterr().err
    assert "tcp://127.0.0.1:9" in err
    assert "Traceback" not in err
    with pytest.raises(DaskUnavailableError, match="local:N"):
        connect("local:x")


@pytest.mark.slow
def test_cli_local_cluster_gives_the_plain_runs_labels(tmp_path):
    import csv

    def labels(out):
        with open(out / "assignments.csv", newline="") as fh:
            return [row["cluster"] for row in csv.DictReader(fh)]

    args = ["demo:digits", "--size", "24", "--iterations", "2", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "plain")]) == 0
    assert main([*args, "--out", str(tmp_path / "dask"), "--dask", "local:2"]) == 0
    assert labels(tmp_path / "dask") == labels(tmp_path / "plain")


def _die_once(marker, values):
    """A task that kills its worker process the first time it runs anywhere."""
    m = Path(marker)
    if not m.exists():
        m.write_text("died")
        os._exit(1)
    return values * 2


def test_a_worker_dying_mid_run_is_retried(cluster, tmp_path):
    _, client = cluster
    out = map_chunks(client, _die_once, [(np.arange(3),), (np.arange(3, 5),)], str(tmp_path / "marker"))
    assert (tmp_path / "marker").exists()  # a worker did die
    assert [span for span, _ in out] == [(0, 3), (3, 5)]
    assert_array_equal(np.concatenate([r for _, r in out]), 2 * np.arange(5))  # nothing lost, nothing wrong
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it
