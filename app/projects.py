"""The project controller: open, save, autosave, recovery, recent lists, and asking before work is lost.

Nothing the user made is dropped without asking: :meth:`ProjectController.confirm_discard` is called
before anything replaces a run or its edits, and :meth:`ProjectController.close_requested` before the
window closes.  The session is autosaved after every change (debounced) and on close; the recovery lock
is removed only once that autosave is written.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox

from iastudio.core.logs import log_dir
from iastudio.core.project import ProjectError

from .home import app_home

log = logging.getLogger(__name__)
AUTOSAVE_DELAY_MS = 1500  # after the last change
MAX_RECENT = 8
SAVE, DISCARD, CANCEL = "save", "discard", "cancel"


def settings() -> QSettings:
    return QSettings(str(app_home() / "settings.ini"), QSettings.Format.IniFormat)


def ask(parent, title: str, text: str, save_text: str = "Save…", discard_text: str = "Discard") -> str:
    """A modal question with Save / Discard / Cancel; returns SAVE, DISCARD or CANCEL."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.NoButton, parent)
    save = box.addButton(save_text, QMessageBox.ButtonRole.AcceptRole)
    discard = box.addButton(discard_text, QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(save)
    box.exec()
    return {save: SAVE, discard: DISCARD}.get(box.clickedButton(), CANCEL)


class ProjectController(QObject):
    """Projects of one window: its File menu's project actions, autosave, recovery and recent lists."""

    ask = staticmethod(ask)  # replaceable (tests answer for the user)

    def __init__(self, window):
        super().__init__(window)
        self.window, self.model = window, window.model
        self.recent_projects_menu = self.recent_folders_menu = None
        self._autosave_timer = QTimer(self)
        self._autosave_timer.setSingleShot(True)
        self._autosave_timer.setInterval(AUTOSAVE_DELAY_MS)
        self._autosave_timer.timeout.connect(self.autosave)
        self.model.projectChanged.connect(self._changed)
        self.lock = app_home() / "session.lock"
        self.crashed = self.lock.exists()
        self.remove_stale_saves()
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        self.lock.write_text(str(os.getpid()))

    # ------------------------------------------------------------ asking first
    def confirm_discard(self, action: str) -> bool:
        """True when ``action`` ("Starting again", "Loading the demo", ...) may go on.

        Asks only when unsaved work would be lost: a run's result or cluster edits not in a saved project.
        """
        risk = self.model.work_at_risk()
        if not risk or not self.model.dirty:
            return True
        answer = self.ask(self.window, "Discard your work?",
                          f"{action} discards {risk}, which are not saved. Save the project first?")
        if answer == SAVE:
            return self.save()
        return answer == DISCARD

    def close_requested(self) -> bool:
        """Save changes? before the window closes; True when it may close."""
        m = self.model
        if m.dirty and m.n:
            name = Path(m.project_path).name if m.project_path else "this session"
            answer = self.ask(self.window, "Save changes?", f"Save the changes to {name} before closing?",
                              save_text="Save…", discard_text="Don't save")
            if answer == CANCEL or (answer == SAVE and not self.save()):
                return False
        self.autosave()
        try:
            self.lock.unlink(missing_ok=True)  # only now: the autosave of this session is written
        except OSError:
            log.exception("cannot remove %s", self.lock)
        return True

    # ------------------------------------------------------------ autosave and recovery
    def autosave_path(self) -> Path:
        return app_home() / "autosave" / "autosave.iaproj"

    def _changed(self) -> None:
        if self.model.dirty:
            self._autosave_timer.start()

    def autosave(self) -> bool:
        self._autosave_timer.stop()
        try:
            if self.model.autosave(self.autosave_path()):
                log.info("autosaved to %s", self.autosave_path())
                return True
        except Exception:  # noqa: BLE001 - autosave must never disturb the user
            log.exception("autosave failed")
        return False

    def remove_stale_saves(self) -> list:
        """Remove what killed saves left beside the autosave and the recent projects."""
        from iastudio.core.atomic import remove_stale_temporaries

        removed = []
        folders = {self.autosave_path().parent} | {Path(p).parent for p in self.recent("recent/projects")}
        for folder in folders:
            try:
                removed += remove_stale_temporaries(folder)
            except Exception:  # noqa: BLE001 - cleaning must never stop the start
                log.exception("cleaning %s failed", folder)
        if removed:
            log.info("removed %d temporary file(s) left by interrupted saves: %s", len(removed), removed)
        return removed

    def offer_recovery(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Question, "Recover your work?",
                          "The last session did not close normally. Open the automatically saved copy?",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self.window)
        self.window.last_dialog = box
        if box.exec() == QMessageBox.StandardButton.Yes and self.open_project(self.autosave_path(),
                                                                             remember=False, ask=False):
            self.model.session.adopt_as_untitled()

    # ------------------------------------------------------------ open and save
    def open_project_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open project", "", "Projects (*.iaproj)")
        if path:
            self.open_project(path)

    def open_project(self, path, *, remember: bool = True, ask: bool = True) -> bool:
        w = self.window
        if self.model.refuse_while_loading() or (ask and not self.confirm_discard("Opening a project")):
            return False
        try:
            proj = self.model.open_project(path)
        except ProjectError as exc:
            w.dialog(QMessageBox.Icon.Warning, "Cannot open the project", str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the session stays as it was; the log has the traceback
            log.exception("opening %s failed", path)
            w.dialog(QMessageBox.Icon.Warning, "Cannot open the project",
                     f"{path}: cannot be opened ({type(exc).__name__}); the log is in {log_dir()}")
            return False
        w.sync.project_opened(proj)
        if remember:
            self.remember("recent/projects", str(path))
        if getattr(proj, "missing", None):
            w.dialog(QMessageBox.Icon.Information, "Originals moved",
                     f"{len(proj.missing)} original file(s) are missing; the project opened from its "
                     "embedded images.", "\n".join(proj.missing))
        return True

    def save(self) -> bool:
        if self.model.project_path:
            return self.save_to(self.model.project_path)
        return self.save_as()

    def save_as(self) -> bool:
        path, _ = QFileDialog.getSaveFileName(self.window, "Save project", "untitled.iaproj", "Projects (*.iaproj)")
        if not path:
            return False
        if not path.endswith(".iaproj"):
            path += ".iaproj"
        return self.save_to(path)

    def save_to(self, path) -> bool:
        try:
            self.model.save_project(path)
        except OSError as exc:
            self.window.dialog(QMessageBox.Icon.Warning, "Cannot save", f"{path}: {exc}")
            return False
        self.remember("recent/projects", str(path))
        return True

    # ------------------------------------------------------------ recent lists
    def remember(self, key: str, value: str) -> None:
        items = [v for v in self.recent(key) if v != value]  # one stored entry comes back as a plain str
        settings().setValue(key, [value] + items[:MAX_RECENT - 1])
        self.refresh_recent()

    def recent(self, key: str) -> list[str]:
        v = settings().value(key) or []
        return [v] if isinstance(v, str) else list(v)

    def refresh_recent(self) -> None:
        for menu, key, fn in ((self.recent_projects_menu, "recent/projects", self.open_project),
                              (self.recent_folders_menu, "recent/folders", self.window.open_folder)):
            if menu is None:
                continue
            menu.clear()
            items = self.recent(key)
            for path in items:
                act = menu.addAction(path)
                act.triggered.connect(lambda _=False, p=path, f=fn: f(p))
            menu.setEnabled(bool(items))
