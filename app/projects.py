"""The project controller: open, save, autosave, recovery, recent lists, and asking before work is lost.

Nothing the user made is dropped without asking: :meth:`ProjectController.confirm_discard` is called
before anything replaces a run or its edits, and :meth:`ProjectController.close_requested` before the
window closes.  The session is autosaved after every change (debounced) and on close; the recovery lock
is removed only once that autosave is written.

Projects are written in a worker thread (superqt's function worker; a project of a big run takes ~10 s
to write): the GUI thread takes the snapshot (:meth:`~iastudio.core.session.Session.to_project`, a few
milliseconds), the worker writes it atomically, and its end comes back by a queued signal.  One autosave
is written at a time; a request while one is written makes exactly one more write after it, of the
state at that time.  File > Save writes in the worker too; the project is marked saved (title, "Saved …")
only once its file is written, and only as clean as the snapshot written.  What must be saved before it
goes on (closing, *Save…* in the questions) waits for its write.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox
from superqt.utils import create_worker

from iastudio.core.imageset import set_source
from iastudio.core.logs import log_dir
from iastudio.core.project import ProjectError, save_project

from .events import listen
from .home import announce, app_home, home_problem

log = logging.getLogger(__name__)
AUTOSAVE_DELAY_MS = 1500  # after the last change
MAX_RECENT = 8
SAVE, DISCARD, CANCEL = "save", "discard", "cancel"


def settings() -> QSettings:
    return QSettings(str(app_home() / "settings.ini"), QSettings.Format.IniFormat)


def suggested_project_path(session) -> str:
    """Where *Save as* proposes to save: the project's own file; else beside the images' folder and named
    after it ("…/my particles.iaproj"; not inside it, where it would be read as a file of the set), or
    after the demo ("demo shapes.iaproj")."""
    if session.project_path:
        return str(session.project_path)
    folder, demo = set_source(session.data.paths)
    if folder is not None:
        return str(folder.parent / f"{folder.name or 'images'}.iaproj")
    return f"demo {demo}.iaproj" if demo else "untitled.iaproj"


def ask(parent, title: str, text: str, save_text: str | None = "Save…", discard_text: str | None = "Discard") -> str:
    """A modal question with Save / Discard / Cancel; returns SAVE, DISCARD or CANCEL.

    ``discard_text`` None: no Discard button; ``save_text`` None: no Save button (Cancel is then the default).
    """
    box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.NoButton, parent)
    save = None if save_text is None else box.addButton(save_text, QMessageBox.ButtonRole.AcceptRole)
    discard = None if discard_text is None else box.addButton(discard_text, QMessageBox.ButtonRole.DestructiveRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(save or cancel)
    box.exec()
    answers = {b: a for b, a in ((save, SAVE), (discard, DISCARD)) if b is not None}  # no button: no answer
    return answers.get(box.clickedButton(), CANCEL)


def _saved_result_goes(action: str, risk: str, path) -> str:
    """The question when changing a saved project's inputs would take its result from the window."""
    them = "them" if " and " in risk else "it"
    return f"{action} discards {risk} from the window. {Path(path).name} keeps {them} as saved, as long as you " \
           "do not save over it."


class ProjectWrite:
    """One project file written in a worker thread: what is written where, and how it ended.

    Attributes
    ----------
    path : str or Path
        As given (it becomes the project's file as it was named).
    revision : int
        The session's :attr:`~iastudio.core.session.Session.revision` when the snapshot was taken.
    error : Exception or None
        Why the write failed (None: written, or not ended yet).
    cancelled : bool
        Dropped before any thread began it (:meth:`cancel`).
    seconds : float
        How long the write took.
    ended : threading.Event
        Set when the write ended, either way, or was cancelled.
    """

    def __init__(self, path, project, *, revision: int = 0, on_end=None):
        self.path, self.revision = path, int(revision)
        self.project = project
        self.on_end = on_end  # called on the GUI thread once it ended
        self.error: Exception | None = None
        self.cancelled = False
        self.seconds = 0.0
        self.ended = threading.Event()
        self.reported = False  # on_end was called
        self._lock = threading.Lock()
        self._taken = False  # a thread began writing it

    def take(self) -> bool:
        """True for the one thread that may write it (the first to ask)."""
        with self._lock:
            taken, self._taken = self._taken, True
        return not taken

    def cancel(self) -> bool:
        """Drop the write if no thread began it; True when dropped."""
        if not self.take():
            return False
        self.cancelled, self.project = True, None
        self.ended.set()
        return True

    def write(self) -> ProjectWrite:
        """The worker's part: write the project, unless a waiting thread took it over (:meth:`take`)."""
        if self.take():
            self.write_taken()
        return self

    def write_taken(self) -> None:
        """Write the project, on the thread that took it; never raises: a failure is kept in :attr:`error`."""
        t0 = time.perf_counter()
        try:
            save_project(self.path, self.project)
        except Exception as exc:  # noqa: BLE001 - reported on the GUI thread
            self.error = exc
        finally:
            self.project = None  # the snapshot's memory goes with the write
            self.seconds = time.perf_counter() - t0
            self.ended.set()


