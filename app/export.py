"""Exports: assignments CSV, per-cluster folders, panels as PNG/SVG, the convergence GIF."""
from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import numpy as np

from iastudio.core import alignment
from iastudio.core.atomic import atomic_write_bytes
from iastudio.core.report import assignment_rows as _rows
from iastudio.core.report import write_assignments
from iastudio.core.stacks import split_member


def assignment_rows(model) -> list[dict]:
    """The CLI's columns plus ``cluster_name``, for the current (edited) clusters."""
    book = model.book
    res = model.final.result if model.final is not None else None
    return _rows(model.data.paths, book.labels, true_labels=model.data.labels, names=book.name_of,
                 run_labels=None if res is None else res.labels,
                 transforms=None if res is None else res.image_transforms,
                 scores=None if res is None else res.scores, canvas=model.canvas)


def export_assignments(model, path) -> Path:
    write_assignments(path, assignment_rows(model))
    return Path(path)


def _safe(name: str) -> str:
    return re.sub(r"[^\w\- .]+", "_", name).strip() or "cluster"


def _png(path, img):
    """``img`` scaled to its maximum, as an 8-bit PNG written atomically (the user's file mode)."""
    import imageio.v3 as iio

    a = np.asarray(img, dtype=np.float32)
    top = float(a.max()) or 1.0
    atomic_write_bytes(path, iio.imwrite("<bytes>", (np.clip(a / top, 0, 1) * 255).astype(np.uint8),
                                         extension=".png"))


def aligned_images(model) -> np.ndarray:
    """Each working image aligned onto its (current) cluster's mean (:func:`iastudio.core.alignment.aligned_images`)."""
    res = model.final.result
    opts = {}
    if model.run is not None:
        s = model.run.settings
        opts = dict(angle_step=s.angle_step, rotation_range=s.rotation_range, group=s.group)
    return alignment.aligned_images(model.working, model.book.array(), run_labels=res.labels,
                                    transforms=res.image_transforms, means=res.cluster_means,
                                    mirrored=res.mirrored, **opts)


def export_cluster_folders(model, folder, *, aligned: bool, progress=None) -> Path:
    """One sub-folder per cluster (named after it) with its original or aligned images."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    imgs = aligned_images(model) if aligned else None
    book = model.book
    for i, path in enumerate(model.data.paths):
        if progress is not None and progress(i, model.n) is False:
            break
        sub = folder / _safe(book.name_of(book.labels[i]))
        sub.mkdir(exist_ok=True)
        member = split_member(path)  # image N of a stack, "stack.mrcs#N": "stack_N"
        stem = _safe(f"{member.path.stem}_{member.index + 1}" if member is not None else Path(path).stem
                     if not path.startswith("demo:") else path.replace("demo:", "").replace("/", "_"))
        src = Path(path)
        if not aligned and src.exists():
            shutil.copy2(src, sub / src.name)
        else:
            _png(sub / f"{stem}{'_aligned' if aligned else ''}.png", imgs[i] if aligned else model.working[i])
    if progress is not None:
        progress(model.n, model.n)
    return folder


@contextlib.contextmanager
def overlays_hidden(window):
    """Hide the views' interactive decorations (selection tints, colour-bar handles) for a picture."""
    views = (window.weights_view, window.means_view, window.convergence_view, window.compare_view,
             window.inspect_view)
    items = [it for v in views for it in v.overlay_items()]
    shown = [it.isVisible() for it in items]
    for it in items:
        it.setVisible(False)
    try:
        yield items
    finally:
        for it, was in zip(items, shown):
            it.setVisible(was)


def export_panels(window, folder) -> list[Path]:
    """Every live panel as PNG (pyqtgraph's exporter, >= 600 px wide) and SVG (Qt's SVG generator).

    The pictures show the data only: the selection tint and the colour bar's handles are left out.
    """
    import pyqtgraph.exporters as ex
    from PySide6.QtCore import QRect, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    widgets = {
        "weights": window.weights_view.plot,
        "means": window.means_view.plot,
        "convergence_curves": window.convergence_view.curves_plot,
        "manifold_map": window.convergence_view.map_plot,
        "ka_means": window.compare_view.plots[0],
        "ia_means": window.compare_view.plots[1],
    }
    written = []
    with overlays_hidden(window):
        for name, widget in widgets.items():
            item = widget.getPlotItem()
            png = ex.ImageExporter(item)
            png.parameters()["width"] = max(600, int(item.sceneBoundingRect().width() * 2))
            png.export(str(folder / f"{name}.png"))
            size = widget.size() if widget.width() > 10 else QSize(600, 450)
            gen = QSvgGenerator()
            gen.setFileName(str(folder / f"{name}.svg"))
            gen.setSize(size)
            gen.setViewBox(QRect(0, 0, size.width(), size.height()))
            gen.setTitle(name.replace("_", " "))
            painter = QPainter(gen)
            widget.render(painter)
            painter.end()
            written += [folder / f"{name}.png", folder / f"{name}.svg"]
    return written


def animation_frames(frames) -> list[np.ndarray]:
    """One RGB picture per recorded step: W (grouped) beside the means mosaic."""
    import pyqtgraph as pg
    from skimage.transform import resize

    from .views import tile

    cmap = pg.colormap.get("viridis")
    out = []
    for f in frames:
        w = f.snapshot.weights[np.ix_(f.order, f.order)]
        w = w / max(float(w.max()), 1e-12)
        heat = cmap.map(resize(w, (256, 256), order=0), mode="byte")[..., :3].astype(np.uint8)
        mosaic = tile(f.snapshot.means[f.order]) / 255.0
        mosaic = resize(mosaic, (256, int(256 * mosaic.shape[1] / mosaic.shape[0])), order=1)
        gray = (np.repeat(mosaic[..., None], 3, axis=2) * 255).astype(np.uint8)
        gap = np.full((256, 8, 3), 255, np.uint8)
        out.append(np.concatenate([heat, gap, gray], axis=1))
    width = max(o.shape[1] for o in out)
    pics = []
    for k, o in enumerate(out):
        o = np.pad(o, ((0, 8), (0, width - o.shape[1]), (0, 0)), constant_values=255)
        o[-6:, : int(width * (k + 1) / len(out))] = (214, 39, 40)  # how far through the run
        pics.append(o)
    return pics


def export_gif(model, path, *, progress=None) -> Path:
    """The convergence animation (every recorded step of the run) as a looping GIF."""
    import imageio.v3 as iio

    frames = model.history_frames
    if not frames:
        raise ValueError("run first: there is no animation to export")
    pics = []
    for k, pic in enumerate(animation_frames(frames)):
        pics.append(pic)
        if progress is not None:
            progress(k + 1, len(frames))
    suffix = Path(path).suffix or ".gif"
    return atomic_write_bytes(path, iio.imwrite("<bytes>", np.stack(pics), extension=suffix, duration=600, loop=0))
