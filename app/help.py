"""Help inside the app: a quick-start page (F1) and the keyboard shortcuts (read from the window's actions)."""
from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
)

__all__ = ["QUICK_START_HTML", "add_help_actions", "quick_start_dialog", "shortcut_rows", "shortcuts_dialog"]

QUICK_START_HTML = """
<h2>Quick start</h2>
<p>Invariant Attention Studio sorts images into groups of look-alikes, even when the same thing
appears turned or shifted. Nothing is sent anywhere; everything runs on this computer.</p>
<h3>1. Open your images</h3>
<p><b>File → Open folder…</b> (Ctrl+O) and pick a folder of images, or drop files onto the window.
No images at hand? Pick one of the <b>Demo…</b> sets above the thumbnails.
Files that cannot be read are listed under the summary, with the reason.</p>
<h3>2. Start</h3>
<p>Press <b>Start</b> in the <i>Run</i> tab (Ctrl+R). The defaults suit most image sets; hover over any
setting to read what it does. While it runs you can watch:</p>
<ul>
<li><b>W</b>, the weight matrix: bright squares are images that look alike. Groups show as bright blocks.</li>
<li><b>Invariant means</b>: each image averaged with its look-alikes after turning them into line.</li>
<li><b>Manifold convergence</b>: look-alikes draw together, different shapes stay apart.</li>
</ul>
<p><b>Stop</b> pauses, <b>Resume</b> continues.</p>
<h3>3. Read the clusters</h3>
<p>When the run is done, each thumbnail gets a coloured frame: its group. The <i>Clusters</i> tab lists the
groups with their sizes. Click a group to select its images; double-click a thumbnail to see it large.
<i>KA vs IA</i> compares plain averaging with Invariant Attention.
To see why two images were put together, select both, or click their square in W (the <i>Inspect</i> tab).</p>
<h3>4. Edit</h3>
<p>Drag thumbnails onto a group to move them. Rename, merge and split groups with the buttons in the
<i>Clusters</i> tab or by right-clicking a group or a thumbnail. <b>Ctrl+Z</b> undoes any edit.</p>
<h3>5. Export</h3>
<p><b>File → Export</b>: a table of which image went where (CSV), one folder per group with the original
or aligned images, particles and class averages for RELION (particles from MRC files), the panels as
pictures, or an animation of the run. <b>File → Save project</b>
keeps everything, edits included, in one file.</p>
<p>Help → <b>Keyboard shortcuts</b> lists the keys. View → <b>Presentation mode</b> enlarges the views
for a projector.</p>
<h3>Arrange the window</h3>
<p>Every panel around W and the means can be dragged by its title bar to another side, onto another panel
(they become tabs) or out of the window; double-click a title bar to float it or put it back. A closed panel
comes back from the <b>View</b> menu, and View → <b>Reset layout</b> puts everything back.</p>
"""


def closable_dialog(parent, title: str, content, size: tuple[int, int], extra_button=None) -> QDialog:
    """A non-blocking window showing ``content`` above a Close button (and ``extra_button`` beside it)."""
    dlg = QDialog(parent)
    dlg.setWindowTitle(title)
    lay = QVBoxLayout(dlg)
    lay.addWidget(content)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    if extra_button is not None:
        buttons.addButton(extra_button, QDialogButtonBox.ButtonRole.ActionRole)
    buttons.rejected.connect(dlg.close)
    lay.addWidget(buttons)
    dlg.resize(*size)
    dlg.show()
    return dlg


def quick_start_dialog(parent=None) -> QDialog:
    """The quick-start page in a window of its own (not blocking)."""
    text = QTextBrowser()
    text.setOpenExternalLinks(False)
    text.setHtml(QUICK_START_HTML)
    dlg = closable_dialog(parent, "Quick start", text, (560, 620))
    dlg.browser = text
    if parent is not None:
        parent.quick_start = dlg
    return dlg


def _clean(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip(".").strip()


def _walk(menu: QMenu, path: str, rows: list, seen: set) -> None:
    for act in menu.actions():
        if act.menu() is not None:
            _walk(act.menu(), f"{path} → {_clean(act.menu().title())}", rows, seen)
        elif not act.isSeparator() and act.shortcuts() and id(act) not in seen:
            seen.add(id(act))
            keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in act.shortcuts())
            rows.append((path, _clean(act.text()), keys))


def shortcut_rows(window) -> list[tuple[str, str, str]]:
    """(menu, command, keys) for every action of the window that has a shortcut, in menu order."""
    rows: list = []
    seen: set = set()
    for top in window.menuBar().actions():
        if top.menu() is not None:
            _walk(top.menu(), _clean(top.text()), rows, seen)
    for act in window.findChildren(QAction):  # shortcuts not in a menu (e.g. added to the window)
        if act.shortcuts() and id(act) not in seen and act.text():
            seen.add(id(act))
            keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in act.shortcuts())
            rows.append(("Window", _clean(act.text()), keys))
    return rows


