"""``ia-studio`` / ``python -m iastudio.app``: open the Invariant Attention Studio window."""
from __future__ import annotations

import argparse
import logging
import os
import sys

from iastudio.core import __version__
from iastudio.core.demos import DEMO_NAMES

log = logging.getLogger("ia-studio")


# Libraries Qt needs on Linux, by platform plugin, with the Debian packages that provide them.
_LINUX_LIBS = {
    "common": [("libGL.so.1", "libgl1"), ("libEGL.so.1", "libegl1"), ("libxkbcommon.so.0", "libxkbcommon0"),
               ("libfontconfig.so.1", "libfontconfig1"), ("libglib-2.0.so.0", "libglib2.0-0"),
               ("libdbus-1.so.3", "libdbus-1-3")],
    "xcb": [("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"), ("libxcb-cursor.so.0", "libxcb-cursor0"),
            ("libxcb-icccm.so.4", "libxcb-icccm4"), ("libxcb-image.so.0", "libxcb-image0"),
            ("libxcb-keysyms.so.1", "libxcb-keysyms1"), ("libxcb-render-util.so.0", "libxcb-render-util0"),
            ("libxcb-shape.so.0", "libxcb-shape0"), ("libxcb-xkb.so.1", "libxcb-xkb1")],
}


def missing_system_libraries(platform_name: str | None = None) -> list[tuple[str, str]]:
    """Linux libraries the Qt window needs but this machine lacks: ``[(library, package)]``."""
    if not sys.platform.startswith("linux"):
        return []
    import ctypes

    if platform_name is None:
        platform_name = os.environ.get("QT_QPA_PLATFORM") or ("wayland" if os.environ.get("WAYLAND_DISPLAY") else "xcb")
    wanted = list(_LINUX_LIBS["common"])
    if platform_name.startswith("xcb"):
        wanted += _LINUX_LIBS["xcb"]
    missing = []
    for lib, pkg in wanted:
        try:
            ctypes.CDLL(lib)
        except OSError:
            missing.append((lib, pkg))
    return missing


def _parse(argv):
    ap = argparse.ArgumentParser(prog="ia-studio", description="Invariant Attention Studio")
    ap.add_argument("--demo", choices=DEMO_NAMES, help="open with a demo set loaded")
    ap.add_argument("--selftest", action="store_true",
                    help="load demo shapes, transform, run IA through the worker, check every panel, exit 0/1 "
                         "(in a temporary home: your settings, autosave and logs are not touched)")
    ap.add_argument("--screenshot", metavar="PATH", help="with --selftest: save a screenshot of the window")
    ap.add_argument("--version", action="version", version=f"ia-studio {__version__}")
    ap.add_argument("--quit-after-show", action="store_true", help=argparse.SUPPRESS)  # start-up timing
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if not args.selftest:
        return _start(args)
    from .home import temporary_home

    outcome = {"code": 1}
    with temporary_home(prefix="ia-studio-selftest-", keep=lambda: outcome["code"] != 0) as home:
        outcome["code"] = _start(args)
        if outcome["code"] != 0:
            print(f"selftest: its log is kept in {home / 'logs'}", file=sys.stderr)
    return outcome["code"]


def _start(args) -> int:
    if args.selftest and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from iastudio.core.logs import setup_file_logging, where_details

    log_path = setup_file_logging("ia-studio")  # None: logs are off (the window says why)
    missing = missing_system_libraries()
    if missing:
        msg = ("ia-studio: cannot open the window: this system lacks "
               + ", ".join(lib for lib, _ in missing)
               + ". On Debian/Ubuntu: sudo apt-get install " + " ".join(pkg for _, pkg in missing))
        log.error(msg)
        print(msg, file=sys.stderr)
        return 1
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:  # a missing system library not in the list above
        log.exception("Qt failed to load")
        print(f"ia-studio: cannot start the window: {exc} ({where_details(log_path)})", file=sys.stderr)
        return 1
    from .main_window import APP_NAME

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName(APP_NAME)
    app.setOrganizationName("InvariantAttentionStudio")
    from .errors import install_excepthook
    from .resources import app_icon

    app.setWindowIcon(app_icon())
    install_excepthook()
    from .collector import GuiThreadCollector

    collector = GuiThreadCollector(app)  # Qt objects in reference cycles die on the GUI thread, not a worker's
    try:
        return _show(app, args)
    finally:
        collector.stop()


def _show(app, args) -> int:
    from .main_window import MainWindow

    window = MainWindow(recover=not (args.selftest or args.quit_after_show))
    window.show()
    if args.quit_after_show:
        app.processEvents()
        window.close()
        return 0
    if args.selftest:
        from .selftest import run_selftest

        code = run_selftest(window, app, args.screenshot)
        window.projects.ask = lambda *a, **k: "discard"  # the self-test's session is made to be thrown away
        window.close()
        return code
    if args.demo:
        window.model.session.load_demo(args.demo)
    prepare_warp_later()
    return app.exec()


def prepare_warp_later(delay_ms: int = 1500):
    """Set the warp's compiled loop up in the background once the window is up; the superqt worker.

    The first warp otherwise pays for it (0.3 to 1.5 s), on the GUI thread when it is the user's first
    inspected pair.  Started after ``delay_ms`` so that it does not compete with the window's first paint;
    a worker on Qt's thread pool like every background job of the app (the window waits for the pool
    when it closes).  A failure is only logged: the warp then sets itself up when first used.
    """
    from PySide6.QtCore import QTimer
    from superqt.utils import create_worker

    from iastudio.core.warp import prepare

    worker = create_worker(prepare, _start_thread=False, _connect={
        "errored": lambda exc: logging.getLogger(__name__).warning("setting the warp up failed: %s", exc)})
    QTimer.singleShot(delay_ms, worker.start)
    return worker

if __name__ == "__main__":
    sys.exit(main())
