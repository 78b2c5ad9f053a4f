"""The app's home folder (settings, autosave, recovery lock, logs), and a throw-away one.

``IA_STUDIO_HOME`` moves the whole home; ``IA_STUDIO_LOG_DIR`` moves only the logs (see
:mod:`iastudio.core.logs`). ``ia-studio --selftest`` and the test suite run in a temporary home so
they never touch the user's autosave, settings or lock.

A home that cannot be used (a file or a device in its place, no permission, a name too long) does not
stop the app: :func:`home_problem` says why, and the window starts with settings, autosave and the
recovery lock off (logs too when they live there), saying so in one line (:func:`announce`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from iastudio.core.filenames import printable
from iastudio.core.logs import HOME_ENV, LOG_ENV, home_dir, logging_problem, remove_file_logging

__all__ = ["HOME_ENV", "announce", "app_home", "home_notice", "home_problem", "temporary_home"]
log = logging.getLogger(__name__)
_ANNOUNCED: set = set()  # the notices already printed on stderr (once per process each)


def app_home() -> Path:
    """The home folder in use now (created when it can be; never raises: see :func:`home_problem`)."""
    home = home_dir()
    with contextlib.suppress(OSError):
        home.mkdir(parents=True, exist_ok=True)
    return home


def home_problem() -> str | None:
    """Why the home folder cannot hold settings, autosave and the lock now; None when it can.

    It can when it is (or can be made) a folder in which a file can be written and removed.
    """
    home = home_dir()
    made = False
    try:
        home.mkdir(parents=True, exist_ok=True)
        made = True
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=home)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        if made:
            return f"nothing can be written in it: {reason}"
        try:
            in_the_way = home.exists() and not home.is_dir()
        except OSError:
            in_the_way = False
        return "it is not a folder" if in_the_way else reason
    return None


def home_notice(problem: str | None, *, logs_off: bool = False) -> str | None:
    """The one line saying what is off and why (None when nothing is)."""
    name = printable(home_dir())
    if len(name) > 80:
        name = name[:38] + "…" + name[-38:]
    if problem:
        off = "settings, autosave and logs are off" if logs_off else "settings and autosave are off"
        return f"The home folder {name} cannot be used ({problem}): {off}."
    if logs_off:
        return f"Logs are off: the log folder cannot be written ({logging_problem('ia-studio')})."
    return None


def announce(window, problem: str | None) -> str | None:
    """Show the home's notice in ``window``'s status bar (for good) and once on stderr; returns it."""
    logs_off = logging_problem("ia-studio") is not None  # ia-studio tried to open its log file and could not
    text = home_notice(problem, logs_off=logs_off)
    if text is None:
        return None
    from PySide6.QtWidgets import QLabel

    label = QLabel(text)
    label.setObjectName("homeNotice")
    label.setToolTip(f"Set {HOME_ENV} to a folder this account can write to, and start again.")
    window.statusBar().addPermanentWidget(label)
    log.info("%s", text)  # not a warning: with logs off, logging would print it on stderr a second time
    if text not in _ANNOUNCED and sys.stderr is not None:
        _ANNOUNCED.add(text)
        print(f"ia-studio: {text}", file=sys.stderr)
    return text


@contextlib.contextmanager
def temporary_home(prefix: str = "ia-studio-home-", keep=lambda: False):
    """Point the app's home (and its logs) at a new temporary folder for the ``with`` block.

    The environment is restored afterwards and the folder removed, unless ``keep()`` is true then
    (e.g. a failed self-test keeps its log for reading). Yields the folder.
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    saved = {k: os.environ.get(k) for k in (HOME_ENV, LOG_ENV)}
    os.environ[HOME_ENV] = str(folder)
    os.environ[LOG_ENV] = str(folder / "logs")
    try:
        yield folder
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        remove_file_logging(folder)
        if not keep():
            shutil.rmtree(folder, ignore_errors=True)