def shortcuts_dialog(window) -> QDialog:
    """A table of the keyboard shortcuts, generated from the window's actions (so it cannot go stale)."""
    rows = shortcut_rows(window)
    table = QTableWidget(len(rows), 3)
    table.setHorizontalHeaderLabels(["Menu", "Command", "Keys"])
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            item = QTableWidgetItem(value)
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
            table.setItem(r, c, item)
    table.verticalHeader().hide()
    table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
    table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    # the keys (what the table is for) always whole: the menu and keys as wide as their text, the
    # command taking the rest and wrapping, never a column pushed out of sight behind a scroll bar
    header = table.horizontalHeader()
    header.setStretchLastSection(False)
    for column, mode in enumerate((QHeaderView.ResizeMode.ResizeToContents, QHeaderView.ResizeMode.Stretch,
                                   QHeaderView.ResizeMode.ResizeToContents)):
        header.setSectionResizeMode(column, mode)
    table.setWordWrap(True)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    header.sectionResized.connect(lambda *_: table.resizeRowsToContents())  # a narrower command column: taller rows
    table.resizeColumnsToContents()
    needed = sum(table.sizeHintForColumn(c) for c in range(3)) + table.verticalScrollBar().sizeHint().width() + 48
    screen = window.screen().availableGeometry().width() if window.screen() is not None else needed
    dlg = closable_dialog(window, "Keyboard shortcuts", table, (max(520, min(needed, screen - 40)), 480))
    table.resizeRowsToContents()
    dlg.table = table
    window.shortcuts_dialog = dlg
    return dlg


def shortcuts_html(window) -> str:
    """The same list as HTML (for printing or the docs)."""
    body = "".join(f"<tr><td>{html.escape(m)}</td><td>{html.escape(c)}</td><td><b>{html.escape(k)}</b></td></tr>"
                   for m, c, k in shortcut_rows(window))
    return f"<table>{body}</table>"


def add_help_actions(window, menu: QMenu) -> dict[str, QAction]:
    """Put "Quick start" (F1) and "Keyboard shortcuts" (Ctrl+/) at the top of the Help menu."""
    first = menu.actions()[0] if menu.actions() else None
    quick = QAction("Quick start", window)
    quick.setShortcut(QKeySequence(QKeySequence.StandardKey.HelpContents))
    quick.triggered.connect(lambda _=False: quick_start_dialog(window))
    keys = QAction("Keyboard shortcuts", window)
    keys.setShortcut(QKeySequence("Ctrl+/"))
    keys.triggered.connect(lambda _=False: shortcuts_dialog(window))
    menu.insertActions(first, [quick, keys])
    if first is not None:
        menu.insertSeparator(first)
    return {"quick_start": quick, "shortcuts": keys}


APP_NAME = "Invariant Attention Studio"


def about_text(model) -> str:
    """Versions, the backend in use, the GPU, where the logs are (Help → About; copyable)."""
    import platform
    import sys

    import numpy
    import PySide6
    from PySide6.QtCore import qVersion

    from iastudio.core import __version__
    from iastudio.core.logs import log_dir
    from iastudio.core.warp import describe_code, describe_gpu_code

    from .edition import edition_text
    from .model import gpu_status

    try:
        import cupy

        cupy_v = cupy.__version__
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        cupy_v = "not installed"
    ok, reason = gpu_status()
    run = model.session.run
    backend = run.backend.describe() if run is not None else ("cupy" if ok else "numpy (CPU)")
    return "\n".join([
        f"{APP_NAME} {__version__}",
        f"Python {platform.python_version()} ({sys.platform})",
        f"Qt {qVersion()}, PySide6 {PySide6.__version__}",
        f"NumPy {numpy.__version__}",
        f"CuPy {cupy_v}",
        f"CPU image warps: {describe_code()}",
        *([f"GPU image warps: {describe_gpu_code()}"] if ok else []),
        f"Backend: {backend}",
        f"GPU: {reason if ok else 'none — running on the CPU (' + reason + ')'}",
        f"Logs: {log_dir()}",
        edition_text(),
        "Nothing is downloaded or sent anywhere.",
    ])


def about_dialog(window) -> QDialog:
    """Help → About: :func:`about_text` with a Copy button (not blocking)."""
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QPushButton

    text = QTextBrowser()
    text.setPlainText(about_text(window.model))
    copy = QPushButton("Copy to clipboard")
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(text.toPlainText()))
    return closable_dialog(window, f"About {APP_NAME}", text, (520, 320), extra_button=copy)
