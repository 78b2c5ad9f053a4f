"""GUI tests (pytest-qt, offscreen): what is drawn and emitted, not only that nothing crashed."""
import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import PointerEvent  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt, QThreadPool, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.model import gpu_status  # noqa: E402
from iastudio.core import __version__  # noqa: E402
from iastudio.core.attention import AttentionRun  # noqa: E402
from iastudio.core.backend import Backend  # noqa: E402


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "home" / "logs"))


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


def _wait_state(qtbot, window, states, timeout=60000):
    qtbot.waitUntil(lambda: window.model.session.state in states, timeout=timeout)


def test_title_size_and_gpu_choice(window):
    assert window.windowTitle().startswith(f"Invariant Attention Studio {__version__}")
    # 1280 x 800, or less where the screen is smaller: the whole window fits the screen it opens on
    avail = window.screen().availableGeometry()
    assert window.width() == min(1280, avail.width() - 8)
    assert window.height() == min(800, avail.height() - 32)
    gpu_item = window.run_panel.backend.model().item(2)
    if not gpu_item.isEnabled():  # no GPU here: disabled, with the reason
        assert gpu_status()[1] in gpu_item.toolTip()


def test_demo_loading_and_summary(window):
    window.images_panel.demo_box.setCurrentIndex(1)
    window.images_panel.demo_box.activated.emit(1)  # "shapes"
    assert window.model.session.n == 18
    assert window.images_panel.thumbs.rowCount() == 18
    assert "18 images · 3 labels" in window.images_panel.summary.text()
    icon = window.images_panel.thumbs.data(window.images_panel.thumbs.index(0), Qt.ItemDataRole.DecorationRole)
    assert not icon.isNull()
    assert icon.width() > 10


def test_random_transforms_apply_and_reset(window):
    m = window.model
    m.session.load_demo("shapes")
    before = m.session.working.copy()
    window.transform_panel.seed.setValue(3)
    window.transform_panel.apply_btn.click()
    assert np.abs(np.rad2deg(m.session.transforms[:, 0])).max() > 20
    assert not np.allclose(m.session.working, before)
    np.testing.assert_allclose(np.linalg.norm(m.session.working.reshape(m.session.n, -1), axis=1), 1,
                               atol=1e-4, rtol=1e-5)
    window.transform_panel.reset_btn.click()
    assert np.array_equal(m.session.working, m.session.base)


def test_per_image_transform_and_preview(window, qtbot):
    m = window.model
    m.session.load_demo("shapes")
    window.images_panel.view.setCurrentIndex(window.images_panel.thumbs.index(4))
    assert m.session.selected == 4
    assert m.session.selection == [4]
    other = m.session.working[5].copy()
    window.transform_panel.theta.setValue(90.0)
    assert m.session.transforms[4, 0] == pytest.approx(np.pi / 2)
    assert np.array_equal(m.session.working[5], other)  # only the selected image changed
    assert not np.allclose(m.session.working[4], m.session.base[4])
    assert window.transform_panel.theta_slider.value() == 90
    pix = window.transform_panel.preview.pixmap()
    assert pix is not None
    assert not pix.isNull()
    window.transform_panel.show_original.setChecked(True)
    assert window.transform_panel.preview.pixmap().toImage() != pix.toImage()


def test_full_run_panels_match_the_engine(window, qtbot):
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(32)
    window.transform_panel.apply_btn.click()
    frames = []
    m.session.events.frame.connect(frames.append)
    window.run_panel.start_btn.click()
    assert m.session.state == "running"
    assert not window.run_panel.start_btn.isEnabled()
    _wait_state(qtbot, window, ("finished", "failed"))
    assert m.session.state == "finished"
    window.redraw()
    res = m.session.final.result
    order = m.session.final.order
    np.testing.assert_allclose(window.weights_view.image_item.image, res.weights[np.ix_(order, order)],
                               rtol=1e-5, atol=1e-8)
    assert window.means_view.n_tiles == 18
    assert window.convergence_view.n_points == 18
    assert window.compare_view.n_tiles == res.n_clusters == 3
    assert "IA ARI 1.00" in window.compare_view.caption.text()
    assert frames[0] is None  # Start first clears what the views showed
    frames = frames[1:]
    assert len(frames) >= 3
    assert window.redraws >= 1
    assert None not in frames
    stages = {f.snapshot.stage for f in frames}
    assert {"similarity", "means", "done"} <= stages
    assert window.run_panel.progress.value() == 1000
    # the same run done directly gives the same W
    direct = AttentionRun(m.session.working, backend="numpy", **window.run_panel.options()).run()
    np.testing.assert_allclose(direct.weights, res.weights, rtol=1e-5, atol=1e-8)


