"""Projects are written in a worker thread: the window goes on while the autosave or File > Save writes,
one autosave at a time with the latest state winning, closing waits for them, failures stay quiet
(autosave) or show the dialog (Save)."""
import errno
import logging
import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from _malicious import good_project  # noqa: E402
from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QMessageBox  # noqa: E402

import iastudio.app.projects as projects  # noqa: E402
import iastudio.core.session_project as session_module  # noqa: E402  (where Session.save_project writes)
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.project import load_project, save_project  # noqa: E402

WAIT_S = 10  # the longest a held write waits to be released (a test that forgets fails, never hangs)


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


class HeldWrites:
    """``save_project`` as the app calls it, held until :attr:`release` is set, recording each write.

    ``log`` holds ``("start", name of cluster 0, written on the GUI thread, the recovery lock exists)``
    and ``("end", name)`` in order.  With ``only``, writes to other files go through untouched.
    """

    def __init__(self, monkeypatch, lock=None, only=None):
        self.only = only
        self.release = threading.Event()
        self.started = threading.Event()
        self.log = []
        self.lock = lock
        self._real = save_project
        for module in (projects, session_module):  # the worker's writer and the session's own
            monkeypatch.setattr(module, "save_project", self, raising=False)

    def __call__(self, path, project, **options):
        if self.only is not None and str(path) != str(self.only):
            return self._real(path, project, **options)
        name = project.clusters.name_of(0)
        on_gui = threading.current_thread() is threading.main_thread()
        self.log.append(("start", name, on_gui, self.lock is not None and self.lock.exists()))
        self.started.set()
        if not self.release.wait(WAIT_S):
            raise TimeoutError("the held write was never released")
        out = self._real(path, project, **options)
        self.log.append(("end", name))
        return out


def _open(window, folder, name="mine", **kw):
    """Open a small project with a finished run and clusters in ``window``; its path."""
    path = save_project(folder / f"{name}.iaproj", good_project(n=8, **kw))
    assert window.projects.open_project(str(path))
    return path


def _visible_boxes():
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


def test_an_autosave_is_written_in_a_worker_while_the_window_goes_on(window, qtbot, tmp_path, monkeypatch):
    w, m = window, window.model
    _open(w, tmp_path)
    held = HeldWrites(monkeypatch)
    assert m.session.rename_cluster(0, "first")
    t0 = time.perf_counter()
    assert w.projects.autosave()  # returns at once: the GUI thread only took the snapshot
    assert time.perf_counter() - t0 < 2.0
    qtbot.waitUntil(held.started.is_set, timeout=WAIT_S * 1000)
    assert w.projects.writing
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    qtbot.waitUntil(lambda: len(ticks) >= 5, timeout=30000)  # the event loop runs while the file is written
    timer.stop()
    assert held.log == [("start", "first", False, False)]  # in a worker thread, still held
    assert m.session.rename_cluster(0, "second")  # an edit while the first write is in flight
    for _ in range(3):
        assert w.projects.autosave()  # asked for again and again: one more write after it, not a queue
    assert m.session.rename_cluster(0, "third")
    assert w.projects.autosave()
    held.release.set()
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    qtbot.wait(100)
    assert held.log == [("start", "first", False, False), ("end", "first"),
                        ("start", "third", False, False), ("end", "third")]  # the latest state wins
    assert load_project(w.projects.autosave_path()).clusters.name_of(0) == "third"
    assert m.session.dirty  # an autosave never makes the project's own file look saved


def test_closing_waits_for_the_autosave_in_flight_then_writes_the_final_state(qtbot, tmp_path, monkeypatch):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    m = w.model
    _open(w, tmp_path)
    lock = w.projects.lock
    held = HeldWrites(monkeypatch, lock)
    assert m.session.rename_cluster(0, "first")
    assert w.projects.autosave()
    qtbot.waitUntil(held.started.is_set, timeout=WAIT_S * 1000)
    assert m.session.rename_cluster(0, "final")  # made while "first" is written; closing comes before its autosave
    threading.Timer(0.3, held.release.set).start()
    assert w.close()  # "Save changes?" is answered "discard" (conftest)
    assert held.log == [("start", "first", False, True), ("end", "first"),
                        ("start", "final", True, True), ("end", "final")]  # waited, then the final state
    assert not lock.exists()  # removed only after that
    assert load_project(w.projects.autosave_path()).clusters.name_of(0) == "final"


