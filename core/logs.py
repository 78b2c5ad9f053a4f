"""Where logs go: tracebacks are written here, never shown to users."""
from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["home_dir", "log_dir", "setup_file_logging"]

HOME_ENV = "IA_STUDIO_HOME"
LOG_ENV = "IA_STUDIO_LOG_DIR"


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
    """The log folder: ``$IA_STUDIO_LOG_DIR``, else ``<home_dir()>/logs`` (created)."""
    env = os.environ.get(LOG_ENV)
    path = Path(env) if env else home_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def setup_file_logging(name: str) -> Path:
    """Send this process's log records (tracebacks included) to ``<log_dir>/<name>.log``."""
    path = log_dir() / f"{name}.log"
    root = logging.getLogger()
    if not any(isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path for h in root.handlers):
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    return path


def remove_file_logging(folder) -> None:
    """Close and remove the root logger's file handlers writing under ``folder`` (a temporary home going away)."""
    folder = Path(folder).resolve()
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, logging.FileHandler) and folder in Path(h.baseFilename).resolve().parents:
            root.removeHandler(h)
            h.close()
