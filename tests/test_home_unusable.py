"""Issue 32 #1 and #10: the app starts when its home folder cannot be used (settings, autosave, the
recovery lock and logs off, one plain line in the window and on stderr), and a full disk under the
home never puts a traceback on stderr."""
import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from _malicious import good_project  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

import iastudio.app.projects as projects  # noqa: E402
import iastudio.core.session_project as session_module  # noqa: E402  (where Session.save_project writes)
from iastudio.core.project import save_project  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LONG = "x" * 300


def _unusable(tmp_path, kind):
    """A home that cannot be made or written: ``(path, words its reason contains)``."""
    if kind == "file":
        (tmp_path / "a-file").write_text("not a folder")
        return tmp_path / "a-file", "not a folder"
    if kind == "devnull":
        return Path(os.devnull), "not a folder"
    if kind == "proc":
        return Path("/proc/self"), "nothing can be written"
    if kind == "long":
        return tmp_path / LONG, "too long"
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder, "permission denied"


KINDS = ["file", "devnull", "long",
         pytest.param("proc", marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc")),
         pytest.param("read-only", marks=pytest.mark.skipif(
             sys.platform == "win32" or os.geteuid() == 0, reason="root writes into read-only folders"))]


def _point_home(monkeypatch, home):
    monkeypatch.setenv("IA_STUDIO_HOME", str(home))
    monkeypatch.delenv("IA_STUDIO_LOG_DIR", raising=False)  # the logs live in the home, as by default


@pytest.mark.parametrize("kind", KINDS)
def test_the_window_opens_with_settings_autosave_and_lock_off(qtbot, tmp_path, monkeypatch, capsys, kind):
    from iastudio.app.main_window import MainWindow

    home, reason = _unusable(tmp_path, kind)
    _point_home(monkeypatch, home)
    w = MainWindow(recover=True)  # raised (mkdir / the lock's write_text) before
    qtbot.addWidget(w)
    w.show()
    p = w.projects
    assert p.home_off
    assert reason in p.home_off
    assert p.lock is None
    assert not p.crashed
    labels = [lab.text() for lab in w.statusBar().findChildren(QLabel) if lab.objectName() == "homeNotice"]
    assert len(labels) == 1
    assert "cannot be used" in labels[0]
    assert "autosave are off" in labels[0]
    assert reason in labels[0]
    assert "\n" not in labels[0]
    err = capsys.readouterr().err
    assert "Traceback" not in err
    w.model.session.load_demo("shapes")  # the session works as ever; only what needs the home is off
    assert w.model.session.n == 18
    assert p.autosave() is False
    assert p.autosave(wait=True) is False
    assert w.close()
    w.model.shutdown(5000)


def test_a_usable_home_shows_no_notice(window, capsys):
    assert window.projects.home_off is None
    assert window.projects.home_notice is None
    assert window.projects.lock.exists()
    assert not [lab for lab in window.statusBar().findChildren(QLabel) if lab.objectName() == "homeNotice"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "long"])
def test_ia_studio_starts_and_says_why_in_one_line(tmp_path, kind):
    home, reason = _unusable(tmp_path, kind)
    env = {**os.environ, "IA_STUDIO_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("IA_STUDIO_LOG_DIR", None)
    run = subprocess.run([sys.executable, "-m", "iastudio.app", "--quit-after-show"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr  # exit 1 and a traceback from app_home().mkdir before
    assert "Traceback" not in run.stderr
    ours = [line for line in run.stderr.splitlines() if line.startswith("ia-studio:")]
    assert len(ours) == 1
    assert "cannot be used" in ours[0]
    assert "logs are off" in ours[0]
    assert reason in ours[0]


def test_setup_file_logging_says_logs_are_off(tmp_path, monkeypatch):
    from iastudio.core.logs import logging_problem, setup_file_logging, where_details

    (tmp_path / "f").write_text("")
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "f" / "logs"))
    assert setup_file_logging("ia-test-off") is None
    assert logging_problem("ia-test-off") == "Not a directory"
    assert where_details(None).startswith("no log:")


def test_a_full_disk_under_the_home_puts_no_traceback_on_stderr(window, tmp_path, monkeypatch, capfd):
    """Issue 32 #10: the autosave fails (ENOSPC) and so does the log record saying so."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    from iastudio.core.logs import setup_file_logging

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "ia-studio.log").symlink_to("/dev/full")  # every write to the log: "No space left on device"
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(logs))
    root = logging.getLogger()
    before = list(root.handlers)
    assert setup_file_logging("ia-studio") is not None

    def disk_full(target, project, **options):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(projects, "save_project", disk_full, raising=False)
    monkeypatch.setattr(session_module, "save_project", disk_full)
    try:
        path = save_project(tmp_path / "p.iaproj", good_project(n=10, seed=1))
        assert window.projects.open_project(str(path))
        assert window.model.session.rename_cluster(0, "unsaved")
        capfd.readouterr()
        assert window.projects.autosave(wait=True) is False
        err = capfd.readouterr().err
        assert "Traceback" not in err
        assert "Logging error" not in err
        assert "OSError" not in err
    finally:
        for h in root.handlers:
            if h not in before:
                root.removeHandler(h)
                h.close()


def test_the_cli_runs_with_its_logs_off(tmp_path, monkeypatch, capsys):
    """ia-cluster died in setup_file_logging (log_dir().mkdir) when the log folder could not be made."""
    from iastudio.core.cli import main

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("IA_STUDIO_HOME", str(tmp_path / "a-file"))
    monkeypatch.delenv("IA_STUDIO_LOG_DIR", raising=False)
    assert main(["demo:shapes", "--size", "24", "--iterations", "1", "--quiet", "--out", str(tmp_path / "o")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert (tmp_path / "o" / "assignments.csv").is_file()
