"""Issue #29: the four ways the window lost work or showed the wrong thing (pytest-qt, real key events).

1. a new set (demo, Show me, another folder) is untitled: Save never overwrites the project it replaced;
2. the working size applies once typing is finished ("96" is never 9 first);
3. adding files that hold no image changes nothing (and the question comes only when images are found);
4. Demo → Show me gives the same picture every time and puts the user's settings back; paper mode is
   saved with a project and is never shown next to "β auto".
"""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QFileDialog  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.panels import PAPER_BETA  # noqa: E402
from iastudio.app.projects import start_folder  # noqa: E402
from iastudio.core.demos import PAPER_DEMO  # noqa: E402

RUN = dict(iterations=1, mean_steps=2)


@pytest.fixture
def win(qtbot, home):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    yield w
    w.projects.ask = lambda *a, **k: "discard"
    w.model.stop()
    w.model.shutdown(5000)


def _run(w, qtbot, **options):
    m = w.model
    assert m.start(backend="numpy", **(RUN | options))
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=120000)


def _saved_project(w, qtbot, path):
    """The shapes demo at 24 px, run, saved to ``path`` (the window's project, clean)."""
    w.model.session.load_demo("shapes")
    w.model.session.set_size(24)
    _run(w, qtbot)
    assert w.projects.save_to(str(path))
    assert w.model.session.project_path == str(path)
    assert not w.model.session.dirty
    return path.read_bytes()


def _title(w) -> str:
    return w.windowTitle().split("—")[-1].strip()


# ------------------------------------------------------------------ 1. Save never overwrites another project
# "show me" runs the whole demo (with its KA comparison): 15-27 s in the fast gate on a loaded 2-core CPU,
# so it runs with the slow tests
@pytest.mark.parametrize("how", ["demo", "folder", pytest.param("show me", marks=pytest.mark.slow)])
def test_a_new_set_is_untitled_and_save_asks_for_a_file(win, qtbot, tmp_path, monkeypatch, how):
    project = tmp_path / "P.iaproj"
    before = _saved_project(win, qtbot, project)
    assert _title(win) == "P.iaproj"
    m = win.model
    if how == "demo":
        win.images_panel.demoChosen.emit("digits")
    elif how == "folder":
        folder = tmp_path / "other"
        folder.mkdir()
        for i in range(3):
            Image.fromarray(np.full((10, 10), 60 * (i + 1), np.uint8)).save(folder / f"o{i}.png")
        win.open_folder(str(folder))
        qtbot.waitUntil(lambda: not m.loading and m.session.n == 3, timeout=30000)
    else:
        win.show_me_action.trigger()
        qtbot.waitUntil(lambda: m.session.state == "finished", timeout=180000)
    assert m.session.project_path is None
    assert _title(win).startswith("untitled")
    chosen = tmp_path / "new.iaproj"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(chosen), ""))
    QTest.keyClick(win, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)  # Ctrl+S: asks for a file ...
    qtbot.waitUntil(lambda: chosen.exists() and not win.projects.writing, timeout=30000)
    assert project.read_bytes() == before  # ... and P is untouched
    assert m.session.project_path == str(chosen)


def test_adding_images_to_a_project_keeps_it_the_projects(win, qtbot, tmp_path):
    project = tmp_path / "P.iaproj"
    _saved_project(win, qtbot, project)
    extra = tmp_path / "extra.png"
    Image.fromarray(np.full((10, 10), 90, np.uint8)).save(extra)
    assert win.load_paths([str(extra)])
    qtbot.waitUntil(lambda: not win.model.loading, timeout=30000)
    # the same project, grown by one
    assert win.model.session.n == 19
    assert win.model.session.project_path == str(project)


def test_changing_a_saved_projects_inputs_asks_before_its_result_goes_from_the_window(win, qtbot, tmp_path, asked):
    project = tmp_path / "séance.iaproj"
    saved = _saved_project(win, qtbot, project)
    m, size = win.model, win.run_panel.size
    final = m.session.final
    asked.answer = "cancel"
    _type_into(size, "32")
    QTest.keyClick(size.lineEdit(), Qt.Key.Key_Return)
    assert len(asked) == 1
    title, text = asked[0]
    assert title == "Discard the result?"
    assert "séance.iaproj keeps it as saved" in text
    assert "working size" in text
    assert m.session.final is final  # Cancel: the result is still there ...
    assert m.session.size == 24
    assert size.value() == 24  # ... and the field shows the size in use
    assert not m.session.dirty
    asked.answer = "discard"
    win.transform_panel.reset.emit()
    assert len(asked) == 2
    assert asked[1][1].startswith("Resetting the transforms discards the result of the last run")
    assert m.session.final is None  # agreed to
    assert project.read_bytes() == saved  # the file keeps it until saved over
    win.start_run()  # a new run of the project's images is what the user asked for: no question
    assert len(asked) == 2
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=120000)


def test_a_run_stopped_on_a_saved_project_is_unsaved_work_not_the_files(win, qtbot, tmp_path, asked):
    project = tmp_path / "P.iaproj"
    _saved_project(win, qtbot, project)
    m = win.model
    assert win.start_run()
    m.stop()
    qtbot.waitUntil(lambda: m.session.state in ("stopped", "finished"), timeout=120000)
    assert m.session.dirty  # the window no longer shows what the file holds
    asked.answer = "cancel"
    win.transform_panel.reset.emit()
    assert asked[-1][0] == "Discard your work?"  # Save… offered, not "the file keeps it"
    assert "Save the project first?" in asked[-1][1]


# ------------------------------------------------------------------ 2. the size field
def _type_into(spin, text):
    spin.setFocus()
    spin.lineEdit().selectAll()
    QTest.keyClicks(spin.lineEdit(), text)


