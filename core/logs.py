"""Where logs go: tracebacks are written here, never shown to users."""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

__all__ = ["home_dir", "log_dir", "logging_problem", "setup_file_logging", "where_details"]

HOME_ENV = "IA_STUDIO_HOME"
LOG_ENV = "IA_STUDIO_LOG_DIR"
_PROBLEM: dict = {}  # the log file's path -> why it could not be opened (the last try)


def home_dir() -> Path:
    """The app's home (settings, autosave, recovery lock, logs).

    ``$IA_STUDIO_HOME``; else the parent of ``$IA_STUDIO_LOG_DIR`` when that is set; else
    ``~/.invariant-attention-studio``. Not created here.
    """
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    logs = os.environ.get(LOG_ENV)
    if logs:
        return Path(logs).parent
    return Path.home() / ".invariant-attention-studio"


def log_dir() -> Path:
    """The log folder: ``$IA_STUDIO_LOG_DIR``, else ``<home_dir()>/logs`` (created when it can be).

    Never raises: a folder that cannot be made (a file in the way, no permission, a name too long)
    is returned as it is; :func:`setup_file_logging` then says that logs are off.
    """
    env = os.environ.get(LOG_ENV)
    path = Path(env) if env else home_dir() / "logs"
    with contextlib.suppress(OSError):
        path.mkdir(parents=True, exist_ok=True)
    return path


class _QuietFileHandler(logging.FileHandler):
    """A log file that drops a record it cannot write (a full disk) instead of printing a traceback.

    :class:`logging.Handler` prints "--- Logging error ---" and a traceback on stderr when a write
    fails; the user would see it, and the record is lost either way.
    """

    dropped = 0

    def handleError(self, record):  # noqa: N802 - logging's name
        self.dropped += 1

    def flush(self):
        try:
            super().flush()
        except OSError:
            self.dropped += 1

    def close(self):
        try:
            super().close()
        except OSError:  # the last buffered bytes could not be written
            self.dropped += 1


def setup_file_logging(name: str) -> Path | None:
    """Send this process's log records (tracebacks included) to ``<log_dir>/<name>.log``.

    Returns the log file, or None when it cannot be opened (logs are off; the reason is in
    :func:`logging_problem`).  A record that cannot be written later (a full disk) is dropped
    without a word on stderr.
    """
    path = log_dir() / f"{name}.log"
    root = logging.getLogger()
    if not any(isinstance(h, logging.FileHandler) and h.baseFilename == os.path.abspath(path)
               for h in root.handlers):
        try:
            handler = _QuietFileHandler(path, encoding="utf-8")
        except OSError as exc:
            _PROBLEM[str(path)] = exc.strerror or type(exc).__name__
            return None
        _PROBLEM.pop(str(path), None)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    return path


def logging_problem(name: str) -> str | None:
    """Why the last :func:`setup_file_logging` of ``name`` could not open its file (None: it could)."""
    return _PROBLEM.get(str(log_dir() / f"{name}.log"))


def where_details(log_path) -> str:
    """"details in <log file>", or that there is no log (``log_path`` None: logs are off)."""
    from .filenames import printable

    if log_path is None:
        return f"no log: {printable(log_dir())} cannot be written"
    return f"details in {log_path}"


def remove_file_logging(folder) -> None:
    """Close and remove the root logger's file handlers writing under ``folder`` (a temporary home going away)."""
    folder = Path(folder).resolve()
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, logging.FileHandler) and folder in Path(h.baseFilename).resolve().parents:
            root.removeHandler(h)
            h.close()
