"""Loading images in the app (D15): files are read in a worker thread, the window stays responsive, Cancel
stops after the file being read, skipped files are named, and only the GUI thread changes the session.

The slow file is made deterministic: the decoder is replaced by one that blocks on ``slow.png`` until the
test releases it (at most 10 s, so that a loader running on the GUI thread fails instead of hanging).
"""
import os
import threading
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QThreadPool, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QPushButton  # noqa: E402

import iastudio.core.session as session_module  # noqa: E402
import iastudio.core.session_inputs as inputs_module  # noqa: E402  (where images are read)
from iastudio.app.errors import current_error_dialog  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402

WAIT_MS = 30000


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


def _pngs(folder, names):
    img = np.zeros((20, 20), np.uint8)
    img[5:12, 4:15] = 255
    for k, name in enumerate(names):
        Image.fromarray(np.roll(img, k, axis=1)).save(folder / name)
    return [folder / name for name in names]


class SlowDecoder:
    """Replaces the session's ``load_image``: ``slow.png`` blocks until :attr:`release` is set.

    Records the files decoded, the threads they were decoded in, and how often ``ticks`` (a counter a
    GUI-thread timer increments) moved while ``slow.png`` was blocked.
    """

    def __init__(self, monkeypatch, ticks=(0,), fail=None):
        self.entered, self.release = threading.Event(), threading.Event()
        self.names, self.threads, self.ticks, self.ticks_while_blocked = [], set(), ticks, None
        real = inputs_module.load_image

        def decode(path):
            name = Path(path).name
            self.names.append(name)
            self.threads.add(threading.current_thread())
            if name == "slow.png":
                before = self.ticks[0]
                self.entered.set()
                self.release.wait(10)
                self.ticks_while_blocked = self.ticks[0] - before
            if fail and name in fail:
                raise fail[name]
            return real(path)

        monkeypatch.setattr(inputs_module, "load_image", decode)


def _ticking(window):
    """A 10 ms timer on the GUI thread counting its ticks in ``ticks[0]``."""
    ticks = [0]
    timer = QTimer(window)
    timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    timer.start(10)
    return ticks


def test_the_window_stays_responsive_while_a_file_is_read(window, qtbot, tmp_path, monkeypatch):
    ticks = _ticking(window)
    slow = SlowDecoder(monkeypatch, ticks)
    files = _pngs(tmp_path, ["a.png", "slow.png", "c.png"])
    assert window.load_paths(files)  # returns at once
    qtbot.waitUntil(slow.entered.is_set, timeout=WAIT_MS)
    start = ticks[0]
    qtbot.waitUntil(lambda: ticks[0] >= start + 20, timeout=WAIT_MS)  # timers fire while slow.png decodes
    dlg = window.loading_dialog
    qtbot.waitUntil(dlg.isVisible, timeout=WAIT_MS)  # shown (after its delay) while the worker is stuck
    assert "Reading slow.png (2 of 3)" in dlg.labelText()
    assert dlg.value() == 1
    assert dlg.maximum() == 3
    assert window.model.loading
    assert window.model.session.n == 0
    assert not slow.release.is_set()
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        slow.release.set()
    assert slow.ticks_while_blocked >= 20
    assert window.model.session.n == 3
    assert not window.model.loading
    assert window.loading_dialog is None
    assert window.images_panel.thumbs.rowCount() == 3
    assert "3 images" in window.images_panel.summary.text()


def test_cancel_keeps_the_images_read_and_reads_no_more(window, qtbot, tmp_path, monkeypatch):
    slow = SlowDecoder(monkeypatch)
    files = _pngs(tmp_path, ["a.png", "b.png", "slow.png", "d.png", "e.png"])
    messages = []
    window.model.session.events.message.connect(messages.append)
    assert window.load_paths(files)
    qtbot.waitUntil(slow.entered.is_set, timeout=WAIT_MS)
    dlg = window.loading_dialog
    qtbot.waitUntil(dlg.isVisible, timeout=WAIT_MS)
    dlg.findChild(QPushButton).click()  # the user presses Cancel while slow.png is read
    assert window.model.loading
    assert "Cancelling" in messages[-1]
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS) as loaded:
        slow.release.set()
    m = window.model
    assert [Path(p).name for p in m.session.data.paths] == ["a.png", "b.png", "slow.png"]  # the file being read is kept
    assert slow.names == ["a.png", "b.png", "slow.png"]  # the rest was never decoded
    assert [(Path(s["path"]).name, s["reason"]) for s in loaded.args[0]] == [
        ("d.png", "not loaded: cancelled"), ("e.png", "not loaded: cancelled")]
    assert messages[-1].startswith("Added 3 images; skipped 2: d.png (not loaded: cancelled)")