def test_the_working_size_applies_once_typing_is_finished(win, qtbot, asked):
    m, size = win.model, win.run_panel.size
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    final = m.session.final
    _type_into(size, "96")
    assert asked == []
    assert m.session.size == 24
    assert m.session.final is final
    asked.answer = "cancel"
    QTest.keyClick(size.lineEdit(), Qt.Key.Key_Return)
    assert len(asked) == 1
    assert "working size" in asked[0][1]
    assert m.session.size == 24
    assert m.session.final is final
    assert size.value() == 24
    asked.answer = "discard"
    _type_into(size, "128")
    QTest.keyClick(size.lineEdit(), Qt.Key.Key_Return)
    assert len(asked) == 2
    assert m.session.size == 128
    assert m.session.working.shape[1:] == (128, 128)
    assert m.session.final is None  # the run on the 24 px images was discarded, as agreed


def test_a_typed_number_out_of_range_is_refused_out_loud(win, qtbot, asked):
    """Qt keeps the old size (under the range) or drops the key (over it) without a word; the window says why."""
    m, rp = win.model, win.run_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _type_into(rp.size, "4")
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    said = "Working size: 4 px is less than 8 px, the least it can be; it stays 24 px"
    assert win.statusBar().currentMessage() == said
    assert m.session.size == 24
    assert rp.size.value() == 24
    assert asked == []
    step = rp.angle_step.value()
    _type_into(rp.angle_step, "90")  # Qt alone would drop the "0" (90 is over 45) and apply 9
    assert rp.angle_step.text() == "90 °"
    QTest.keyClick(rp.angle_step.lineEdit(), Qt.Key.Key_Return)
    assert rp.angle_step.value() == step
    assert win.statusBar().currentMessage() == (f"Angle step: 90.00 ° is more than 45.00 °, the most it "
                                                f"can be; it stays {step:.2f} °")
    _type_into(rp.size, "1000")  # not 100, which Tab would then apply
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert m.session.size == 24
    assert rp.size.value() == 24
    assert win.statusBar().currentMessage().startswith("Working size: 1000 px is more than 512 px")
    _type_into(rp.iterations, "12")  # in range: nothing said
    QTest.keyClick(rp.iterations.lineEdit(), Qt.Key.Key_Return)
    assert rp.iterations.value() == 12
    assert win.statusBar().currentMessage().startswith("Working size: 1000")  # nothing new said


def test_a_k_typed_and_left_says_it_is_not_read_yet(win, qtbot):
    """Tab out of Clusters k left "5" beside 3 clusters with nothing said; now the tab says to press Re-read."""
    m, cp = win.model, win.clusters_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot, clusters=3)
    book, usual = m.session.book, cp.hint.text()
    cp.k_auto.setChecked(False)
    assert not cp.k_apply.font().bold()
    _type_into(cp.k, "5")
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Tab)
    assert m.session.book is book  # leaving the field reads nothing
    assert cp.hint.text() == "Press Re-read to show 5 clusters (3 shown now)."
    assert cp.k_apply.font().bold()
    cp.k_auto.setChecked(True)  # auto: Re-read would choose, nothing typed is pending
    assert cp.hint.text() == usual
    assert not cp.k_apply.font().bold()
    cp.k_auto.setChecked(False)
    assert cp.pending_k() == 5
    _type_into(cp.k, "3")  # back to what is shown
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Tab)
    assert cp.hint.text() == usual
    _type_into(cp.k, "2")
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Return)  # read: the cue goes
    assert len(m.session.book.cluster_ids()) == 2
    assert cp.hint.text() == usual
    assert not cp.k_apply.font().bold()


def test_an_unsure_runs_other_counts_are_one_click_away(win, qtbot):
    """"unsure: 2 or 4 also plausible" meant typing 2 into Clusters k and pressing Re-read; now each is a link."""
    from dataclasses import replace

    from iastudio.core.clustering import KChoice

    m, cp = win.model, win.clusters_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot, clusters=3)
    usual = cp.hint.text()
    result = m.session.final.result
    assert not result.k_choice.unsure
    assert cp.other_counts() == []  # a sure run offers nothing
    unsure = replace(result, k_choice=KChoice(3, 2, 0.1, "silhouette", [(3, 0.30), (4, 0.29), (2, 0.28)]))
    cp.show_evidence(unsure, m.session.data.paths)
    assert cp.evidence.text().startswith("Run: 3 clusters \u2014 unsure: 2 or 4 also plausible")
    assert cp.other_counts() == [2, 4]
    assert '<a href="k:2">2 clusters</a>' in cp.hint.text()
    assert '<a href="k:4">4 clusters</a>' in cp.hint.text()
    cp.hint.linkActivated.emit("k:2")  # what a click on "2 clusters" sends
    assert len(m.session.book.cluster_ids()) == 2
    assert win.statusBar().currentMessage() == "Re-read clusters with k = 2 (2 clusters now)"
    assert cp.other_counts() == [3, 4]  # the run's own count is offered back
    assert '<a href="k:3">3 clusters</a>' in cp.hint.text()
    assert m.session.undo()
    assert cp.other_counts() == [2, 4]
    assert cp.hint.focusPolicy() == Qt.FocusPolicy.TabFocus  # the links from the keyboard too
    cp.hint.setFocus()
    QTest.keyClick(cp.hint, Qt.Key.Key_Tab)  # onto the first link
    QTest.keyClick(cp.hint, Qt.Key.Key_Return)
    assert len(m.session.book.cluster_ids()) == 2
    assert m.session.undo()
    cp.k_auto.setChecked(False)
    _type_into(cp.k, "5")  # a typed k waiting for Re-read says so first
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Tab)
    assert cp.hint.text() == "Press Re-read to show 5 clusters (3 shown now)."
    cp.show_evidence(None)  # the run discarded: nothing offered
    cp.k.setValue(3)
    assert cp.hint.text() == usual
    assert cp.hint.focusPolicy() == Qt.FocusPolicy.NoFocus


