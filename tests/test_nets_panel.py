"""The Networks panel: trains a tiny model for one epoch in its worker thread and draws turning attention."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.imageset import ImageSet


def _labelled_set():
    rng = np.random.default_rng(0)
    images, labels = [], []
    for k in range(12):
        img = np.zeros((30, 24))
        if k % 2:
            img[5:25, 10:14] = 1.0  # a bar
        else:
            img[8:20, 6:18] = 0.6  # a box
        images.append(np.clip(img + 0.05 * rng.random(img.shape), 0, 1))
        labels.append("bar" if k % 2 else "box")
    return ImageSet(images, [f"x/{k}.png" for k in range(12)], labels)


def test_panel_without_torch_says_how_to_add_it(qtbot, monkeypatch):
    import iastudio.app.nets_panel as np_mod

    monkeypatch.setattr(np_mod, "torch_available", lambda: False)
    panel = np_mod.NetsPanel(lambda: None)
    qtbot.addWidget(panel)
    assert "invariant-attention-studio[nets]" in panel.status.text()
    assert panel.shutdown()


def test_panel_trains_one_epoch_and_attention_turns(qtbot, tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (optional extra [nets])")
    from iastudio.app.nets_panel import CURRENT_SET, NetsPanel

    iset = _labelled_set()
    panel = NetsPanel(lambda: iset)
    qtbot.addWidget(panel)
    panel.resize(1000, 420)
    panel.show()
    panel.data_box.setCurrentText(CURRENT_SET)
    panel.model_box.setCurrentText("a-p4cnn")
    panel.epochs.setValue(1)
    with qtbot.waitSignal(panel.trainingEnded, timeout=120000):
        panel.train_button.click()
    qtbot.waitUntil(lambda: panel.state.model is not None, timeout=30000)
    # the live curve got the epoch, the status reports the result
    x, _ = panel.acc_curve.getData()
    assert list(x) == [1]
    assert "test accuracy" in panel.status.text()
    assert panel.train_button.isEnabled()
    assert panel.progress.value() == panel.progress.maximum() > 0
    # input + one attention map per rotation of p4
    items = panel._map_items
    assert len(items) == 5
    assert [t.text for _, _, t in items][1:] == ["0°", "90°", "180°", "270°"]
    before = [np.array(item.image) for _, item, _ in items]
    panel.grab().save(str(tmp_path / "nets_panel_0.png"))
    panel.angle.setValue(90)
    after = [np.array(item.image) for _, item, _ in items]
    assert_allclose(after[0], np.rot90(before[0]), atol=1e-6)  # the input turned
    for h in range(4):  # each map turned and moved on to the next rotation
        assert_allclose(after[1 + (h + 1) % 4], np.rot90(before[1 + h]), atol=1e-5)
    assert "True label" in panel.prediction.text()
    panel.grab().save(str(tmp_path / "nets_panel_90.png"))
    assert panel.shutdown()


def test_training_runs_in_a_worker_and_a_failure_is_shown_not_raised(qtbot, monkeypatch):
    pytest.importorskip("torch", reason="PyTorch is not installed (optional extra [nets])")
    import iastudio.app.nets_panel as np_mod

    threads = []

    def failing(name, data, epochs, *, on_epoch, on_batch, should_stop):
        threads.append(threading.current_thread())
        on_batch(3, 3)
        on_epoch({"epoch": 1, "train_loss": 0.5, "test_accuracy": 0.25})
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(np_mod, "train_in_background", failing)
    iset = _labelled_set()
    panel = np_mod.NetsPanel(lambda: iset)
    qtbot.addWidget(panel)
    panel.data_box.setCurrentText(np_mod.CURRENT_SET)
    with qtbot.waitSignal(panel.trainingEnded, timeout=60000):
        panel.train_button.click()
    assert threads
    assert threads[0] is not threading.main_thread()
    x, y = panel.acc_curve.getData()  # the epoch reached the curve (queued to the GUI thread)
    assert list(x) == [1]
    assert_allclose(y, [0.25])
    assert panel.progress.value() == 3
    assert panel.status.text() == "Training failed: CUDA out of memory (simulated) (details in the log)"
    assert panel.train_button.isEnabled()
    assert not panel.stop_button.isEnabled()
    assert panel.worker is None
    assert panel.shutdown()