class ProjectController(QObject):
    """Projects of one window: its File menu's project actions, autosave, recovery and recent lists."""

    ask = staticmethod(ask)  # replaceable (tests answer for the user)

    def __init__(self, window):
        super().__init__(window)
        self.window, self.model = window, window.model
        self.recent_projects_menu = self.recent_folders_menu = None
        self.asked = False  # the last confirm_discard asked its question (and was let go on)
        self._autosave_timer = QTimer(self)
        self._autosave_timer.setSingleShot(True)
        self._autosave_timer.setInterval(AUTOSAVE_DELAY_MS)
        self._autosave_timer.timeout.connect(self.autosave)
        listen(self.model.session.events.project, self._changed)
        self._autosaving: ProjectWrite | None = None  # the autosave being written
        self._autosave_again = False  # asked for while one was written: one more write after it
        self._saving: ProjectWrite | None = None  # File > Save being written
        self.home_off = home_problem()  # None, or why settings, autosave and the recovery lock are off
        self.lock = None if self.home_off else app_home() / "session.lock"
        self.crashed = self.lock is not None and self.lock.exists()
        self.remove_stale_saves()
        if self.lock is not None:
            try:
                self.lock.write_text(str(os.getpid()))
            except OSError as exc:
                self.home_off, self.lock, self.crashed = (exc.strerror or type(exc).__name__).lower(), None, False
        self.home_notice = announce(window, self.home_off)  # one line in the status bar and on stderr

    # ------------------------------------------------------------ asking first
    def confirm_discard(self, action: str, *, replaces: bool = False, changes_inputs: bool = False) -> bool:
        """True when ``action`` ("Starting again", "Loading the demo", ...) may go on; :attr:`asked`: it asked.

        Asks when unsaved work would be lost: a run's result or cluster edits not in a saved project, or
        (``replaces``: the action replaces the whole set) unsaved changes to an opened project's images;
        ``changes_inputs`` (working size, transforms, images added or removed): also a saved project's
        result, which the next save would write over (Discard or Cancel).  A save being written is waited for.
        """
        self.wait_for(self._saving)
        s = self.model.session
        risk = s.work_at_risk()
        self.asked = bool(risk and changes_inputs and s.project_path and not s.dirty)
        if self.asked:  # a saved project's result: it stays in the file, unless saved over
            return self.ask(self.window, "Discard the result?", _saved_result_goes(action, risk, s.project_path),
                            save_text=None) == DISCARD
        if not risk and replaces and s.project_path and s.n:
            risk = f"the changes to {Path(s.project_path).name}"
        self.asked = bool(risk) and s.dirty
        if not self.asked:
            return True
        answer = self.ask(self.window, "Discard your work?",
                          f"{action} discards {risk} (not saved yet). Save the project first?")
        return self.save(wait=True) if answer == SAVE else answer == DISCARD

    def close_requested(self) -> bool:
        """Save changes? before the window closes; True when it may close.

        The saves being written are waited for; then the final state is autosaved here, and only then
        is the recovery lock removed.
        """
        self.wait_for(self._saving)
        m = self.model
        if m.session.dirty and m.session.n:
            name = Path(m.session.project_path).name if m.session.project_path else "this session"
            answer = self.ask(self.window, "Save changes?", f"Save the changes to {name} before closing?",
                              save_text="Save…", discard_text="Don't save")
            if answer == CANCEL or (answer == SAVE and not self.save(wait=True)):
                return False
        self.autosave(wait=True)
        try:
            if self.lock is not None:
                self.lock.unlink(missing_ok=True)  # only now: the autosave of this session is written
        except OSError:
            log.exception("cannot remove %s", self.lock)
        return True

    # ------------------------------------------------------------ autosave and recovery
    def autosave_path(self) -> Path:
        return app_home() / "autosave" / "autosave.iaproj"

    def _changed(self) -> None:
        if self.model.session.dirty:
            self._autosave_timer.start()

    @property
    def writing(self) -> bool:
        """True while a project or the autosave is being written (or waits for its worker thread)."""
        return self._autosaving is not None or self._saving is not None

    def autosave(self, *, wait: bool = False) -> bool:
        """Autosave the session (never a dialog: a failure is logged).

        By default in a worker thread, returning at once: True when a write started, or was asked for
        after the one being written (exactly one more, of the state when it starts).  ``wait=True``
        (closing) waits for the write in flight, then writes the state now on this thread; True when
        it was written.  False when there is nothing to save.
        """
        self._autosave_timer.stop()
        if self.home_off:
            return False  # no home to write it to (the window says so)
        if wait:
            self._autosave_again = False  # the write below has the latest state
            if self._autosaving is not None and self._autosaving.cancel():  # not begun: superseded by it
                self._ended(self._autosaving)
            self.wait_for(self._autosaving)
            try:
                self.window.sync.remember_view()
                if self.model.session.autosave(self.autosave_path()):
                    log.info("autosaved to %s", self.autosave_path())
                    return True
            except Exception:  # noqa: BLE001 - autosave must never disturb the user
                log.exception("autosave failed")
            return False
        if self._autosaving is not None:
            self._autosave_again = True
            return True
        if not self.model.session.n:
            return False
        try:
            self.window.sync.remember_view()
            project = self.model.session.to_project(autosave=True)
        except Exception:  # noqa: BLE001 - autosave must never disturb the user
            log.exception("autosave failed")
            return False
        self._autosaving = self._write(self.autosave_path(), project, on_end=self._autosaved)
        return True

    def _autosaved(self, job: ProjectWrite) -> None:
        self._autosaving = None
        if job.error is not None:
            log.error("autosave failed", exc_info=job.error)
        elif not job.cancelled:
            log.info("autosaved to %s in %.1f s", job.path, job.seconds)
        if self._autosave_again:
            self._autosave_again = False
            self.autosave()

    # ------------------------------------------------------------ writing in a worker thread
    def _write(self, path, project, *, revision: int = 0, on_end, start: bool = True) -> ProjectWrite:
        """A write of ``project`` to ``path``, started in a worker thread unless ``start`` is False (then
        :meth:`wait_for` writes it on this thread); ``on_end(job)`` follows on this thread."""
        job = ProjectWrite(path, project, revision=revision, on_end=on_end)
        if start:
            worker = create_worker(job.write, _start_thread=False, _connect={"returned": self._ended})
            worker.start()
        return job

    def _ended(self, job: ProjectWrite) -> None:
        """A write ended (queued from its worker thread, or after :meth:`wait_for`): report it once."""
        if not job.reported:
            job.reported = True
            job.on_end(job)

    def wait_for(self, job: ProjectWrite | None) -> None:
        """Block until ``job`` (a write started here; None: nothing) has ended and been reported.

        A write its worker has not begun is written here: superqt starts a worker from this thread's
        event loop, which does not run while it waits.
        """
        if job is None or job.reported:
            return
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            if job.take():
                job.write_taken()
            else:
                job.ended.wait()
        finally:
            QApplication.restoreOverrideCursor()
        self._ended(job)

    def remove_stale_saves(self) -> list:
        """Remove what killed saves left beside the autosave and the recent projects."""
        from iastudio.core.atomic import remove_stale_temporaries

        removed = []
        folders = {Path(p).parent for p in self.recent("recent/projects")}
        if not self.home_off:
            folders.add(self.autosave_path().parent)
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
            self.model.session.adopt_recovered()

    # ------------------------------------------------------------ open and save
    def open_project_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open project", start_folder(self), "Projects (*.iaproj)")
        if path:
            self.open_project(path)

    def open_project(self, path, *, remember: bool = True, ask: bool = True) -> bool:
        w = self.window
        self.wait_for(self._saving)  # its end names the project's file, which opening replaces
        if self.model.refuse_while_loading() or (ask and not self.confirm_discard("Opening a project", replaces=True)):
            return False
        try:
            proj = self.model.session.open_project(path)
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

    def save(self, *, wait: bool = True) -> bool:
        """Save to the project's own file (Save as… when there is none); see :meth:`save_to`."""
        if self.model.session.project_path:
            return self.save_to(self.model.session.project_path, wait=wait)
        return self.save_as(wait=wait)

    def save_as(self, *, wait: bool = True) -> bool:
        suggested = suggested_project_path(self.model.session)  # a demo's is a bare name: in the start folder
        path, _ = QFileDialog.getSaveFileName(self.window, "Save project", os.path.join(start_folder(self), suggested),
                                              "Projects (*.iaproj)")
        if not path:
            return False
        if not path.endswith(".iaproj"):
            path += ".iaproj"
        return self.save_to(path, wait=wait)

    def save_to(self, path, *, wait: bool = True) -> bool:
        """Write the project to ``path``; a failure is shown in a dialog.

        ``wait=False`` (File > Save): the snapshot is written in a worker thread and this returns at
        once, True when the write started.  ``wait=True``: written on this thread; True when it was.
        Either way ``path`` becomes the project's file, and the session clean as of the snapshot
        written, only once the file is written.  A save already being written is waited for first.
        """
        self.wait_for(self._saving)
        try:
            self.window.sync.remember_view()
            project, revision = self.model.session.to_project(), self.model.session.revision
        except Exception as exc:  # noqa: BLE001 - shown, the session goes on
            log.exception("saving %s failed", path)
            self._cannot_save(path, exc)
            return False
        self.model.session.message(f"Saving {path}…")
        self._saving = job = self._write(path, project, revision=revision, on_end=self._saved, start=not wait)
        if wait:
            self.wait_for(job)  # written here
        return not wait or job.error is None

    def _saved(self, job: ProjectWrite) -> None:
        self._saving = None
        if job.error is not None:
            log.error("saving %s failed", job.path, exc_info=job.error)
            self._cannot_save(job.path, job.error)
            return
        log.info("saved %s in %.1f s", job.path, job.seconds)
        self.model.session.mark_saved(str(job.path), revision=job.revision)
        self.remember("recent/projects", str(job.path))

    def _cannot_save(self, path, exc: Exception) -> None:
        reason = str(exc) or type(exc).__name__
        self.window.dialog(QMessageBox.Icon.Warning, "Cannot save", f"{path}: {reason}")

    # ------------------------------------------------------------ recent lists
    def remember(self, key: str, value: str) -> None:
        items = [v for v in self.recent(key) if v != value]  # one stored entry comes back as a plain str
        settings().setValue(key, [value, *items[:MAX_RECENT - 1]])
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


def start_folder(projects) -> str:
    """Where a dialog that opens images or a project starts: the folder images were last opened from
    (File → Open recent folder's first), else the current images' folder, else the home folder; never
    the folder the app happened to be started in.  ``projects``: the window's :class:`ProjectController`."""
    for folder in projects.recent("recent/folders")[:1]:
        if os.path.isdir(folder):
            return folder
    images, _ = set_source(projects.model.session.data.paths)
    if images is not None and images.is_dir():
        return str(images)
    return str(Path.home())


def export_folder(projects) -> str:
    """Where an export dialog proposes to write: beside the project's file, else beside the images'
    folder (not inside it, where it would be read as part of the set), else :func:`start_folder`."""
    s = projects.model.session
    if s.project_path and Path(s.project_path).parent.is_dir():
        return str(Path(s.project_path).absolute().parent)
    images, _ = set_source(s.data.paths)
    if images is not None and images.parent.is_dir():
        return str(images.parent)
    return start_folder(projects)