def test_the_clusters_tab_fields_refuse_out_loud_and_enter_does_what_the_button_does(win, qtbot, asked):
    """Re-read k above the number of images was read as n, silently; Enter did nothing."""
    m, cp = win.model, win.clusters_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot, clusters=3)
    n, book = m.session.n, m.session.book
    assert cp.k.maximum() == n
    cp.k_auto.setChecked(False)
    _type_into(cp.k, "500")
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage() == f"Clusters k: 500 is more than {n}, the most it can be; it stays 3"
    assert m.session.book is book  # not re-read with the old k either
    _type_into(cp.k, "2")
    QTest.keyClick(cp.k.lineEdit(), Qt.Key.Key_Return)
    assert len(m.session.book.cluster_ids()) == 2
    assert win.statusBar().currentMessage() == "Re-read clusters with k = 2 (2 clusters now)"
    book = m.session.book
    _type_into(cp.threshold, "5")
    QTest.keyClick(cp.threshold.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage() == ("Distance threshold: 5.000 is more than 2.000, the most it can "
                                                "be; it stays 0.300")
    assert m.session.book is book
    cp.list.item(0).setSelected(True)
    _type_into(cp.split_k, "60")
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage() == "Split k: 60 is more than 50, the most it can be; it stays 2"
    assert m.session.book is book
    _type_into(cp.split_k, "")  # emptied, then Enter: nothing is split with the old k
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Delete)
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Return)
    assert m.session.book is book
    assert cp.split_k.value() == 2
    _type_into(cp.split_k, "2")
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Return)
    assert len(m.session.book.cluster_ids()) == 3
    assert win.statusBar().currentMessage().endswith("into 2 (3 clusters now)")
    assert asked == []