def test_stop_within_a_second_and_resume_to_the_same_result(window, qtbot):
    m = window.model
    m.session.load_demo("digits")
    window.run_panel.size.setValue(24)
    window.run_panel.iterations.setValue(2)
    # an explicit β: no guard, so no forecast skips the means this test stops in
    window.run_panel.beta_auto.setChecked(False)
    window.run_panel.start_btn.click()
    qtbot.waitUntil(lambda: m.session.latest is not None and m.session.latest.snapshot.stage == "means", timeout=60000)
    import time

    t0 = time.monotonic()
    window.run_panel.stop_btn.click()
    _wait_state(qtbot, window, ("stopped", "finished"), timeout=30000)
    assert time.monotonic() - t0 < 5.0  # prompt, with room for a loaded machine
    assert m.session.state == "stopped"
    assert window.run_panel.resume_btn.isEnabled()
    window.run_panel.resume_btn.click()
    _wait_state(qtbot, window, ("finished",), timeout=120000)
    direct = AttentionRun(m.session.working, backend="numpy", **window.run_panel.options()).run()
    assert np.array_equal(m.session.final.result.weights, direct.weights)
    assert np.array_equal(m.session.final.result.labels, direct.labels)


def test_errors_reach_a_dialog(window, qtbot, monkeypatch):
    def boom(self):
        raise RuntimeError("simulated failure in the engine")
        yield  # pragma: no cover

    monkeypatch.setattr(AttentionRun, "steps", boom)
    window.model.session.load_demo("shapes")
    window.run_panel.start_btn.click()
    _wait_state(qtbot, window, ("failed",))
    box = window.last_dialog
    assert isinstance(box, QMessageBox)
    assert "simulated failure" in box.text()
    assert "Traceback" in box.detailedText()


def test_gpu_failure_falls_back_to_cpu(window, qtbot, monkeypatch):
    real_steps = AttentionRun.steps

    def flaky(self):
        if self.backend.name == "cupy":
            raise RuntimeError("CUDA error: an illegal memory access")
        yield from real_steps(self)

    monkeypatch.setattr(AttentionRun, "steps", flaky)
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(24)
    messages = []
    m.session.events.message.connect(messages.append)
    assert m.start(backend=Backend("cupy", np, "Fake GPU"), iterations=1)
    _wait_state(qtbot, window, ("finished", "failed"))
    assert m.session.state == "finished"
    assert any("continuing on the CPU" in t for t in messages)


def test_start_with_fewer_than_two_images_is_refused(window):
    assert window.start_run() is False
    assert window.last_dialog is not None
    assert "at least 2 images" in window.last_dialog.text()
    assert window.model.session.state == "idle"


