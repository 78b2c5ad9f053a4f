"""Where the bundled resources (icons) are: beside the code, or inside a frozen bundle."""
from __future__ import annotations

import sys
from pathlib import Path


def resource_path(*parts: str) -> Path:
    """Path of a file under ``resources/`` (works from a checkout and from the PyInstaller bundle)."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base.joinpath("resources", *parts)


def app_icon():
    """The application icon, or an empty icon when the file is not there."""
    from PySide6.QtGui import QIcon

    path = resource_path("icons", "ia-studio.png")
    return QIcon(str(path)) if path.exists() else QIcon()