def test_what_qt_would_misread_silently_is_refused_or_read_as_meant(win, qtbot, asked):
    """The trial: "1e3" became 13, "-5" became 5, "0,5" became 5, "abc" was dropped, all without a word."""
    m, rp = win.model, win.run_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    its = rp.iterations.value()
    for typed, key, said in (
            ("abc", Qt.Key.Key_Tab, f"Iterations: \u201cabc\u201d is not a whole number; it stays {its}"),
            ("-5", Qt.Key.Key_Return, f"Iterations: -5 is less than 1, the least it can be; it stays {its}"),
            ("2.5", Qt.Key.Key_Return, f"Iterations: 2.5 is not a whole number; it stays {its}")):
        _type_into(rp.iterations, typed)
        assert rp.iterations.lineEdit().text() == typed  # kept as typed until Enter or Tab
        QTest.keyClick(rp.iterations.lineEdit(), key)
        assert win.statusBar().currentMessage() == said
        assert rp.iterations.value() == its
        assert rp.iterations.text() == str(its)
    _type_into(rp.size, "1e3")  # not 13
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage() == ("Working size: 1000 px is more than 512 px, the most it can be; "
                                                "it stays 24 px")
    assert m.session.size == 24
    _type_into(rp.size, "4e1")  # a number in range, however written
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert m.session.size == 40
    _type_into(rp.angle_step, "0,5")  # a decimal comma: 0.5, not 5
    QTest.keyClick(rp.angle_step.lineEdit(), Qt.Key.Key_Return)
    assert rp.angle_step.value() == pytest.approx(0.5)
    _type_into(rp.iterations, "99999999999")  # past what Qt's int holds: refused, not a crash
    QTest.keyClick(rp.iterations.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage().startswith("Iterations: 99999999999 is more than")
    assert rp.iterations.value() == its
    tp = win.transform_panel  # the Transforms tab's fields too
    m.session.select([2])
    _type_into(tp.theta, "400")  # Qt alone would drop the last "0" and turn the image by 40
    QTest.keyClick(tp.theta.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage() == ("\u03b8: 400.0 \u00b0 is more than 180.0 \u00b0, the most it can be; "
                                                "it stays 0.0 \u00b0")
    assert not m.session.transforms.any()
    _type_into(tp.tx, "-2,5")
    QTest.keyClick(tp.tx.lineEdit(), Qt.Key.Key_Return)
    assert_allclose(m.session.transforms[2], [0.0, -2.5, 0.0])
    _type_into(tp.ty, "1.26")  # more decimals than it shows: the value is what it shows
    QTest.keyClick(tp.ty.lineEdit(), Qt.Key.Key_Return)
    assert tp.ty.text() == "1.3 px"
    assert_allclose(m.session.transforms[2], [0.0, -2.5, 1.3])
    assert asked == []


def _type_number_only(spin, text):
    """Ctrl+A in a spin box selects the number only (not its unit), then ``text`` is typed over it."""
    spin.setFocus()
    QTest.keyClick(spin, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(spin.lineEdit(), text)


def test_a_unit_typed_after_the_number_is_the_fields_own(win, qtbot, asked):
    """The trial: Ctrl+A, "32 px", Enter showed "32 px px" and was refused ("“32 px” is not a whole number")."""
    m, rp, tp = win.model, win.run_panel, win.transform_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    for typed, size in (("32 px", 32), ("40px", 40), ("48 PX", 48)):
        _type_number_only(rp.size, typed)
        assert rp.size.lineEdit().text() == f"{typed} px"
        QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Return)
        assert m.session.size == size
        assert rp.size.text() == f"{size} px"
        assert "not a whole number" not in win.statusBar().currentMessage()
    _type_into(rp.size, "56px")  # the whole text replaced: the unit typed once
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert m.session.size == 56
    _type_number_only(rp.angle_step, "2,5°")
    QTest.keyClick(rp.angle_step.lineEdit(), Qt.Key.Key_Return)
    assert rp.angle_step.value() == pytest.approx(2.5)
    _type_number_only(tp.shift, "20 %")
    QTest.keyClick(tp.shift.lineEdit(), Qt.Key.Key_Return)
    assert tp.shift.value() == pytest.approx(20)
    _type_number_only(rp.size, "32 cm")  # another unit is not the field's: refused, and said so
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage() == "Working size: “32 cm” is not a whole number; it stays 56 px"
    assert m.session.size == 56
    assert asked == []


def test_a_refusal_leaves_the_status_bar_once_the_field_takes_a_number(win, qtbot, asked):
    """The trial: after "Working size: … it stays 40 px", typing 56 + Tab took 56 and the refusal stayed."""
    m, rp = win.model, win.run_panel
    m.session.load_demo("shapes")
    m.session.set_size(40)
    _type_into(rp.size, "4")
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage().startswith("Working size: 4 px is less than 8 px")
    rp.size.setFocus()  # only coming back to the field and leaving it again: the refusal still holds
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage().startswith("Working size: 4 px is less than 8 px")
    _type_into(rp.iterations, "0")  # another field's refusal ...
    QTest.keyClick(rp.iterations.lineEdit(), Qt.Key.Key_Return)
    _type_into(rp.size, "56")  # ... is not withdrawn by the working size taking a number
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Tab)
    assert m.session.size == 56
    assert win.statusBar().currentMessage().startswith("Iterations: 0 is less than 1")
    _type_into(rp.iterations, "3")
    QTest.keyClick(rp.iterations.lineEdit(), Qt.Key.Key_Return)
    assert rp.iterations.value() == 3
    assert "Iterations:" not in win.statusBar().currentMessage()
    _type_into(rp.size, "1000")
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Return)
    assert win.statusBar().currentMessage().startswith("Working size: 1000 px is more than")
    _type_into(rp.size, "64")
    QTest.keyClick(rp.size.lineEdit(), Qt.Key.Key_Return)
    assert m.session.size == 64
    assert "Working size:" not in win.statusBar().currentMessage()
    cp = win.clusters_panel  # the Transforms and Clusters tabs' fields too
    _type_into(cp.split_k, "60")
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage().startswith("Split k: 60 is more than 50")
    _type_into(cp.split_k, "3")
    QTest.keyClick(cp.split_k.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage() == ""
    tp = win.transform_panel
    _type_into(tp.seed, "-1")
    QTest.keyClick(tp.seed.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage().startswith("Seed: -1 is less than 0")
    _type_into(tp.seed, "7")
    QTest.keyClick(tp.seed.lineEdit(), Qt.Key.Key_Tab)
    assert win.statusBar().currentMessage() == ""
    assert asked == []


def test_rename_merge_and_split_from_the_keyboard(win, qtbot, asked, monkeypatch):
    """The trial: F2 did not rename a cluster; Rename, Merge and Split were only buttons."""
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QInputDialog

    m, cp = win.model, win.clusters_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot, clusters=3)
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("tops", True)))
    cp.list.setFocus()
    QTest.keyClick(cp.list, Qt.Key.Key_F2)
    assert win.statusBar().currentMessage() == "Select one cluster in the Clusters tab to rename it."
    cp.list.item(0).setSelected(True)
    QTest.keyClick(cp.list, Qt.Key.Key_F2)
    assert m.session.book.name_of(cp.selected_clusters()[0]) == "tops"
    split = next(a for a in win.findChildren(QAction) if a.shortcut().toString() == "Ctrl+K")
    assert split.text() == "Split the selected cluster (into the k= next to the Split button)"  # not Clusters k
    assert cp.split_k.prefix() == "k="
    assert cp.k.value() == 3
    QTest.keyClick(cp.list, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)  # into the split's k (2), not 3
    assert len(m.session.book.cluster_ids()) == 4
    assert "tops a" in m.session.book.names.values()
    cp.list.clearSelection()  # after the split both parts are highlighted (their images are the selection)
    for row in range(2):
        cp.list.item(row).setSelected(True)
    QTest.keyClick(win.images_panel.view, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)  # from anywhere
    assert len(m.session.book.cluster_ids()) == 3
    assert win.statusBar().currentMessage() == "Merge 2 clusters (3 clusters now)"
    assert m.session.edits == ["Rename Cluster 1 to tops", "Split tops into 2", "Merge 2 clusters"]


def test_the_run_settings_are_there_again_at_the_next_start(qtbot, home, asked):
    """The trial: 48 px set, quit, relaunched: back to 64 px."""
    from iastudio.app.demo import show_me
    from iastudio.app.projects import settings
    from iastudio.app.remember import RUN_SETTINGS_KEY

    settings().remove(RUN_SETTINGS_KEY)
    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    rp = first.run_panel
    rp.size.setValue(48)  # as typed and taken (the typing itself: the tests above)
    assert first.model.session.size == 48
    rp.iterations.setValue(7)
    rp.denoise.setCurrentIndex(rp.denoise.findData("off"))
    first.close()
    again = MainWindow()
    qtbot.addWidget(again)
    assert again.run_panel.size.value() == 48
    assert again.model.session.size == 48
    assert again.run_panel.iterations.value() == 7
    assert again.run_panel.denoise.currentData() == "off"
    again.model.start = lambda *a, **k: False  # Show me's demo, not run: its settings are on show
    assert not show_me(again)
    again.settings_before_demo = again.run_panel.settings_state() | {"iterations": 9}  # as while it runs
    again.size_after_demo = 40
    again.close()  # the user's own settings are remembered, not the demo's
    third = MainWindow()
    qtbot.addWidget(third)
    assert (third.model.session.size, third.run_panel.iterations.value()) == (40, 9)
    settings().setValue(RUN_SETTINGS_KEY, "{damaged")
    fourth = MainWindow()  # a damaged entry: the defaults
    qtbot.addWidget(fourth)
    assert fourth.model.session.size == 64
    settings().setValue(RUN_SETTINGS_KEY, '{"iterations": 10000000000, "size": 10000000000, "denoise": -7}')
    fifth = MainWindow()  # numbers out of range (past Qt's int): the field's own limits
    qtbot.addWidget(fifth)
    assert fifth.run_panel.iterations.value() == fifth.run_panel.iterations.maximum()
    assert fifth.model.session.size == 64
    assert fifth.run_panel.denoise.currentIndex() == 0
    fifth.close()
    settings().remove(RUN_SETTINGS_KEY)
    for w in (third, fourth):
        w.close()


