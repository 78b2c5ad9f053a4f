"""Where logs go: tracebacks are written here, never shown to users."""
from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["log_dir", "setup_file_logging"]


def log_dir() -> Path:
    """The log folder: ``$IA_STUDIO_LOG_DIR`` or ``~/.invariant-attention-studio/logs``."""
    env = os.environ.get("IA_STUDIO_LOG_DIR")
    path = Path(env) if env else Path.home() / ".invariant-attention-studio" / "logs"
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
