"""``ia-studio`` / ``python -m app``: open the Invariant Attention Studio window."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from core import __version__
from core.demos import DEMO_NAMES

log = logging.getLogger("ia-studio")


def _excepthook(exc_type, exc, tb):
    """Uncaught exceptions: logged, and shown locally in a dialog (nothing is sent anywhere)."""
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    log.error("uncaught exception\n%s", text)
    try:
        from PySide6.QtWidgets import QApplication, QMessageBox

        from core.logs import log_dir

        if QApplication.instance() is not None:
            box = QMessageBox(QMessageBox.Icon.Critical, "Unexpected error",
                              f"{exc_type.__name__}: {exc}\n\nThe report is in the log folder:\n{log_dir()}")
            box.setDetailedText(text)
            box.open()
            box.setParent(QApplication.activeWindow())
    except Exception:  # noqa: BLE001 - never fail inside the hook
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ia-studio", description="Invariant Attention Studio")
    ap.add_argument("--demo", choices=DEMO_NAMES, help="open with a demo set loaded")
    ap.add_argument("--selftest", action="store_true",
                    help="load demo shapes, transform, run IA through the worker, check every panel, exit 0/1")
    ap.add_argument("--screenshot", metavar="PATH", help="with --selftest: save a screenshot of the window")
    ap.add_argument("--version", action="version", version=f"ia-studio {__version__}")
    args = ap.parse_args(argv)
    if args.selftest and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from core.logs import setup_file_logging

    setup_file_logging("ia-studio")
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:  # a missing system library (libGL, libEGL, ...)
        print(f"ia-studio: cannot start the window: {exc}", file=sys.stderr)
        return 1
    from .main_window import APP_NAME, MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName(APP_NAME)
    app.setOrganizationName("InvariantAttentionStudio")
    sys.excepthook = _excepthook
    window = MainWindow(recover=not args.selftest)
    window.show()
    if args.selftest:
        from .selftest import run_selftest

        code = run_selftest(window, app, args.screenshot)
        window.close()
        return code
    if args.demo:
        window.model.load_demo(args.demo)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
