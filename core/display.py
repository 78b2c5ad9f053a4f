"""What the window draws of a run, prepared where the frames are made (off the GUI thread).

A run of thousands of images cannot be drawn image by image at 30 frames a
second: the W panel draws the dense block of an even sample of the images
(:func:`even_sample`, :func:`weight_block`), and the per-image means grid an
even sample of at most :data:`TILES_MAX` means, upright (:func:`upright_tiles`)
and already scaled to 8-bit grey, laid out by :func:`mosaic`.  The run's worker
thread prepares both with every frame
(:func:`iastudio.core.frames.prepare_display`); a view only adds the few
selected images that the sample left out (:func:`sample_with`) and draws.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "BACKGROUND",
    "KEEP_MAX",
    "TILES_MAX",
    "W_SAMPLE",
    "colour_top",
    "even_sample",
    "mosaic",
    "sample_with",
    "tile_levels",
    "upright_tiles",
    "weight_block",
]

W_SAMPLE = 400  # a sparse W (a pruned run above 2,000 images) is drawn for this many images
TILES_MAX = 1024  # per-image means shown at most; a larger run shows an even sample
KEEP_MAX = 64  # selected images added to a sample when it left them out (a larger selection is not added)
BACKGROUND = 38  # grey level (of 255) between the tiles of a mosaic


STANDS_OUT = 1.5  # colour_top: a largest W_ij this many times the typical column's largest is an outlier
TOP_PERCENTILE = 95  # ... the typical column's largest W_ij: this percentile of the columns' largest


def colour_top(weights) -> float:
    """The top of W's colour scale: its largest W_ij, unless a few columns stand far above the rest.

    An image alone in its cluster (a blank or odd one) keeps most of its own column's weight: its
    W_ii can be ten times any other entry, and a scale up to it draws every cluster's block the
    same dark colour.  Each column's largest entry (its strongest neighbour's weight) is compared:
    when the largest of all is more than ``STANDS_OUT`` times the 95th percentile of the columns'
    largest, the scale tops at that percentile (the few above it take the top colour; hovering
    still shows their values).  Many small clusters (large W_ij in every column) keep the full scale.

    Parameters
    ----------
    weights : ndarray or sparse matrix, shape (m, m)
        W, or the part of it drawn (a sparse W: its stored entries, the others 0).

    Returns
    -------
    float
        The top of the scale, at least 1e-6.
    """
    if hasattr(weights, "nnz"):
        if not weights.nnz:
            return 1e-6
        columns = np.asarray(weights.max(axis=0).todense(), dtype=float).ravel()
    else:
        w = np.asarray(weights, dtype=float)
        if not w.size:
            return 1e-6
        columns = w.max(axis=0) if w.ndim == 2 else w.ravel()
    top, typical = float(columns.max()), float(np.percentile(columns, TOP_PERCENTILE))
    return max(typical if top > STANDS_OUT * typical else top, 1e-6)


def even_sample(order, labels, *, limit: int, keep=()) -> np.ndarray:
    """At most ``limit`` image indices of ``order`` (grouped by cluster), spread evenly within each cluster.

    Parameters
    ----------
    order : array of int, shape (n,)
        Image indices, grouped by cluster (a frame's ``order``).
    labels : array of int, shape (n,)
        Cluster of each image (indexed by image, not by position in ``order``).
    limit : int
        How many images to pick (about: each cluster keeps its rounded share).
    keep : sequence of int, optional
        Images added to the sample when it left them out.

    Returns
    -------
    ndarray of int
        A subsequence of ``order``: ``order`` itself when it has at most
        ``limit`` images; otherwise every cluster's share of ``limit``
        proportional to its size (at least one image, two where it has them),
        evenly spaced within the cluster and always including its first
        image, plus ``keep``.  The same inputs give the same sample (frames do
        not flicker).

    Examples
    --------
    >>> even_sample(np.arange(8), np.array([0, 0, 0, 0, 0, 0, 1, 1]), limit=4).tolist()
    [0, 2, 5, 6, 7]
    """
    order = np.asarray(order)
    if order.size <= limit:
        return order
    labels = np.asarray(labels)[order]
    pick = np.zeros(order.size, dtype=bool)
    for c in np.unique(labels):
        where = np.flatnonzero(labels == c)
        share = max(min(2, where.size), int(round(limit * where.size / order.size)))
        pick[where[np.linspace(0, where.size - 1, min(share, where.size)).round().astype(int)]] = True
    keep = np.asarray(list(keep), dtype=int)
    if keep.size:
        pick |= np.isin(order, keep)
    return order[pick]


def sample_with(order, sample, keep, *, limit: int = KEEP_MAX) -> np.ndarray:
    """``sample`` with the images of ``keep`` it lacks, in ``order``'s order.

    Parameters
    ----------
    order : array of int, shape (n,)
        The grouped order ``sample`` was taken from (:func:`even_sample`).
    sample : array of int
        A subsequence of ``order``.
    keep : sequence of int
        Images to include (e.g. the selected ones).
    limit : int
        A ``keep`` of more images is not added (a whole cluster selected):
        ``sample`` is returned as it is.

    Returns
    -------
    ndarray of int
        ``sample`` itself (the same object) when nothing is to be added.
    """
    keep = np.asarray(list(keep), dtype=int)
    sample = np.asarray(sample)
    if keep.size == 0 or keep.size > limit:
        return sample
    missing = np.setdiff1d(keep, sample)
    if missing.size == 0:
        return sample
    order = np.asarray(order)
    return order[np.isin(order, sample) | np.isin(order, missing)]


def weight_block(weights, ids) -> np.ndarray:
    """The dense block ``W[ids][:, ids]`` of a dense or sparse W, float32.

    Parameters
    ----------
    weights : ndarray or scipy.sparse matrix, shape (n, n)
    ids : array of int, shape (m,)

    Returns
    -------
    ndarray, shape (m, m), float32
        A sparse W's entries off its graph are 0.
    """
    import scipy.sparse as sp

    ids = np.asarray(ids, dtype=int)
    if sp.issparse(weights):
        w = weights.tocsr()
        return np.asarray(w[ids][:, ids].toarray(), dtype=np.float32)
    return np.asarray(np.asarray(weights)[np.ix_(ids, ids)], dtype=np.float32)


def tile_levels(images) -> np.ndarray:
    """Each image scaled to its own maximum, as 8-bit grey (colour images: the mean of the channels).

    Parameters
    ----------
    images : ndarray, shape (m, H, W) or (m, H, W, C)

    Returns
    -------
    ndarray, shape (m, H, W), uint8
        ``round(255 * clip(v / max(v), 0, 1))``; an image whose maximum is
        not positive is scaled by 1 (all 0 where it is <= 0).
    """
    a = np.asarray(images, dtype=np.float32)
    if a.ndim == 4:
        a = a.mean(axis=-1)
    if len(a) == 0:
        return np.zeros(a.shape, np.uint8)
    top = a.reshape(len(a), -1).max(axis=1)
    top[~(top > 0)] = 1.0
    scaled = a * (255.0 / top)[:, None, None]
    np.clip(scaled, 0.0, 255.0, out=scaled)
    return np.rint(scaled).astype(np.uint8)


def upright_tiles(images, *, like=None) -> np.ndarray:
    """:func:`tile_levels` of the images turned upright and centred (:func:`iastudio.core.pose.canonical_pose`).

    Parameters
    ----------
    images : ndarray, shape (m, H, W) or (m, H, W, C)
    like : ndarray, shape (m, H, W) or (m, H, W, C), optional
        Turn image ``i`` as ``like[i]`` is turned upright (its
        :func:`~iastudio.core.pose.canonical_transforms`) instead of by its own
        look: two versions of the same averages (a run's class averages of the
        images before and after denoising) are then shown in one pose.

    Returns
    -------
    ndarray, shape (m, H, W), uint8

    Examples
    --------
    >>> bar = np.zeros((1, 32, 32)); bar[0, 14:18, 4:28] = 1.0   # a horizontal bar: drawn upright
    >>> dot = np.zeros((1, 32, 32)); dot[0, 15, 20] = 1.0        # a dot right of the centre
    >>> tiles = upright_tiles(dot, like=bar)                     # turned as the bar is: above or below the centre
    >>> r, c = np.unravel_index(int(tiles[0].argmax()), (32, 32))
    >>> bool(abs(c - 15.5) < 1.5 and abs(r - 15.5) > 3)
    True
    """
    from .pose import canonical_pose, canonical_transforms

    if like is None:
        return tile_levels(canonical_pose(images))
    from .warp import warp

    a = np.asarray(images)
    if len(a) == 0:
        return tile_levels(a)
    t = canonical_transforms(np.asarray(like))
    return tile_levels(warp(a, t, parallel=False))  # display work: this thread only


def mosaic(tiles, cols: int | None = None, *, pad: int = 2) -> np.ndarray:
    """8-bit tiles laid out in a grid, rows from the top, ``pad`` pixels of :data:`BACKGROUND` around each.

    Parameters
    ----------
    tiles : ndarray, shape (m, H, W), uint8
        As :func:`tile_levels` makes them.
    cols : int, optional
        Tiles per row; default ``ceil(sqrt(m))``.
    pad : int

    Returns
    -------
    ndarray, shape (rows * (H + pad) + pad, cols * (W + pad) + pad), uint8
        Tile ``k`` has its top-left pixel at ``(pad + r (H + pad), pad + c (W + pad))``
        with ``r, c = divmod(k, cols)``; an empty ``tiles`` gives an 8 x 8 background.

    Examples
    --------
    >>> mosaic(np.full((3, 2, 2), 255, np.uint8), 2, pad=1).tolist()[1]
    [38, 255, 255, 38, 255, 255, 38]
    """
    t = np.asarray(tiles, dtype=np.uint8)
    m = len(t)
    if m == 0:
        return np.full((8, 8), BACKGROUND, np.uint8)
    cols = cols or int(np.ceil(np.sqrt(m)))
    rows = int(np.ceil(m / cols))
    h, w = t.shape[1:3]
    cells = np.full((rows * cols, h + pad, w + pad), BACKGROUND, np.uint8)
    cells[:m, pad:, pad:] = t
    out = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad), BACKGROUND, np.uint8)
    out[:rows * (h + pad), :cols * (w + pad)] = (
        cells.reshape(rows, cols, h + pad, w + pad).transpose(0, 2, 1, 3).reshape(rows * (h + pad), cols * (w + pad)))
    return out
