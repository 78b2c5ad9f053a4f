"""Hardening, third pass (issue 32): the last bad inputs of the CLIs and the library."""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from iastudio.core.cli import main  # noqa: E402

FAST = ["--size", "24", "--iterations", "1", "--quiet"]


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _usage_error(capsys, argv):
    t = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert time.perf_counter() - t < 5, err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if "error:" in line]
    assert len(ours) == 1
    return ours[0]


# ------------------------------------------------------------------------------------------ #4: long names
@pytest.mark.parametrize("option", ["--out", "--save-project"])
@pytest.mark.parametrize("length", [300, 250])
def test_a_name_too_long_is_one_line_and_exit_2(tmp_path, capsys, option, length):
    """A 300-character --out was a traceback (File name too long); 250 failed at the temporary name."""
    name = str(tmp_path / ("n" * length))
    more = [option, name] if option == "--out" else ["--out", str(tmp_path / "o"), option, name]
    argv = ["demo:shapes", *FAST, *more]
    line = _usage_error(capsys, argv)
    assert "too long" in line
    assert option in line
    assert len(line) < 300
    assert sorted(os.listdir(tmp_path)) in ([], ["logs"])


def test_an_out_that_cannot_be_looked_at_is_one_line(tmp_path, capsys, monkeypatch):
    import pathlib

    real = pathlib.Path.exists
    locked = tmp_path / "locked"

    def exists(self, *a, **k):
        if locked in (self, *self.parents) and self != locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "exists", exists)
    line = _usage_error(capsys, ["demo:shapes", *FAST, "--out", str(locked / "o")])
    assert "--out" in line
    assert "permission denied" in line


@pytest.mark.slow
def test_a_long_name_that_fits_is_used(tmp_path):
    out = tmp_path / ("n" * 200)
    assert main(["demo:shapes", "--out", str(out), *FAST]) == 0
    assert (out / "assignments.csv").is_file()


# ------------------------------------------------------------------------------------------ #11: --dask ""
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_dask_address_is_a_usage_error(tmp_path, capsys, value):
    """--dask "" ran locally with exit 0, where an empty --out is a usage error: one rule."""
    line = _usage_error(capsys, ["demo:shapes", "--out", str(tmp_path / "o"), "--dask", value, *FAST])
    assert "--dask" in line
    assert "empty" in line
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ #5: ia-nets data
def _npz(path, *, n_train=12, n_test=6, side=28, poison=None):
    from iastudio.core.nets.data import Dataset, save_npz

    rng = np.random.default_rng(0)
    x = rng.random((n_train + n_test, side, side)).astype(np.float32)
    y = np.arange(n_train + n_test) % 2
    if poison is not None:
        x[1, 3, 3] = poison
    save_npz(Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:], ["a", "b"], "t"), path)
    return path


