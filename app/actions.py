"""The window's menus and their actions (File, Edit, Run, View, Demo, Help); View → Palette lives here.

Undo and Redo act from anywhere in the window: a spin box or line edit with the focus would otherwise
take Ctrl+Z for its own text (:class:`UndoAnywhere`).
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QLineEdit

from .events import listen
from .help import add_help_actions
from .layout import add_action, add_view_menu


def build_menus(window) -> None:
    """Create the menu bar; the actions other code needs become attributes of ``window``."""
    m, p, ex = window.model, window.projects, window.exports
    bar = window.menuBar()
    f = bar.addMenu("&File")
    add_action(window, f, "Open folder…", window.open_folder, QKeySequence.StandardKey.Open)
    add_action(window, f, "Add files…", window.add_files, "Ctrl+Shift+A")
    f.addSeparator()
    add_action(window, f, "Open project…", p.open_project_dialog, "Ctrl+Shift+O")
    window.save_action = add_action(window, f, "Save project", lambda: p.save(wait=False),
                                    QKeySequence.StandardKey.Save)  # written in a worker thread
    add_action(window, f, "Save project as…", lambda: p.save_as(wait=False), QKeySequence.StandardKey.SaveAs)
    p.recent_projects_menu = f.addMenu("Recent projects")
    p.recent_folders_menu = f.addMenu("Recent folders")
    f.addSeparator()
    e = f.addMenu("Export")
    add_action(window, e, "Assignments (CSV)…", ex.csv, "Ctrl+E")
    add_action(window, e, "Cluster folders (original images)…", lambda: ex.folders(False))
    add_action(window, e, "Cluster folders (aligned images)…", lambda: ex.folders(True))
    add_action(window, e, "For RELION (particles.star, class averages)…", ex.relion)
    add_action(window, e, "Panels as figures (PNG, PDF, SVG)…", ex.panels)
    add_action(window, e, "Convergence animation (GIF)…", ex.gif)
    f.addSeparator()
    add_action(window, f, "Quit", window.close, QKeySequence.StandardKey.Quit)
    edit = bar.addMenu("&Edit")
    window.undo_action = add_action(window, edit, "Undo", m.session.undo, "Ctrl+Z")
    window.redo_action = add_action(window, edit, "Redo", m.session.redo, "Ctrl+Shift+Z")
    window.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
    edit.addSeparator()
    window.remove_action = add_action(window, edit, "Remove selected images from the set",
                                      lambda: window.remove_images(), QKeySequence.StandardKey.Delete)
    edit.addSeparator()  # the Clusters tab's buttons, from the keyboard (on the clusters selected in its list)
    add_action(window, edit, "Rename the selected cluster…", lambda: edit_selected_clusters(window, "rename"), "F2")
    add_action(window, edit, "Merge the selected clusters", lambda: edit_selected_clusters(window, "merge"), "Ctrl+M")
    add_action(window, edit, "Split the selected cluster (into the k= next to the Split button)",
               lambda: edit_selected_clusters(window, "split"), "Ctrl+K")
    listen(m.session.events.history, lambda: update_undo_actions(window))
    update_undo_actions(window)
    window.undo_anywhere = UndoAnywhere(window)
    r = bar.addMenu("&Run")
    window.start_action = add_action(window, r, "Start", window.start_run, "Ctrl+R")
    window.stop_action = add_action(window, r, "Stop", m.stop, "Ctrl+.")
    window.resume_action = add_action(window, r, "Resume", m.resume, "Ctrl+Shift+R")
    h = bar.addMenu("&Help")
    add_action(window, h, "About", window.show_about)
    add_action(window, h, "Open log folder", window.open_log_folder)
    add_help_actions(window, h)  # F1: quick start; keyboard shortcuts
    add_view_menu(window, before=h.menuAction())  # View → Presentation mode
    add_palette_menu(window, window.view_menu)  # View → Palette: system, light or dark
    from .demo import add_demo_menu

    add_demo_menu(window, before=h.menuAction())  # Demo → Show me
    p.refresh_recent()


PALETTE_KEY = "view/palette"


def add_palette_menu(window, menu) -> None:
    """View → Palette (under Presentation mode): System / Light / Dark, remembered and applied at once."""
    from PySide6.QtWidgets import QMenu

    from .projects import settings
    from .theme import PALETTES, apply_palette

    sub = QMenu("Palette", menu)
    after_first = menu.actions()[1] if len(menu.actions()) > 1 else None  # under Presentation mode
    if after_first is None:
        menu.addMenu(sub)
    else:
        menu.insertMenu(after_first, sub)
    sub.setToolTipsVisible(True)
    group = QActionGroup(window)
    group.setExclusive(True)
    window.palette_actions = {}
    chosen = apply_palette(str(settings().value(PALETTE_KEY, "system")))
    for key, text in PALETTES.items():
        act = QAction(text, window, checkable=True)
        act.setToolTip("The desktop's colours." if key == "system" else f"{text} colours, whatever the desktop's.")
        act.setChecked(key == chosen)
        act.triggered.connect(lambda _on=False, key=key: choose_palette(key))
        group.addAction(act)
        sub.addAction(act)
        window.palette_actions[key] = act


def choose_palette(key: str) -> None:
    """Apply palette ``key`` to the application and remember it for the next start."""
    from .projects import settings
    from .theme import apply_palette

    settings().setValue(PALETTE_KEY, apply_palette(key))


def update_undo_actions(window) -> None:
    """Undo/Redo enabled only when there is something to undo/redo, and named after it."""
    h = window.model.session.history
    for act, can, text, verb in ((window.undo_action, h.can_undo, h.undo_text, "Undo"),
                                 (window.redo_action, h.can_redo, h.redo_text, "Redo")):
        act.setEnabled(can)
        act.setText(f"{verb} {text}" if can else verb)


class UndoAnywhere(QObject):
    """Lets Undo/Redo reach the cluster history while a spin box or line edit has the focus.

    Qt first offers a shortcut to the focused widget (a ShortcutOverride event); text fields accept
    Ctrl+Z for their own undo.  Declining that offer for the window's Undo/Redo keys lets the actions run.
    """

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        QApplication.instance().installEventFilter(self)

    def eventFilter(self, obj, event):
        if (event.type() == QEvent.Type.ShortcutOverride and isinstance(obj, (QAbstractSpinBox, QLineEdit))
                and obj.window() is self.window
                and _matches(event, (self.window.undo_action, self.window.redo_action))):
            event.ignore()
            return True
        return False


def _matches(event, actions) -> bool:
    pressed = QKeySequence(event.keyCombination())
    return any(seq.matches(pressed) == QKeySequence.SequenceMatch.ExactMatch
               for act in actions for seq in act.shortcuts())


def edit_selected_clusters(window, what: str) -> bool:
    """Rename, merge or split (``what``) the clusters selected in the Clusters tab's list (Edit menu)."""
    s, cp = window.model.session, window.clusters_panel
    if s.book is None:
        s.message("Run first: there are no clusters yet.")
        return False
    chosen = cp.selected_clusters()
    if what == "merge":
        return s.merge_clusters(chosen)
    if len(chosen) != 1:
        s.message(f"Select one cluster in the Clusters tab to {what} it.")
        return False
    if what == "rename":
        window.rename_cluster(chosen[0])
        return True
    return s.split_cluster(chosen[0], cp.split_k.value())
