"""``ia-studio --selftest``: a full run through the real window and worker, checked."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication


def wait_for(app: QApplication, predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def check_window(window) -> list[tuple[str, bool, str]]:
    """Every panel's content against the finished result: (check, ok, detail)."""
    m = window.model
    frame = m.session.final
    res = frame.result
    checks = []
    shown = window.weights_view.image_item.image
    expected = res.weights[np.ix_(frame.order, frame.order)]
    checks.append(("W heatmap = result W in display order",
                   shown is not None and shown.shape == expected.shape and np.allclose(shown, expected),
                   f"{None if shown is None else shown.shape}"))
    window.means_view.per_cluster.setChecked(False)
    window.means_view.show_frame(frame)
    checks.append(("means grid: one tile per image", window.means_view.n_tiles == m.session.n,
                   f"{window.means_view.n_tiles} tiles"))
    window.means_view.per_cluster.setChecked(True)
    checks.append(("means grid: one tile per cluster", window.means_view.n_tiles == res.n_clusters,
                   f"{window.means_view.n_tiles} tiles, {res.n_clusters} clusters"))
    window.means_view.per_cluster.setChecked(False)
    pts = window.convergence_view.n_points
    checks.append(("manifold map: one point per image", pts == m.session.n, f"{pts} points"))
    xs, _ys = window.convergence_view.curves["median"].getData()
    checks.append(("convergence curves: one point per distance computation",
                   xs is not None and len(xs) == len(res.history), f"{0 if xs is None else len(xs)} points"))
    checks.append(("KA vs IA: one tile per cluster", window.compare_view.n_tiles == res.n_clusters,
                   f"{window.compare_view.n_tiles}"))
    checks.append(("redrawn during the run", window.redraws >= 2, f"{window.redraws} redraws"))
    views = (window.weights_view, window.means_view, window.convergence_view, window.compare_view)
    empty = [type(v).__name__ for v in views if getattr(v, "empty", False)]
    checks.append(("every view shows its plot, not its hint", not empty, ", ".join(empty) or "all drawn"))
    if m.session.data.has_labels:
        from sklearn.metrics import adjusted_rand_score

        ari = adjusted_rand_score(m.session.data.labels, res.labels)
        checks.append(("clusters match the demo's labels", ari == 1.0, f"ARI {ari:.3f}"))
    return checks


def check_reachable_paths(window, folder) -> list[tuple[str, bool, str]]:
    """What a user reaches besides the run: each demo, each image and stack format, the exports, About.

    These import the parts of SciPy, scikit-learn, Pillow and imageio that the run itself does not, so the
    frozen self-test fails where the installer left out something the app needs.
    """
    from pathlib import Path

    import imageio.v3 as iio
    import mrcfile
    import tifffile

    from iastudio.core.demos import DEMO_NAMES, load_demo
    from iastudio.core.imageset import load_images

    from .edition import is_packaged
    from .export import export_assignments, export_cluster_folders, export_gif
    from .help import about_text

    folder = Path(folder)
    checks = []
    sizes = {name: len(load_demo(name).images) for name in DEMO_NAMES}
    checks.append(("every demo loads", all(sizes.values()), ", ".join(f"{k} {v}" for k, v in sizes.items())))
    rng = np.random.default_rng(0)
    img = (rng.random((24, 20)) * 255).astype(np.uint8)
    files = folder / "formats"
    files.mkdir()
    for ext in ("png", "jpg", "bmp", "tif"):
        iio.imwrite(files / f"one.{ext}", img)
    tifffile.imwrite(files / "pages.tif", np.stack([img, img[::-1]]))
    np.save(files / "one.npy", img.astype(np.float32))
    with mrcfile.new(files / "stack.mrcs") as mrc:
        mrc.set_data(np.stack([img, img[:, ::-1]]).astype(np.float32))
    loaded = load_images(files)
    checks.append(("PNG, JPEG, BMP, TIFF, multi-page TIFF, NPY, MRC stack read", len(loaded.images) == 9
                   and not loaded.skipped, f"{len(loaded.images)} images, {len(loaded.skipped)} skipped"))
    m = window.model
    s = m.session
    csv = export_assignments(s, folder / "clusters.csv")
    tree = export_cluster_folders(s, folder / "clusters", aligned=True)
    gif = export_gif(s, folder / "run.gif")
    pngs = list(Path(tree).rglob("*.png"))
    checks.append(("exports: CSV, aligned cluster folders, animation", csv.stat().st_size > 0 and len(pngs) == s.n
                   and gif.stat().st_size > 0, f"{len(pngs)} images in folders, GIF {gif.stat().st_size} bytes"))
    about = about_text(m)
    frozen_says_pip = is_packaged() and "pip install" in about  # the installed app cannot pip install
    checks.append(("Help → About names the edition", "Edition:" in about and not frozen_says_pip,
                   next(line for line in about.splitlines() if line.startswith("Edition:"))[:60]))
    return checks


def write_inventory(path: str | None) -> None:
    """Write what the self-test loaded to ``path`` (JSON): the imported modules and the mapped files.

    The installer build (``build_scripts/build.py``) sets ``IA_SELFTEST_INVENTORY`` and lists what the bundle
    carries that the self-test never loaded.  The mapped files are read from ``/proc/self/maps`` (Linux).
    """
    if not path:
        return
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            mapped = sorted({line.split(maxsplit=5)[5].strip() for line in fh
                             if len(line.split(maxsplit=5)) == 6 and line.split(maxsplit=5)[5].startswith("/")})
    except OSError:
        mapped = []
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"modules": sorted(sys.modules), "mapped": mapped}, fh, indent=0)


def run_selftest(window, app: QApplication, screenshot: str | None = None, timeout_s: float = 300) -> int:
    m = window.model
    m.session.load_demo("shapes", seed=0)
    window.transform_panel.rotation.setValue(180)
    window.transform_panel.shift.setValue(8)
    window.transform_panel.seed.setValue(1)
    window.transform_panel.apply_btn.click()
    window.run_panel.start_btn.click()
    t0 = time.monotonic()
    ok = wait_for(app, lambda: m.session.state in ("finished", "failed"), timeout_s)
    app.processEvents()
    if not ok or m.session.state != "finished":
        print(f"selftest: FAILED - the run did not finish (state {m.session.state})", file=sys.stderr)
        return 1
    window.redraw()
    checks = check_window(window)
    with tempfile.TemporaryDirectory(prefix="ia-selftest-") as folder:
        try:
            checks += check_reachable_paths(window, folder)
        except Exception as exc:  # noqa: BLE001 - a missing module or a broken export is a failed check
            checks.append(("demos, formats, exports, About", False, f"{type(exc).__name__}: {exc}"))
    if screenshot:
        QTimer.singleShot(0, lambda: None)
        app.processEvents()
        window.grab().save(screenshot)
        checks.append(("screenshot saved", os.path.getsize(screenshot) > 10000, screenshot))
    for name, good, detail in checks:
        print(f"selftest: {'ok  ' if good else 'FAIL'} {name} ({detail})")
    write_inventory(os.environ.get("IA_SELFTEST_INVENTORY"))
    print(f"selftest: run took {time.monotonic() - t0:.1f} s on {m.session.run.backend.describe()}")
    return 0 if all(good for _, good, _ in checks) else 1
