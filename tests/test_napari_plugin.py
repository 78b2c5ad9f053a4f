"""The napari plugin (optional extra ``[napari]``): its manifest validates, its widget clusters a stack layer.

Skipped where napari is not installed (the studio does not depend on it).
"""
import os
from pathlib import Path

import numpy as np
import pytest

napari = pytest.importorskip("napari")
npe2 = pytest.importorskip("npe2")

MANIFEST = Path(__file__).resolve().parents[1] / "app" / "napari" / "napari.yaml"


def test_the_manifest_validates_and_names_the_widget():
    from npe2 import PluginManifest
    from npe2.manifest.utils import import_python_name

    pm = PluginManifest.from_file(MANIFEST)  # what `npe2 validate napari.yaml` checks: the schema
    pm.validate_imports()  # `npe2 validate --imports`: every python_name imports
    (widget,) = pm.contributions.widgets
    assert widget.display_name == "Cluster by Invariant Attention"
    (command,) = pm.contributions.commands
    assert command.id == widget.command
    assert import_python_name(command.python_name).__name__ == "ClusterWidget"


@pytest.fixture
def shapes_stack():
    from iastudio.core import se2
    from iastudio.core.demos import base_shapes
    from iastudio.core.warp import warp

    bases, _ = base_shapes()
    tau = se2.random_transforms(12, rotation_range=180, shift_range=4, seed=5)
    return np.clip(warp(np.repeat(bases, 4, axis=0), tau), 0, 1).astype(np.float32), np.repeat(np.arange(3), 4)


def _run_and_check(viewer, widget, layer, truth, qtbot):
    from sklearn.metrics import adjusted_rand_score

    assert widget.layer.value is layer
    widget.size.value, widget.clusters.value = 24, 3
    assert widget.run()
    assert not widget.run()  # one run at a time
    qtbot.waitUntil(lambda: widget.result is not None and widget.worker is None, timeout=180_000)
    means, aligned = viewer.layers["particles means"], viewer.layers["particles aligned"]
    assert means.data.shape == (3, 24, 24)
    assert aligned.data.shape == (12, 24, 24)
    table = layer.metadata["iastudio"]
    assert list(table.columns) == ["cluster", "score", "theta_deg", "tx_px", "ty_px"]
    assert len(table) == 12
    assert adjusted_rand_score(truth, table["cluster"]) == 1.0
    assert widget.progress.value == 100
    assert widget.status.value.startswith("12 images -> 3 clusters")
    assert widget.run_button.enabled


def test_the_widget_clusters_a_stack_layer_offscreen(qtbot, shapes_stack):
    """On napari's viewer model (no canvas, so no OpenGL: runs with the offscreen Qt platform)."""
    from napari.components import ViewerModel

    from iastudio.app.napari.widget import ClusterWidget

    stack, truth = shapes_stack
    viewer = ViewerModel()
    layer = viewer.add_image(stack, name="particles")
    widget = ClusterWidget(viewer)
    qtbot.addWidget(widget.native)
    _run_and_check(viewer, widget, layer, truth, qtbot)


def test_the_widget_refuses_a_layer_that_is_not_a_stack(qtbot):
    from napari.components import ViewerModel

    from iastudio.app.napari.widget import ClusterWidget

    viewer = ViewerModel()
    viewer.add_image(np.zeros((2, 3, 8, 8), np.float32), name="volume")
    widget = ClusterWidget(viewer)
    qtbot.addWidget(widget.native)
    assert not widget.run()
    assert "use a stack of 2-D images" in widget.status.value


@pytest.mark.skipif(os.environ.get("QT_QPA_PLATFORM") == "offscreen",
                    reason="napari's canvas needs OpenGL: run under xvfb-run with QT_QPA_PLATFORM=xcb")
def test_the_widget_docked_in_a_napari_window(make_napari_viewer, qtbot, shapes_stack):
    from iastudio.app.napari.widget import ClusterWidget

    stack, truth = shapes_stack
    viewer = make_napari_viewer()
    layer = viewer.add_image(stack, name="particles")
    widget = ClusterWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Cluster by Invariant Attention")
    _run_and_check(viewer, widget, layer, truth, qtbot)
