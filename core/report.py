"""Writing a run's results: CSV, JSON, arrays and figures (matplotlib, Agg).

Figures are written at print resolution: a PNG at :data:`PRINT_DPI` dots per inch (its size in inches
is the figure's), or as vector PDF or SVG, by the file's suffix (:func:`save_figure`).  The figure
functions (:func:`weights_figure`, :func:`mosaic_figure`, :func:`curves_figure`, :func:`map_figure`)
draw arrays the caller already has, e.g. what a window shows.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from .atomic import atomic_write, atomic_write_text
from .clusterbook import UNASSIGNED
from .clustering import grouping_order
from .display import colour_top

__all__ = [
    "ASSIGNMENT_COLUMNS",
    "FIGURE_FORMATS",
    "PRINT_DPI",
    "assignment_rows",
    "cluster_curves",
    "cluster_number",
    "convergence_curves",
    "curves_figure",
    "map_figure",
    "means_figure",
    "mosaic_figure",
    "save_convergence_png",
    "save_figure",
    "save_means_png",
    "save_weights_png",
    "weights_figure",
    "write_assignments",
    "write_json",
]

ASSIGNMENT_COLUMNS = ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label"]
PRINT_DPI = 300  # dots per inch of a PNG figure
FIGURE_FORMATS = ("png", "pdf", "svg")  # what save_figure writes, by the file's suffix
CURVE_NAMES = {"within_max": "within-cluster max", "between_min": "between-cluster min", "median": "median"}
CURVE_COLOURS = {"within_max": "#d62728", "between_min": "#1f77b4", "median": "#5a5a5a"}


def cluster_number(cluster: int) -> int:
    """The number a cluster has in exports (``assignments.csv``, ``summary.json``, figures): its id + 1.

    Matches the default names: id 0 is cluster 1, "Cluster 1".

    Examples
    --------
    >>> cluster_number(0)
    1
    """
    return int(cluster) + 1


def assignment_rows(paths, clusters, *, true_labels=None, names=None, run_labels=None, transforms=None,
                    scores=None, canvas=None, mirrored=None) -> list[dict]:
    """The rows of ``assignments.csv``: each image's cluster and its alignment onto the cluster mean.

    Parameters
    ----------
    paths : sequence of str
    clusters : sequence of int
        Cluster of each image (0-based ids, as in a
        :class:`~iastudio.core.clusterbook.ClusterBook`); the ``cluster``
        column numbers them from 1, as their default names do (id 0 is
        cluster 1, "Cluster 1");
        :data:`~iastudio.core.clusterbook.UNASSIGNED` gives an empty ``cluster``.
    true_labels : sequence of str or None, optional
        The ``label`` column (None or missing: empty).
    names : callable, optional
        ``names(cluster) -> str``; adds a ``cluster_name`` column (e.g.
        ``ClusterBook.name_of``).
    run_labels : sequence of int, optional
        The cluster each transform aligns its image onto (the run's
        clusters).  An image whose cluster differs gets no transform and no
        score: its alignment is onto another cluster's mean.  Default:
        ``clusters`` (e.g. poses onto the edited clusters' own means,
        :func:`iastudio.core.cluster_means.poses_onto_clusters`).
    transforms : ndarray (n, 3), optional
        The per-image transforms (canvas px); with ``canvas`` they
        fill ``theta_deg``, ``tx_px``, ``ty_px`` in original pixels.  A
        row holding NaN (no pose) leaves them empty.
    scores : ndarray (n,), optional
        Fills ``score`` where the transform is written (NaN: empty).
    canvas : Canvas, optional
        Geometry of the working canvas (only ``scale``, ``offset`` and the
        side are used; see :func:`iastudio.core.preprocess.canvas_to_original`).
    mirrored : ndarray of bool (n,), optional
        Adds a ``mirrored`` column (0/1; runs with ``group="e2"``).

    Returns
    -------
    list of dict
        For :func:`write_assignments`.  Numbers are formatted: angles and
        shifts with 3 decimals, scores with 4.
    """
    from .preprocess import canvas_to_original

    rows = []
    for i, path in enumerate(paths):
        c = int(clusters[i])
        lab = None if true_labels is None else true_labels[i]
        row = {"path": path, "cluster": "" if c == UNASSIGNED else cluster_number(c), "theta_deg": "", "tx_px": "",
               "ty_px": "", "score": "", "label": "" if lab is None else lab}
        if names is not None:
            row["cluster_name"] = names(c)
        same = c != UNASSIGNED and (run_labels is None or int(run_labels[i]) == c)
        if same and transforms is not None and canvas is not None and np.isfinite(transforms[i]).all():
            t = canvas_to_original(transforms[i], canvas, i)
            row.update(theta_deg=f"{t['theta_deg']:.3f}", tx_px=f"{t['tx_px']:.3f}", ty_px=f"{t['ty_px']:.3f}")
            if scores is not None and np.isfinite(scores[i]):
                row["score"] = f"{float(scores[i]):.4f}"
        if mirrored is not None:
            row["mirrored"] = int(mirrored[i])
        rows.append(row)
    return rows


def write_assignments(path, rows) -> None:
    """Write ``assignments.csv`` (columns :data:`ASSIGNMENT_COLUMNS`, extra keys appended).

    UTF-8, one line per row; a field holding a comma, a quote, a newline or a
    carriage return is quoted (RFC 4180).  A file name that is not valid
    UTF-8 is written as its original bytes (``surrogateescape``), so reading
    the CSV back with ``errors="surrogateescape"`` and :func:`os.fsencode`
    gives the exact name.
    """
    import io

    rows = list(rows)
    cols = list(ASSIGNMENT_COLUMNS)
    for r in rows:
        cols += [k for k in r if k not in cols]
    buf = io.StringIO()
    plain = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    quoted = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writeheader()
    for r in rows:
        row = {k: ("" if r.get(k) is None else r.get(k)) for k in cols}
        # the csv module leaves a lone "\r" unquoted when the line ends in "\n": quote that row
        (quoted if any("\r" in str(v) for v in row.values()) else plain).writerow(row)
    atomic_write_text(Path(path), buf.getvalue(), errors="surrogateescape")


def write_json(path, data) -> None:
    """Write JSON atomically (UTF-8; undecodable file-name bytes as ``\\udcXX`` escapes)."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    with atomic_write(Path(path)) as fh:
        fh.write(text.encode("utf-8", "backslashreplace"))


