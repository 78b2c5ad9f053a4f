"""``ia-studio --selftest``: a full run through the real window and worker, checked."""
from __future__ import annotations

import sys
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
    frame = m.final
    res = frame.result
    checks = []
    shown = window.weights_view.image_item.image
    expected = res.weights[np.ix_(frame.order, frame.order)]
    checks.append(("W heatmap = result W in display order",
                   shown is not None and shown.shape == expected.shape and np.allclose(shown, expected),
                   f"{None if shown is None else shown.shape}"))
    window.means_view.per_cluster.setChecked(False)
    window.means_view.show_frame(frame)
    checks.append(("means grid: one tile per image", window.means_view.n_tiles == m.n,
                   f"{window.means_view.n_tiles} tiles"))
    window.means_view.per_cluster.setChecked(True)
    checks.append(("means grid: one tile per cluster", window.means_view.n_tiles == res.n_clusters,
                   f"{window.means_view.n_tiles} tiles, {res.n_clusters} clusters"))
    window.means_view.per_cluster.setChecked(False)
    pts = window.convergence_view.n_points
    checks.append(("manifold map: one point per image", pts == m.n, f"{pts} points"))
    xs, _ys = window.convergence_view.curves["median"].getData()
    checks.append(("convergence curves: one point per distance computation",
                   xs is not None and len(xs) == len(res.history), f"{0 if xs is None else len(xs)} points"))
    checks.append(("KA vs IA: one tile per cluster", window.compare_view.n_tiles == res.n_clusters,
                   f"{window.compare_view.n_tiles}"))
    checks.append(("redrawn during the run", window.redraws >= 2, f"{window.redraws} redraws"))
    views = (window.weights_view, window.means_view, window.convergence_view, window.compare_view)
    empty = [type(v).__name__ for v in views if getattr(v, "empty", False)]
    checks.append(("every view shows its plot, not its hint", not empty, ", ".join(empty) or "all drawn"))
    if m.data.has_labels:
        from sklearn.metrics import adjusted_rand_score

        ari = adjusted_rand_score(m.data.labels, res.labels)
        checks.append(("clusters match the demo's labels", ari == 1.0, f"ARI {ari:.3f}"))
    return checks


def run_selftest(window, app: QApplication, screenshot: str | None = None, timeout_s: float = 300) -> int:
    m = window.model
    m.load_demo("shapes", seed=0)
    window.transform_panel.rotation.setValue(180)
    window.transform_panel.shift.setValue(8)
    window.transform_panel.seed.setValue(1)
    window.transform_panel.apply_btn.click()
    window.run_panel.start_btn.click()
    t0 = time.monotonic()
    ok = wait_for(app, lambda: m.state in ("finished", "failed"), timeout_s)
    app.processEvents()
    if not ok or m.state != "finished":
        print(f"selftest: FAILED - the run did not finish (state {m.state})", file=sys.stderr)
        return 1
    window.redraw()
    checks = check_window(window)
    if screenshot:
        QTimer.singleShot(0, lambda: None)
        app.processEvents()
        window.grab().save(screenshot)
        checks.append(("screenshot saved", __import__("os").path.getsize(screenshot) > 10000, screenshot))
    for name, good, detail in checks:
        print(f"selftest: {'ok  ' if good else 'FAIL'} {name} ({detail})")
    print(f"selftest: run took {time.monotonic() - t0:.1f} s on {m.run.backend.describe()}")
    return 0 if all(good for _, good, _ in checks) else 1
