"""Invariant means of clusters a person made: the class average of any set of images.

A run reads out its clusters and gives one invariant mean per cluster.  After edits (an image moved,
two clusters merged, one split) a cluster holds images no mean was computed for; averaging the
members' per-image means as they lie would smear them (they are in different poses).
:func:`cluster_invariant_means` computes the invariant mean of each such set from the images: every
member aligned onto the cluster's medoid (as the run starts its own clusters' means), re-aligned onto
the mean (below), then the invariant mean with equal weights.

On noisy images one noisy medoid is a poor reference: the members' poses are then partly the noise's.
:func:`realign_to_mean` minimises the invariant mean's objective ``sum_i ||v_i o tau_i - mu||^2`` by
alternating, as reference-free class averaging does in cryo-EM: every member aligned *globally* (the
engine's full angle search and shifts) onto the current mean, whose signal-to-noise ratio is about
``n`` times the medoid's, then the mean recomputed, for a few rounds until the poses settle; then the
invariant mean's local refinement.  ``cluster_invariant_means`` does this by default
(``realign_rounds=3``, each member onto the mean of the others); ``realign_rounds=0`` is the medoid
alignment alone.

A denoised run finds its poses on the denoised images, where they are right, but the denoiser's basis
drops fine detail; cryo-EM class averaging aligns on denoised images and averages the raw ones.
:func:`pose_averages` averages any images of the run (the images before denoising,
``preprocess(..., keep_undenoised=True)``) at the run's poses.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

from . import se2
from .backend import array_module, to_host
from .invariant_mean import invariant_means
from .similarity import invariant_distances
from .warp import warp

__all__ = ["cluster_invariant_means", "cluster_key", "edited_cluster_means", "medoid", "pose_averages",
           "poses_onto_clusters", "realign_to_mean"]


def cluster_key(members) -> bytes:
    """A hashable key of a set of image indices (sorted, as int64 bytes)."""
    return np.unique(np.asarray(members, dtype=np.int64)).tobytes()


def medoid(members, distances) -> int:
    """The member closest to the others: least squared distance (dense), most ties (a sparse graph).

    Parameters
    ----------
    members : array of int
        Image indices of the cluster.
    distances : ndarray or scipy.sparse matrix, shape (n, n), or None
        Invariant distances between the images (None: the first member).

    Returns
    -------
    int
        An element of ``members``.
    """
    members = np.asarray(members, dtype=int)
    if distances is None or members.size <= 2:
        return int(members[0])
    if sparse.issparse(distances):
        sub = sparse.csr_matrix(distances)[members][:, members]
        return int(members[np.argmax(np.diff(sub.indptr))])
    d = np.asarray(distances, dtype=float)[np.ix_(members, members)]
    return int(members[np.argmin(np.nan_to_num(d, nan=np.inf) ** 2 @ np.ones(members.size))])


def _objective(aligned) -> float:
    """``mean_i ||a_i - mu||^2`` with ``mu`` the mean of the aligned members (float64; NumPy or CuPy)."""
    a = aligned.astype(np.float64)
    return float(((a - a.mean(axis=0)) ** 2).sum(axis=tuple(range(1, a.ndim))).mean())


def _realign_round(images, t, aligned, *, angle_step, rotation_range, leave_one_out, client=None):
    """One round: every member aligned globally onto its reference; a member keeps a pose that fits better."""
    xp = array_module(images)
    n = images.shape[0]
    axes = tuple(range(1, images.ndim))
    per_image = (n,) + (1,) * (images.ndim - 1)
    a = aligned.astype(np.float64)
    total = a.sum(axis=0)
    refs = (total[None] - a) / (n - 1) if leave_one_out else xp.broadcast_to(total / n, a.shape)
    norms = xp.sqrt((images.astype(np.float64) ** 2).sum(axis=axes))
    ref_norms = xp.sqrt((refs ** 2).sum(axis=axes))
    scale = xp.where(ref_norms > 0, norms / xp.maximum(ref_norms, 1e-300), 0.0)  # the alignment's unit scale
    rows = np.arange(n)
    sim = invariant_distances(xp.concatenate([images, (refs * scale.reshape(per_image)).astype(np.float32)]),
                              angle_step=angle_step, rotation_range=rotation_range, pairs=(rows, rows + n),
                              client=client)
    proposed = sim.transform(rows, rows + n)  # host
    moved = warp(images, xp.asarray(proposed, dtype=np.float32))
    better = to_host(((moved.astype(np.float64) - refs) ** 2).sum(axis=axes) < ((a - refs) ** 2).sum(axis=axes))
    return (np.where(better[:, None], proposed, t),
            xp.where(xp.asarray(better).reshape(per_image), moved, aligned))


def realign_to_mean(images, transforms=None, *, rounds: int = 3, angle_step: float = 5.0,
                    rotation_range: float | None = None, leave_one_out: bool = True,
                    tol_px: float = 0.5, client=None) -> tuple[np.ndarray, list]:
    """Align every image globally onto the current mean (of the others, by default), re-average, repeat.

    Alternating minimisation of the invariant mean's objective (paper eq. 2.3 with equal weights)
    ``J = (1/n) sum_i ||v_i o tau_i - mu||^2``: with ``mu`` fixed, each ``tau_i`` is found by the
    engine's global alignment of ``v_i`` onto ``mu`` (every grid angle's candidates, shifts, then
    Gauss-Newton; :func:`~iastudio.core.similarity.invariant_distances`); with the poses fixed,
    ``mu`` is their average.  A member keeps its pose unless the new one fits its reference better,
    and a round that would raise ``J`` is not taken, so ``J`` never rises.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The members (one canvas; unit norm as the run's working images, though any scale works), NumPy
        or CuPy: the alignments and averages run where the images are.
    transforms : ndarray, shape (n, 3), optional
        Starting poses ``tau_i`` (``v_i o tau_i`` in the mean's frame), e.g. each member aligned onto
        a medoid.  Default: the identity (then ``leave_one_out=False`` converges much faster: the
        others' mean of unaligned images is a smear).
    rounds : int
        Rounds at most (each: ``n`` global alignments and one average).
    angle_step, rotation_range : float
        The alignment search (:func:`~iastudio.core.similarity.invariant_distances`).
    leave_one_out : bool
        Align member ``i`` onto the mean of the *others*, so that its own noise in the mean does not pull
        it towards its current pose (at SNR 0.1 with 30 members that pull is a third of the signal's);
        ``J`` is still the criterion that accepts a round.  False: onto the mean of all, plain
        alternating minimisation of ``J``.  Two members always use the mean of both (each moved
        onto the other at once, they would swap poses and never meet).
    tol_px : float
        The poses have settled, and the rounds stop, when no member turned by more than half the angle
        step nor moved by more than this many pixels in a round.
    client : dask.distributed.Client, optional
        Run the alignments as tasks on this cluster (:func:`~iastudio.core.similarity.invariant_distances`).

    Returns
    -------
    transforms : ndarray, shape (n, 3)
        The final poses (host, float64).
    objective : list of float
        ``J`` at the start and after every round taken (non-increasing).

    Examples
    --------
    >>> import numpy as np
    >>> from iastudio.core.warp import warp
    >>> yy, xx = np.mgrid[:32, :32]
    >>> blob = np.exp(-((yy - 12) ** 2 + (xx - 18) ** 2) / 8.0).astype(np.float32)
    >>> turned = warp(blob[None], np.array([[0.0, 0, 0], [1.5, 0, 0], [-2.0, 0, 0]]))
    >>> t, objective = realign_to_mean(turned, leave_one_out=False)  # from the identity: onto the mean of all
    >>> bool(objective[-1] < 0.01 * objective[0])
    True
    """
    xp = array_module(images)
    images = xp.asarray(images, dtype=np.float32)
    n = images.shape[0]
    t = np.zeros((n, 3)) if transforms is None else np.array(to_host(transforms), dtype=np.float64).reshape(n, 3)
    aligned = warp(images, xp.asarray(t, dtype=np.float32))
    objective = [_objective(aligned)]
    if n < 2 or rounds <= 0:
        return t, objective
    leave_one_out = leave_one_out and n > 2  # two members: each onto the other would swap their poses
    for _ in range(rounds):
        t_new, aligned_new = _realign_round(images, t, aligned, angle_step=angle_step, rotation_range=rotation_range,
                                            leave_one_out=leave_one_out, client=client)
        j = _objective(aligned_new)
        if j > objective[-1]:
            break
        turn = np.abs(se2.wrap_angle(t_new[:, 0] - t[:, 0]))
        shift = np.hypot(t_new[:, 1] - t[:, 1], t_new[:, 2] - t[:, 2])
        t, aligned = t_new, aligned_new
        objective.append(j)
        if turn.max() <= np.deg2rad(angle_step) / 2 and shift.max() <= tol_px:
            break
    return t, objective


def cluster_invariant_means(images, clusters, *, distances=None, angle_step: float = 5.0,
                            rotation_range: float | None = None, steps: int = 10, sigmas=(0.0, 1.0, 2.0),
                            rtol: float = 1e-3, realign_rounds: int = 3,
                            leave_one_out: bool = True, return_poses: bool = False):
    """The invariant mean of each set of images: aligned onto the medoid, re-aligned onto the mean, refined.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        The run's working images (unit norm, one canvas).
    clusters : sequence of array of int
        The member indices of each cluster (each non-empty).
    distances : ndarray or scipy.sparse matrix, shape (n, n), optional
        Invariant distances between the images, to pick each medoid (:func:`medoid`).
    angle_step, rotation_range : float
        The alignment search, as for the run (:func:`~iastudio.core.similarity.invariant_distances`).
    steps, sigmas, rtol
        The invariant mean's gradient steps (:func:`~iastudio.core.invariant_mean.invariant_means`).
    realign_rounds : int
        Rounds of global re-alignment of every member onto the current mean before the local
        refinement (:func:`realign_to_mean`); 0: the medoid alignment alone (the recipe before
        issue 30).  Each round aligns every member once.
    leave_one_out : bool
        In those rounds, align each member onto the mean of the others (:func:`realign_to_mean`).
    return_poses : bool
        Also return each member's transform onto its cluster's mean.

    Returns
    -------
    means : ndarray, shape (len(clusters), H, W), float32
        Mean ``c`` is in (about) the pose of cluster ``c``'s medoid.
    poses : list of ndarray, shape (len(clusters[c]), 3)
        With ``return_poses``: ``tau_i`` of each member (in ``clusters[c]``'s order) such that
        ``v_i o tau_i`` is aligned onto mean ``c`` (:func:`pose_averages` of the members at these
        poses is the mean before its last smoothing; of other images of the same objects, such as
        the images before denoising, their class average).
    """
    images = np.asarray(images, dtype=np.float32)
    out = np.zeros((len(clusters), *images.shape[1:]), dtype=np.float32)
    poses = []
    for c, members in enumerate(clusters):
        members = np.asarray(members, dtype=int)
        if members.size == 0:
            raise ValueError(f"cluster {c} has no images")
        centre = medoid(members, distances)
        subset = images[members]
        if members.size == 1:
            out[c] = subset[0]
            poses.append(np.zeros((1, 3)))
            continue
        others = np.flatnonzero(members != centre)
        target = int(np.flatnonzero(members == centre)[0])
        init = np.zeros((members.size, 1, 3))
        aligned = invariant_distances(subset, angle_step=angle_step, rotation_range=rotation_range,
                                      pairs=(others, np.full(others.size, target)))
        init[others, 0] = aligned.transform(others, np.full(others.size, target))
        if realign_rounds > 0:
            init[:, 0], _ = realign_to_mean(subset, init[:, 0], rounds=realign_rounds, angle_step=angle_step,
                                            rotation_range=rotation_range, leave_one_out=leave_one_out)
        weights = np.full((members.size, 1), 1.0 / members.size, dtype=np.float32)
        state = invariant_means(subset, weights, init, steps=steps, sigmas=sigmas, rtol=rtol)
        out[c] = np.asarray(state.means[0], dtype=np.float32)
        poses.append(state.transforms(members.size)[:, 0])
    return (out, poses) if return_poses else out


def edited_cluster_means(images, clusters, *, undenoised=None, **options) -> tuple:
    """The invariant means of clusters a person made, and their class averages before denoising.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        The run's working images.
    clusters : sequence of array of int
        The member indices of each cluster.
    undenoised : ndarray, shape (n, H, W), optional
        The same images before denoising, in the same frames (a denoised run's; see
        :func:`iastudio.core.frames.undenoised_means`).
    **options
        Passed to :func:`cluster_invariant_means` (``distances``, ``angle_step``, ...).

    Returns
    -------
    means : ndarray, shape (len(clusters), H, W), float32
    before : ndarray, shape (len(clusters), H, W), float32, or None
        Each cluster's images before denoising, averaged at the poses that put its working images
        onto its invariant mean (:func:`pose_averages`); None without ``undenoised``.
    """
    means, poses = cluster_invariant_means(images, clusters, return_poses=True, **options)
    if undenoised is None:
        return means, None
    undenoised = np.asarray(to_host(undenoised))
    before = np.stack([np.asarray(to_host(pose_averages(undenoised[np.asarray(m, dtype=int)],
                                                        np.zeros(len(m), dtype=int), pose)))[0]
                       for m, pose in zip(clusters, poses, strict=True)]).astype(np.float32)
    return means, before


def poses_onto_clusters(images, labels, *, run_labels=None, transforms=None, scores=None, n_run=None,
                        distances=None, progress=None, means=None, **options) -> tuple:
    """Each image's pose onto its (edited) cluster's invariant mean, and its score there.

    A cluster exactly as the run found it keeps the run's poses and scores (onto the run's mean).  A
    cluster the edits changed (split, merged, moved into or out of) gets its invariant mean computed
    from its members (:func:`cluster_invariant_means`, as the app computes the means it shows of such
    clusters) and each member's pose onto it, scored as the run scores its own: the cosine of the
    aligned image with the mean.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The run's working images.
    labels : array of int, shape (n,)
        The clusters now (edits included); negative: unassigned (no pose).
    run_labels : array of int, shape (n,), optional
        The run's clusters; None: every cluster is taken as changed.
    transforms : ndarray, shape (n, 3), optional
        The run's poses (each image onto its run cluster's mean); None: every cluster as changed.
    scores : ndarray, shape (n,), optional
        The run's scores.
    n_run : int, optional
        The number of clusters the run has a mean for (default: ``max(run_labels) + 1``).
    distances : ndarray or scipy.sparse matrix, shape (n, n), optional
        The inputs' invariant distances, to pick each changed cluster's medoid.
    progress : callable, optional
        ``progress(done, total)`` after each changed cluster; returning False stops (the clusters
        not yet done keep no pose).
    means : dict, optional
        Filled with ``{cluster: invariant mean}`` of the clusters whose poses were computed here (the
        means the poses are onto).
    **options
        ``angle_step``, ``rotation_range`` (:func:`cluster_invariant_means`).

    Returns
    -------
    transforms : ndarray, shape (n, 3), float64
        NaN where an image has no pose (unassigned, or its cluster not done).
    scores : ndarray, shape (n,), float64
        NaN likewise (and where the run gave no scores).
    changed : dict
        ``{cluster: members}`` of the clusters whose poses were computed here.
    """
    labels = np.asarray(labels, dtype=int)
    n = labels.size
    out_t = np.full((n, 3), np.nan)
    out_s = np.full(n, np.nan)
    have_run = run_labels is not None and transforms is not None
    if have_run:
        run_labels = np.asarray(run_labels, dtype=int)
        if n_run is None:
            n_run = int(run_labels.max()) + 1 if run_labels.size else 0
    todo = {}
    for c in np.unique(labels[labels >= 0]):
        members = labels == c
        if have_run and c < n_run and np.array_equal(members, run_labels == c):
            out_t[members] = np.asarray(transforms, dtype=float)[members]
            if scores is not None:
                out_s[members] = np.asarray(scores, dtype=float)[members]
        else:
            todo[int(c)] = np.flatnonzero(members)
    images = np.asarray(to_host(images), dtype=np.float32)
    done = {}
    for k, (c, members) in enumerate(todo.items()):
        (mean,), (pose,) = cluster_invariant_means(images, [members], distances=distances, return_poses=True,
                                                   **options)
        aligned = warp(images[members], np.asarray(pose, dtype=np.float64))
        a, m = aligned.reshape(members.size, -1).astype(np.float64), mean.reshape(-1).astype(np.float64)
        out_t[members] = pose
        out_s[members] = (a @ m) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(m), 1e-12)
        done[c] = members
        if means is not None:
            means[c] = mean
        if progress is not None and progress(k + 1, len(todo)) is False:
            break
    return out_t, out_s, done


def pose_averages(images, labels, transforms, *, mirrored=None) -> np.ndarray:
    """Each cluster's images moved by their poses and averaged: ``mean_{i in c} v_i o tau_i``.

    The class averages of images at poses found on *other* images of the same set: a run's
    ``image_transforms`` (each image onto its cluster's invariant mean) found on the denoised
    images, applied to the images before denoising (:attr:`iastudio.core.preprocess.Canvas.undenoised`).
    The denoiser removes the noise at every frequency but also the detail its basis does not hold;
    the plain average of the raw images keeps that detail and divides the noise by the cluster's size.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        NumPy or CuPy.
    labels : ndarray of int, shape (n,)
        Clusters ``0 .. k-1``.
    transforms : ndarray, shape (n, 3)
        ``tau_i`` per image (:mod:`iastudio.core.se2`).
    mirrored : ndarray of bool, shape (n,), optional
        Images flipped (left-right) before their transform (a run with ``group="e2"``).

    Returns
    -------
    ndarray, shape (k, H, W[, C]), float32
        A cluster without images gives zeros.

    Examples
    --------
    Three turned copies of a two-lobed shape, each turned back by its pose, average to the shape:

    >>> from iastudio.core.warp import warp
    >>> r, c = np.mgrid[:32, :32] - 15.5
    >>> shape = (np.exp(-((r + 4) ** 2 + c ** 2) / 6) + 0.5 * np.exp(-(r ** 2 + (c - 5) ** 2) / 6)).astype(np.float32)
    >>> copies = warp(shape[None], np.array([[0.0, 0, 0], [1.0, 0, 0], [-2.0, 0, 0]]), index=np.zeros(3, dtype=int))
    >>> back = np.array([[0.0, 0, 0], [-1.0, 0, 0], [2.0, 0, 0]])  # each turn undone
    >>> avg = pose_averages(copies, np.zeros(3, dtype=int), back)
    >>> bool(np.abs(avg[0] - shape).max() < 0.05)
    True
    """
    xp = array_module(images)
    images = xp.asarray(images, dtype=np.float32)
    labels = np.asarray(to_host(labels), dtype=int)
    n = images.shape[0]
    t = np.asarray(to_host(transforms), dtype=np.float64).reshape(n, 3)
    if labels.shape != (n,):
        raise ValueError(f"labels must hold one cluster per image ({n}), not {labels.shape}")
    k = int(labels.max()) + 1 if n else 0
    flip = np.zeros(n, dtype=bool) if mirrored is None else np.asarray(to_host(mirrored), dtype=bool).reshape(n)
    out = xp.zeros((k, *images.shape[1:]), dtype=np.float32)
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if not members.size:
            continue
        sub = images[xp.asarray(members)]  # this cluster's copy: the mirrored ones flipped left-right first
        turned = np.flatnonzero(flip[members])
        if turned.size:
            sub[xp.asarray(turned)] = xp.flip(sub[xp.asarray(turned)], axis=2)
        out[c] = warp(sub, xp.asarray(t[members])).mean(axis=0, dtype=np.float64)
    return out