def test_save_as_proposes_a_name_after_the_images_folder(win, qtbot, tmp_path, monkeypatch):
    """The trial: the Save dialog proposed "untitled.iaproj" for a folder of particles."""
    proposed = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda parent, title, path, *a, **k: (proposed.append(path), ("", ""))[1]))
    win.model.session.load_demo("shapes")
    start = start_folder(win.projects)
    assert not win.projects.save_as()
    folder = tmp_path / "my particles"
    folder.mkdir()
    for i in range(3):
        Image.fromarray((np.random.default_rng(i).random((20, 20)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
    assert win.load_paths([str(folder)], replace=True)
    qtbot.waitUntil(lambda: not win.model.loading and win.model.session.n == 3, timeout=30000)
    assert not win.projects.save_as()
    # a demo's name in the start folder (not the folder the app was started in); beside the images' folder
    assert proposed == [os.path.join(start, "demo shapes.iaproj"),
                        str(tmp_path / "my particles.iaproj")]


# ------------------------------------------------------------------ 3. Add files that hold no image
def test_adding_a_file_with_no_image_changes_nothing(win, qtbot, tmp_path, asked, monkeypatch):
    m = win.model
    _saved_project(win, qtbot, tmp_path / "P.iaproj")
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(notes)], ""))
    final, book = m.session.final, m.session.book
    win.images_panel.addFiles.emit()
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)
    assert m.session.final is final
    assert m.session.book is book
    assert not m.session.dirty
    assert asked == []
    assert "Nothing added" in win.statusBar().currentMessage()
    assert any(s["path"].endswith("notes.txt") for s in m.session.data.skipped)  # listed under "details"
    assert m.session.merge_clusters([0, 1])  # unsaved edits: still nothing asked, nothing lost
    win.images_panel.addFiles.emit()
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)
    assert asked == []
    assert m.session.edits == ["Merge 2 clusters"]
    assert m.session.final is final


