"""Screenshots of the window for the README and for review: three sizes, light and dark palettes.

    QT_QPA_PLATFORM=offscreen python build_scripts/screenshots.py [--out resources/screenshots]
    QT_QPA_PLATFORM=offscreen python build_scripts/screenshots.py --undenoised --out shots-undenoised

Each shot is the real window after a finished run on the shapes demo (random transforms applied),
grabbed offscreen at 1024×700, 1280×800 and 1920×1080 with the light and a dark palette, and the
window at the end of Demo → Show me.  ``--undenoised``: instead, the window after a run with
*Denoise: auto* on a noisy cryo-EM-like particle stack (``benchmarks/noise_suite.py``, SNR 0.1,
read from an ``.npy`` file as a user's stack is; 4 clusters asked for), at 1024×700 and 1280×800, its
means view showing the
denoised class averages and then the class averages before denoising.
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


def _particles(folder: Path, *, snr: float = 0.1, per_view: int = 30) -> Path:
    """A noisy particle stack of the noise suite (4 views, ``per_view`` each) written as ``particles.npy``."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from noise_suite import NoiseSpec, make_noise_set

    images, _, _ = make_noise_set(NoiseSpec(f"cryo-snr{snr:g}-{per_view}", snr, per_view))
    path = folder / "particles.npy"
    np.save(path, np.stack(images).astype(np.float32))
    return path


def _grab(app, w, size, path: Path) -> Path:
    """The window ``w`` resized to ``size``, settled and redrawn, saved as ``path``."""
    w.resize(*size)
    _wait(app, lambda: False, 0.3)
    w.redraw()
    w.grab().save(str(path))
    return path


def undenoised_shots(app, out: Path) -> None:
    """The window after a denoised run on noisy particles: the denoised class averages, then those before denoising."""
    from iastudio.app.docks import show_view
    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    w.projects.ask = lambda *a, **k: "discard"
    w.show()
    w.resize(*SIZES[1])
    m = w.model
    assert m.load_paths([str(_particles(Path(tempfile.mkdtemp(prefix="ia-particles-"))))], replace=True, size=48)
    if not _wait(app, lambda: not m.loading and m.session.n > 0):
        raise SystemExit("the particles did not load")
    w.run_panel.denoise.setCurrentIndex(w.run_panel.denoise.findData("auto"))
    w.run_panel.clusters_auto.setChecked(False)  # the set's 4 views, as a user who knows them would ask
    w.run_panel.clusters.setValue(4)
    assert w.start_run()
    if not _wait(app, lambda: m.session.state == "finished", 600):
        raise SystemExit(f"the run did not finish (state {m.session.state})")
    show_view(w, w.compare_view)
    mv = w.means_view
    mv.per_cluster.setChecked(True)
    for choice in ("denoised", "undenoised"):
        mv.averages.setCurrentIndex(mv.averages.findData(choice))
        for width, height in SIZES[:2]:
            path = _grab(app, w, (width, height), out / f"means-{choice}-{width}x{height}.png")
            print(f"{path}: {mv.title.text()}; {mv.caption.text()}")
    w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="resources/screenshots")
    ap.add_argument("--undenoised", action="store_true",
                    help="the class averages before denoising after a denoised run on noisy particles")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    if args.undenoised:
        undenoised_shots(app, out)
        return 0
    from iastudio.app.theme import dark_palette

    light = app.palette()
    w = _finished_window(app)
    for scheme, palette in (("light", light), ("dark", dark_palette())):
        app.setPalette(palette)
        for width, height in SIZES:
            path = _grab(app, w, (width, height), out / f"window-{scheme}-{width}x{height}.png")
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
