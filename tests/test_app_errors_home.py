"""M1 (errors are seen) and M7 (the self-test and the tests use a temporary home)."""
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QObject, QThread, Signal, Slot  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from iastudio.app import errors  # noqa: E402
from iastudio.app.events import listen  # noqa: E402
from iastudio.app.home import app_home  # noqa: E402
from iastudio.app.projects import settings  # noqa: E402
from iastudio.core.attention import AttentionRun  # noqa: E402
from iastudio.core.logs import log_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def window(shared_window):
    """The module's window (conftest's ``module_window``, put back before each test); an error box a test
    left open is closed after it."""
    yield shared_window
    box = errors.current_error_dialog()
    if box is not None:
        box.close()


@pytest.mark.qt_no_exception_capture
def test_uncaught_exception_in_a_slot_shows_a_visible_top_level_window(window, qtbot, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", errors.excepthook)

    def broken_slot(_text):
        raise ZeroDivisionError("simulated bug in a slot")

    connected = listen(window.model.session.events.message, broken_slot)
    window.model.session.message("hello")  # the callback raises; listen hands it to sys.excepthook
    window.model.session.events.message.disconnect(connected)
    qtbot.waitUntil(lambda: errors.current_error_dialog() is not None, timeout=30000)
    box = errors.current_error_dialog()
    assert box.isVisible()
    assert box.isWindow()
    assert str(log_dir()) in box.informativeText()
    assert "ZeroDivisionError" in box.detailedText()
    assert "Traceback" in box.detailedText()
    assert "simulated bug" in box.text()
    assert "Traceback" not in box.text()
    assert any(b.text() == "Open log folder" for b in box.buttons())
    # the session goes on: the window still works behind the dialog
    window.model.session.load_demo("shapes")
    assert window.model.session.n == 18
    assert window.images_panel.thumbs.rowCount() == 18


@pytest.mark.qt_no_exception_capture
def test_repeated_errors_add_to_one_window(window, qtbot, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", errors.excepthook)
    for k in range(5):
        try:
            raise ValueError(f"failure {k}")
        except ValueError:
            errors.excepthook(*sys.exc_info())
    tops = [w for w in QApplication.topLevelWidgets() if isinstance(w, errors.ErrorDialog) and w.isVisible()]
    assert len(tops) == 1
    assert "4 more errors" in tops[0].text()
    assert "failure 4" in tops[0].detailedText()


class _Thrower(QObject):
    go = Signal()

    @Slot()
    def boom(self):
        raise RuntimeError("raised in a worker thread")


@pytest.mark.qt_no_exception_capture
def test_an_error_in_a_worker_thread_reaches_the_gui_thread(window, qtbot, monkeypatch):
    errors.install_excepthook()
    monkeypatch.setattr(sys, "excepthook", errors.excepthook)
    thread = QThread()
    obj = _Thrower()
    obj.moveToThread(thread)
    obj.go.connect(obj.boom)
    thread.start()
    try:
        obj.go.emit()
        qtbot.waitUntil(lambda: errors.current_error_dialog() is not None, timeout=30000)
        box = errors.current_error_dialog()
        assert box.thread() is QApplication.instance().thread()
        assert "worker thread" in box.text()
    finally:
        thread.quit()
        thread.wait(30000)


def test_a_failed_run_shows_the_error_window(window, qtbot, monkeypatch):
    def boom(self):
        raise RuntimeError("simulated failure in the engine")
        yield  # pragma: no cover

    monkeypatch.setattr(AttentionRun, "steps", boom)
    window.model.session.load_demo("shapes")
    window.run_panel.start_btn.click()
    qtbot.waitUntil(lambda: window.model.session.state == "failed", timeout=60000)
    box = window.last_dialog
    assert isinstance(box, errors.ErrorDialog)
    assert box.isVisible()
    assert box.isWindow()
    assert "simulated failure" in box.text()
    assert str(log_dir()) in box.informativeText()
    window.model.session.load_demo("shapes")  # and the session goes on
    assert window.model.session.state != "failed" or window.run_panel.start_btn.isEnabled()


def test_the_app_home_is_movable_and_the_tests_use_a_temporary_one(tmp_path, monkeypatch):
    real = Path.home() / ".invariant-attention-studio"
    assert not str(app_home()).startswith(str(real))  # the autouse fixture's home
    monkeypatch.setenv("IA_STUDIO_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("IA_STUDIO_LOG_DIR")
    assert app_home() == tmp_path / "h"
    assert log_dir() == tmp_path / "h" / "logs"
    settings().setValue("x", 1)
    settings().sync()
    assert (tmp_path / "h" / "settings.ini").exists()


@pytest.mark.slow
def test_selftest_runs_in_a_temporary_home(tmp_path):
    """``ia-studio --selftest`` with HOME pointed at a fresh folder writes nothing into the app's folder there."""
    env = {k: v for k, v in os.environ.items() if k not in ("IA_STUDIO_HOME", "IA_STUDIO_LOG_DIR")}
    (tmp_path / "tmp").mkdir()
    env.update(HOME=str(tmp_path), QT_QPA_PLATFORM="offscreen", USERPROFILE=str(tmp_path),
               TMPDIR=str(tmp_path / "tmp"))
    env.pop("DISPLAY", None)
    out = subprocess.run([sys.executable, "-m", "iastudio.app", "--selftest"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAIL" not in out.stdout
    assert "W heatmap = result W" in out.stdout
    assert not (tmp_path / ".invariant-attention-studio").exists()
    assert not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("ia-studio")]  # cleaned up