def test_the_loading_dialog_is_gone_before_the_question_after_reading(win, qtbot, tmp_path, monkeypatch):
    """The trial: the reading dialog (97 %) stayed on top of "Discard your work?" and took its clicks."""
    from iastudio.app.projects import ProjectController

    m = win.model
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    folder = tmp_path / "more"
    folder.mkdir()
    for i in range(3):
        Image.fromarray((np.random.default_rng(i).random((20, 20)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
    seen = []

    def ask(parent, title, text, **_):
        shown = lambda: win.loading_dialog is not None and win.loading_dialog.isVisible()  # noqa: E731
        seen.append(shown())
        qtbot.wait(800)  # the user reads the question: the dialog's own 0.5 s timer must not show it now
        seen.append(shown())
        return "cancel"

    monkeypatch.setattr(ProjectController, "ask", staticmethod(ask))
    for slow in (True, False):  # shown already (a slow folder), or not yet (a fast one)
        seen.clear()
        assert win.load_paths([str(folder)], replace=True)
        if slow:
            win.loading_dialog.show()
        qtbot.waitUntil(lambda: not m.loading, timeout=30000)
        assert seen == [False, False]
    assert m.session.final is not None  # cancelled: the run is kept


def test_adding_real_images_asks_after_reading_and_cancel_keeps_the_edits(win, qtbot, tmp_path, asked):
    m = win.model
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    assert m.session.merge_clusters([0, 1])
    img = tmp_path / "one.png"
    Image.fromarray(np.full((10, 10), 90, np.uint8)).save(img)
    asked.answer = "cancel"
    assert win.load_paths([str(img)])
    assert asked == []  # not before reading
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)
    assert len(asked) == 1
    assert m.session.n == 18
    assert m.session.edits == ["Merge 2 clusters"]
    assert m.session.final is not None
    asked.answer = "discard"
    assert win.load_paths([str(img)])
    qtbot.waitUntil(lambda: not m.loading, timeout=30000)
    assert len(asked) == 2
    assert m.session.n == 19
    assert m.session.final is None


def test_removing_images_from_the_set_asks_first_and_delete_in_a_field_stays_there(win, qtbot, asked):
    from PySide6.QtCore import QItemSelectionModel

    from iastudio.app.context_menus import thumbnail_menu

    m, view = win.model, win.images_panel.view
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    assert m.session.merge_clusters([0, 1])
    paths = list(m.session.data.paths)
    for row in (0, 5):  # as a ctrl-click would
        view.selectionModel().select(view.model().index(row, 0), QItemSelectionModel.SelectionFlag.Select)
    assert m.session.selection == [0, 5]
    _type_into(win.run_panel.iterations, "7")  # Delete while typing in a field edits the field
    QTest.keyClick(win.run_panel.iterations.lineEdit(), Qt.Key.Key_Delete)
    assert m.session.n == 18
    assert asked == []
    view.setFocus()
    asked.answer = "cancel"
    QTest.keyClick(view, Qt.Key.Key_Delete)
    assert len(asked) == 1
    assert "Removing 2 images discards" in asked[0][1]
    assert m.session.n == 18
    assert m.session.edits == ["Merge 2 clusters"]
    asked.answer = "discard"
    QTest.keyClick(view, Qt.Key.Key_Delete)
    assert m.session.data.paths == [p for i, p in enumerate(paths) if i not in (0, 5)]
    assert m.session.final is None
    assert win.images_panel.thumbs.rowCount() == 16  # the gallery shows the smaller set
    assert win.statusBar().currentMessage().startswith("Removed 2 images from the set")
    remove = next(a for a in thumbnail_menu(win, [3]).actions() if a.text() == "Remove 1 image from the set")
    asked.answer = "cancel"
    remove.trigger()  # no run to lose now, but a removal cannot be undone: asked all the same
    assert asked[-1][0] == "Remove images?"
    assert m.session.n == 16
    asked.answer = "save"  # the question's "Remove" button
    remove.trigger()
    asked.answer = "discard"  # (closing the window at the end must not save)
    assert len(asked) == 4
    assert m.session.n == 15
    assert paths[4] not in m.session.data.paths
    assert win.statusBar().currentMessage() == "Removed 1 image from the set (004)"  # a demo's: no file


def test_delete_on_a_selected_cluster_removes_nothing(win, qtbot, asked):
    m, lst = win.model, win.clusters_panel.list
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    QTest.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, pos=lst.visualItemRect(lst.item(0)).center())
    qtbot.waitUntil(lambda: len(m.session.selection) > 0)  # a cluster clicked in its list selects its images
    QTest.keyClick(lst, Qt.Key.Key_Delete)
    assert asked == []
    assert m.session.n == 18
    assert m.session.final is not None


def test_replacing_a_project_with_unsaved_image_changes_asks_first(win, qtbot, tmp_path, asked):
    m = win.model
    _saved_project(win, qtbot, tmp_path / "P.iaproj")
    m.session.discard_run()  # no run, no edits: only the images changed below are at risk
    assert m.session.remove_images([0])
    assert m.session.dirty
    asked.answer = "cancel"
    assert not win.load_demo("digits")
    assert asked[-1][1] == "Loading the demo discards the changes to P.iaproj (not saved yet). Save the project first?"
    assert m.session.n == 17
    asked.answer = "discard"
    assert win.load_demo("digits")
    assert m.session.n != 17


# ------------------------------------------------------------------ 4. Show me, paper mode
def test_paper_mode_is_never_shown_next_to_beta_auto(win):
    rp = win.run_panel
    rp.paper_mode.setChecked(True)
    assert not rp.beta_auto.isChecked()
    assert rp.beta.value() == PAPER_BETA
    rp.set_options({"beta": "auto", "iterations": 3})  # an opened project's settings
    assert rp.beta_auto.isChecked()
    assert not rp.paper_mode.isChecked()
    rp.paper_mode.setChecked(True)
    rp.beta_auto.setChecked(True)  # clicked by the user
    assert not rp.paper_mode.isChecked()
    assert "preset" not in rp.options()


def _show_me(win, qtbot):
    m = win.model
    win.show_me_action.trigger()
    assert m.session.state == "running"
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=180000)
    qtbot.waitUntil(lambda: "ARI" in win.compare_view.caption.text(), timeout=30000)
    return m.session.final, len({f.snapshot.iteration for f in m.session.frames}), win.compare_view.caption.text()


@pytest.mark.slow
def test_show_me_is_the_same_every_time_and_puts_the_users_settings_back(win, qtbot, tmp_path):
    rp, m = win.run_panel, win.model
    rp.paper_mode.setChecked(True)  # left ticked ...
    rp.set_options({"beta": "auto"})  # ... when a project set β to auto (the case)
    rp.iterations.setValue(3)
    rp.angle_step.setValue(10)
    m.session.set_size(40)
    mine = rp.settings_state()
    first, iterations, caption = _show_me(win, qtbot)
    assert iterations >= 4
    assert "IA ARI 1.00" in caption
    assert rp.settings_state() == mine  # the user's settings are back ...
    # ... the demo set keeps its size
    assert m.session.size == PAPER_DEMO["size"]
    assert rp.size.value() == PAPER_DEMO["size"]
    second, iterations_again, caption_again = _show_me(win, qtbot)
    assert iterations_again == iterations
    assert caption_again == caption
    assert_allclose(second.snapshot.weights, first.snapshot.weights, atol=1e-6)
    assert rp.settings_state() == mine
    win.images_panel.demoChosen.emit("shapes")  # the next set is read at the user's own size again
    assert m.session.size == 40
    assert rp.size.value() == 40


def test_paper_mode_is_saved_and_restored_with_a_project(win, qtbot, tmp_path):
    rp, m = win.run_panel, win.model
    m.session.load_demo("shapes")
    m.session.set_size(24)
    rp.paper_mode.setChecked(True)
    rp.iterations.setValue(1)
    assert m.start(backend="numpy", mean_steps=2, **rp.options())
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=120000)
    path = tmp_path / "paper.iaproj"
    assert win.projects.save_to(str(path))
    rp.paper_mode.setChecked(False)
    assert rp.beta_auto.isChecked()
    assert win.projects.open_project(str(path))
    assert rp.paper_mode.isChecked()
    assert not rp.beta_auto.isChecked()
    assert rp.beta.value() == PAPER_BETA
    assert rp.iterations.value() == 1  # the project's own iterations, not paper mode's bound


