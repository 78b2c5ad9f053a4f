"""What a user trial found squeezed (pytest-qt): W's labels and colour bar cut off under Show me's comparison
(with the narration line above W, in presentation mode, after a second Show me), the Clusters list showing
1.5 rows at 1024 x 700, and the Iteration readout collapsed to "Run…"."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from _qt import window_after_a_run  # noqa: E402
from PySide6.QtCore import QRectF, Qt  # noqa: E402

from iastudio.app.demo import narration, show_comparison  # noqa: E402
from iastudio.app.docks import show_view  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.run_output import Stage  # noqa: E402

SIZES = ((1024, 700), (1280, 800))


def _settle(qapp, rounds=10):
    for _ in range(rounds):
        qapp.processEvents()


@pytest.fixture(scope="module")
def ran(qapp, home):
    """A window after a short run on the demo shapes."""
    w = window_after_a_run(qapp)
    _settle(qapp)
    yield w
    w.presentation_action.setChecked(False)
    w.close()


def _inside_plot(view, item) -> bool:
    """``item`` (a label of W's axes or colour bar) is drawn whole inside W's plot."""
    margin = item.document().documentMargin()  # the text item's blank border around its text
    text = item.boundingRect().adjusted(margin, margin, -margin, -margin)
    rect = view.plot.mapFromScene(item.mapRectToScene(text)).boundingRect()
    return QRectF(view.plot.rect()).adjusted(-1, -1, 1, 1).contains(QRectF(rect))


def _w_whole(w) -> list:
    """What of W is cut off (empty: its axis labels, colour bar label and tick label 0 are whole)."""
    view = w.weights_view
    item = view.plot.getPlotItem()
    cut = [name for name, label in (("image i (row)", item.getAxis("left").label),
                                    ("image j (column)", item.getAxis("bottom").label),
                                    ("W_ij", view.colorbar.axis.label)) if not _inside_plot(view, label)]
    vb = item.vb
    if vb.height() < item.getAxis("left").label.boundingRect().width():  # the rotated label longer than W
        cut.append(f"W {vb.height():.0f} px high")
    return cut


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("presenting", [False, True], ids=["normal", "presentation"])
def test_show_me_comparison_leaves_w_and_the_means_whole(ran, qapp, size, presenting):
    """The trial: a second Show me in presentation mode shrank W to ~100 px, its labels cut; at 1024 x 700 too."""
    w = ran
    w.resize(*size)
    w.presentation_action.setChecked(presenting)
    done = type("Snap", (), {"stage": Stage.DONE, "iteration": 5})()
    w.narration.say(narration(done, iterations=5))  # the line above W at the end of Show me: 2-3 lines
    _settle(qapp)
    heights = []
    try:
        for _ in range(2):  # Show me, then Show me again
            show_comparison(w)
            _settle(qapp, 20)
            assert not _w_whole(w), (_w_whole(w), size, presenting)
            heights.append(w.weights_view.plot.height())
        assert heights[1] >= heights[0] - 2  # a second Show me does not shrink W further
        means = w.means_view
        assert means.plot.height() >= means.fontMetrics().horizontalAdvance("image i (row)"), means.plot.height()
        compare = w.docks["compare"]
        assert compare.height() > (0.3 if presenting else 0.5) * (compare.height() + w.centralWidget().height())
        assert w.height() == size[1]  # the window still fits: nothing pushed it taller
    finally:
        w.narration.dismiss()
        w.presentation_action.setChecked(False)
        _settle(qapp)


def test_a_dragged_separator_stops_where_w_is_still_whole(ran, qapp):
    w = ran
    w.resize(1024, 700)
    show_view(w, w.compare_view)
    w.resizeDocks([w.docks["compare"]], [650], Qt.Orientation.Vertical)  # as a separator dragged up
    _settle(qapp, 20)
    assert not _w_whole(w), _w_whole(w)


@pytest.mark.parametrize("size", SIZES)
def test_the_clusters_list_shows_three_clusters(ran, qapp, size):
    """The trial: 1.5 rows at 1024 x 700, so Ctrl-click to merge two clusters needed scrolling."""
    w = ran
    w.resize(*size)
    show_view(w, w.clusters_panel)
    _settle(qapp, 20)
    lst = w.clusters_panel.list
    assert lst.count() >= 3
    assert lst.viewport().height() >= 3 * lst.sizeHintForRow(0), (lst.viewport().height(), lst.sizeHintForRow(0))
    for btn in (w.clusters_panel.rename_btn, w.clusters_panel.merge_btn, w.clusters_panel.split_btn,
                w.clusters_panel.rerun_btn, w.clusters_panel.new_btn, w.clusters_panel.unassign_btn,
                w.clusters_panel.k_apply, w.clusters_panel.t_apply):
        assert btn.isVisible(), btn.text()
        assert btn.width() >= btn.fontMetrics().horizontalAdvance(btn.text()), btn.text()
    assert w.clusters_panel.evidence_area.isVisible()
    show_view(w, w.run_panel)


@pytest.mark.parametrize("size", SIZES)
def test_the_iteration_hint_stays_whole_before_a_run(qtbot, qapp, size):
    """The trial: the readout beside the slider collapsed to "Run…" (it read as a command), at 1280 after a
    menu had been opened."""
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    _settle(qapp)
    label = w.scrubber.label
    for step in ("shown", "menu opened and closed", "presentation mode"):
        if step == "menu opened and closed":
            menu = w.menuBar().actions()[0].menu()
            menu.popup(w.mapToGlobal(w.rect().topLeft()))
            _settle(qapp)
            menu.hide()
        elif step == "presentation mode":
            w.presentation_action.setChecked(True)
        _settle(qapp, 20)
        assert label.text().startswith("Run to step through"), label.text()
        assert label.width() >= label.fontMetrics().horizontalAdvance(label.text()), (step, label.width())
        assert w.scrubber.slider.width() > w.scrubber.width() // 3, step  # the slider keeps most of the row
    w.presentation_action.setChecked(False)
    w.model.shutdown(5000)
