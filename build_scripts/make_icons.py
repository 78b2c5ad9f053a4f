"""Render resources/icons/ia-studio.svg to the PNG and ICO files the bundle and installers use.

    python build_scripts/make_icons.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "resources" / "icons"


def main():
    from PIL import Image
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ICONS / "ia-studio.svg"))
    img = QImage(256, 256, QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.transparent)
    p = QPainter(img)
    renderer.render(p)
    p.end()
    png = ICONS / "ia-studio.png"
    img.save(str(png))
    sizes = [(s, s) for s in (16, 32, 48, 64, 128, 256)]
    Image.open(png).save(ICONS / "ia-studio.ico", sizes=sizes)
    print(f"wrote {png} and {ICONS / 'ia-studio.ico'}")
    del app


if __name__ == "__main__":
    main()