def _drop(qtbot, window, paths):
    """Drop ``paths`` on the window and wait until the worker's images are in the session."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    ev = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=30000):
        window.dropEvent(ev)


def test_drag_and_drop_files_and_unreadable_ones(window, qtbot, tmp_path):
    tmp_path = tmp_path / "drop"
    tmp_path.mkdir()
    img = np.zeros((20, 20), np.uint8)
    img[5:12, 4:15] = 255
    for k in range(3):
        Image.fromarray(np.roll(img, k, axis=1)).save(tmp_path / f"{k}.png")
    (tmp_path / "bad.png").write_text("garbage")
    messages = []
    window.model.session.events.message.connect(messages.append)
    _drop(qtbot, window, [tmp_path / "bad.png"])
    assert window.model.session.n == 0
    assert "bad.png" in messages[-1]
    _drop(qtbot, window, [tmp_path])
    assert window.model.session.n == 3
    assert "skipped 1" in messages[-1]
    assert "bad.png" in messages[-1]
    assert "details" in window.images_panel.summary.text()


def test_closing_during_a_run_stops_cleanly(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.model.session.load_demo("digits")
    w.run_panel.start_btn.click()
    qtbot.waitUntil(lambda: w.model.session.latest is not None, timeout=60000)
    w.close()
    assert QThreadPool.globalInstance().activeThreadCount() == 0


def test_selftest_entry_point(qtbot, tmp_path, capsys):
    from iastudio.app.__main__ import main

    shot = tmp_path / "shot.png"
    assert main(["--selftest", "--screenshot", str(shot)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert "W heatmap = result W" in out
    assert Image.open(shot).size[0] >= 700


def test_the_warp_is_set_up_on_a_background_thread_after_start(qtbot, monkeypatch):
    import importlib

    from iastudio.app.__main__ import prepare_warp_later

    warp_module = importlib.import_module("iastudio.core.warp")  # the module (the package exports the function)
    monkeypatch.setattr(warp_module, "_KERNEL", None)  # as in a fresh process
    seen = []
    real = warp_module._compiled
    monkeypatch.setattr(warp_module, "_compiled", lambda: seen.append(threading.current_thread()) or real())
    worker = prepare_warp_later(50)
    with qtbot.waitSignal(worker.finished, timeout=60000):
        assert seen == []  # nothing yet: the window paints first
        assert warp_module._KERNEL is None
    assert len(seen) == 1
    assert seen[0] is not threading.main_thread()  # set up off the GUI thread
    assert warp_module._KERNEL is not None


def test_missing_system_library_gives_a_readable_message(monkeypatch, capsys, tmp_path):
    import ctypes
    import sys as _sys

    from iastudio.app import __main__ as entry

    if not _sys.platform.startswith("linux"):
        pytest.skip("the library check is for Linux")
    real = ctypes.CDLL

    def fake(name, *a, **k):
        if name == "libEGL.so.1":
            raise OSError("libEGL.so.1: cannot open shared object file")
        return real(name, *a, **k)

    monkeypatch.setattr(ctypes, "CDLL", fake)
    assert entry.missing_system_libraries("offscreen") == [("libEGL.so.1", "libegl1")]
    assert entry.main(["--quit-after-show"]) == 1
    err = capsys.readouterr().err
    assert "libEGL.so.1" in err
    assert "apt-get install libegl1" in err
    log = (tmp_path / "home" / "logs" / "ia-studio.log").read_text()
    assert "libEGL.so.1" in log


def test_heatmap_hover_names_the_pair(window, qtbot):
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(24)
    window.run_panel.iterations.setValue(1)
    window.start_run()
    _wait_state(qtbot, window, ("finished",))
    window.redraw()

    order = m.session.final.order
    window.weights_view._hover(PointerEvent(2.5, 1.5))  # row 1, column 2 of the grouped matrix
    i, j = int(order[1]), int(order[2])
    text = window.weights_view.hover.text()
    w = m.session.final.result.weights
    assert f"i = {i} ({i:03d})" in text
    assert f"j = {j} ({j:03d})" in text
    assert f"{w[i, j]:.4f}" in text


def test_log_ticks_are_readable():
    from iastudio.app.views import log_ticks

    labels = [t[1] for t in log_ticks(0.01, 0.8)]
    assert labels == ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"]
    narrow = [t[1] for t in log_ticks(0.3, 0.6)]
    assert len(narrow) >= 3
    assert "0.5" in narrow


def test_adding_files_keeps_the_transforms_already_set(window, tmp_path):
    img = np.zeros((20, 20), np.uint8)
    img[5:12, 4:15] = 255
    for k in range(2):
        Image.fromarray(np.roll(img, k, axis=0)).save(tmp_path / f"a{k}.png")
    Image.fromarray(img.T).save(tmp_path / "b.png")
    m = window.model
    m.session.add_paths([tmp_path / "a0.png", tmp_path / "a1.png"])
    m.session.set_transform(1, 30.0, 1.5, -2.0)
    m.session.add_paths([tmp_path / "b.png"])
    assert m.session.n == 3
    assert np.allclose(m.session.transforms[1], [np.deg2rad(30), 1.5, -2.0])
    assert not m.session.transforms[2].any()
    assert not np.allclose(m.session.working[1], m.session.base[1])


def test_k_evidence_and_blank_images_shown_after_a_run(window, qtbot, tmp_path):
    from iastudio.core.demos import base_shapes

    bases, _ = base_shapes()
    d = tmp_path / "set"
    d.mkdir()
    for k, img in enumerate(np.repeat(bases[:2], 3, axis=0)):
        Image.fromarray((np.rot90(img, k % 4) * 255).astype(np.uint8)).save(d / f"{k}.png")
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(d / "empty-scan.png")
    m = window.model
    m.session.add_paths([str(d)])
    window.run_panel.size.setValue(24)
    window.run_panel.iterations.setValue(1)
    window.run_panel.start_btn.click()
    _wait_state(qtbot, window, ("finished",))
    text = window.clusters_panel.evidence.text()
    res = m.session.final.result
    assert res.n_clusters == 3
    assert f"Run: {res.k_choice.describe(3)}" in text
    assert "1 blank image in a cluster of its own: empty-scan.png" in text
    window.clusters_panel.grab().save(str(tmp_path / "clusters_panel.png"))



def test_the_evidence_names_the_images_that_fit_their_cluster_much_worse(qtbot):
    from types import SimpleNamespace

    from iastudio.app.panels import ClustersPanel
    from iastudio.core.clustering import KChoice

    panel = ClustersPanel()
    qtbot.addWidget(panel)
    labels = np.repeat([0, 1], 6)
    scores = np.full(12, 0.99)
    scores[8] = 0.59
    paths = [f"/data/particles/p{i:02d}.tif" for i in range(12)]
    paths[8] = "/data/particles/odd_64x37.png"
    result = SimpleNamespace(k_choice=KChoice(2, 2, 0.6, "eigengap", [(2, 0.6)]), n_clusters=2, blank=None,
                             labels=labels, scores=scores, notes=["a note of the run"])
    panel.show_evidence(result, paths)
    lines = panel.evidence.text().split("\n")
    assert lines[1] == "1 image fits its cluster much worse than the rest of it (junk, or a stray?): odd_64x37.png"
    assert lines[2] == "a note of the run"
    scores[8] = 0.985  # it fits: nothing named
    panel.show_evidence(result, paths)
    assert "worse" not in panel.evidence.text()


def test_long_run_evidence_scrolls_instead_of_being_cut_off(qtbot, tmp_path):
    # at 1280 x 800 the Clusters dock is short; the run's lines (denoiser, guard's notes) can be long
    from iastudio.app.panels import ClustersPanel

    panel = ClustersPanel()
    qtbot.addWidget(panel)
    lines = ["Run: 3 clusters — unsure: 4 or 5 also plausible",
             "Not denoised: the images are not mostly gray and of one size (a stack of particle images is)",
             "Stopped before the first iteration of 3: an iteration would move images between clusters without "
             "making them fit better. Details: iteration 1 not run: its forecast (the distances of its means "
             "estimated from the current distances "
             "and W) moves images between clusters without fitting the input images better (silhouette on the "
             "input distances 0.047 -> not defined (one cluster, or each image alone))",
             "the last line of the evidence"]
    panel.evidence.setText("\n".join(lines))
    panel.resize(360, 420)
    panel.show()
    qtbot.waitExposed(panel)
    label, area = panel.evidence, panel.evidence_area
    assert label.height() >= label.heightForWidth(label.width())  # every line laid out, none cut
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0  # more than fits: it scrolls
    bar.setValue(bar.maximum())
    bottom = label.mapTo(area.viewport(), label.rect().bottomLeft()).y()
    assert bottom <= area.viewport().height() + 1  # scrolled to the end, the last line is in view
    assert label.text().endswith("the last line of the evidence")
    panel.grab().save(str(tmp_path / "clusters_panel_long.png"))


def test_frames_and_results_arrive_on_the_gui_thread(window, qtbot):
    from PySide6.QtCore import QThread
    from PySide6.QtWidgets import QApplication

    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(24)
    threads = []
    def on_gui_thread(_frame):
        threads.append(QThread.currentThread() is QApplication.instance().thread())

    m.session.events.frame.connect(on_gui_thread)
    m.session.events.finished.connect(on_gui_thread)
    assert m.start(backend="numpy", iterations=1, mean_steps=2)
    _wait_state(qtbot, window, ("finished", "failed"))
    assert m.session.state == "finished"
    assert len(threads) >= 3
    assert all(threads)


@pytest.mark.slow
def test_run_panel_dask_field_reaches_the_run(window, qtbot):
    """Run panel → Dask cluster: an address that cannot work is refused with the reason; local:1 runs there."""
    pytest.importorskip("distributed")
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(16)
    window.run_panel.iterations.setValue(1)
    assert "Dask" in window.run_panel.dask.toolTip()
    messages = []
    m.session.events.message.connect(messages.append)
    window.run_panel.dask.setText("local:many")
    assert window.start_run() is False
    assert "whole number of workers" in messages[-1]
    assert m.session.run is None
    window.run_panel.dask.setText("local:1")
    assert window.start_run()
    _wait_state(qtbot, window, ("finished", "failed"))
    assert m.session.state == "finished"
    assert m.session.run.client is not None
    assert window.run_panel.dask_address() == "local:1"
