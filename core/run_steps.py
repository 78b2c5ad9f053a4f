"""The work of a run's steps: the distances of the features, the invariant means, the final alignment.

:class:`~iastudio.core.attention.AttentionRun` keeps the state and decides what
comes next; these functions do the work of one step on the arrays they are
given, with the run's :class:`~iastudio.core.attention.Settings` (``settings``)
and the backend's array module (``xp``).  One IA iteration (paper §2):
invariant distances of the features (:func:`feature_distances`) -> W -> the
invariant mean of every column (:func:`start_means`, then :func:`mean_step`
until done).  At the end, every image is aligned onto the invariant mean of
its cluster (:func:`align_to_clusters`): aligned onto the cluster's medoid,
re-aligned globally onto the mean of the others for ``realign_rounds`` rounds
(:func:`~iastudio.core.cluster_means.realign_to_mean`), then the invariant
mean's refinement.
"""
from __future__ import annotations

import numpy as np

from .backend import array_module, to_host
from .cluster_means import realign_to_mean
from .descent_mean import descent_step, start_descent_means
from .invariant_mean import invariant_mean_step, invariant_means, start_invariant_means
from .neighbors import resolve_neighbors
from .run_output import is_sparse
from .similarity import invariant_distances, plain_distances
from .warp import warp

__all__ = ["AUTO_REALIGN_ROUNDS", "align_to_clusters", "entry_transforms", "feature_distances", "mean_step",
           "realign_rounds", "start_means", "with_mirrors"]

#: ``realign_rounds="auto"``: the rounds where every pair is aligned, and on the pruned path (thousands of
#: images, where each round costs about 5 % of the run: ``benchmarks/bench_class_averages.py --run-only``)
AUTO_REALIGN_ROUNDS = {"all pairs": 3, "pruned": 1}


def realign_rounds(setting, *, pruned: bool) -> int:
    """The rounds of re-alignment of a run's final class averages.

    Parameters
    ----------
    setting : int or "auto"
        ``Settings.realign_rounds``.
    pruned : bool
        The run aligned only candidate neighbours (its distances are a sparse graph).

    Returns
    -------
    int
        ``setting``, or for ``"auto"`` the entry of :data:`AUTO_REALIGN_ROUNDS`.

    Examples
    --------
    >>> realign_rounds("auto", pruned=False), realign_rounds("auto", pruned=True), realign_rounds(0, pruned=False)
    (3, 1, 0)
    """
    if setting == "auto":
        return AUTO_REALIGN_ROUNDS["pruned" if pruned else "all pairs"]
    return int(setting)


def feature_distances(feats, settings, *, client=None, on_progress=None) -> tuple:
    """Distances of the features, on every pair or on each image's candidate neighbours.

    Parameters
    ----------
    feats : array (n, H, W[, C])
    settings : Settings
        ``method``, ``group``, ``neighbors``, ``angle_step``, ``rotation_range``.
    client : dask.distributed.Client, optional
    on_progress : callable, optional
        ``on_progress(fraction)`` during the alignment (it may raise to stop it).

    Returns
    -------
    tuple
        ``(distances, transforms, mirrored, probes)``: dense arrays on every pair; on a pruned run the
        sparse graph, the pairs' alignments (:mod:`iastudio.core.neighbors`) and its sample of pairs
        off the graph; KA: plain distances, zero transforms.
    """
    n = feats.shape[0]
    s = settings
    if s.method != "ia":
        return plain_distances(feats), np.zeros((n, n, 3)), np.zeros((n, n), dtype=bool), None
    k = None if s.group == "e2" else resolve_neighbors(s.neighbors, n)
    opts = dict(angle_step=s.angle_step, rotation_range=s.rotation_range, client=client, on_progress=on_progress)
    if k is None:
        sim = invariant_distances(feats, group=s.group, **opts)
        return sim.distances, sim.transforms, sim.mirrored, None
    from .neighbors import pruned_distances

    sim, graph, sample = pruned_distances(feats, k, **opts)
    return graph, sim, sim.mirrored, sample


def _init_of(trans):
    """Starting transforms of the means: the dense array, or a look-up into a pruned run's pairs."""
    if isinstance(trans, np.ndarray):
        return trans
    return lambda src, col: trans.transform(src, col)


def start_means(features, weights, sim, settings, *, xp=np) -> tuple:
    """The start of an iteration's invariant means (IA; KA has none).

    Parameters
    ----------
    features : array (n, H, W[, C])
    weights : ndarray or sparse matrix (n, n)
        W.
    sim : tuple
        The features' ``(distances, transforms, mirrored, probes)``.
    settings : Settings
        ``method``, ``init``, ``group``, ``mean_solver``, ``weight_tol``, ``weight_mass``.
    xp : module

    Returns
    -------
    sources : array or None
        The images the means are made of (``[v; flip(v)]`` for E(2)).
    state : object or None
        The means' state (:mod:`iastudio.core.invariant_mean`, :mod:`iastudio.core.descent_mean`).
    """
    s = settings
    if s.method != "ia":
        return None, None
    init = _init_of(sim[1]) if s.init == "pairwise" else None
    if is_sparse(weights):
        src, w_src = features, weights
    else:
        src, w_src, init = with_mirrors(features, weights, init, sim[2], group=s.group, xp=xp)
        w_src = xp.asarray(w_src, dtype=np.float32)
    if s.mean_solver == "gradient":  # Algorithm 1: the sample mean first
        return src, start_descent_means(src, w_src, init, tol=s.weight_tol)
    return src, start_invariant_means(src, w_src, init, tol=s.weight_tol, mass=s.weight_mass)


