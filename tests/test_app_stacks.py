"""Stacks in the app: a dropped .mrcs or STAR file, and the Add files dialog, give one image per particle."""
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import mrcfile  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402

import iastudio.app.main_window  # noqa: E402, F401 - imported first, so conftest answers the app's questions

WAIT_MS = 30000


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


def _particles(path, n=5):
    img = np.zeros((n, 20, 20), np.float32)
    for k in range(n):
        img[k, 5:12, 3 + k:10 + k] = 1.0
    with mrcfile.new(path) as m:
        m.set_data(img)
    return path


def test_a_dropped_stack_and_star_file_become_images_named_by_number(window, qtbot, tmp_path):
    starfile = pytest.importorskip("starfile")
    pd = pytest.importorskip("pandas")
    stack = _particles(tmp_path / "s.mrcs")
    starfile.write(pd.DataFrame({"rlnImageName": ["2@s.mrcs", "4@s.mrcs"]}), tmp_path / "p.star")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(stack)), QUrl.fromLocalFile(str(tmp_path / "p.star"))])
    event = QDropEvent(QPointF(10, 10), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        window.dropEvent(event)
    names = [Path(p).name for p in window.model.session.data.paths]
    assert names == ["s.mrcs#1", "s.mrcs#2", "s.mrcs#3", "s.mrcs#4", "s.mrcs#5", "s.mrcs#2", "s.mrcs#4"]
    assert window.images_panel.thumbs.rowCount() == 7
    assert "7 images" in window.images_panel.summary.text()


def test_add_files_offers_stacks_and_reads_them(window, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    stack = _particles(tmp_path / "s.mrcs", n=3)
    asked = []

    def fake_dialog(parent, title, folder, filters):
        asked.append(filters)
        return [str(stack)], filters.split(";;")[0]

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(fake_dialog))
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        window.add_files()
    first = asked[0].split(";;")[0]
    assert all(f"*.{ext}" in first for ext in ("mrcs", "mrc", "star", "npy", "tif", "png"))
    assert [Path(p).name for p in window.model.session.data.paths] == ["s.mrcs#1", "s.mrcs#2", "s.mrcs#3"]


def test_cluster_folders_name_each_stack_image_apart(tmp_path):
    from types import SimpleNamespace

    from iastudio.app.export import export_cluster_folders
    from iastudio.core.clusterbook import ClusterBook

    stack = _particles(tmp_path / "s.mrcs", n=3)
    session = SimpleNamespace(data=SimpleNamespace(paths=[f"{stack}#{k}" for k in (1, 2, 3)]), n=3,
                              book=ClusterBook.from_labels([0, 0, 1]), working=np.ones((3, 8, 8), np.float32))
    out = export_cluster_folders(session, tmp_path / "out", aligned=False)
    assert sorted(p.name for p in out.rglob("*.png")) == ["s_1.png", "s_2.png", "s_3.png"]


def test_a_star_file_whose_stack_is_missing_lists_its_images_in_one_skipped_line(window, qtbot, tmp_path):
    starfile = pytest.importorskip("starfile")
    pd = pytest.importorskip("pandas")
    _particles(tmp_path / "s.mrcs", n=3)
    names = ["1@s.mrcs", "2@s.mrcs", "3@s.mrcs", "9@s.mrcs"] + [f"{i}@gone.mrcs" for i in range(1, 501)]
    starfile.write(pd.DataFrame({"rlnImageName": names}), tmp_path / "p.star")
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        assert window.load_paths([tmp_path / "p.star"])
    assert window.model.session.n == 3
    lst = window.images_panel.skipped_list
    assert [lst.item(i).text() for i in range(lst.count())] == [
        "Skipped s.mrcs#9: no image 9 in the stack (it holds 3)",
        "Skipped gone.mrcs#1 to #500 (500 images): does not exist"]  # not 500 lines, one per particle
    assert lst.item(1).toolTip().startswith(str(tmp_path / "gone.mrcs#1"))
    window.show_skipped()
    box = window.last_dialog
    assert box.text() == "501 skipped (files, or images of a stack or STAR file)."
    assert box.detailedText().splitlines()[1] == f"{tmp_path / 'gone.mrcs'}#1 to #500 (500 images): does not exist"
    box.close()
