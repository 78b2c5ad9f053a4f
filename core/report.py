"""Writing a run's results: CSV, JSON, arrays and PNG figures (matplotlib, Agg)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from .atomic import atomic_write, atomic_write_text
from .clusterbook import UNASSIGNED
from .clustering import grouping_order

__all__ = ["ASSIGNMENT_COLUMNS", "assignment_rows", "write_assignments", "write_json", "save_means_png",
           "save_weights_png", "save_convergence_png", "cluster_curves", "convergence_curves"]

ASSIGNMENT_COLUMNS = ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label"]


def assignment_rows(paths, clusters, *, true_labels=None, names=None, run_labels=None, transforms=None,
                    scores=None, canvas=None, mirrored=None) -> list[dict]:
    """The rows of ``assignments.csv``: each image's cluster and its alignment onto the cluster mean.

    Parameters
    ----------
    paths : sequence of str
    clusters : sequence of int
        Cluster of each image; :data:`~iastudio.core.clusterbook.UNASSIGNED`
        gives an empty ``cluster``.
    true_labels : sequence of str or None, optional
        The ``label`` column (None or missing: empty).
    names : callable, optional
        ``names(cluster) -> str``; adds a ``cluster_name`` column (e.g.
        ``ClusterBook.name_of``).
    run_labels : sequence of int, optional
        The clusters the run found.  An image whose cluster differs (moved
        by hand) gets no transform and no score: the run's alignment is onto
        another cluster's mean.  Default: ``clusters`` are the run's.
    transforms : ndarray (n, 3), optional
        The run's per-image transforms (canvas px); with ``canvas`` they
        fill ``theta_deg``, ``tx_px``, ``ty_px`` in original pixels.
    scores : ndarray (n,), optional
        Fills ``score`` where the transform is written.
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
        row = {"path": path, "cluster": "" if c == UNASSIGNED else c, "theta_deg": "", "tx_px": "", "ty_px": "",
               "score": "", "label": "" if lab is None else lab}
        if names is not None:
            row["cluster_name"] = names(c)
        same = c != UNASSIGNED and (run_labels is None or int(run_labels[i]) == c)
        if same and transforms is not None and canvas is not None:
            t = canvas_to_original(transforms[i], canvas, i)
            row.update(theta_deg=f"{t['theta_deg']:.3f}", tx_px=f"{t['tx_px']:.3f}", ty_px=f"{t['ty_px']:.3f}")
            if scores is not None:
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
    grid = np.zeros((rows * (h + 2), cols * (w + 2)) + imgs.shape[3:], dtype=np.float32)
    for k in range(n):
        r, c = divmod(k, cols)
        im = imgs[k]
        top = float(np.abs(im).max()) or 1.0
        grid[r * (h + 2) + 1:r * (h + 2) + 1 + h, c * (w + 2) + 1:c * (w + 2) + 1 + w] = np.clip(im / top, 0, 1)
    return grid


def _save_figure(plt, fig, path) -> None:
    """Save ``fig`` as PNG atomically (:mod:`iastudio.core.atomic`) and close it."""
    try:
        with atomic_write(Path(path)) as fh:
            fig.savefig(fh, format="png", dpi=100)
    finally:
        plt.close(fig)


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_means_png(path, means, names=None) -> None:
    """One tile per cluster mean, titled with the cluster's name."""
    plt = _figure()
    k = len(means)
    cols = min(k, 6)
    rows = int(np.ceil(k / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(1.8 * cols, 2.0 * rows), squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.axis("off")
        if i < k:
            ax.imshow(means[i], cmap="gray" if np.ndim(means[i]) == 2 else None)
            ax.set_title(names[i] if names else f"cluster {i}", fontsize=9)
    fig.tight_layout()
    _save_figure(plt, fig, path)


def save_weights_png(path, weights, labels) -> None:
    """The weight matrix with rows and columns grouped by cluster."""
    plt = _figure()
    order = grouping_order(labels)
    w = np.asarray(weights)[np.ix_(order, order)]
    fig, ax = plt.subplots(figsize=(5.5, 4.6))
    im = ax.imshow(w, cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="W_ij")
    lab = np.asarray(labels)[order]
    for b in np.flatnonzero(np.diff(lab)) + 0.5:
        ax.axhline(b, color="white", lw=0.6)
        ax.axvline(b, color="white", lw=0.6)
    ax.set_title("Weight matrix W (grouped by cluster)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("image j")
    ax.set_ylabel("image i")
    fig.tight_layout()
    _save_figure(plt, fig, path)


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
    plt = _figure()
    curves = convergence_curves(history, labels)
    x = np.arange(len(history))
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key, name in (("within_max", "within-cluster max"), ("between_min", "between-cluster min"),
                      ("median", "median")):
        y = np.maximum(np.asarray(curves[key]), 1e-6)
        ax.plot(x, y, marker="o", label=name)
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator, NullFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration (0 = inputs)")
    ax.set_ylabel("manifold distance d(S_i, S_j)")
    ax.set_title("Convergence of the image manifolds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save_figure(plt, fig, path)
