"""Exports: assignments CSV, per-cluster folders, panels as figures (PNG, PDF, SVG), the convergence GIF,
and for particles read from MRC files, RELION's ``particles.star`` with ``class_averages.mrcs``.

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
from iastudio.core.frames import book_frame, cluster_tiles
from iastudio.core.imageset import set_source
from iastudio.core.report import assignment_rows as _rows
from iastudio.core.report import write_assignments
from iastudio.core.stacks import split_member
from iastudio.core.wording import count_of


def cluster_poses(session, *, progress=None, means=None) -> tuple:
    """Each image's pose onto its current cluster's mean and its score, edits included.

    ``(transforms, scores, changed)`` (:func:`iastudio.core.cluster_means.poses_onto_clusters`): the
    run's where a cluster is the run's own, else onto the edited cluster's invariant mean, computed
    from its images (as the means view shows it).  ``(None, None, {})`` before a run.
    """
    from iastudio.core.cluster_means import poses_onto_clusters

    # ``means``: filled with the invariant means of the edited clusters whose poses are computed here

    book, final = session.book, session.final
    res = final.result if final is not None else None
    if res is None or book is None or len(res.labels) != book.n:
        return None, None, {}
    working = session.working
    if working is None or len(working) != book.n:  # no images to align: the run's poses of its own clusters
        same = np.asarray(book.labels) == np.asarray(res.labels)
        return (np.where(same[:, None], np.asarray(res.image_transforms, dtype=float), np.nan),
                np.where(same, np.asarray(res.scores, dtype=float), np.nan), {})
    distances = res.input_distances if res.input_distances is not None else final.snapshot.distances
    return poses_onto_clusters(working, book.labels, run_labels=res.labels, transforms=res.image_transforms,
                               scores=res.scores, n_run=len(res.cluster_means), distances=distances,
                               progress=progress, means=means, **session.alignment_options())


def assignment_rows(session, *, poses=None) -> list[dict]:
    """The CLI's columns plus ``cluster_name``, for the current (edited) clusters.

    The poses (``theta_deg``, ``tx_px``, ``ty_px``, ``score``) are onto each image's current
    cluster's mean (:func:`cluster_poses`, or ``poses`` as it gives them).
    """
    book = session.book
    transforms, scores, _ = cluster_poses(session) if poses is None else poses
    return _rows(session.data.paths, book.labels, true_labels=session.data.labels, names=book.name_of,
                 transforms=transforms, scores=scores, canvas=session.canvas)


def export_assignments(session, path, *, progress=None, notes=None) -> Path:
    """``assignments.csv`` of the current clusters (:func:`assignment_rows`).

    ``progress(done, total)``: after each edited cluster whose poses are computed.  ``notes``: a list
    the export adds what the person should know to (the poses computed for edited clusters).
    """
    poses = cluster_poses(session, progress=progress)
    write_assignments(path, assignment_rows(session, poses=poses))
    transforms, _, changed = poses
    if notes is not None and changed:
        n = sum(len(m) for m in changed.values())
        whose = "that cluster's" if len(changed) == 1 else "each cluster's"
        notes.append(f"the {count_of(n, 'image')} of {count_of(len(changed), 'edited cluster')} are aligned to "
                     f"{whose} own mean")
    if notes is not None and transforms is not None:
        assigned = np.asarray(session.book.labels) >= 0
        blank = int((np.isnan(np.asarray(transforms, dtype=float)[:, 0]) & assigned).sum())
        if blank:
            notes.append(f"the poses of {count_of(blank, 'image')} are blank (their edited clusters' means were "
                         "not computed)")
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


def set_name(session) -> str:
    """What the exports name the session's images by: the project's name, else the images' folder
    (a stack's own folder; a demo's name), else "Images"."""
    project = getattr(session, "project_path", None)
    if project:
        return _safe(Path(project).stem)
    folder, demo = set_source(getattr(session.data, "paths", []) or [])
    name = folder.name if folder is not None else demo or ""
    return _safe(name) if name else "Images"


def new_folder(parent, name: str) -> Path:
    """A new, empty folder ``parent/name`` (``name 2``, ``name 3``… when that exists): never another's."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 10_000):
        folder = parent / (name if k == 1 else f"{name} {k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{parent / name}: too many folders of that name")


