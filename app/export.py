"""Exports: assignments CSV, per-cluster folders, panels as figures (PNG, PDF, SVG), the convergence GIF.

A run that denoised its images also exports its class averages of the images before denoising with the
panels, under ``ia-cluster``'s names: ``means_undenoised.npy`` (one per run cluster, float32) and the
figure ``means_undenoised.png`` (with ``.pdf`` and ``.svg``).
"""
from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import numpy as np

from iastudio.core import alignment
from iastudio.core.atomic import atomic_write_bytes
from iastudio.core.display import mosaic
from iastudio.core.frames import cluster_tiles
from iastudio.core.report import assignment_rows as _rows
from iastudio.core.report import write_assignments
from iastudio.core.stacks import split_member


def assignment_rows(session) -> list[dict]:
    """The CLI's columns plus ``cluster_name``, for the current (edited) clusters."""
    book = session.book
    res = session.final.result if session.final is not None else None
    return _rows(session.data.paths, book.labels, true_labels=session.data.labels, names=book.name_of,
                 run_labels=None if res is None else res.labels,
                 transforms=None if res is None else res.image_transforms,
                 scores=None if res is None else res.scores, canvas=session.canvas)


def export_assignments(session, path) -> Path:
    write_assignments(path, assignment_rows(session))
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


def aligned_images(session) -> np.ndarray:
    """Each working image aligned onto its (current) cluster's mean (:func:`iastudio.core.alignment.aligned_images`)."""
    res = session.final.result
    opts = {}
    if session.run is not None:
        s = session.run.settings
        opts = dict(angle_step=s.angle_step, rotation_range=s.rotation_range, group=s.group)
    return alignment.aligned_images(session.working, session.book.array(), run_labels=res.labels,
                                    transforms=res.image_transforms, means=res.cluster_means,
                                    mirrored=res.mirrored, **opts)


def export_cluster_folders(session, folder, *, aligned: bool, progress=None) -> Path:
    """One sub-folder per cluster (named after it) with its original or aligned images."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    imgs = aligned_images(session) if aligned else None
    book = session.book
    for i, path in enumerate(session.data.paths):
        if progress is not None and progress(i, session.n) is False:
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
            _png(sub / f"{stem}{'_aligned' if aligned else ''}.png", imgs[i] if aligned else session.working[i])
    if progress is not None:
        progress(session.n, session.n)
    return folder


PANEL_WIDTH_CM = 16.0  # an exported figure's width: a page's text width; at 300 dpi its PNG is 1,890 px wide


def _plain(text: str) -> str:
    """A title without its rich-text tags."""
    return re.sub(r"<[^>]+>", "", text or "").strip()


def _panel_figures(window, width_cm: float) -> dict:
    """``{name: figure}`` of what each view shows now (views still showing their hint are left out)."""
    from iastudio.core import report

    figures = {}
    wv, mv, cv, kv = window.weights_view, window.means_view, window.convergence_view, window.compare_view
    if not wv.empty and wv.image_item.image is not None:
        figures["weights"] = lambda: report.weights_figure(
            wv.image_item.image, groups=wv.groups, title=_plain(wv.title.text()), width_cm=width_cm,
            levels=tuple(wv.colorbar.levels()))
    if not mv.empty and mv.image_item.image is not None:
        figures["means"] = lambda: report.mosaic_figure(mv.image_item.image, title=_plain(mv.title.text()),
                                                        width_cm=width_cm)
    if not cv.empty:
        curves = {key: item.getData()[1] for key, item in cv.curves.items() if item.getData()[1] is not None}
        if curves:
            figures["convergence_curves"] = lambda: report.curves_figure(curves, width_cm=width_cm)
        if cv.n_points:
            xy = np.concatenate([np.c_[item.getData()] for item in cv.points if len(item.data)])
            colours = [item.opts["brush"].color().name() for item in cv.points for _ in range(len(item.data))]
            figures["manifold_map"] = lambda: report.map_figure(
                xy, colours, title=cv.map_plot.getPlotItem().titleLabel.text, width_cm=width_cm,
                axes=(cv.map_plot.getAxis("bottom").labelText, cv.map_plot.getAxis("left").labelText))
    if not kv.empty and kv.n_tiles:
        for name, plot, item in zip(("ka_means", "ia_means"), kv.plots, kv.items):
            if item.image is not None:
                figures[name] = (lambda plot=plot, item=item: report.mosaic_figure(
                    item.image, title=plot.getPlotItem().titleLabel.text, width_cm=width_cm))
    shown = window.sync.with_book(window.model.session.final)  # the clusters as the views draw them
    if shown is not None and shown.undenoised_means is not None and shown.cluster_means is not None:
        from .views import UNDENOISED_TITLE

        tiles = cluster_tiles(shown, undenoised=True)[1]
        figures["means_undenoised"] = lambda: report.mosaic_figure(mosaic(tiles), title=UNDENOISED_TITLE,
                                                                   width_cm=width_cm)
    return figures


def export_undenoised_means(session, folder) -> Path | None:
    """A denoised run's class averages of the images before denoising as ``folder/means_undenoised.npy``
    (float32, one per cluster of the run, as ``ia-cluster`` writes it); None when the run has none."""
    final = session.final
    if final is None or final.undenoised_means is None:
        return None
    buf = io.BytesIO()
    np.save(buf, np.asarray(final.undenoised_means, dtype=np.float32), allow_pickle=False)
    return atomic_write_bytes(Path(folder) / "means_undenoised.npy", buf.getvalue())


def export_panels(window, folder, *, width_cm: float = PANEL_WIDTH_CM, dpi: int = 300, progress=None) -> list[Path]:
    """Every view that shows something, as a figure for print: PNG at ``dpi``, and vector PDF and SVG.

    Each figure is ``width_cm`` wide (a PNG of ``width_cm / 2.54 * dpi`` pixels, its resolution recorded),
    drawn with matplotlib from what the view shows: W with its colour bar and the lines between the
    clusters, the means, the convergence curves with their legend, the map, KA's and IA's means, and after a run that
    denoised its images its class averages before denoising (``means_undenoised``, with
    ``means_undenoised.npy``: :func:`export_undenoised_means`).  The
    selection's tint and the colour bar's handles are not part of them.  ``progress(done, total)``
    is called after each figure; returning False stops there (the figures written are kept).
    """
    from iastudio.core.report import save_figure

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    array = export_undenoised_means(window.model.session, folder)
    if array is not None:
        written.append(array)
    figures = _panel_figures(window, width_cm)
    for k, (name, make) in enumerate(figures.items()):
        fig = make()
        for fmt in ("png", "pdf", "svg"):
            written.append(save_figure(fig, folder / f"{name}.{fmt}", dpi=dpi, close=fmt == "svg"))
        if progress is not None and progress(k + 1, len(figures)) is False:
            break
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


def export_gif(session, path, *, progress=None) -> Path:
    """The convergence animation (every recorded step of the run) as a looping GIF."""
    import imageio.v3 as iio

    frames = session.frames
    if not frames:
        raise ValueError("run first: there is no animation to export")
    pics = []
    for k, pic in enumerate(animation_frames(frames)):
        pics.append(pic)
        if progress is not None:
            progress(k + 1, len(frames))
    suffix = Path(path).suffix or ".gif"
    return atomic_write_bytes(path, iio.imwrite("<bytes>", np.stack(pics), extension=suffix, duration=600, loop=0))
