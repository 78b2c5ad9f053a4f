"""The dock widget: a stack layer in, the clusters, the invariant means and the aligned images out.

A thin view over :mod:`iastudio.core`: the images are preprocessed and clustered by
:class:`~iastudio.core.attention.AttentionRun` in a napari worker thread (progress shown, the viewer
stays responsive); what comes back is added on the GUI thread by the worker's signals.
"""
from __future__ import annotations

import logging

import numpy as np
from magicgui.widgets import ComboBox, Container, FloatSpinBox, Label, ProgressBar, PushButton, SpinBox

from iastudio.core.options import option

log = logging.getLogger(__name__)

AUTO = 0  # "auto" in the integer fields


def layer_images(layer) -> list[np.ndarray]:
    """The 2-D images an image layer holds: each plane of a stack ``(n, H, W)`` or ``(n, H, W, 3)``, or itself."""
    data = np.asarray(layer.data)
    rgb = bool(getattr(layer, "rgb", False))
    if data.ndim == (3 if rgb else 2):
        return [data]
    if data.ndim == (4 if rgb else 3):
        return list(data)
    raise ValueError(f"layer {layer.name!r} has shape {data.shape}: use a stack of 2-D images (n, H, W)")


def cluster_images(images, *, size=64, scale="content", clusters="auto", beta="auto", iterations=3,
                   angle_step=5.0, rotation_range=None, group="se2", method="ia"):
    """Run the engine on ``images`` as the studio's Run panel does; yields progress, returns the results.

    Yields
    ------
    float
        The run's progress in [0, 1].

    Returns
    -------
    dict
        ``labels``, ``scores``, ``means`` (k, S, S), ``aligned`` (n, S, S) and ``features`` (a table:
        cluster, score, theta_deg, tx_px, ty_px per image).
    """
    from iastudio.core.alignment import aligned_images
    from iastudio.core.attention import AttentionRun
    from iastudio.core.preprocess import canvas_to_original, preprocess

    canvas = preprocess(list(images), size=size, scale=scale)
    run = AttentionRun(canvas.images, method=method, beta=beta, iterations=iterations, clusters=clusters,
                       angle_step=angle_step, rotation_range=rotation_range, group=group)
    for snap in run.steps():
        yield float(snap.progress)
    res = run.result()
    aligned = aligned_images(canvas.images, res.labels, run_labels=res.labels, transforms=res.image_transforms,
                             means=res.cluster_means, mirrored=res.mirrored, angle_step=angle_step,
                             rotation_range=rotation_range, group=group)
    poses = [canvas_to_original(res.image_transforms[i], canvas, i) for i in range(len(canvas))]
    features = {"cluster": np.asarray(res.labels, dtype=int), "score": np.asarray(res.scores, dtype=float),
                "theta_deg": np.array([p["theta_deg"] for p in poses]),
                "tx_px": np.array([p["tx_px"] for p in poses]), "ty_px": np.array([p["ty_px"] for p in poses])}
    return {"labels": np.asarray(res.labels), "scores": np.asarray(res.scores), "means": res.cluster_means,
            "aligned": aligned, "features": features, "k_text": res.k_choice.describe(res.n_clusters)
            if res.k_choice is not None else f"{res.n_clusters} clusters"}


def _spin(kind, label: str, name: str):
    """A magicgui spin box for the run option ``name``: its declared minimum, maximum and default."""
    opt = option(name)
    return kind(label=label, value=opt.default, min=opt.minimum, max=opt.maximum)