def export_cluster_folders(session, folder, *, aligned: bool, progress=None) -> Path:
    """Into one new folder inside ``folder`` ("<set> clusters", or "<set> aligned clusters"; " 2" etc.
    when that exists: :func:`new_folder`), one sub-folder per cluster (named after it) with its original
    or aligned images; returns the new folder."""
    imgs = aligned_images(session) if aligned else None
    folder = new_folder(folder, f"{set_name(session)} {'aligned clusters' if aligned else 'clusters'}")
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


def relion_problem(session) -> str | None:
    """Why the session's clusters cannot be written for RELION (None: they can)."""
    from iastudio.core.relion import mrc_box, relion_image_name

    names = [relion_image_name(p) for p in session.data.paths]
    if not names or any(n is None for n in names):
        other = sum(n is None for n in names)
        return (f"RELION export needs particles from MRC files (.mrcs, .mrc or a STAR file listing them); "
                f"{other} of {len(names)} images are not")
    res = session.final.result
    if res.mirrored is not None and np.asarray(res.mirrored).any():
        return "RELION's 2-D poses have no mirror, and this run mirrored some images (Transforms: mirror)"
    try:
        boxes = mrc_box(names)
    except (OSError, ValueError) as exc:
        return f"RELION export reads each stack's box size, and could not: {exc}"
    if len(boxes) != 1 or boxes[0][0] != boxes[0][1]:
        return "RELION export needs square particles of one box size; found " + \
            ", ".join(f"{w}x{h}" for w, h in boxes[:4])
    return None


def relion_pixel_size(session) -> float | None:
    """The particles' pixel size (Å) from their STAR rows, when every image has one (else None: ask)."""
    from iastudio.core.particle_ctf import ParticleCtf

    ctf = session.data.ctf or []
    if len(ctf) != session.n or not all(isinstance(c, ParticleCtf) for c in ctf):
        return None
    return float(np.median([c.pixel_size for c in ctf]))


def export_relion(session, folder, *, pixel_size: float | None = None, progress=None, notes=None) -> Path | None:
    """Into a new folder "<set> relion" inside ``folder``: ``particles.star`` (each assigned image's class, in
    the order of the Clusters list, its pose onto its cluster's mean, in the file's pixels, and its STAR
    row's CTF where every image has one) and ``class_averages.mrcs`` (image N: class N's invariant mean, the
    one its particles' poses are onto: an edited cluster's is computed here with its poses).

    ``pixel_size`` (Å) is needed where the images have no CTF from a STAR file (:func:`relion_pixel_size`).
    Unassigned images are left out (``notes``).  ``progress(done, total)``: after each edited cluster whose
    poses are computed (:func:`cluster_poses`); returning False cancels: nothing is written, None returned.
    """
    from iastudio.core import se2
    from iastudio.core.particle_ctf import ParticleCtf
    from iastudio.core.relion import (
        mrc_box,
        relion_image_name,
        relion_poses,
        write_class_averages,
        write_particles_star,
    )

    cancelled = []

    def step(done, total):
        going = progress is None or progress(done, total) is not False
        if not going:
            cancelled.append(True)
        return going

    book = session.book
    computed: dict = {}  # the edited clusters' invariant means, which their poses are onto
    transforms, scores, _ = cluster_poses(session, progress=step, means=computed)
    if cancelled:
        return None
    frame = book_frame(session.final, book.labels, book.names, images=session.working, means=session.cluster_means)
    order = {c: k for k, c in enumerate(frame.cluster_ids)}  # class k + 1: the k-th cluster, its mean image k
    means = np.array(frame.cluster_means, dtype=np.float32)
    for c, mean in computed.items():
        means[order[c]] = mean
    transforms = se2.compose(np.asarray(session.transforms, dtype=float), np.asarray(transforms, dtype=float))
    names = [relion_image_name(p) for p in session.data.paths]
    box = mrc_box(names)[0][0]
    poses = relion_poses(transforms, session.canvas, box=box)
    keep = np.array([c in order for c in book.labels]) & np.isfinite(poses).all(axis=1)
    ctf = session.data.ctf or []
    ctf = [ctf[i] for i in np.flatnonzero(keep)] if all(isinstance(c, ParticleCtf) for c in ctf) and ctf else None
    pixel = relion_pixel_size(session) if pixel_size is None else float(pixel_size)
    out = new_folder(folder, f"{set_name(session)} relion")
    write_particles_star(out / "particles.star", names=[names[i] for i in np.flatnonzero(keep)],
                         clusters=[order[c] for c in np.asarray(book.labels)[keep]], poses=poses[keep],
                         scores=np.asarray(scores, dtype=float)[keep], pixel_size=pixel, box=box, ctf=ctf)
    write_class_averages(out / "class_averages.mrcs", means, pixel_size=pixel / float(np.mean(session.canvas.scale)))
    if notes is not None and (left := int((~keep).sum())):
        notes.append(f"{count_of(left, 'image')} left out (unassigned)")
    return out


