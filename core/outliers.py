"""Images that fit their cluster much worse than the rest of it: junk, strays, a wrong pick.

Every image is put in a cluster, so a file that belongs nowhere (an empty frame's noise, an image of
another size left out of the denoising, a particle pick that is only ice) still gets one.  Its
*score* -- the cosine similarity of the aligned image with its cluster's invariant mean
(:class:`~iastudio.core.run_output.RunResult`) -- then stands far below its cluster's others:
:func:`poor_fits` names those, so that the CLI and the app can say which files to look at.
"""
from __future__ import annotations

import numpy as np

from .filenames import display_name
from .wording import count_of

__all__ = ["MARGIN", "MIN_CLUSTER", "SPREAD", "poor_fit_line", "poor_fits"]

SPREAD = 6.0  # how many robust standard deviations (1.4826 x MAD) below the cluster's median score ...
MARGIN = 0.1  # ... and at least this far below it (clusters whose scores all agree have a MAD near 0)
MIN_CLUSTER = 5  # smaller clusters have no "rest" to stand out from


def poor_fits(labels, scores, *, spread: float = SPREAD, margin: float = MARGIN,
              min_cluster: int = MIN_CLUSTER) -> np.ndarray:
    """Indices of the images whose score is far below their own cluster's.

    An image is a poor fit when its score is more than ``max(spread * 1.4826 * MAD, margin)`` below
    the median score of its cluster (MAD: the median absolute deviation of the cluster's scores), in
    a cluster of at least ``min_cluster`` images with a finite score.  Images without a finite score
    (NaN: not aligned) and negative labels (unassigned) are never named.

    Parameters
    ----------
    labels : array_like of int, shape (n,)
        Each image's cluster.
    scores : array_like of float, shape (n,)
        Each image's score against its cluster's mean.
    spread, margin : float
        How far below the median counts as far (see above).
    min_cluster : int
        Clusters with fewer scored images are skipped.

    Returns
    -------
    ndarray of int
        The poor fits' indices, lowest score first.

    Examples
    --------
    >>> poor_fits([0] * 6 + [1] * 5, [0.99, 0.98, 0.99, 0.60, 0.99, 0.98, 0.9, 0.8, 0.85, 0.95, 0.9])
    array([3])
    """
    labels = np.asarray(labels)
    scores = np.asarray(scores, dtype=float)
    if labels.shape != scores.shape:
        raise ValueError(f"labels and scores differ in shape: {labels.shape} and {scores.shape}")
    out = []
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero((labels == c) & np.isfinite(scores))
        if members.size < min_cluster:
            continue
        s = scores[members]
        median = np.median(s)
        mad = 1.4826 * np.median(np.abs(s - median))
        out.extend(members[s < median - max(spread * mad, margin)].tolist())
    out = np.asarray(out, dtype=int)
    return out[np.argsort(scores[out], kind="stable")]


def poor_fit_line(paths, *, shown: int = 3) -> str:
    """One line naming the poor fits (:func:`poor_fits`' images' paths, the first ``shown`` of them).

    Examples
    --------
    >>> poor_fit_line(["a/odd.png"])
    '1 image fits its cluster much worse than the rest of it (junk, or a stray?): odd.png'
    >>> poor_fit_line(["p1.tif", "p2.tif", "p3.tif", "p4.tif", "p5.tif"])
    '5 images fit their clusters much worse than the rest (junk, or strays?): p1.tif, p2.tif, p3.tif and 2 more'
    """
    paths = list(paths)
    names = ", ".join(display_name(p) for p in paths[:shown])
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    if len(paths) == 1:
        return f"1 image fits its cluster much worse than the rest of it (junk, or a stray?): {names}"
    return (f"{count_of(len(paths), 'image')} fit their clusters much worse than the rest (junk, or strays?): "
            f"{names}{more}")
