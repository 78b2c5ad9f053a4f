"""Images turned into their cluster's frame: what an export of aligned images shows.

A finished run gives each image ``v_i`` a transform ``tau_i`` with
``v_i o tau_i ~ m_c``, the invariant mean of its cluster ``c`` (and, with
``group="e2"``, whether ``v_i`` is flipped first).  :func:`aligned_images`
applies those, so the images of a cluster all face the same way.  Clusters
edited by hand are respected: an image moved to another cluster no longer
fits its run transform, so it is aligned afresh
(:func:`~iastudio.core.similarity.invariant_distances` of the pair) onto the
mean of the cluster it was moved to, or, for a cluster the run did not have,
onto that cluster's first other member.
"""
from __future__ import annotations

import numpy as np

from .clusterbook import UNASSIGNED
from .similarity import invariant_distances
from .warp import warp

__all__ = ["aligned_images", "inspect_pair"]


def _flip(image):
    """Mirror an image left-right (``v[:, ::-1]``, as E(2) alignments use)."""
    return image[:, ::-1]


def _align_pair(image, reference, *, angle_step, rotation_range, group):
    """``(transform, mirrored)`` aligning ``image`` onto ``reference``."""
    sim = invariant_distances(np.stack([image, reference]), angle_step=angle_step, rotation_range=rotation_range,
                              group=group)
    mirrored = bool(sim.mirrored[0, 1]) if sim.mirrored is not None else False
    return np.asarray(sim.transforms[0, 1], dtype=float), mirrored


def aligned_images(images, labels, *, run_labels, transforms, means=None, mirrored=None,
                   angle_step: float = 5.0, rotation_range: float | None = None, group: str = "se2") -> np.ndarray:
    """Each image aligned onto its cluster's mean.

    Parameters
    ----------
    images : ndarray, shape (n, S, S[, C])
        The images the run was made on (unit-norm, one canvas).
    labels : ndarray of int, shape (n,)
        The current cluster of each image (after any edits);
        :data:`~iastudio.core.clusterbook.UNASSIGNED` images stay as they are.
    run_labels : ndarray of int, shape (n,)
        The clusters the run found (:attr:`RunResult.labels`).
    transforms : ndarray, shape (n, 3)
        The run's ``tau_i`` onto the mean of cluster ``run_labels[i]``
        (:attr:`RunResult.image_transforms`).
    means : ndarray, shape (k, S, S[, C]), optional
        The run's cluster means (:attr:`RunResult.cluster_means`): the
        reference for images moved to cluster ``c < k`` while some image the
        run put in ``c`` is still there.
    mirrored : ndarray of bool, shape (n,), optional
        The run flips image ``i`` before ``transforms[i]`` (``group="e2"``).
    angle_step, rotation_range, group
        Options of the alignment of moved images
        (:func:`~iastudio.core.similarity.invariant_distances`).

    Returns
    -------
    ndarray, shape (n, S, S[, C]), float32
        A new stack; row ``i`` is ``images[i]`` (flipped if so) warped by its
        transform.
    """
    images = np.asarray(images, dtype=np.float32)
    labels = np.asarray(labels, dtype=int)
    run_labels = np.asarray(run_labels, dtype=int)
    out = images.copy()
    for i in range(images.shape[0]):
        c = int(labels[i])
        if c == UNASSIGNED:
            continue
        if run_labels[i] == c:
            t, flip = np.asarray(transforms[i], dtype=float), mirrored is not None and bool(mirrored[i])
        else:  # moved by hand: align it onto the cluster it was moved to
            if means is not None and c < len(means) and np.any((labels == c) & (run_labels == c)):
                ref = np.asarray(means[c], dtype=np.float32)  # still the run's cluster c: its mean
            else:
                others = np.flatnonzero((labels == c) & (np.arange(labels.size) != i))
                ref = images[others[0]] if others.size else images[i]
            t, flip = _align_pair(images[i], ref, angle_step=angle_step, rotation_range=rotation_range,
                                  group=group)
        src = _flip(images[i]) if flip else images[i]
        out[i] = warp(np.ascontiguousarray(src)[None], t[None])[0]
    return out


def inspect_pair(image, reference, *, angle_step: float = 5.0, rotation_range: float | None = None) -> dict:
    """Align one image onto another and say how well it fits (the app's Inspect view).

    Parameters
    ----------
    image, reference : ndarray, shape (S, S[, C])
        Two unit-norm images on one canvas.
    angle_step, rotation_range
        Options of the global search (:func:`~iastudio.core.similarity.invariant_distances`).

    Returns
    -------
    dict
        ``vi``, ``vj`` (the two images), ``aligned`` (``image`` warped onto ``reference``),
        ``difference`` (``|aligned - reference|``), ``theta_deg``, ``tx``, ``ty`` (the transform),
        ``distance`` (the invariant distance) and ``score`` (cosine of ``aligned`` and ``reference``).
    """
    pair = np.stack([np.asarray(image, np.float32), np.asarray(reference, np.float32)])
    sim = invariant_distances(pair, angle_step=angle_step, rotation_range=rotation_range)
    t = np.asarray(sim.transforms[0, 1], dtype=float)
    aligned = warp(pair[:1], t[None])[0]
    norm = max(float(np.linalg.norm(aligned) * np.linalg.norm(pair[1])), 1e-12)
    return {"vi": pair[0], "vj": pair[1], "aligned": aligned, "difference": np.abs(aligned - pair[1]),
            "theta_deg": float(np.rad2deg(t[0])), "tx": float(t[1]), "ty": float(t[2]),
            "distance": float(sim.distances[0, 1]), "score": float((aligned * pair[1]).sum() / norm)}