def _tile(images, cols=None):
    imgs = np.asarray(images, dtype=np.float32)
    n = imgs.shape[0]
    cols = cols or int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    h, w = imgs.shape[1:3]
    grid = np.zeros((rows * (h + 2), cols * (w + 2), *imgs.shape[3:]), dtype=np.float32)
    for k in range(n):
        r, c = divmod(k, cols)
        im = imgs[k]
        top = float(np.abs(im).max()) or 1.0
        grid[r * (h + 2) + 1:r * (h + 2) + 1 + h, c * (w + 2) + 1:c * (w + 2) + 1 + w] = np.clip(im / top, 0, 1)
    return grid


def save_figure(fig, path, *, dpi: int = PRINT_DPI, close: bool = True) -> Path:
    """Write a matplotlib figure atomically, in the format its suffix names, and close it (unless told not to).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or Path
        ``.png`` (``dpi`` dots per inch, recorded in the file), ``.pdf`` or
        ``.svg`` (vector; SVG text stays text).
    dpi : int, optional
        A PNG's resolution: its width in pixels is the figure's width in
        inches times ``dpi``.
    close : bool, optional
        False keeps the figure open, to write it again in another format.

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        For any other suffix (nothing is written).
    """
    plt = _figure()
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    try:
        if fmt not in FIGURE_FORMATS:
            raise ValueError(f"{path.name}: a figure is written as {', '.join(FIGURE_FORMATS)}, "
                             f"not {fmt or 'no suffix'}")
        with plt.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}), atomic_write(path) as fh:
            fig.savefig(fh, format=fmt, dpi=dpi)
    finally:
        if close:
            plt.close(fig)
    return path


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _inches(width_cm: float, aspect: float) -> tuple[float, float]:
    return width_cm / 2.54, width_cm / 2.54 * aspect


