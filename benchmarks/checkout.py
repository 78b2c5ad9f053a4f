"""Run the benchmarks from a checkout that is not installed (e.g. copied onto a lent GPU machine).

The folders ``core/`` and ``app/`` install as ``iastudio.core`` / ``iastudio.app`` (a setuptools
package-dir mapping), so a bare checkout has no ``iastudio`` to import.  :func:`importable` stages one
when none is installed: a temporary folder whose ``iastudio/core`` and ``iastudio/app`` link to the
checkout's folders, put first on ``sys.path`` and on ``PYTHONPATH`` (which the benchmark's own
subprocesses inherit).  An installed package is used as it is.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "app")


def stage(folder, root=ROOT) -> Path:
    """Make ``folder/iastudio/{core,app}`` point at ``root/{core,app}`` (links; copies where links fail)."""
    package = Path(folder) / "iastudio"
    package.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        target = package / name
        if not (target.is_symlink() or target.exists()):
            try:
                target.symlink_to(Path(root) / name, target_is_directory=True)
            except OSError:  # no symlinks here (Windows without the privilege)
                shutil.copytree(Path(root) / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    return Path(folder)


def importable() -> Path | None:
    """Make ``iastudio`` importable from this checkout unless it is installed; the staged folder, or None."""
    if importlib.util.find_spec("iastudio") is not None:
        return None
    folder = stage(tempfile.mkdtemp(prefix="iastudio-checkout-"))
    atexit.register(shutil.rmtree, folder, True)  # removes the links, never what they point at
    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return folder
