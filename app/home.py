"""The app's home folder (settings, autosave, recovery lock, logs), and a throw-away one.

``IA_STUDIO_HOME`` moves the whole home; ``IA_STUDIO_LOG_DIR`` moves only the logs (see
:mod:`iastudio.core.logs`). ``ia-studio --selftest`` and the test suite run in a temporary home so
they never touch the user's autosave, settings or lock.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from iastudio.core.logs import HOME_ENV, LOG_ENV, home_dir, remove_file_logging

__all__ = ["HOME_ENV", "app_home", "temporary_home"]


def app_home() -> Path:
    """The home folder in use now (created)."""
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    return home


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