@pytest.mark.parametrize("kind", ["nan", "inf", "no training images", "no test images", "huge"])
def test_ia_nets_refuses_data_it_cannot_learn_from(tmp_path, capsys, kind):
    """NaN images or zero training images trained anyway: exit 0 and results written."""
    pytest.importorskip("torch")
    from iastudio.core.nets.cli import main as nets_main

    options = {"nan": dict(poison=np.nan), "inf": dict(poison=np.inf), "huge": dict(poison=1e30),
               "no training images": dict(n_train=0), "no test images": dict(n_test=0)}[kind]
    data = _npz(tmp_path / "d.npz", **options)
    out = tmp_path / "out"
    rc = nets_main(["train", "--model", "cnn", "--data", f"npz:{data}", "--epochs", "1", "--quiet",
                    "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(data) in lines[0], err
    assert not out.exists()


def test_check_dataset_accepts_good_data_and_names_the_first_bad_image(tmp_path):
    from iastudio.core.nets.data import check_dataset, load_npz

    ds = load_npz(_npz(tmp_path / "ok.npz"))
    assert check_dataset(ds) is ds
    assert ds.x_train.shape == (12, 28, 28)
    ds.x_test[4, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"1 test image\(s\) hold NaN or infinite values \(the first: number 4\)"):
        check_dataset(ds, source="mine")


# ------------------------------------------------------------------------------------------ #6: cluster name keys
def _named(tmp_path, names):
    from _malicious import read_members, save_good, write_project

    good = save_good(tmp_path / "good.iaproj")
    manifest, members = read_members(good)
    manifest["clusters"]["names"] = names
    return write_project(tmp_path / "named.iaproj", manifest, members)


@pytest.mark.parametrize("key", ["٣", "３", "²", "03", "+1", " 1", "-1", "1e3", "99999999999999999999"])
def test_cluster_names_keyed_by_anything_but_an_ascii_id_are_refused(tmp_path, capsys, key):
    """"٣" (an Arabic-Indic three) passed str.isdigit(); the export then counted a third cluster."""
    from iastudio.core.project import ProjectError, load_project

    path = _named(tmp_path, {"0": "a", "1": "b", key: "ghost"})
    with pytest.raises(ProjectError, match="cluster names are malformed"):
        load_project(path)
    assert main(["--project", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "malformed" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_name_of_a_cluster_without_images_is_no_cluster(tmp_path, capsys):
    from iastudio.core.project import load_project

    path = _named(tmp_path, {"0": "a", "1": "b", "3": "ghost"})
    book = load_project(path).clusters
    assert book.cluster_ids() == [0, 1]
    assert book.name_of(1) == "b"
    assert main(["--project", str(path), "--out", str(tmp_path / "o")]) == 0
    assert "4 images in 2 clusters" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- #7, #8: the library's inputs
def _three(scale=1.0, dtype=np.float64):
    from iastudio.core.demos import base_shapes

    b = base_shapes()[0][:, ::2, ::2].astype(np.float64)
    b /= np.linalg.norm(b.reshape(3, -1), axis=1)[:, None, None]
    return (b * scale).astype(dtype)


@pytest.mark.parametrize(("scale", "dtype"), [(1e30, np.float64), (1e300, np.float64), (1e30, np.float32),
                                          (3e38, np.float32), (1e13, np.float32)])
def test_values_that_overflow_are_refused_naming_the_image(scale, dtype):
    """1e30, 3e38 (float32) or 1e300 gave NaN/inf distances and scores."""
    from iastudio.core.attention import AttentionRun
    from iastudio.core.similarity import invariant_distances

    images = _three(dtype=np.float64)
    images[1] *= scale
    images = images.astype(dtype)
    assert np.isfinite(images).all()
    with pytest.raises(ValueError, match="image 1 holds values beyond"):
        invariant_distances(images, angle_step=30)
    with pytest.raises(ValueError, match="image 1 holds values beyond"):
        AttentionRun(images, angle_step=30)


def test_large_values_within_bounds_give_the_same_scores_and_finite_distances():
    from iastudio.core.attention import AttentionRun
    from iastudio.core.similarity import invariant_distances

    small, large = _three(), _three(1e12)
    d = invariant_distances(large, angle_step=30).distances
    assert np.isfinite(d).all()
    np.testing.assert_allclose(d / 1e12, invariant_distances(small, angle_step=30).distances, rtol=1e-4, atol=1e-6)
    scores = []
    for images in (small, large):
        run = AttentionRun(images, iterations=1, clusters=2, angle_step=30)
        for _ in run.steps():
            pass
        scores.append(run.result().scores)
    assert np.isfinite(scores[1]).all()
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-4)  # the overflowing norm product gave 0 before


@pytest.mark.parametrize("shape", [(1, 1, 1, 8, 8, 8), (1, 1, 2, 8, 8), (8, 8), (64,), (), (3, 1, 8)])
def test_only_stacks_of_images_are_taken(shape):
    """A 6-D array was taken as one image (a 1x1 result)."""
    from iastudio.core.similarity import invariant_distances

    with pytest.raises(ValueError, match=r"\(n, H, W\)"):
        invariant_distances(np.ones(shape, np.float32))


def test_complex_images_are_refused():
    from iastudio.core.similarity import invariant_distances

    with pytest.raises(ValueError, match="real numbers"):
        invariant_distances(_three().astype(np.complex64))


# ------------------------------------------------------------------------------------------ #13: --dask at a stranger
def _stranger(payload):
    """A TCP port that answers ``payload`` to whoever connects (then waits a little and hangs up)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        server.settimeout(30)
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(payload)
                    time.sleep(0.5)
        except OSError:
            pass

    threading.Thread(target=answer, daemon=True).start()
    return server, f"tcp://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("payload", [b"\xff" * 64, (2**40).to_bytes(8, "little") + b"x" * 64,
                                     b"SSH-2.0-OpenSSH_9.2\r\n" + bytes(64)])
def test_a_port_that_answers_arbitrary_bytes_is_refused_before_any_allocation(tmp_path, capsys, payload):
    """Dask sized a buffer from the peer's length bytes ("Unable to allocate 3.07 EiB")."""
    pytest.importorskip("distributed")
    from iastudio.core.distributed import DaskUnavailableError, connect

    server, address = _stranger(payload)
    try:
        t0 = time.perf_counter()
        with pytest.raises(DaskUnavailableError, match="is not a Dask scheduler"):
            connect(address, timeout=5)
        assert time.perf_counter() - t0 < 5
        assert main(["demo:shapes", "--out", str(tmp_path / "o"), "--dask", address, *FAST]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert address in err[0]
        assert "not a Dask scheduler" in err[0]
        assert not (tmp_path / "o").exists()
    finally:
        server.close()


def test_a_real_scheduler_passes_the_probe():
    distributed = pytest.importorskip("distributed")
    from iastudio.core.distributed import close, connect, probe_scheduler

    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        probe_scheduler(cluster.scheduler_address, timeout=10)
        client = connect(cluster.scheduler_address, timeout=10)
        assert client.scheduler_info()["address"] == cluster.scheduler_address
        close(client)