def mean_step(features, weights, sources, state, settings, *, client=None, check=None, xp=np) -> tuple:
    """One step of the means (IA), or the whole kernel average (KA).

    Parameters
    ----------
    features : array (n, H, W[, C])
    weights : ndarray (n, n)
        W (KA).
    sources, state
        As :func:`start_means` returned them, or the last step.
    settings : Settings
        ``method``, ``mean_solver``, ``learning_rate``, ``sigmas``, ``mean_rtol``, ``mean_steps``.
    client : dask.distributed.Client, optional
    check : callable, optional
        Called between columns; raises to stop.
    xp : module

    Returns
    -------
    state : object or None
        The means' state after the step (None for KA).
    means : array (n, H, W[, C])
    done : bool
        The iteration's means are final.
    """
    s = settings
    if s.method == "ka":
        w = xp.asarray(weights, dtype=np.float32)
        return None, xp.tensordot(w.T, features, axes=1), True
    if s.mean_solver == "gradient":
        state = descent_step(sources, state, learning_rate=s.learning_rate, sigmas=s.sigmas)
        return state, state.means, state.step >= s.mean_steps
    state = invariant_mean_step(sources, state, sigmas=s.sigmas, rtol=s.mean_rtol, client=client, check=check)
    return state, state.means, state.step >= s.mean_steps or state.converged


def with_mirrors(images, weights, init, mirrored, *, group: str, xp=np) -> tuple:
    """E(2): sources ``[v; flip(v)]``, with weights and starts routed by the mirror flags.

    Entry ``(i, j)`` uses ``flip(v_i)`` where ``mirrored[i, j]``; with SE(2)
    everything is returned unchanged.

    Parameters
    ----------
    images : array (n, H, W[, C])
    weights : ndarray (n, m)
    init : ndarray (n, m, 3) or None
    mirrored : ndarray of bool (n, m)
    group : {"se2", "e2"}
    xp : module

    Returns
    -------
    tuple
        ``(images, weights, init)``, doubled along the first axis for E(2).
    """
    if group != "e2":
        return images, weights, init
    w = np.asarray(to_host(weights), dtype=float)
    m = np.asarray(mirrored, dtype=bool)
    w2 = np.concatenate([np.where(m, 0.0, w), np.where(m, w, 0.0)])
    init2 = None if init is None else np.concatenate([init, init])
    return xp.concatenate([images, xp.flip(images, axis=2)]), w2, init2


def entry_transforms(state, *, n: int, n_sources: int, mirrored) -> np.ndarray:
    """The means' ``(n, m, 3)`` entry transforms, mirror sources folded back.

    Parameters
    ----------
    state : object
        The means' state.
    n : int
        Images.
    n_sources : int
        The means' sources: ``n``, or ``2 n`` with the mirror images.
    mirrored : ndarray of bool (n, m)
        Which entries use a mirror image (read only when ``n_sources`` is ``2 n``).

    Returns
    -------
    ndarray (n, m, 3)
    """
    t = state.transforms(n_sources)
    if t.shape[0] == n:
        return t
    return np.where(mirrored[..., None], t[n:], t[:n])


def _cluster_starts(labels, input_sim, beta: float):
    """One-per-cluster weights, and where each cluster's mean starts (its medoid's alignments)."""
    n = labels.shape[0]
    k = int(labels.max()) + 1
    d0, t_in, m_in, _ = input_sim
    weights = np.zeros((n, k))
    init = np.zeros((n, k, 3))
    mirror = np.zeros((n, k), dtype=bool)
    medoids = np.zeros(k, dtype=int)
    for c in range(k):
        members = np.flatnonzero(labels == c)
        weights[members, c] = 1.0 / members.size
        if is_sparse(d0):  # pruned: the member most strongly tied to the others on the graph
            sub = d0[members][:, members].tocoo()
            tie = np.bincount(sub.row, weights=np.exp(-beta * sub.data**2), minlength=members.size)
            medoids[c] = members[np.argmax(tie)]
        else:
            medoid = members[np.argmin((d0[np.ix_(members, members)] ** 2).sum(axis=1))]
            init[:, c] = t_in[:, medoid]
            if m_in is not None:
                mirror[:, c] = m_in[:, medoid]
    return weights, init, mirror, medoids


