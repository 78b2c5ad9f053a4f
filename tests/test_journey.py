"""A user's journey through the real window, driven by key and mouse events (issue #29).

Open a folder, run, move / rename / undo, export, save, quit, reopen; each of the four ways the window
used to lose work (Save over another project, the size field per keystroke, an Add that holds no image,
Show me twice); and the window at 1024×700 — asserting what is drawn and what is on disk, and saving a
screenshot at each step.

Where ``xvfb-run`` is installed and the tests run offscreen, the journey runs again in a child process
in a **real X window** under Xvfb (Qt's ``xcb`` platform); CI installs Xvfb, so there it always does.
Screenshots go to ``$IA_ARTIFACTS/journey`` (default: the test's temporary folder).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog, QInputDialog  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.project import load_project  # noqa: E402

CHILD = "IA_JOURNEY_CHILD"


def _artifacts(tmp_path) -> Path:
    root = os.environ.get("IA_ARTIFACTS")
    folder = Path(root) / "journey" if root else tmp_path / "journey"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _shot(window, folder: Path, name: str) -> Path:
    QApplication.processEvents()
    path = folder / f"{name}.png"
    assert window.grab().save(str(path)), path
    img = np.asarray(Image.open(path).convert("L"), float)
    assert img.std() > 5, f"{name}: the window drew nothing"  # not a blank grab
    return path


def _make_folder(root: Path) -> Path:
    """Nine PNGs: three shapes, each three times, turned (what a user would bring)."""
    from skimage.draw import disk, polygon
    from skimage.transform import rotate

    root.mkdir()
    for kind, angles in (("square", (0, 30, 75)), ("triangle", (10, 100, 200)), ("bar", (0, 60, 140))):
        for j, a in enumerate(angles):
            img = np.zeros((48, 48))
            if kind == "square":
                img[14:34, 14:34] = 1
            elif kind == "triangle":
                img[polygon([10, 38, 38], [24, 8, 40], img.shape)] = 1
            else:
                img[20:28, 6:42] = 1
                img[disk((24, 40), 6, shape=img.shape)] = 1
            Image.fromarray((255 * rotate(img, a, order=1)).astype(np.uint8)).save(root / f"{kind}_{j}.png")
    return root


def _click(widget):
    QTest.mouseClick(widget, Qt.MouseButton.LeftButton, pos=widget.rect().center())


def _keys(qtbot, window, key, modifier=Qt.KeyboardModifier.ControlModifier):
    """A shortcut typed into the window (it must be the active window for Qt to route it)."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=10000)
    QTest.keyClick(window, key, modifier)