def weights_figure(weights, *, groups=None, title: str = "Weight matrix W (grouped by cluster)",
                   width_cm: float = 16.0, levels=None):
    """W as a heatmap with one colour bar (labelled W_ij) and lines between the clusters.

    Parameters
    ----------
    weights : ndarray, shape (m, m)
        W with its rows and columns already in the order to show.
    groups : array of int, shape (m,), optional
        The cluster of each row; a line is drawn where it changes.
    title : str
    width_cm : float
        The figure's width; its height is 0.85 of it.
    levels : (float, float), optional
        The colour scale; default ``(0, colour_top(W))`` (:func:`~iastudio.core.display.colour_top`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _figure()
    from matplotlib.ticker import MaxNLocator

    w = np.asarray(weights, dtype=float)
    lo, hi = levels if levels is not None else (0.0, colour_top(w) if w.size else 1.0)
    fig, ax = plt.subplots(figsize=_inches(width_cm, 0.85))
    im = ax.imshow(w, cmap="viridis", interpolation="nearest", vmin=lo, vmax=hi)
    fig.colorbar(im, ax=ax, label="W_ij")
    if groups is not None:
        for b in np.flatnonzero(np.diff(np.asarray(groups))) + 0.5:
            ax.axhline(b, color="white", lw=0.6)
            ax.axvline(b, color="white", lw=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("image j (column)")
    ax.set_ylabel("image i (row)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def mosaic_figure(image, *, title: str = "", width_cm: float = 16.0):
    """An 8-bit grey picture (a mosaic of means) shown whole, with a title and no axes.

    Parameters
    ----------
    image : ndarray, shape (h, w), uint8
        Drawn with grey levels 0..255, nearest pixels (no smoothing).
    title : str
    width_cm : float
        The figure's width; its height follows the picture's shape.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _figure()
    img = np.asarray(image)
    aspect = min(img.shape[0] / max(img.shape[1], 1), 1.5)
    fig, ax = plt.subplots(figsize=_inches(width_cm, aspect + (0.06 if title else 0.0)))
    ax.imshow(img, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
    ax.axis("off")
    if title:
        ax.set_title(title)
    fig.tight_layout(pad=0.3)
    return fig


def curves_figure(curves, *, title: str = "Convergence of the image manifolds", width_cm: float = 16.0):
    """Manifold distances per iteration on a log scale, with a legend under the axes.

    Parameters
    ----------
    curves : dict
        ``{"within_max": [...], "between_min": [...], "median": [...]}``
        (:func:`convergence_curves`); a missing key is left out, NaN and
        values below 1e-6 are drawn at 1e-6.
    title : str
    width_cm : float
        The figure's width; its height is 0.7 of it.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _figure()
    from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator, NullFormatter

    fig, ax = plt.subplots(figsize=_inches(width_cm, 0.7))
    for key, name in CURVE_NAMES.items():
        if key in curves:
            y = np.maximum(np.nan_to_num(np.asarray(curves[key], dtype=float), nan=1e-6), 1e-6)
            ax.plot(np.arange(len(y)), y, marker="o", label=name, color=CURVE_COLOURS[key])
    points = max((len(curves[key]) for key in CURVE_NAMES if key in curves), default=1)
    ax.set_xlim(-0.3, max(points - 1, 1) + 0.3)  # whole iterations, even with a single point
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration (0 = inputs)")
    ax.set_ylabel("manifold distance d(S_i, S_j)")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def map_figure(coords, colours, *, title: str = "Map of the images", axes=("1st coordinate", "2nd coordinate"),
               width_cm: float = 16.0):
    """A 2-D map of the images: one dot per image in its cluster's colour.

    Parameters
    ----------
    coords : ndarray, shape (n, 2)
    colours : sequence of colour
        One matplotlib colour per image (e.g. ``"#1f77b4"`` or an RGB tuple in 0..1).
    title : str
    axes : (str, str)
        The labels of the horizontal and the vertical axis.
    width_cm : float
        The figure's width; its height is 0.8 of it.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _figure()
    xy = np.asarray(coords, dtype=float).reshape(-1, 2)
    fig, ax = plt.subplots(figsize=_inches(width_cm, 0.8))
    ax.scatter(xy[:, 0], xy[:, 1], c=list(colours) if len(xy) else None, s=40, edgecolors="k", linewidths=0.5)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    ax.set_title(title)
    fig.tight_layout()
    return fig


def means_figure(means, names=None, *, title: str | None = None):
    """One tile per cluster mean, titled with the cluster's name; ``title`` above them all."""
    plt = _figure()
    k = len(means)
    cols = min(k, 6)
    rows = int(np.ceil(k / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(1.8 * cols, 2.0 * rows + (0.4 if title else 0.0)), squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.axis("off")
        if i < k:
            ax.imshow(means[i], cmap="gray" if np.ndim(means[i]) == 2 else None)
            ax.set_title(names[i] if names else f"Cluster {cluster_number(i)}", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def save_means_png(path, means, names=None, *, title: str | None = None) -> None:
    """:func:`means_figure`, saved."""
    save_figure(means_figure(means, names, title=title), path)


def save_weights_png(path, weights, labels) -> None:
    """The weight matrix with rows and columns grouped by cluster (:func:`weights_figure`, 14 cm wide)."""
    order = grouping_order(labels)
    w = np.asarray(weights)[np.ix_(order, order)]
    save_figure(weights_figure(w, groups=np.asarray(labels)[order], width_cm=14.0), path)


def cluster_curves(history, labels) -> dict:
    """Within-cluster max and between-cluster min manifold distance per iteration.

    Parameters
    ----------
    history : sequence of ndarray (n, n)
        Dense distance matrices, one per distance computation.
    labels : array of int, shape (n,)
        Cluster of each image; an image labelled ``< 0`` (unassigned, see
        :data:`~iastudio.core.clusterbook.UNASSIGNED`) belongs to no cluster
        and counts in neither curve.

    Returns
    -------
    dict
        ``{"within_max": [...], "between_min": [...]}``, one float per matrix
        (NaN when there is no such pair, e.g. one cluster).
    """
    labels = np.asarray(labels)
    assigned = labels >= 0
    same = (labels[:, None] == labels[None, :]) & assigned[:, None]
    np.fill_diagonal(same, False)
    between = (labels[:, None] != labels[None, :]) & assigned[:, None] & assigned[None, :]
    out = {"within_max": [], "between_min": []}
    has_same, has_between = bool(same.any()), bool(between.any())
    for d in history:
        d = np.asarray(d)  # its own dtype: no copy (the GUI reads these again after each cluster edit)
        out["within_max"].append(float(np.where(same, d, -np.inf).max()) if has_same else float("nan"))
        out["between_min"].append(float(np.where(between, d, np.inf).min()) if has_between else float("nan"))
    return out


def convergence_curves(history, labels) -> dict:
    """Within-cluster max, between-cluster min (:func:`cluster_curves`) and median manifold distance per iteration."""
    out = cluster_curves(history, labels)
    off = ~np.eye(np.asarray(labels).size, dtype=bool)
    out["median"] = [float(np.median(np.asarray(d, dtype=float)[off])) if off.any() else float("nan")
                     for d in history]
    return out


def save_convergence_png(path, history, labels) -> None:
    """Manifold distances over iterations (log scale)."""
    save_figure(curves_figure(convergence_curves(history, labels), width_cm=14.0), path)