class ClusterWidget(Container):
    """Cluster by Invariant Attention: pick an image layer holding a stack, set the options, Run.

    Adds, when the run ends: the cluster of each image as the layer's ``features`` (a table, also in
    ``metadata["iastudio"]``), an image layer "<name> means" (one invariant mean per cluster) and
    "<name> aligned" (each image turned onto its cluster's mean).
    """

    def __init__(self, napari_viewer):
        super().__init__(labels=True)
        self.viewer = napari_viewer
        self.layer = ComboBox(label="Images", choices=self._image_layers)
        # ranges and defaults from the run options' declaration (iastudio.core.options); 0 stands for "auto"
        # and for the rotation range's whole circle
        self.clusters = SpinBox(label="Clusters (0: auto)", value=AUTO, min=0, max=option("clusters").maximum)
        self.beta = FloatSpinBox(label="Beta (0: auto)", value=0.0, min=0.0, max=option("beta").maximum, step=0.5)
        self.iterations = _spin(SpinBox, "Iterations", "iterations")
        self.size = _spin(SpinBox, "Working size (px)", "size")
        self.scale = ComboBox(label="Scale", choices=list(option("scale").choices), value=option("scale").default)
        self.group = ComboBox(label="Group", choices=list(option("group").choices), value=option("group").default)
        self.angle_step = _spin(FloatSpinBox, "Angle step (deg)", "angle_step")
        self.rotation_range = FloatSpinBox(label="Rotation range (0: all)", value=0.0, min=0.0,
                                           max=option("rotation_range").maximum)
        self.run_button = PushButton(text="Run")
        self.progress = ProgressBar(label="Progress", value=0, min=0, max=100)
        self.status = Label(label="", value="")
        self.extend([self.layer, self.clusters, self.beta, self.iterations, self.size, self.scale, self.group,
                     self.angle_step, self.rotation_range, self.run_button, self.progress, self.status])
        self.run_button.changed.connect(self.run)
        self.viewer.layers.events.inserted.connect(lambda _e: self.layer.reset_choices())
        self.viewer.layers.events.removed.connect(lambda _e: self.layer.reset_choices())
        self.worker = None
        self.result = None

    def _image_layers(self, _widget=None):
        from napari.layers import Image

        return [lay for lay in self.viewer.layers if isinstance(lay, Image)]

    def options(self) -> dict:
        """The run's options as :func:`cluster_images` takes them."""
        return {"size": int(self.size.value), "scale": self.scale.value,
                "clusters": "auto" if self.clusters.value == AUTO else int(self.clusters.value),
                "beta": "auto" if self.beta.value == 0 else float(self.beta.value),
                "iterations": int(self.iterations.value), "angle_step": float(self.angle_step.value),
                "rotation_range": None if self.rotation_range.value == 0 else float(self.rotation_range.value),
                "group": self.group.value}

    def run(self, *_):
        """Start the run in a napari worker; False when there is nothing to run on or a run is going."""
        from napari.qt.threading import create_worker

        layer = self.layer.value
        if layer is None or self.worker is not None:
            return False
        try:
            images = layer_images(layer)
        except ValueError as exc:
            self.status.value = str(exc)
            return False
        if len(images) < 2:
            self.status.value = "Need at least 2 images"
            return False
        self.run_button.enabled = False
        self.status.value = f"Clustering {len(images)} images…"
        worker = create_worker(cluster_images, images, **self.options())
        worker.yielded.connect(lambda frac: setattr(self.progress, "value", int(100 * frac)))
        worker.returned.connect(lambda res, lay=layer: self._show(lay, res))
        worker.errored.connect(self._failed)
        worker.finished.connect(self._done)
        self.worker = worker
        worker.start()
        return True

    def _show(self, layer, res):
        import pandas as pd

        table = pd.DataFrame(res["features"])
        if hasattr(layer, "features"):
            layer.features = table
        layer.metadata["iastudio"] = table
        self.viewer.add_image(np.asarray(res["means"]), name=f"{layer.name} means")
        self.viewer.add_image(np.asarray(res["aligned"]), name=f"{layer.name} aligned")
        self.progress.value = 100
        self.status.value = f"{len(table)} images -> {res['k_text']}"
        self.result = res

    def _failed(self, exc):
        log.error("napari run failed", exc_info=exc)
        self.status.value = f"The run failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"

    def _done(self):
        self.worker = None
        self.run_button.enabled = True