def test_a_failed_autosave_is_logged_and_does_not_disturb_the_user(window, qtbot, tmp_path, monkeypatch, caplog):
    w, m = window, window.model
    path = _open(w, tmp_path)
    threads = []

    def disk_full(target, project, **options):
        threads.append(threading.current_thread() is threading.main_thread())
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(projects, "save_project", disk_full, raising=False)
    monkeypatch.setattr(session_module, "save_project", disk_full)
    assert m.session.rename_cluster(0, "kept")
    with caplog.at_level(logging.INFO, logger="iastudio.app.projects"):
        assert w.projects.autosave()
        qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    assert threads
    assert not any(threads)
    failed = [r for r in caplog.records if r.getMessage() == "autosave failed"]
    assert failed
    assert failed[0].levelno == logging.ERROR
    assert "No space left" in caplog.text
    assert w.last_dialog is None
    assert not _visible_boxes()
    assert m.session.dirty
    assert m.session.project_path == str(path)
    assert m.session.book.name_of(0) == "kept"
    monkeypatch.setattr(projects, "save_project", save_project)  # the disk has room again
    assert m.session.rename_cluster(0, "again")
    assert w.projects.autosave()
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    assert load_project(w.projects.autosave_path()).clusters.name_of(0) == "again"


def test_save_writes_in_a_worker_and_marks_saved_only_what_it_wrote(window, qtbot, tmp_path, monkeypatch):
    w, m = window, window.model
    path = _open(w, tmp_path)
    held = HeldWrites(monkeypatch, only=path)  # an autosave may come in between: not held
    assert m.session.rename_cluster(0, "saved")
    w.save_action.trigger()  # File > Save returns while its file is written
    qtbot.waitUntil(held.started.is_set, timeout=WAIT_S * 1000)
    assert held.log == [("start", "saved", False, False)]
    assert m.session.dirty
    assert w.windowTitle().endswith("*")
    assert "Saving" in w.statusBar().currentMessage()
    assert m.session.rename_cluster(1, "later")  # an edit while the save is written
    held.release.set()
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    p = load_project(path)
    assert p.clusters.name_of(0) == "saved"
    assert p.clusters.name_of(1) != "later"
    assert m.session.dirty
    assert w.windowTitle().endswith("*")
    assert w.statusBar().currentMessage() == f"Saved {path}"
    assert m.session.project_path == str(path)
    w.save_action.trigger()  # nothing changes while this one is written: clean
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    assert not m.session.dirty
    assert not w.windowTitle().endswith("*")
    assert load_project(path).clusters.name_of(1) == "later"


def test_a_failed_save_shows_the_dialog_and_the_work_stays_unsaved(window, qtbot, tmp_path, monkeypatch):
    w, m = window, window.model
    path = _open(w, tmp_path)

    def disk_full(target, project, **options):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(projects, "save_project", disk_full, raising=False)
    monkeypatch.setattr(session_module, "save_project", disk_full)
    assert m.session.rename_cluster(0, "unsaved")
    w.save_action.trigger()
    qtbot.waitUntil(lambda: w.last_dialog is not None, timeout=WAIT_S * 1000)
    assert w.last_dialog.windowTitle() == "Cannot save"
    assert "No space left on device" in w.last_dialog.text()
    assert m.session.dirty
    assert m.session.project_path == str(path)
    assert "Saved" not in w.statusBar().currentMessage()
    assert load_project(path).clusters.name_of(0) != "unsaved"


def test_opening_another_project_while_an_autosave_is_written(window, qtbot, tmp_path, monkeypatch):
    w, m = window, window.model
    _open(w, tmp_path, "a")
    other = save_project(tmp_path / "b.iaproj", good_project(n=12, seed=3))
    held = HeldWrites(monkeypatch)
    assert m.session.rename_cluster(0, "of a")
    assert w.projects.autosave()
    qtbot.waitUntil(held.started.is_set, timeout=WAIT_S * 1000)
    assert w.projects.open_project(str(other))  # not held up by the autosave of the old session
    assert m.session.n == 12
    assert m.session.project_path == str(other)
    assert not m.session.dirty
    held.release.set()
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    # the old state was written whole, then the opened project (its finished run asks for an autosave)
    assert held.log == [("start", "of a", False, False), ("end", "of a"),
                        ("start", "Cluster 1", False, False), ("end", "Cluster 1")]
    assert load_project(w.projects.autosave_path()).n == 12
    # the old write changed nothing of the new session
    assert m.session.project_path == str(other)
    assert not m.session.dirty
    assert m.session.rename_cluster(0, "of b")
    assert w.projects.autosave()
    qtbot.waitUntil(lambda: not w.projects.writing, timeout=WAIT_S * 1000)
    auto = load_project(w.projects.autosave_path())
    assert auto.n == 12
    assert auto.clusters.name_of(0) == "of b"