# ------------------------------------------------------------------ minors
def test_an_edited_clusters_mean_is_recomputed_in_a_worker_not_averaged(win, qtbot):
    from iastudio.core.cluster_means import cluster_key

    m = win.model
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot, clusters=3)
    labels = np.asarray(m.session.book.labels)
    target = int(labels[0])
    moved = int(np.flatnonzero(labels != target)[0])
    m.session.move_images([moved], target)
    qtbot.waitUntil(lambda: m.means_worker is None and not m.session.missing_cluster_means(), timeout=60000)
    joined = cluster_key(np.flatnonzero(np.asarray(m.session.book.labels) == target))
    shown = win.sync.with_book(m.session.final)
    row = shown.cluster_ids.index(target)
    assert_allclose(shown.cluster_means[row], m.session.cluster_means[joined])  # what the views draw


def test_views_never_show_stale_text(win, qtbot):
    m, rp = win.model, win.run_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    win.weights_view.hover.setText("i=1, j=2 of the old set")
    m.session.select([0])
    assert "Image:" in win.transform_panel.image_label.text()
    assert win.clusters_panel.evidence.text().startswith("Run:")
    win.images_panel.demoChosen.emit("digits")  # another set
    assert win.weights_view.hover.text().startswith("Hover over W")
    assert win.transform_panel.image_label.text().startswith("Select a thumbnail")
    assert win.transform_panel.preview.pixmap().isNull()
    assert win.clusters_panel.evidence.text() == ""
    assert rp.progress.value() == 0
    assert "idle" in rp.progress.format()
    assert m.start(backend="numpy", iterations=1, mean_steps=2)
    win.redraw()
    assert "Open a folder" not in win.weights_view.hint.text()  # says what is being computed
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=120000)
    assert rp.progress.format() == "done"


def test_a_recovered_session_is_its_projects_with_its_settings(win, qtbot, tmp_path, home, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    project = tmp_path / "P.iaproj"
    _saved_project(win, qtbot, project)
    win.run_panel.iterations.setValue(5)
    win.run_panel.angle_step.setValue(10)
    win.means_view.per_cluster.setChecked(True)
    assert win.model.session.merge_clusters([0, 1])  # unsaved work, then the app "crashes"
    assert win.projects.autosave(wait=True)
    (home / "session.lock").write_text("4242")
    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Yes)
    w2 = MainWindow(recover=True)
    qtbot.addWidget(w2)
    try:
        qtbot.waitUntil(lambda: w2.model.session.n == 18, timeout=30000)
        m2 = w2.model
        assert m2.session.project_path == str(project)
        assert m2.session.dirty
        assert w2.windowTitle().endswith("P.iaproj*")
        assert m2.session.edits == ["Merge 2 clusters"]
        assert w2.run_panel.iterations.value() == 5
        assert w2.run_panel.angle_step.value() == 10
        assert w2.means_view.per_cluster.isChecked()
        message = w2.statusBar().currentMessage()
        assert message.startswith("Recovered the last session (P.iaproj")
        assert "autosave" not in message
    finally:
        w2.projects.ask = lambda *a, **k: "discard"
        w2.close()


def test_a_stopped_run_is_autosaved(win, qtbot):
    from iastudio.core.project import load_project

    m = win.model
    m.session.load_demo("digits")
    m.session.set_size(24)
    assert m.start(backend="numpy", iterations=3, mean_steps=4)
    qtbot.waitUntil(lambda: m.session.latest is not None, timeout=120000)
    m.stop()
    qtbot.waitUntil(lambda: m.session.state in ("stopped", "finished"), timeout=120000)
    if m.session.state == "finished":
        pytest.skip("the run ended before it could be stopped")
    auto = win.projects.autosave_path()
    qtbot.waitUntil(lambda: not win.projects.writing and auto.exists(), timeout=30000)
    saved = load_project(auto)
    assert saved.n == 40
    assert len(saved.history) >= 1
    assert saved.parameters.get("iterations") == 3


def test_remembered_choices_are_values_that_survive_a_reordered_list(qtbot, home, asked, monkeypatch):
    """A later version lists its methods and denoise choices in another order, or adds one: the
    remembered "KA" and "off" are still what the next start shows (an index would pick another)."""
    from iastudio.app.panels import RunPanel
    from iastudio.app.projects import settings
    from iastudio.app.remember import RUN_SETTINGS_KEY

    settings().remove(RUN_SETTINGS_KEY)
    first = MainWindow()
    qtbot.addWidget(first)
    rp = first.run_panel
    rp.method.setCurrentIndex(rp.method.findData("ka"))
    rp.denoise.setCurrentIndex(rp.denoise.findData("off"))
    first.close()
    built = RunPanel._build_form

    def later_version(self, *a, **k):  # a new first method; the denoise choices listed the other way round
        form = built(self, *a, **k)
        self.method.insertItem(0, "Some new method", "new")
        for i in range(self.denoise.count() - 1):
            self.denoise.insertItem(i, self.denoise.itemText(self.denoise.count() - 1),
                                    self.denoise.itemData(self.denoise.count() - 1))
            self.denoise.removeItem(self.denoise.count() - 1)
        return form

    monkeypatch.setattr(RunPanel, "_build_form", later_version)
    again = MainWindow()
    qtbot.addWidget(again)
    assert [again.run_panel.denoise.itemData(i) for i in range(3)] == ["off", "on", "auto"]
    assert again.run_panel.method.currentData() == "ka"
    assert again.run_panel.denoise.currentData() == "off"
    assert again.run_panel.options()["method"] == "ka"
    again.close()
    settings().remove(RUN_SETTINGS_KEY)


