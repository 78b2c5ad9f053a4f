"""Hardening: untrusted files and names, failed and interrupted writes, option abuse (library and CLI)."""
import csv
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
from _malicious import good_project  # noqa: E402

import iastudio.core.imageset as imageset  # noqa: E402
from iastudio.core.atomic import ResultFolder, atomic_write_bytes, remove_stale_temporaries, umask  # noqa: E402
from iastudio.core.cli import main  # noqa: E402
from iastudio.core.filenames import printable  # noqa: E402
from iastudio.core.imageset import ImageLoadError, load_image, load_images  # noqa: E402
from iastudio.core.project import ProjectError, load_project, save_project  # noqa: E402
from iastudio.core.report import write_assignments, write_json  # noqa: E402

FAST = ["--size", "24", "--iterations", "1", "--quiet"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _shapes(folder, names):
    """Small images of two shapes, one per name."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, name in enumerate(names):
        img = np.zeros((20, 20), np.uint8)
        if k % 2:
            img[5:15, 8:12] = 255
        else:
            img[8:12, 3:17] = 255
        path = os.path.join(os.fsencode(folder), name) if isinstance(name, bytes) else folder / name
        with open(path, "wb") as fh:
            Image.fromarray(np.roll(img, k, axis=1)).save(fh, format="PNG")
        out.append(path)
    return out


# ------------------------------------------------------------------------------------------ D7: non-regular files
def test_fifo_folder_and_links_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "x.iaproj"
    os.mkfifo(fifo)
    result = {}

    def refused():
        with pytest.raises(ProjectError) as info:
            load_project(fifo)
        result["e"] = info

    th = threading.Thread(target=refused)
    th.start()
    th.join(5)
    assert not th.is_alive(), "load_project blocked on a FIFO"
    assert "FIFO" in str(result["e"].value)
    (tmp_path / "d.iaproj").mkdir()
    with pytest.raises(ProjectError, match="a folder"):
        load_project(tmp_path / "d.iaproj")
    os.symlink(tmp_path / "l1.iaproj", tmp_path / "l2.iaproj")
    os.symlink(tmp_path / "l2.iaproj", tmp_path / "l1.iaproj")
    with pytest.raises(ProjectError, match="symbolic link loop"):
        load_project(tmp_path / "l1.iaproj")
    os.symlink(tmp_path / "gone.iaproj", tmp_path / "dangling.iaproj")
    with pytest.raises(ProjectError, match="broken symbolic link"):
        load_project(tmp_path / "dangling.iaproj")


def test_cli_refuses_a_fifo_project_with_one_line(tmp_path, capsys):
    os.mkfifo(tmp_path / "p.iaproj")
    assert main(["--project", str(tmp_path / "p.iaproj"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "FIFO" in err[0]
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ D3: names as bytes
@pytest.mark.skipif(sys.platform != "linux", reason="non-UTF-8 names are a Linux thing")
def test_non_utf8_and_control_character_names_round_trip(tmp_path, capsys):
    folder = tmp_path / "in"
    names = [b"caf\xe9.png", "plain.png", "new\nline.png", "carriage\rreturn.png", "tab\t.png", "esc\x1b[31m.png"]
    _shapes(folder, names)
    (folder / "bad\nskipped: forged.png").write_text("not an image")
    out = tmp_path / "out"
    proj = tmp_path / "p.iaproj"
    assert main([str(folder), "--out", str(out), *FAST, "--save-project", str(proj)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "bad\\nskipped: forged.png" in err
    with open(out / "assignments.csv", newline="", encoding="utf-8", errors="surrogateescape") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(names)  # the \r and \n names did not split rows
    on_disk = sorted(os.listdir(os.fsencode(folder)))
    assert sorted(os.path.basename(os.fsencode(r["path"])) for r in rows) == sorted(
        n for n in on_disk if not n.startswith(b"bad"))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert os.fsencode(summary["skipped"][0]["path"]).endswith(b"bad\nskipped: forged.png")
    p = load_project(proj)
    assert sorted(os.path.basename(os.fsencode(x)) for x in p.paths) == sorted(os.fsencode(r["path"]).split(b"/")[-1]
                                                                             for r in rows)
    assert os.path.exists(os.fsencode(p.paths[0]))  # the exact bytes, not a look-alike


def test_printable_escapes_controls_and_bad_bytes():
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("caf\udce9\x1b") == "caf\\xe9\\x1b"
    assert printable("日本 é") == "日本 é"
    assert "\n" not in printable("x\u2028y\x85")


def test_project_manifest_keeps_surrogate_names(tmp_path):
    p = good_project()
    p.paths[0] = "/data/caf\udce9\r.png"
    q = load_project(save_project(tmp_path / "s.iaproj", p))
    assert q.paths[0] == p.paths[0]
    assert os.fsencode(q.paths[0]) == b"/data/caf\xe9\r.png"


def test_csv_quotes_carriage_returns():
    import io

    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cr-{os.getpid()}.csv")
    write_assignments(path, [{"path": "a\rb", "cluster": 0}, {"path": "c", "cluster": 1}])
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(io.StringIO(fh.read())))
    os.unlink(path)
    assert [r[0] for r in rows] == ["path", "a\rb", "c"]


# ------------------------------------------------------------------------------------------ D5, D10, D13: images
def test_multipage_tiff_bomb_is_refused_from_the_header(tmp_path):
    import tifffile

    tifffile.imwrite(tmp_path / "bomb.tif", np.zeros((40, 1200, 1200), np.uint8), compression="zlib")
    assert (tmp_path / "bomb.tif").stat().st_size < 2_000_000  # each page is under the limit, the whole is not
    t = time.perf_counter()
    with pytest.raises(ImageLoadError, match=r"over 50 megapixels .* in 40 frames"):
        load_image(tmp_path / "bomb.tif")
    assert time.perf_counter() - t < 1.0


def test_memory_error_while_decoding_skips_only_that_file(tmp_path, monkeypatch):
    _shapes(tmp_path, ["a.png", "b.png", "c.png"])
    real = imageset._decode

    def decode(path, ext):
        if path.name == "b.png":
            raise MemoryError()
        return real(path, ext)

    monkeypatch.setattr(imageset, "_decode", decode)
    s = load_images(tmp_path)
    assert len(s) == 2
    assert s.skipped == [{"path": str(tmp_path / "b.png"),
                                          "reason": "too large to decode in the memory available"}]


def test_unexpected_decoder_error_skips_only_that_file(tmp_path, monkeypatch):
    _shapes(tmp_path, ["a.png", "b.png"])
    real = imageset._decode
    monkeypatch.setattr(imageset, "_decode", lambda p, e: (_ for _ in ()).throw(ZeroDivisionError("bug"))
                        if p.name == "a.png" else real(p, e))
    s = load_images(tmp_path)
    assert len(s) == 1
    assert "ZeroDivisionError" in s.skipped[0]["reason"]


def test_cmyk_jpeg_becomes_rgb(tmp_path):
    rgb = np.zeros((32, 40, 3), np.uint8)
    rgb[..., 0] = 200
    rgb[8:24, 8:24, 1] = 160
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "c.jpg", quality=95)
    assert Image.open(tmp_path / "c.jpg").mode == "CMYK"
    out = load_image(tmp_path / "c.jpg")
    assert out.shape == (32, 40, 3)
    np.testing.assert_allclose(out, rgb / 255.0, atol=6 / 255)


def test_cmyk_tiff_becomes_rgb(tmp_path):
    import tifffile

    cmyk = np.zeros((8, 8, 4), np.uint8)
    cmyk[..., 1] = 255  # magenta ink: no green
    tifffile.imwrite(tmp_path / "c.tif", cmyk, photometric="separated")
    np.testing.assert_allclose(load_image(tmp_path / "c.tif")[0, 0], [1.0, 0.0, 1.0])


@pytest.mark.parametrize("value", [3e38, np.inf, np.nan, 1e16])
def test_overflowing_float_tiffs_are_skipped(tmp_path, value):
    import tifffile

    img = np.zeros((8, 8), np.float32)
    img[2:5, 2:5] = value
    tifffile.imwrite(tmp_path / "f.tif", img)
    with pytest.raises(ImageLoadError, match="NaN or infinite values"):
        load_image(tmp_path / "f.tif")


def test_precise_reasons_for_permission_loops_and_fifos(tmp_path, monkeypatch):
    _shapes(tmp_path, ["ok.png", "locked.png"])
    os.symlink("loop_b.png", tmp_path / "loop_a.png")
    os.symlink("loop_a.png", tmp_path / "loop_b.png")
    os.mkfifo(tmp_path / "pipe.png")
    real_open = open

    def fake_open(path, *a, **k):  # root reads anything: simulate the permission bit
        if str(path).endswith("locked.png"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(imageset, "open", fake_open, raising=False)
    s = load_images([tmp_path / n for n in ("ok.png", "locked.png", "loop_a.png", "pipe.png", "gone.png")])
    reasons = {os.path.basename(x["path"]): x["reason"] for x in s.skipped}
    assert len(s) == 1
    assert reasons == {"locked.png": "cannot be read: permission denied",
                       "loop_a.png": "cannot be read: a symbolic link loop",
                       "pipe.png": "not a regular file: a FIFO (named pipe)",
                       "gone.png": "does not exist"}


# ------------------------------------------------------------------------------------------ D11: options
@pytest.mark.parametrize("args", [
    ["--beta", "inf"], ["--beta", "nan"], ["--beta", "1e9"], ["--transform", "nan,0.1"], ["--transform", "inf,0"],
    ["--transform", "10,nan"], ["--angle-step", "1e-9"], ["--angle-step", "inf"], ["--size", "1e9"],
    ["--size", "20000"], ["--out", ""], ["--out", "  "], ["--rotation-range", "nan"], ["--rotation-range", "1e300"],
    ["--iterations", "100000000"], ["--seed", "-1"], ["--seed", str(2**70)], ["--save-project", ""],
])
def test_absurd_options_are_usage_errors(tmp_path, capsys, args):
    t = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(["demo:shapes", *args] if "--out" in args else ["demo:shapes", "--out", str(tmp_path / "o"), *args])
    assert exc.value.code == 2
    assert time.perf_counter() - t < 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error:" in err
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        main(["demo:shapes", "--out", str(tmp_path / "f")])
    assert exc.value.code == 2
    assert (tmp_path / "f").read_text() == "mine"


def test_limits_themselves_are_accepted(tmp_path):
    assert main(["demo:shapes", "--out", str(tmp_path / "o"), "--beta", "10000", "--angle-step", "45",
                 "--rotation-range", "180", "--seed", str(2**32 - 1), *FAST]) == 0


# ------------------------------------------------------------------------------------------ D9, D14, D16: writes
def test_full_disk_leaves_no_partial_result(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    import iastudio.core.report

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(iastudio.core.report, "save_weights_png", full)
    assert main(["demo:shapes", "--out", str(out), *FAST]) == 1
    assert "failed: no space left on device" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["mine.txt"]  # no half-written set beside the user's file
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # the hidden folder is gone


def test_atomic_write_failure_keeps_old_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "summary.json"
    write_json(target, {"old": 1})

    class Boom:
        def __str__(self):
            raise OSError(28, "No space left on device")

    with pytest.raises(TypeError):
        write_json(target, {"new": Boom()})
    assert json.loads(target.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["summary.json"]


def test_result_files_get_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        assert umask() == 0o022
        assert main(["demo:shapes", "--out", str(tmp_path / "o"), *FAST]) == 0
        save_project(tmp_path / "p.iaproj", good_project())
        atomic_write_bytes(tmp_path / "b.bin", b"x")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "o").iterdir()}
    assert set(modes.values()) == {0o644}, modes
    assert stat.S_IMODE((tmp_path / "o").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "p.iaproj").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.bin").stat().st_mode) == 0o644


def test_stale_temporaries_of_killed_saves_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".work.iaproj.{dead.pid}.0123abcd.tmp"
    stale.write_bytes(b"x" * 100)
    live = tmp_path / f".work.iaproj.{os.getpid()}.0123abcd.tmp"  # a save in progress in this process
    live.write_bytes(b"x")
    old_style = tmp_path / ".work.iaproj.k3j4h5g6.tmp"
    old_style.write_bytes(b"x")
    os.utime(old_style, (time.time() - 7200, time.time() - 7200))
    stale_dir = tmp_path / f".out.{dead.pid}.0123abcd.partial"
    stale_dir.mkdir()
    (stale_dir / "weights.npy").write_bytes(b"x")
    mine = tmp_path / ".hidden-user-file"
    mine.write_text("mine")
    other = tmp_path / ".someone-elses.abcdefgh.tmp"  # not ours, however old
    other.write_text("theirs")
    os.utime(other, (time.time() - 7200, time.time() - 7200))
    save_project(tmp_path / "work.iaproj", good_project())  # a save cleans its own leftovers
    assert not stale.exists()
    assert not old_style.exists()
    assert live.exists()
    assert remove_stale_temporaries(tmp_path) == [stale_dir]
    assert live.exists()
    assert mine.exists()
    assert other.exists()
    assert (tmp_path / "work.iaproj").exists()


def test_result_folder_is_all_or_nothing(tmp_path):
    rf = ResultFolder(tmp_path / "r")
    work = rf.open()
    (work / "a.txt").write_text("a")
    rf.discard()
    assert os.listdir(tmp_path) == []
    with ResultFolder(tmp_path / "r") as work:
        (work / "a.txt").write_text("a")
    assert os.listdir(tmp_path) == ["r"]
    assert (tmp_path / "r" / "a.txt").read_text() == "a"


def _run_and_signal(tmp_path, sig, delay):
    out = tmp_path / f"out{sig}_{delay}"
    logs = tmp_path.parent / f"{tmp_path.name}-logs{sig}_{delay}"  # outside tmp_path: it must stay clean
    env = dict(os.environ, IA_STUDIO_LOG_DIR=str(logs))
    # a run of several seconds (explicit beta: no guard stopping it early), so the signal lands mid-run
    p = subprocess.Popen([sys.executable, "-m", "iastudio.core.cli", "demo:digits", "--size", "40", "--iterations", "3",
                          "--beta", "20", "--quiet", "--out", str(out), "--save-project", str(out) + ".iaproj"],
                         cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    # the log file appears once the handlers are installed: a loaded machine can take seconds to get there
    while p.poll() is None and time.monotonic() < deadline and not (logs.is_dir() and any(logs.iterdir())):
        time.sleep(0.05)
    time.sleep(delay)
    p.send_signal(sig)
    err = p.communicate(timeout=60)[1]
    return p.returncode, err, out


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_leave_all_or_nothing_and_one_line(tmp_path, sig, code):
    complete = None
    for delay in (0.0, 1.0, 2.0, 3.0, 9.0):
        rc, err, out = _run_and_signal(tmp_path, sig, delay)
        hidden = [p for p in os.listdir(tmp_path) if p.startswith(".")]
        assert hidden == [], hidden
        if rc == 0:  # finished before the signal
            complete = sorted(os.listdir(out))
            continue
        assert rc == code, err
        lines = err.strip().splitlines()
        assert len(lines) == 1
        assert "interrupted by" in lines[0]
        assert "Traceback" not in err
        assert not out.exists()
    if complete is not None:
        assert {"assignments.csv", "summary.json", "weights.npy"} <= set(complete)


@pytest.mark.parametrize("when", ["before", "during"])
def test_signal_at_the_moment_of_moving_results_into_place(tmp_path, capsys, monkeypatch, when):
    import iastudio.core.atomic

    out = tmp_path / "out"
    real_commit, real_replace = ResultFolder.commit, os.replace

    moving = []

    def commit(self):
        if when == "before":
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at once: nothing is moved
        moving.append(True)
        return real_commit(self)

    def replace(a, b):
        if when == "during" and moving:
            os.kill(os.getpid(), signal.SIGTERM)  # held back until the move is complete
        return real_replace(a, b)

    monkeypatch.setattr(ResultFolder, "commit", commit)
    monkeypatch.setattr(iastudio.core.atomic.os, "replace", replace)
    assert main(["demo:shapes", "--out", str(out), *FAST]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "interrupted by SIGTERM" in err[0]
    if when == "before":
        assert not out.exists()
        assert "no results were written" in err[0]
    else:
        assert sorted(os.listdir(out)) == sorted(["assignments.csv", "summary.json", "weights.npy", "distances.npy",
                                                  "means.npy", "means.png", "weights.png", "convergence.png"])
        assert "are complete" in err[0]
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


class _SignalInDel:
    """An object whose ``__del__`` receives SIGTERM: the handler's exception cannot leave a ``__del__``."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside __del__


def test_a_signal_swallowed_where_it_cannot_be_raised_still_stops_the_run(tmp_path, capsys, monkeypatch):
    # As when SIGTERM lands in one of importlib's module-lock callbacks during an import: Python
    # prints "Exception ignored" with a traceback and the run would go on to write its results.
    out = tmp_path / "out"
    real_commit = ResultFolder.commit
    resent = []

    def commit(self):
        trap = _SignalInDel()
        del trap
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the signal, sent again, lands in this ordinary code
            resent.append(time.monotonic())
            time.sleep(0.01)
        return real_commit(self)

    monkeypatch.setattr(ResultFolder, "commit", commit)
    assert main(["demo:shapes", "--out", str(out), *FAST]) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "interrupted by SIGTERM; no results were written" in lines[0]
    assert not out.exists()
    assert resent[-1] - resent[0] < 1.0  # stopped within a moment, not at the end of the wait
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


def test_project_export_on_a_full_disk_leaves_nothing(tmp_path, capsys, monkeypatch):
    proj = save_project(tmp_path / "p.iaproj", good_project())
    import iastudio.core.report

    real = iastudio.core.report.atomic_write

    def full(path, **kw):
        if str(path).endswith("summary.json"):
            raise OSError(28, "No space left on device")
        return real(path, **kw)

    monkeypatch.setattr(iastudio.core.report, "atomic_write", full)
    assert main(["--project", str(proj), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "no space left on device" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["logs", "p.iaproj"]


def test_animations_are_refused_before_decoding_every_frame(tmp_path):
    frames = [Image.fromarray(np.full((10, 12), k * 50, np.uint8)) for k in range(3)]
    frames[0].save(tmp_path / "anim.png", save_all=True, append_images=frames[1:])
    with pytest.raises(ImageLoadError, match="animation of 3 frames"):
        load_image(tmp_path / "anim.png")


def test_display_name_takes_either_separator():
    from iastudio.core.filenames import display_name

    assert display_name(r"C:\scans\cell 1.png") == "cell 1.png"
    assert display_name("/data/x/y.tif") == "y.tif"
    assert display_name("demo:shapes/003") == "003"
