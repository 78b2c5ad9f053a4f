"""What a first-time user's trial found drawn unreadable or misleading (pytest-qt): the keyboard shortcuts'
keys pushed out of sight, W's hover line cut before its value at 1024 x 700, a skipped file's reason cut off
at the panel's edge, and a denoised image shown large under its file's name as if the file held it."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import PointerEvent  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from test_session_denoise import _noisy_set  # noqa: E402

from iastudio.app.help import shortcuts_dialog  # noqa: E402

SIZES = ((1024, 700), (1280, 800))


def _settle(qapp, rounds=10):
    for _ in range(rounds):
        qapp.processEvents()


# ------------------------------------------------------------------ 1. the shortcut keys are readable

def test_the_keyboard_shortcuts_show_every_key_whole(window, qapp):
    """The trial: Help → Keyboard shortcuts showed the Keys column as "Ctrl+" behind a horizontal scroll bar."""
    dlg = shortcuts_dialog(window)
    _settle(qapp)
    table = dlg.table
    assert table.horizontalHeaderItem(2).text() == "Keys"
    viewport = table.viewport().width()
    assert table.columnViewportPosition(2) + table.columnWidth(2) <= viewport  # the column in view
    assert table.horizontalScrollBar().maximum() == 0  # nothing to scroll to
    fm = table.fontMetrics()
    for r in range(table.rowCount()):
        keys = table.item(r, 2).text()
        assert fm.horizontalAdvance(keys) <= table.columnWidth(2), keys  # each key sequence whole
        command = table.item(r, 1).text()
        lines = -(-fm.horizontalAdvance(command) // max(1, table.columnWidth(1) - 8))
        assert table.rowHeight(r) >= lines * fm.height() - 2, command  # a long command wraps, not cut
    dlg.close()


# ------------------------------------------------------------------ 2. W's hover line keeps its value

@pytest.mark.parametrize("size", SIZES)
def test_hovering_w_shows_the_value_at_1024x700(run_win, qapp, size):
    """The trial: "i = 21 (noisy_sieben_01.png), j = 39 (noisy_siebe…" — the elided line lost W_ij."""
    w = run_win
    w.resize(*size)
    _settle(qapp)
    view = w.weights_view
    view.set_names([f"/data/particles/a_longer_file_name_{i:03d}.png" for i in range(w.model.session.n)])
    view._hover(PointerEvent(2.5, 1.5))  # row 1, column 2 of the grouped matrix
    label = view.hover
    value = f"{view.weights[1, 2]:.4f}"
    assert value in label.text()
    drawn = label.fontMetrics().elidedText(label.text(), Qt.TextElideMode.ElideRight, label.contentsRect().width())
    assert f"W_ij = {value}" in drawn, drawn  # what the label draws in the width it has


# ------------------------------------------------------------------ 3. a skipped file's reason wraps

@pytest.mark.parametrize("size", SIZES)
def test_a_skipped_files_reason_is_not_cut_off(window, qapp, size):
    """The trial: "Skipped broken.png: not an image (the file's contents are" and a horizontal scroll bar."""
    window.resize(*size)
    panel = window.images_panel
    reason = "not an image (the file's contents are not a readable image)"
    panel.set_skipped([{"path": "/tmp/trial/imgs/broken.png", "reason": reason}])
    _settle(qapp)
    box = panel.skipped_list
    assert box.isVisible()
    assert not box.horizontalScrollBar().isVisible()
    rect = box.visualItemRect(box.item(0))
    assert rect.left() >= 0
    assert rect.right() <= box.viewport().width(), (rect, box.viewport().width())
    fm = box.fontMetrics()
    text = box.item(0).text()
    if fm.horizontalAdvance(text) > box.viewport().width():  # wider than the panel: wrapped onto more lines
        assert rect.height() >= 2 * fm.height()
    assert rect.bottom() <= box.viewport().height()  # and the wrapped lines in view


# ------------------------------------------------------------------ 4. a denoised image says so when shown large

def test_an_image_shown_large_after_a_denoised_run_says_it_is_denoised(window, qtbot):
    """The trial: double-clicking a noisy particle after a denoised run showed a smooth blob above the file's
    path, nothing saying that the file is not what is shown."""
    from iastudio.app.dialogs import show_image

    data, _ = _noisy_set(n=15, seed=1)
    window.model.session.set_images(data)
    before = show_image(window, 0)
    assert "denoised" not in before.name_label.text()  # the file's own image: nothing to say
    before.close()
    panel = window.run_panel
    panel.denoise.setCurrentIndex(panel.denoise.findData("on"))
    panel.size.setValue(32)
    panel.iterations.setValue(1)
    panel.clusters_auto.setChecked(False)
    panel.clusters.setValue(3)
    panel.start_btn.click()
    qtbot.waitUntil(lambda: window.model.session.state in ("finished", "failed"), timeout=60000)
    assert window.model.session.denoise_report.applied
    dlg = show_image(window, 0)
    shown = dlg.picture.pixmap().toImage()
    assert not shown.isNull()
    assert "denoised" in dlg.name_label.text()
    assert "file itself is unchanged" in dlg.name_label.text()
    assert "denoised" in dlg.windowTitle()
    assert dlg.path.text() == data.paths[0]
    dlg.close()
    window.model.session.set_size(24)  # an input change: the run goes, the images are the files' again
    again = show_image(window, 0)
    assert "denoised" not in again.name_label.text()
    again.close()
    assert np.isfinite(window.model.session.working[0]).all()