def test_a_bad_file_is_skipped_and_named_without_a_traceback(window, qtbot, tmp_path, monkeypatch):
    SlowDecoder(monkeypatch, fail={"odd.png": ZeroDivisionError("a decoder bug")})
    files = _pngs(tmp_path, ["a.png", "odd.png", "b.png"])
    (tmp_path / "bad.png").write_text("garbage")
    messages = []
    window.model.session.events.message.connect(messages.append)
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS) as loaded:
        assert window.load_paths([files[0], tmp_path / "bad.png", *files[1:]])
    assert window.model.session.n == 2
    reasons = {Path(s["path"]).name: s["reason"] for s in loaded.args[0]}
    assert reasons == {"bad.png": "not an image (the file's contents are not a readable image)",
                       "odd.png": "could not be decoded (ZeroDivisionError: a decoder bug)"}
    assert messages[-1] == ("Added 2 images; skipped 2: bad.png (not an image (the file's contents are not a "
                            "readable image)); odd.png (could not be decoded (ZeroDivisionError: a decoder bug))")
    lst = window.images_panel.skipped_list
    assert lst.count() == 2
    assert "bad.png" in lst.item(0).text()
    assert "odd.png" in lst.item(1).text()
    assert current_error_dialog() is None  # a skip is not an error window, and no traceback is shown


def test_files_are_read_in_a_worker_and_the_session_changes_on_the_gui_thread(window, qtbot, tmp_path,
                                                                               monkeypatch):
    gui = threading.current_thread()
    slow = SlowDecoder(monkeypatch)
    seen = []
    real_add = session_module.Session.add_loaded

    def add_loaded(self, *a, **k):
        seen.append(("add_loaded", threading.current_thread()))
        return real_add(self, *a, **k)

    monkeypatch.setattr(session_module.Session, "add_loaded", add_loaded)
    window.model.session.events.images.connect(lambda: seen.append(("images", threading.current_thread())))
    window.model.imagesLoading.connect(lambda *a: seen.append(("progress", threading.current_thread())))
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        window.load_paths(_pngs(tmp_path, ["a.png", "b.png"]))
    assert window.model.session.n == 2
    assert slow.names == ["a.png", "b.png"]
    assert slow.threads
    assert gui not in slow.threads
    kinds = [k for k, _ in seen]
    assert kinds.count("progress") == 2
    assert "add_loaded" in kinds
    assert "images" in kinds
    assert {t for _, t in seen} == {gui}  # everything that reached the session or the views: GUI thread


def test_what_would_change_the_inputs_waits_for_the_loading(window, qtbot, tmp_path, monkeypatch):
    slow = SlowDecoder(monkeypatch)
    files = _pngs(tmp_path, ["a.png", "slow.png"])
    messages = []
    window.model.session.events.message.connect(messages.append)
    assert window.load_paths(files)
    qtbot.waitUntil(slow.entered.is_set, timeout=WAIT_MS)
    refused = {"another loading": window.load_paths(_pngs(tmp_path, ["c.png"])),
               "Start": window.start_run(),
               "a demo": window.load_demo("shapes"),
               "a project": window.projects.open_project(str(tmp_path / "x.iaproj"))}
    assert refused == dict.fromkeys(refused, False)
    assert messages.count("Wait for the images to load, or cancel the loading.") == 4
    assert window.model.session.n == 0
    assert window.last_dialog is None
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        slow.release.set()
    assert [Path(p).name for p in window.model.session.data.paths] == ["a.png", "slow.png"]


def test_closing_while_loading_stops_it_and_leaves_no_thread(qtbot, tmp_path, monkeypatch):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    slow = SlowDecoder(monkeypatch)
    assert w.load_paths(_pngs(tmp_path, ["a.png", "slow.png", "c.png"]))
    qtbot.waitUntil(slow.entered.is_set, timeout=WAIT_MS)
    loaded = []
    w.model.imagesLoaded.connect(loaded.append)
    threading.Timer(0.2, slow.release.set).start()  # the decoder finishes while the window waits for it
    assert w.close()
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    QApplication.processEvents()  # the worker's last (queued) result arrives, and is dropped
    assert slow.names == ["a.png", "slow.png"]
    assert w.model.session.n == 0
    assert loaded == []


def test_a_loading_that_fails_as_a_whole_is_an_error_window_and_changes_nothing(window, qtbot, tmp_path,
                                                                                  monkeypatch):
    window.model.session.load_demo("shapes")

    def broken(paths):
        raise ValueError("the folder listing broke")

    monkeypatch.setattr(inputs_module, "image_files", broken)
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS) as loaded:
        assert window.load_paths([tmp_path])
    box = current_error_dialog()
    try:
        assert box is not None
        assert box.windowTitle() == "Loading the images failed"
        assert box.message == "the folder listing broke"
        assert "Traceback" in box.detailedText()
        assert loaded.args == [[]]
        assert not window.model.loading
        assert window.model.session.n == 18
        assert window.loading_dialog is None
    finally:
        if box is not None:
            box.close()
