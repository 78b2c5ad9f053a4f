"""What a first-time user's trial found drawn unreadable or misleading (pytest-qt): the keyboard shortcuts'
keys pushed out of sight, W's hover line cut before its value at 1024 x 700, a skipped file's reason cut off
at the panel's edge, and a denoised image shown large under its file's name as if the file held it."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from iastudio.app.help import shortcuts_dialog  # noqa: E402


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