PANEL_WIDTH_CM = 16.0  # an exported figure's width: a page's text width; at 300 dpi its PNG is 1,890 px wide


def _plain(text: str) -> str:
    """A title without its rich-text tags."""
    return re.sub(r"<[^>]+>", "", text or "").strip()


def _panel_figures(window, width_cm: float, notes=None) -> dict:
    """``{name: figure}`` of what each view shows now (views still showing their hint are left out).

    ``notes``: a list to add what was left out, and why, to (no figure holds blank tiles).
    """
    from iastudio.core import report

    notes = [] if notes is None else notes
    figures = {}
    wv, mv, cv, kv = window.weights_view, window.means_view, window.convergence_view, window.compare_view
    if not wv.empty and wv.image_item.image is not None:
        figures["weights"] = lambda: report.weights_figure(
            wv.image_item.image, groups=wv.groups, title=_plain(wv.title.text()), width_cm=width_cm,
            levels=tuple(wv.colorbar.levels()))
    if not mv.empty and mv.image_item.image is not None:
        image = mv.image_item.image
        frame = getattr(mv, "_frame", None)
        if mv.shows_undenoised and frame is not None and frame.undenoised_missing:
            image = _without_blank_tiles(frame, notes)  # None: every tile would be blank
        if image is not None:
            figures["means"] = lambda: report.mosaic_figure(image, title=_plain(mv.title.text()), width_cm=width_cm)
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
    undenoised = undenoised_tiles(window.model.session, notes)
    if undenoised is not None:
        tiles, title = undenoised
        figures["means_undenoised"] = lambda: report.mosaic_figure(mosaic(tiles), title=title, width_cm=width_cm)
    return figures


def _cluster_list(names) -> str:
    names = list(names)
    return ", ".join(names[:4]) + ("…" if len(names) > 4 else "")


def _without_blank_tiles(frame, notes) -> np.ndarray | None:
    """The means view's mosaic of the class averages before denoising without the edited clusters that
    have none (drawn blank there), and a note naming them; None when no cluster has one."""
    ids, tiles = cluster_tiles(frame, undenoised=True)
    missing = set(frame.undenoised_missing)
    names = frame.cluster_names or [f"Cluster {c + 1}" for c in ids]
    left = [str(names[row]) for row, c in enumerate(ids) if c in missing]
    notes.append(f"means leaves out {len(left)} edited cluster{'s' if len(left) != 1 else ''} "
                 f"({_cluster_list(left)}) with no average before denoising yet (a reopened project does not "
                 "hold the images before denoising: re-run to average them)")
    keep = [row for row, c in enumerate(ids) if c not in missing]
    return mosaic(tiles[keep]) if keep else None


