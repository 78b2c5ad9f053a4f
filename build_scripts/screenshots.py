"""Screenshots of the window for the README and for review: three sizes, light and dark palettes.

    QT_QPA_PLATFORM=offscreen python build_scripts/screenshots.py [--out resources/screenshots]

Each shot is the real window after a finished run on the shapes demo (random transforms applied),
grabbed offscreen at 1024×700, 1280×800 and 1920×1080 with the light and a dark palette, and the
window at the end of Demo → Show me.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("IA_STUDIO_HOME", tempfile.mkdtemp(prefix="ia-shots-"))  # never the user's settings

from PySide6.QtWidgets import QApplication  # noqa: E402

SIZES = ((1024, 700), (1280, 800), (1920, 1080))


def _wait(app, pred, timeout=120.0):
    from PySide6.QtCore import QEvent

    end = time.monotonic() + timeout
    while time.monotonic() < end and not pred():
        app.processEvents()
        app.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)  # as the event loop would (old dock tab bars)
        time.sleep(0.01)
    return pred()


def _finished_window(app):
    from iastudio.app.docks import show_view
    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    w.projects.ask = lambda *a, **k: "discard"  # a throwaway session
    w.show()
    m = w.model
    m.session.load_demo("shapes")
    w.run_panel.size.setValue(40)
    m.session.apply_random_transforms(rotation_deg=180, shift_percent=8, seed=1)
    assert m.start(backend="numpy", iterations=2)
    if not _wait(app, lambda: m.session.state == "finished"):
        raise SystemExit(f"the run did not finish (state {m.session.state})")
    show_view(w, w.compare_view)
    w.redraw()
    return w


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="resources/screenshots")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from iastudio.app.theme import dark_palette

    light = app.palette()
    w = _finished_window(app)
    for scheme, palette in (("light", light), ("dark", dark_palette())):
        app.setPalette(palette)
        for width, height in SIZES:
            w.resize(width, height)
            _wait(app, lambda: False, 0.3)
            w.redraw()
            path = out / f"window-{scheme}-{width}x{height}.png"
            w.grab().save(str(path))
            print(f"{path}: window {w.width()}x{w.height()} (minimum {w.minimumSizeHint().width()} px wide)")
    w.close()
    app.setPalette(light)
    path = out / "show-me-1280x800.png"
    shown = _show_me(app)
    shown.grab().save(str(path))
    shown.close()
    print(f"{path}: the end of Demo → Show me")
    return 0


def _show_me(app):
    """The window at the end of Demo → Show me (1280×800, light)."""
    from iastudio.app.demo import show_me
    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    w.projects.ask = lambda *a, **k: "discard"
    w.show()
    w.resize(1280, 800)
    assert show_me(w)
    if not _wait(app, lambda: w.model.session.state == "finished"):
        raise SystemExit(f"Show me did not finish (state {w.model.session.state})")
    _wait(app, lambda: False, 0.5)
    w.redraw()
    return w


if __name__ == "__main__":
    sys.exit(main())