def test_remembered_choices_written_by_the_last_version_or_damaged(qtbot, home, asked, caplog):
    from iastudio.app.projects import settings
    from iastudio.app.remember import RUN_SETTINGS_KEY

    settings().setValue(RUN_SETTINGS_KEY, '{"method": 1, "denoise": 2, "iterations": 6}')  # the last version's
    old = MainWindow()
    qtbot.addWidget(old)
    assert (old.run_panel.method.currentData(), old.run_panel.denoise.currentData()) == ("ka", "off")
    old.close()
    settings().setValue(RUN_SETTINGS_KEY, '{"method": "no such method", "denoise": 5, "iterations": 6}')
    with caplog.at_level("INFO", logger="iastudio.app.panels"):
        damaged = MainWindow()
    qtbot.addWidget(damaged)
    rp = damaged.run_panel
    assert (rp.method.currentData(), rp.denoise.currentData()) == ("ia", "auto")  # left at the defaults
    assert rp.iterations.value() == 6  # the rest is taken
    assert "'no such method' of method" in caplog.text
    assert "5 of denoise" in caplog.text
    damaged.close()
    settings().remove(RUN_SETTINGS_KEY)


def test_figures_without_matplotlib_say_so_instead_of_failing(win, monkeypatch):
    import sys

    from iastudio.app import export_actions

    monkeypatch.setattr(export_actions, "can_draw_figures", lambda: False)  # the installer leaves matplotlib out
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: pytest.fail("no folder is asked for"))
    assert win.exports.panels() is None
    box = win.last_dialog
    assert box.windowTitle() == "Figures need matplotlib"
    assert "pip install" not in box.text()
    assert "CSV" in box.text()  # what still works


def test_packaged_app_says_what_its_edition_does_and_never_pip_install(qtbot, home, monkeypatch):
    """Issue #35 item 5: About and the Run panel's GPU hints in the installer's app (no CuPy in it)."""
    import sys

    from iastudio.app.help import about_text
    from iastudio.core import backend

    def no_cupy():
        raise ImportError("No module named 'cupy'")

    monkeypatch.setattr(backend, "_probe_cupy", no_cupy)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    w = MainWindow()
    qtbot.addWidget(w)
    panel = w.run_panel
    about = about_text(w.model)
    shown = [about, panel.backend.toolTip(), panel.backend.model().item(2).toolTip(), panel.gpu_note.text()]
    assert not [t for t in shown if "pip install" in t]
    assert "Edition: the installed app" in about
    assert "Networks (PyTorch), an NVIDIA GPU (CuPy)" in about
    assert panel.backend.itemText(2) == "GPU (unavailable)"
    monkeypatch.setattr(sys, "frozen", False)  # the same window in a Python install names the command
    assert "pip install 'invariant-attention-studio[gpu]'" in about_text(w.model)
    assert "Edition: installed with Python" in about_text(w.model)
    w.model.shutdown(5000)


def test_typing_an_angle_after_a_run_asks_once_typing_is_finished_and_cancel_shows_the_angle_in_use(
        win, qtbot, asked):
    m, tp = win.model, win.transform_panel
    m.session.load_demo("shapes")
    m.session.set_size(24)
    _run(win, qtbot)
    m.session.select([2])
    _type_into(tp.theta, "30")
    assert asked == []  # not after the "3"
    asked.answer = "cancel"
    QTest.keyClick(tp.theta.lineEdit(), Qt.Key.Key_Return)
    assert len(asked) == 1
    assert "Transforming an image" in asked[0][1]
    assert m.session.final is not None
    assert tp.theta.value() == pytest.approx(np.rad2deg(m.session.transforms[2][0]))  # not the 30 refused
    assert tp.theta_slider.value() == round(tp.theta.value())
    asked.answer = "discard"
    _type_into(tp.theta, "30")
    QTest.keyClick(tp.theta.lineEdit(), Qt.Key.Key_Return)
    assert np.rad2deg(m.session.transforms[2][0]) == pytest.approx(30.0)


def test_file_dialogs_start_where_the_images_are_not_where_the_app_was_started(win, qtbot, asked, monkeypatch,
                                                                                 tmp_path):
    """The trial: Open folder, Open project, Export CSV, Cluster folders and Panels as figures all started in
    the folder the app was started from."""
    from iastudio.app.edition import can_draw_figures
    from iastudio.app.projects import settings

    settings().remove("recent/folders")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    elsewhere = tmp_path / "started here"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    seen = []

    def dialog(answer):
        def static(parent, caption="", directory="", *rest, **kw):
            seen.append((caption, directory))
            return answer
        return staticmethod(static)

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", dialog(""))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", dialog(("", "")))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", dialog(([], "")))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", dialog(("", "")))

    def last():
        return seen[-1][1]

    win.open_folder()  # nothing opened yet: the home folder
    assert last() == str(home)
    win.projects.open_project_dialog()
    assert last() == str(home)
    folder = tmp_path / "particles"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (24, 24), dtype=np.uint8)).save(folder / f"p{i:02d}.png")
    win.open_folder(str(folder))
    qtbot.waitUntil(lambda: win.model.session.n == 12, timeout=30000)
    for open_dialog in (win.open_folder, win.projects.open_project_dialog, win.add_files):
        open_dialog()  # the folder images were last opened from
        assert last() == str(folder)
    settings().remove("recent/folders")  # forgotten: the current images' folder
    win.open_folder()
    assert last() == str(folder)
    win.model.session.set_size(24)
    _run(win, qtbot, clusters=2)
    win.exports.csv()  # the exports propose beside the images' folder (not inside it)
    assert last() == str(tmp_path / "assignments.csv")
    win.exports.folders(aligned=False)
    assert last() == str(tmp_path)
    if can_draw_figures():
        win.exports.panels()
        assert last() == str(tmp_path)
    win.exports.gif()
    assert last() == str(tmp_path / "convergence.gif")
    project = tmp_path / "projects" / "p.iaproj"
    project.parent.mkdir()
    assert win.projects.save_to(str(project))
    win.exports.csv()  # a saved project: beside it
    assert last() == str(project.parent / "assignments.csv")
    assert all(str(elsewhere) not in d for _, d in seen), seen