def undenoised_tiles(session, notes=None) -> tuple | None:
    """The figure ``means_undenoised`` of what ``means_undenoised.npy`` holds: ``(tiles, title)`` or None.

    One upright 8-bit tile per cluster of the run (its class average of the images before denoising,
    turned as its invariant mean is: :func:`iastudio.core.display.upright_tiles`), in the run's
    cluster order.  A cluster whose average is blank (zero or not finite: nothing to show) is left
    out and named in ``notes``; so is the fact that these are the run's clusters when edits changed them
    (a changed cluster's average before denoising is not in a reopened project). None: no such averages.
    """
    from iastudio.core.display import upright_tiles
    from iastudio.core.report import cluster_number

    from .views import UNDENOISED_TITLE

    notes = [] if notes is None else notes
    final = session.final
    if final is None or final.undenoised_means is None or final.cluster_means is None:
        return None
    und = np.asarray(final.undenoised_means, dtype=np.float32)
    means = np.asarray(final.cluster_means)
    flat = und.reshape(len(und), -1)
    shows = np.isfinite(flat).all(axis=1) & (np.nan_to_num(flat, nan=0.0).max(axis=1, initial=0.0) > 0)
    keep = np.flatnonzero(shows)
    if keep.size < len(und):
        blank = [f"cluster {cluster_number(c)}" for c in np.flatnonzero(~shows)]
        notes.append(f"means_undenoised leaves out {_cluster_list(blank)} of the run: "
                     f"{'its average is' if len(blank) == 1 else 'their averages are'} blank (nothing to show)")
    if keep.size == 0:
        return None
    title = UNDENOISED_TITLE
    book, res = session.book, final.result
    if book is not None and res is not None and book.n == len(res.labels) and not np.array_equal(
            np.asarray(book.labels), np.asarray(res.labels)):
        title = f"{UNDENOISED_TITLE}, the run's {len(und)} clusters"
        notes.append(f"means_undenoised shows the run's {len(und)} clusters before your edits, as "
                     "means_undenoised.npy holds them")
    return upright_tiles(und[keep], like=means[keep]), title


def export_undenoised_means(session, folder) -> Path | None:
    """A denoised run's class averages of the images before denoising as ``folder/means_undenoised.npy``
    (float32, one per cluster of the run, as ``ia-cluster`` writes it); None when the run has none."""
    final = session.final
    if final is None or final.undenoised_means is None:
        return None
    buf = io.BytesIO()
    np.save(buf, np.asarray(final.undenoised_means, dtype=np.float32), allow_pickle=False)
    return atomic_write_bytes(Path(folder) / "means_undenoised.npy", buf.getvalue())


def export_panels(window, folder, *, width_cm: float = PANEL_WIDTH_CM, dpi: int = 300, progress=None,
                  notes=None) -> list[Path]:
    """Every view that shows something, as a figure for print: PNG at ``dpi``, and vector PDF and SVG.

    Written into one new folder inside ``folder``, "<set> figures" (" 2" etc. when that exists:
    :func:`new_folder`), never over a file of the person's; returns the files written, all in that new
    folder (``written[0].parent``).  Nothing to write (no view shows anything, no class averages before
    denoising): ``[]``, and no folder is made.

    Each figure is ``width_cm`` wide (a PNG of ``width_cm / 2.54 * dpi`` pixels, its resolution recorded),
    drawn with matplotlib from what the view shows: W with its colour bar and the lines between the
    clusters, the means, the convergence curves with their legend, the map, KA's and IA's means, and after a run that
    denoised its images its class averages before denoising (``means_undenoised``, with
    ``means_undenoised.npy``: :func:`export_undenoised_means`).  The
    selection's tint and the colour bar's handles are not part of them.  ``progress(done, total)``
    is called after each figure; returning False stops there (the figures written are kept).

    ``means_undenoised`` shows what ``means_undenoised.npy`` holds, the run's clusters
    (:func:`undenoised_tiles`); no figure draws a blank tile for a cluster with nothing to show: it is
    left out, and ``notes`` (a list) says which and why.
    """
    from iastudio.core.report import save_figure

    session = window.model.session
    figures = _panel_figures(window, width_cm, notes)
    final = session.final
    if not figures and (final is None or final.undenoised_means is None):
        return []
    folder = new_folder(folder, f"{set_name(session)} figures")
    written = []
    array = export_undenoised_means(session, folder)
    if array is not None:
        written.append(array)
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
