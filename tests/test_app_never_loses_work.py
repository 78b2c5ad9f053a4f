"""The app never loses work: it asks before discarding a result or edits, saves changes on close, autosaves
after each edit and keeps the recovery lock until that autosave is written (issue M4, M5, M6)."""
import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402

from iastudio.app import model as model_module  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.project import load_project  # noqa: E402

RUN = dict(iterations=1, mean_steps=2)


def _finished_shapes_window(qtbot):
    """A shown window with a finished run on the shapes demo (24 px)."""
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.model.session.load_demo("shapes")
    w.run_panel.size.setValue(24)
    assert w.model.start(backend="numpy", **RUN)
    qtbot.waitUntil(lambda: w.model.session.state == "finished", timeout=60000)
    return w


@pytest.fixture
def edited(qtbot):
    """A window with a finished run on the shapes demo and one unsaved cluster edit."""
    w = _finished_shapes_window(qtbot)
    m = w.model
    assert m.session.merge_clusters([0, 1])
    assert m.session.dirty
    assert m.session.edits == ["Merge 2 clusters"]
    yield w
    w.projects.ask = lambda *a, **k: "discard"
    w.close()


def test_an_edited_clusters_mean_that_arrives_after_closing_is_dropped(qtbot, monkeypatch):
    """Closing the window while an edited cluster's mean is computed: the worker's result, queued to the
    GUI thread, arrives after the views are gone and is dropped (it used to reach the deleted thumbnails)."""
    gate = threading.Event()
    real = model_module.edited_cluster_means

    def held(*args, **kwargs):
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_module, "edited_cluster_means", held)
    w = _finished_shapes_window(qtbot)
    m = w.model
    assert m.session.merge_clusters([0, 1])
    assert m.means_worker is not None  # the merged cluster's mean is being computed
    delivered = []
    monkeypatch.setattr(m.session, "set_cluster_means", lambda *args: delivered.append(args))
    threading.Timer(0.3, gate.set).start()
    w.projects.ask = lambda *a, **k: "discard"
    assert w.close()  # waits for the worker's thread; its result is queued behind this
    qtbot.wait(300)
    assert m.means_worker is None  # the result did arrive ...
    assert delivered == []  # ... and was dropped


def test_start_again_asks_and_cancel_keeps_the_result_and_edits(edited, asked):
    w, m = edited, edited.model
    final, book = m.session.final, m.session.book
    asked.answer = "cancel"
    assert w.start_run() is False
    assert asked
    assert "Starting again discards the result of the last run and 1 cluster edit" in asked[-1][1]
    assert m.session.final is final
    assert m.session.book == book
    assert m.session.state == "finished"


def test_loading_a_demo_or_dropping_files_asks_first(edited, asked, tmp_path, qtbot):
    w, m = edited, edited.model
    asked.answer = "cancel"
    w.images_panel.demoChosen.emit("digits")
    assert m.session.n == 18
    assert m.session.final is not None
    assert len(asked) == 1
    for i in range(2):
        Image.fromarray(np.full((12, 12), 40 * (i + 1), np.uint8)).save(tmp_path / f"new{i}.png")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path))])
    w.dropEvent(QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                           Qt.KeyboardModifier.NoModifier))
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)  # read first, then asked: images were found
    assert len(asked) == 2
    assert asked[-1][1].startswith("Adding images discards")
    # Cancel kept everything
    assert m.session.n == 18
    assert m.session.final is not None
    assert m.session.edits == ["Merge 2 clusters"]
    asked.answer = "discard"
    w.images_panel.demoChosen.emit("digits")
    assert m.session.n == 40
    assert m.session.final is None
    assert m.session.book is None


def test_nothing_is_asked_when_the_work_is_saved(edited, asked, tmp_path):
    w, m = edited, edited.model
    assert w.projects.save_to(str(tmp_path / "kept.iaproj"))
    w.images_panel.demoChosen.emit("digits")
    assert asked == []
    assert m.session.n == 40


def test_close_asks_to_save_changes_and_cancel_keeps_the_window(edited, asked, tmp_path):
    w, m = edited, edited.model
    asked.answer = "cancel"
    assert not w.close()
    assert w.isVisible()
    assert asked[-1][0] == "Save changes?"
    assert m.session.edits == ["Merge 2 clusters"]
    path = tmp_path / "mine.iaproj"
    assert w.projects.save_to(str(path))
    assert m.session.move_images([0], m.session.book.cluster_ids()[-1])
    asked.answer = "save"  # Save writes the project's own file, then the window closes
    assert w.close()
    assert load_project(path).edits == m.session.edits
    assert len(m.session.edits) == 2


def test_each_edit_is_autosaved_and_the_lock_outlives_the_closing_autosave(edited, qtbot, monkeypatch):
    w, m = edited, edited.model
    auto = w.projects.autosave_path()
    qtbot.waitUntil(lambda: auto.exists() and load_project(auto).edits == ["Merge 2 clusters"], timeout=30000)
    assert m.session.rename_cluster(m.session.book.cluster_ids()[0], "round ones")
    qtbot.waitUntil(lambda: len(load_project(auto).edits) == 2, timeout=30000)
    lock = w.projects.lock
    seen = []
    real = m.session.autosave

    def autosave(path):
        seen.append(lock.exists())  # the lock must still be there while the closing autosave is written
        return real(path)

    monkeypatch.setattr(m.session, "autosave", autosave)
    assert m.session.undo()
    w.projects.ask = lambda *a, **k: "discard"
    assert w.close()
    assert seen
    assert seen[-1] is True
    assert not lock.exists()
    assert load_project(auto).edits == ["Merge 2 clusters"]  # the state at closing, undo included


def test_the_working_size_cannot_change_during_a_run(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    m = w.model
    m.session.load_demo("digits")
    w.run_panel.size.setValue(40)
    assert m.start(backend="numpy", iterations=3)
    assert m.session.state == "running"
    w.run_panel.size.setValue(28)  # M6: transforms of one canvas applied to images of another
    assert m.session.size == 40
    assert w.run_panel.size.value() == 40
    m.stop()
    qtbot.waitUntil(lambda: m.session.state in ("stopped", "finished"), timeout=60000)
    w.projects.ask = lambda *a, **k: "discard"
    w.close()


def test_opening_a_folder_keeps_the_clusters_setting(qtbot, tmp_path):
    """The Clusters field used to drop to 1 on opening a folder (the set was emptied first)."""
    import numpy as np
    from PIL import Image

    img = np.zeros((24, 24), np.uint8)
    img[6:18, 8:14] = 255
    for k in range(5):
        Image.fromarray(np.roll(img, k, axis=1)).save(tmp_path / f"{k}.png")
    w = MainWindow()
    qtbot.addWidget(w)
    w.model.session.load_demo("shapes")
    w.run_panel.clusters.setValue(3)
    with qtbot.waitSignal(w.model.imagesLoaded, timeout=30000):
        w.open_folder(str(tmp_path))
    assert w.model.session.n == 5
    assert w.run_panel.clusters.value() == 3
    assert w.projects.recent("recent/folders")[0] == str(tmp_path)