def _realigned_starts(src, index, labels, init, settings, *, rounds: int, client=None, check=None):
    """Each image's start re-aligned onto its cluster's mean: ``init(source, column)`` for the means.

    ``init`` holds the medoid alignments (the ``(n_sources, k, 3)`` array, or a pruned run's look-up);
    image ``i`` is the source ``index[i]`` (its mirror image where E(2) chose it: the mirror flags stay
    the medoid alignment's, the rounds search rotations and shifts).  Sources that are no image's own
    entry (the other half of ``[v; flip(v)]``) start at the identity; they carry no weight.
    """
    n = labels.shape[0]
    own = np.arange(n)
    t = np.array(init(own, labels) if callable(init) else to_host(init)[index, labels], dtype=np.float64)
    xp = array_module(src)
    for c in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == c)
        if check is not None:
            check()
        images = src[xp.asarray(index[members])]
        if members.size < 2 or not bool(xp.any(images != 0)):  # one image, or the blank images' cluster
            continue
        t[members], _ = realign_to_mean(images, t[members], rounds=rounds,
                                        angle_step=settings.angle_step, rotation_range=settings.rotation_range,
                                        client=client)
    starts = np.zeros((src.shape[0], 3))
    starts[index] = t
    return lambda source, col: starts[np.asarray(source)]


def align_to_clusters(inputs, labels, input_sim, settings, *, beta: float, client=None, check=None,
                      xp=np) -> tuple:
    """Each cluster's invariant mean of its input images, and every image aligned onto its cluster's.

    Parameters
    ----------
    inputs : array (n, H, W[, C])
        The run's input images (on ``xp``).
    labels : ndarray of int (n,)
    input_sim : tuple
        The inputs' ``(distances, transforms, mirrored, probes)``.
    settings : Settings
        ``method``, ``group``, ``angle_step``, ``rotation_range``, ``mean_steps``, ``sigmas``, ``mean_rtol``,
        ``realign_rounds``.  IA: every image is aligned onto its cluster's medoid (the features'
        alignments; a pruned run aligns the pairs image -> medoid here), then, for ``realign_rounds``
        rounds (:func:`realign_rounds`), globally onto the mean of the cluster's other images
        (:func:`~iastudio.core.cluster_means.realign_to_mean`), then the invariant mean's refinement.
        E(2): whether an image is mirrored stays the medoid alignment's choice.
    beta : float
        The run's bandwidth (a pruned run's medoids).
    client : dask.distributed.Client, optional
    check : callable, optional
        Called between columns of the means and between blocks of the alignments; raises to stop.
    xp : module

    Returns
    -------
    means : array (k, H, W[, C])
    transforms : ndarray (n, 3)
        ``tau_i`` aligning image i onto its cluster's mean.
    scores : ndarray (n,)
        Cosine similarity of each aligned image with its cluster mean.
    mirrored : ndarray of bool (n,)
        The image is flipped first (E(2)).
    """
    s = settings
    n = labels.shape[0]
    weights, init, mirror, medoids = _cluster_starts(labels, input_sim, beta)
    mirrored = mirror[np.arange(n), labels]
    src, w_src, init = with_mirrors(inputs, weights, init, mirror, group=s.group, xp=xp)
    index = np.arange(n) + (n * mirrored if src.shape[0] > n else 0)
    if is_sparse(input_sim[0]) and s.method == "ia":
        # align every image onto its cluster's medoid (n pairs): the start of the cluster means
        a = np.arange(n)
        b = medoids[labels]
        own = invariant_distances(inputs, angle_step=s.angle_step, rotation_range=s.rotation_range,
                                  pairs=(a[a != b], b[a != b]), client=client,
                                  on_progress=None if check is None else lambda f: check())
        init = lambda src, col: own.transform(src, medoids[col])  # noqa: E731
    if s.method == "ia":
        rounds = realign_rounds(s.realign_rounds, pruned=is_sparse(input_sim[0]))
        if rounds > 0:
            init = _realigned_starts(src, index, labels, init, s, rounds=rounds, client=client, check=check)
        state = invariant_means(src, xp.asarray(w_src, dtype=np.float32), init, steps=s.mean_steps,
                                sigmas=s.sigmas, tol=0.0, rtol=s.mean_rtol, check=check)
        means = state.means
        tr = state.transforms(src.shape[0])[index, labels]
    else:
        means = xp.tensordot(xp.asarray(weights.T, dtype=np.float32), inputs, axes=1)
        tr = np.zeros((n, 3))
    aligned = warp(src, xp.asarray(tr), index=xp.asarray(index))
    m = means[xp.asarray(labels)]
    num = (aligned * m).reshape(n, -1).sum(axis=1)
    # the product of the two norms, not the root of the product of their squares (which overflows float32
    # for images of large values)
    den = xp.sqrt((aligned**2).reshape(n, -1).sum(axis=1)) * xp.sqrt((m**2).reshape(n, -1).sum(axis=1))
    scores = to_host(num / xp.maximum(den, 1e-12), np.float64)
    return means, tr, scores, mirrored