# three real runs (one of the folder, two of "Show me"): 64-66 s in the fast gate on a loaded 2-core CPU, so
# it runs with the slow tests (and again in a real X window, below, where xvfb-run is installed)
@pytest.mark.slow
def test_a_users_journey(qtbot, home, tmp_path, monkeypatch, asked):
    shots = _artifacts(tmp_path)
    folder = _make_folder(tmp_path / "shapes")
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    m, rp = w.model, w.run_panel
    (shots / "platform.txt").write_text(QApplication.platformName())
    _shot(w, shots, "01-empty")

    # open a folder with the button
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    _click(w.images_panel.open_btn)
    qtbot.waitUntil(lambda: not m.loading and m.session.n == 9, timeout=60000)
    assert "9 images" in w.images_panel.summary.text()

    # the working size, typed as people type: nothing happens until Enter
    rp.size.setFocus()
    rp.size.lineEdit().selectAll()
    QTest.keyClicks(rp.size.lineEdit(), "32")
    assert m.session.size == 64
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Return)
    assert m.session.size == 32
    assert m.session.working.shape[1:] == (32, 32)

    # run with Ctrl+R
    rp.iterations.setValue(1)
    _keys(qtbot, w, Qt.Key.Key_R)
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=180000)
    w.redraw()
    assert m.session.book is not None
    assert len(m.session.book.cluster_ids()) == 3
    assert not w.weights_view.empty
    assert w.weights_view.image_item.image.shape == (9, 9)
    _shot(w, shots, "02-finished")

    # move one image, rename its cluster, undo the move with Ctrl+Z
    book = m.session.book
    target = book.cluster_ids()[1]
    moved = int(np.flatnonzero(np.asarray(book.labels) != target)[0])
    w.clusters_panel.list.imagesDropped.emit([moved], target)  # what dropping its thumbnail on the bin emits
    assert m.session.book.labels[moved] == target
    assert m.session.dirty
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("triangles", True))
    w.clusters_panel.list.setCurrentRow(0)
    _click(w.clusters_panel.rename_btn)
    assert "triangles" in m.session.book.names.values()
    _keys(qtbot, w, Qt.Key.Key_Z)  # undo the rename
    _keys(qtbot, w, Qt.Key.Key_Z)  # and the move
    assert m.session.book.labels[moved] == book.labels[moved]
    _shot(w, shots, "03-edited")

    # export the assignments (Ctrl+E)
    csv = tmp_path / "assignments.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(csv), ""))
    _keys(qtbot, w, Qt.Key.Key_E)
    qtbot.waitUntil(csv.exists, timeout=30000)
    assert len(csv.read_text().strip().splitlines()) == 10  # a header and one row per image

    # save (Ctrl+S asks for a file: the session has none yet)
    project = tmp_path / "mine.iaproj"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(project), ""))
    _keys(qtbot, w, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: project.exists() and not m.session.dirty, timeout=30000)
    saved = project.read_bytes()
    assert w.windowTitle().endswith("mine.iaproj")

    # major 3: Add files → a text file: nothing changes, nothing asked
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(notes)], ""))
    final = m.session.final
    _click(w.images_panel.add_btn)
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)
    assert m.session.final is final
    assert not m.session.dirty
    assert asked == []

    # major 1 and 4: Show me twice; the demo is untitled, Save asks for a new file, mine.iaproj is untouched
    captions = []
    for _ in range(2):
        w.show_me_action.trigger()
        qtbot.waitUntil(lambda: m.session.state == "finished", timeout=180000)
        qtbot.waitUntil(lambda: "ARI" in w.compare_view.caption.text(), timeout=30000)
        captions.append(w.compare_view.caption.text())
        assert m.session.project_path is None
        assert "untitled" in w.windowTitle()
    assert captions[0] == captions[1]
    assert "IA ARI 1.00" in captions[0]
    _shot(w, shots, "04-show-me")
    other = tmp_path / "demo.iaproj"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(other), ""))
    _keys(qtbot, w, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: other.exists() and not w.projects.writing, timeout=30000)
    assert project.read_bytes() == saved

    # a small window: every view keeps a usable size
    w.resize(1024, 700)
    qtbot.wait(200)
    w.redraw()
    for view in (w.weights_view, w.means_view):
        assert view.height() >= 150, view
        assert view.width() >= 200, view
    assert w.run_panel.progress.visibleRegion().boundingRect().height() >= w.run_panel.progress.height() - 1
    _shot(w, shots, "05-small-window")

    # quit, and reopen the project in a new window: the same clusters come back
    assert w.close()
    labels = load_project(project).clusters.labels
    w2 = MainWindow()
    qtbot.addWidget(w2)
    w2.show()
    assert w2.projects.open_project(str(project))
    assert list(w2.model.session.book.labels) == list(labels)
    assert w2.model.session.n == 9
    w2.redraw()
    assert not w2.weights_view.empty
    _shot(w2, shots, "06-reopened")
    w2.close()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(CHILD) == "1" or os.environ.get("QT_QPA_PLATFORM") != "offscreen"
                    or shutil.which("xvfb-run") is None,
                    reason="runs the journey in a real X window: needs xvfb-run (apt-get install xvfb xauth)")
def test_the_journey_in_a_real_x_window(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", **{CHILD: "1"})
    env.setdefault("IA_ARTIFACTS", str(tmp_path))
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", sys.executable, "-m", "pytest", "-q", "-x",
           "-p", "no:cacheprovider", "-m", "", f"{Path(__file__)}::test_a_users_journey"]  # -m "": whatever its marks
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[1])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "1 passed" in p.stdout
    shots = sorted((Path(env["IA_ARTIFACTS"]) / "journey").glob("*.png"))
    assert len(shots) >= 6
    assert (Path(env["IA_ARTIFACTS"]) / "journey" / "platform.txt").read_text() == "xcb"  # a real X window
