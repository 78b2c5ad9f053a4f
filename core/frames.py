"""What a run's views draw: :class:`Frame`, built from snapshots or from a saved project.

A :class:`Frame` is a :class:`~iastudio.core.attention.Snapshot` plus what is
derived from it for display: the image order grouping the clusters, a 2-D
map of the manifold distances (:func:`~iastudio.core.embedding.classical_mds`,
or :func:`~iastudio.core.neighbors.graph_map` for a pruned run's sparse
distances, turned onto the previous frame's map; frames whose distances did
not change share one map), the convergence curves of every distance matrix so
far, and what the views draw of the means and of W (:func:`prepare_display`:
upright 8-bit tiles of at most 1,024 images, a sparse W's sampled block).
The frame of a finished run also holds the
:class:`~iastudio.core.attention.RunResult`, the cluster means and the plain
(kernel-attention style) averages of each cluster, and, for a run that
denoised its images, the class averages of the images before denoising at the
run's poses (:func:`~iastudio.core.cluster_means.pose_averages`).

:class:`FrameBuilder` keeps what consecutive frames share (the distance
history and the last map); a live run and a restored project use the same
builder, so they draw the same frames.  Everything here is host NumPy and
Qt-free: an application builds frames off its GUI thread.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .attention import AttentionRun, RunResult, Snapshot, Stage
from .backend import to_host
from .cluster_means import cluster_key, medoid, pose_averages
from .clustering import KChoice, grouping_order
from .display import TILES_MAX, W_SAMPLE, colour_top, even_sample, mosaic, sample_with, upright_tiles, weight_block
from .embedding import classical_mds
from .report import cluster_curves, convergence_curves

__all__ = [
    "Frame",
    "FrameBuilder",
    "book_frame",
    "book_order",
    "cluster_tiles",
    "frame_tiles",
    "frame_weights",
    "frames_from_project",
    "plain_means",
    "prepare_display",
    "undenoised_means",
    "weight_range",
]


@dataclass
class Frame:
    """A snapshot and what is derived from it for display.

    Attributes
    ----------
    snapshot : Snapshot
    order : ndarray (n,)
        Image order grouping the snapshot's clusters (stable).
    mds : ndarray (n, 2)
        Manifold map of the snapshot's distances, aligned to the previous frame's.
    curves : dict
        Within-cluster max, between-cluster min and median distance per
        distance computation (:func:`~iastudio.core.report.convergence_curves`).
    cluster_means : ndarray (k, H, W[, C]) or None
        The invariant cluster means (finished runs).
    plain_means : ndarray (k, H, W[, C]) or None
        Plain averages of each cluster's images, what kernel attention would show.
    ka_labels : ndarray (n,) or None
        Kernel attention's own clusters of the same images (finished IA runs).
    elapsed : float
        Seconds since the run (or its resumption) started.
    result : RunResult or None
        The finished run's result (the last frame of a finished run).
    cluster_ids : list of int or None
        Set by :func:`book_frame`: the edited clusters' ids, in the order of
        the rows of ``cluster_means`` / ``plain_means`` (None: the run's own
        clusters ``0 .. k - 1``).
    cluster_names : list of str or None
        Set by :func:`book_frame`: the name of each of ``cluster_ids``.
    distance_history : tuple of ndarray
        The run's distance matrices up to this frame, the ones ``curves`` are
        read from (shared with the run, not copied), so the curves can be read
        again with edited clusters (:func:`book_frame`).  Empty: not known.
    tile_ids : ndarray (m,) of int or None
        The images the per-image means grid shows: all of them in ``order``
        up to :data:`~iastudio.core.display.TILES_MAX`, otherwise an even
        sample per cluster (:func:`~iastudio.core.display.even_sample`).
    tiles : ndarray (m, H, W) of uint8 or None
        Their means upright and centred, scaled for display
        (:func:`~iastudio.core.display.upright_tiles`), row for row.
    tile_mosaic : ndarray of uint8 or None
        ``tiles`` laid out as the grid is drawn (:func:`~iastudio.core.display.mosaic`).
    w_ids : ndarray (m,) of int or None
        For a sparse W (a pruned run above 2,000 images): the even sample of
        :data:`~iastudio.core.display.W_SAMPLE` images the W panel shows.
    w_block : ndarray (m, m) of float32 or None
        W among ``w_ids`` (0 off the K-neighbour graph).
    undenoised_means : ndarray (k, H, W[, C]) or None
        A finished run that denoised its images: the class averages of the
        images *before* denoising, each moved by its pose in the run
        (:func:`undenoised_means`), rows as ``cluster_means``; None when the
        run did not denoise (or a project saved without them).
    undenoised_missing : tuple of int
        Set by :func:`book_frame`: the edited clusters (ids of
        ``cluster_ids``) that have no average before denoising (their rows of
        ``undenoised_means`` are zeros): the run's poses put each image onto
        its *run* cluster's mean, which another cluster's images do not share.

    The five from ``tile_ids`` to ``w_block`` are made by :func:`prepare_display` where the frame is
    built -- the run's worker thread -- so that the window only draws them;
    None when not made (the views then make them, see :func:`frame_tiles`
    and :func:`frame_weights`).
    """

    snapshot: Snapshot
    order: np.ndarray
    mds: np.ndarray
    curves: dict
    cluster_means: np.ndarray | None = None
    plain_means: np.ndarray | None = None
    ka_labels: np.ndarray | None = None
    elapsed: float = 0.0
    result: RunResult | None = None
    cluster_ids: list | None = None
    cluster_names: list | None = None
    distance_history: tuple = ()
    tile_ids: np.ndarray | None = None
    tiles: np.ndarray | None = None
    tile_mosaic: np.ndarray | None = None
    w_ids: np.ndarray | None = None
    w_block: np.ndarray | None = None
    undenoised_means: np.ndarray | None = None
    undenoised_missing: tuple = ()


def weight_range(frames) -> tuple[float, float]:
    """``(0, top)`` over ``frames`` (:func:`colour_top`): one colour scale for every frame of a run.

    Parameters
    ----------
    frames : sequence of Frame
        Dense or sparse W (a sparse W's missing entries are 0).

    Returns
    -------
    tuple of float
        ``(0.0, top)`` with ``top > 0`` (1e-6 when every W is 0 or there are no frames).
    """
    tops = [colour_top(f.snapshot.weights) for f in frames if f.snapshot.weights is not None]
    return 0.0, max(tops, default=1e-6)


def plain_means(images: np.ndarray, labels: np.ndarray, *, n_clusters: int | None = None) -> np.ndarray:
    """Plain average of each cluster's images (no alignment).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    labels : ndarray of int, shape (n,)
        Cluster of each image, ``0 .. n_clusters - 1``.
    n_clusters : int, optional
        Default ``max(labels) + 1``.

    Returns
    -------
    ndarray, shape (n_clusters, H, W[, C]), float32
        Row ``c`` is the mean of the images labelled ``c``; zeros for a
        cluster without images.
    """
    images = np.asarray(images)
    labels = np.asarray(labels, dtype=int)
    k = int(labels.max()) + 1 if n_clusters is None else int(n_clusters)
    out = np.zeros((k, *images.shape[1:]), dtype=np.float32)
    for c in range(k):
        if (labels == c).any():
            out[c] = images[labels == c].mean(axis=0)
    return out


def _tile_rows(means, ids, have_ids, have_tiles) -> np.ndarray:
    """Upright tiles of the images ``ids``: the rows of ``have_tiles`` (of ``have_ids``) where there, the rest made."""
    ids = np.asarray(ids, dtype=int)
    out = np.empty((ids.size, *means.shape[1:3]), dtype=np.uint8)
    found = np.zeros(ids.size, dtype=bool)
    if have_ids is not None and have_tiles is not None and len(have_ids):
        pos = np.full(len(means), -1)
        pos[np.asarray(have_ids, dtype=int)] = np.arange(len(have_ids))
        where = pos[ids]
        found = where >= 0
        out[found] = have_tiles[where[found]]
    if not found.all():
        out[~found] = upright_tiles(means[ids[~found]])
    return out


def prepare_display(frame: Frame, *, like: Frame | None = None) -> Frame:
    """Make what the window draws of ``frame``: the means grid's sample and tiles, a sparse W's sampled block.

    Parameters
    ----------
    frame : Frame
        Changed in place: :attr:`Frame.tile_ids`, :attr:`Frame.tiles`,
        :attr:`Frame.tile_mosaic`, :attr:`Frame.w_ids` and :attr:`Frame.w_block` are set from its
        snapshot and its ``order``.
    like : Frame, optional
        A frame of the same snapshot means (the same array): its tiles are
        reused for the images both samples share, only the others are made
        (a frame regrouped by other clusters, :func:`book_frame`).  May be
        ``frame`` itself.

    Returns
    -------
    Frame
        ``frame``.
    """
    import scipy.sparse as sp

    snap = frame.snapshot
    labels = np.asarray(snap.labels)
    had_ids = had_tiles = had_w_ids = had_block = None  # read before ``frame`` changes (``like`` may be it)
    if like is not None and like.snapshot.means is snap.means:
        had_ids, had_tiles = like.tile_ids, like.tiles
    if like is not None and like.snapshot.weights is snap.weights:
        had_w_ids, had_block = like.w_ids, like.w_block
    frame.w_ids = frame.w_block = None
    if snap.weights is not None and sp.issparse(snap.weights):
        ids = even_sample(frame.order, labels, limit=W_SAMPLE)
        same = had_w_ids is not None and had_block is not None and np.array_equal(had_w_ids, ids)
        frame.w_ids, frame.w_block = ids, had_block if same else weight_block(snap.weights, ids)
    frame.tile_ids = frame.tiles = frame.tile_mosaic = None
    if snap.means is not None and len(snap.means) == labels.size:
        ids = even_sample(frame.order, labels, limit=TILES_MAX)
        frame.tile_ids, frame.tiles = ids, _tile_rows(snap.means, ids, had_ids, had_tiles)
        frame.tile_mosaic = mosaic(frame.tiles)
    return frame


def frame_tiles(frame: Frame, *, keep=()) -> tuple[np.ndarray, np.ndarray]:
    """The per-image means grid of ``frame``: image indices and their upright tiles.

    Parameters
    ----------
    frame : Frame
    keep : sequence of int
        Images to show even when the sample left them out (the selection; at
        most :data:`~iastudio.core.display.KEEP_MAX` of them, a larger
        selection is not added).

    Returns
    -------
    ids : ndarray of int, shape (m,)
        The frame's :attr:`Frame.tile_ids` with the kept images it lacks, in
        the frame's order.
    tiles : ndarray, shape (m, H, W), uint8
        The prepared tiles; only those of images not prepared are made here
        (all of them for a frame :func:`prepare_display` did not prepare).
    """
    snap = frame.snapshot
    sample = frame.tile_ids
    if sample is None:
        sample = even_sample(frame.order, snap.labels, limit=TILES_MAX)
    ids = sample_with(frame.order, sample, keep)
    if ids is frame.tile_ids and frame.tiles is not None:
        return ids, frame.tiles
    return ids, _tile_rows(snap.means, ids, frame.tile_ids, frame.tiles)


def cluster_tiles(frame: Frame, *, undenoised: bool = False) -> tuple[list, np.ndarray]:
    """One upright tile per cluster: the cluster means when the frame has them, else each cluster's first image's.

    Parameters
    ----------
    frame : Frame
    undenoised : bool
        The class averages of the images before denoising instead
        (:attr:`Frame.undenoised_means`, where the frame has them), each turned
        upright as its cluster's invariant mean is, so that both are seen in one pose.

    Returns
    -------
    ids : list of int
        The clusters (:attr:`Frame.cluster_ids`, or the snapshot's labels).
    tiles : ndarray, shape (len(ids), H, W), uint8
    """
    labels = np.asarray(frame.snapshot.labels)
    ids = frame.cluster_ids if frame.cluster_ids is not None else [int(c) for c in np.unique(labels)]
    if undenoised and frame.undenoised_means is not None and frame.cluster_means is not None:
        return ids, upright_tiles(frame.undenoised_means, like=frame.cluster_means)
    if frame.cluster_means is not None:
        return ids, upright_tiles(frame.cluster_means)
    firsts = [int(np.flatnonzero(labels == c)[0]) for c in ids]
    return ids, _tile_rows(frame.snapshot.means, firsts, frame.tile_ids, frame.tiles)


def frame_weights(frame: Frame, *, keep=()) -> tuple[np.ndarray, np.ndarray]:
    """What the W panel draws of ``frame``: the images of its rows and columns, and W among them.

    Parameters
    ----------
    frame : Frame
    keep : sequence of int
        For a sparse W: images to show even when the sample left them out (at
        most :data:`~iastudio.core.display.KEEP_MAX`).

    Returns
    -------
    ids : ndarray of int, shape (m,)
        A dense W: the frame's whole ``order``.  A sparse W: its
        :attr:`Frame.w_ids` (an even sample per cluster) with the kept images.
    block : ndarray, shape (m, m), float32
        ``W[ids][:, ids]``; the prepared :attr:`Frame.w_block` when nothing was added.
    """
    import scipy.sparse as sp

    w = frame.snapshot.weights
    if not sp.issparse(w):
        return frame.order, weight_block(w, frame.order)
    sample = frame.w_ids
    if sample is None:
        sample = even_sample(frame.order, frame.snapshot.labels, limit=W_SAMPLE)
    ids = sample_with(frame.order, sample, keep)
    if ids is frame.w_ids and frame.w_block is not None:
        return ids, frame.w_block
    return ids, weight_block(w, ids)


def _ka_labels(run: AttentionRun) -> np.ndarray | None:
    """Kernel attention's clusters of an IA run's inputs (same beta, iterations, clusters); None for KA."""
    s = run.settings
    if s.method != "ia":
        return None
    ka = AttentionRun(run.inputs, backend="numpy", method="ka", beta=s.beta, iterations=s.iterations,
                      clusters=s.clusters)
    return ka.run().labels


def _map(distances, previous):
    """The 2-D map: classical MDS, or for a pruned run's sparse distances a map of its neighbour graph."""
    import scipy.sparse as sp

    if sp.issparse(distances):
        from .neighbors import graph_map

        return graph_map(distances, previous)
    return classical_mds(distances, previous=previous)


def _same_matrix(a, b) -> bool:
    """True when ``a`` and ``b`` are the same distances (the same object, or equal dense / equal sparse arrays)."""
    import scipy.sparse as sp

    if a is b:
        return True
    if a is None or b is None or sp.issparse(a) != sp.issparse(b) or a.shape != b.shape:
        return False
    if sp.issparse(a):
        a, b = a.tocsr(), b.tocsr()
        return (a.nnz == b.nnz and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
                and np.array_equal(a.data, b.data))
    return np.array_equal(a, b)


def _book_curves(frame: Frame, labels: np.ndarray) -> dict:
    """The frame's curves read with ``labels``: within/between follow the clusters, the median does not."""
    history = list(frame.distance_history)
    if not history:
        return frame.curves
    import scipy.sparse as sp

    if sp.issparse(history[-1]):
        return _curves(history, labels)
    return {**cluster_curves(history, labels), "median": list(frame.curves["median"])}


def _curves(history, labels) -> dict:
    """Convergence curves; a pruned run's on its computed pairs only."""
    import scipy.sparse as sp

    if history and sp.issparse(history[-1]):
        from .neighbors import graph_curves

        return graph_curves(history, labels)
    return convergence_curves(history, labels)


class FrameBuilder:
    """Builds the :class:`Frame` of each snapshot of one run, in order.

    It keeps the distance matrices of the run's distance computations (the
    ``similarity`` and ``done`` snapshots) for the convergence curves, and the
    last map, so each map is turned onto the one before.

    Examples
    --------
    >>> builder = FrameBuilder()                           # doctest: +SKIP
    >>> last = None
    >>> for snap in run.steps():                           # doctest: +SKIP
    ...     last = snap
    ...     draw(builder.frame(snap))
    >>> final = builder.final(run, last)                   # doctest: +SKIP
    """

    def __init__(self):
        self.history: list[np.ndarray] = []
        self.mds: np.ndarray | None = None
        self._mapped = None  # the distances self.mds maps
        self._last: Frame | None = None

    def reset(self) -> None:
        """Forget the history and the map (a new run starts)."""
        self.history, self.mds, self._mapped, self._last = [], None, None, None

    def frame(self, snapshot: Snapshot, *, elapsed: float = 0.0) -> Frame:
        """The frame of the next snapshot of the run.

        Parameters
        ----------
        snapshot : Snapshot
        elapsed : float
            Seconds since the run started, kept in the frame.

        Returns
        -------
        Frame
            Without the final read-out (see :meth:`final`).
        """
        if snapshot.stage == Stage.SIMILARITY:  # each is a new d(S_i, S_j)
            self.history.append(snapshot.distances)
        elif snapshot.stage == Stage.DONE:  # the distances after the iterations kept (the guard may undo one)
            self.history = [*self.history[:max(0, int(snapshot.iteration))], snapshot.distances]
        if self.mds is None or not _same_matrix(snapshot.distances, self._mapped):
            self.mds = _map(snapshot.distances, self.mds)  # a new array: frames share an unchanged map
            self.mds.setflags(write=False)
            self._mapped = snapshot.distances
        fr = Frame(snapshot=snapshot, order=np.argsort(snapshot.labels, kind="stable"), mds=self.mds,
                   curves=_curves(self.history, snapshot.labels), elapsed=elapsed,
                   distance_history=tuple(self.history))
        self._last = prepare_display(fr)
        return fr

    def final(self, run: AttentionRun, last: Snapshot | None, *, elapsed: float = 0.0,
              undenoised=None) -> Frame:
        """The frame of a finished run: its last snapshot with the result and the cluster means.

        Parameters
        ----------
        run : AttentionRun
            Finished.
        last : Snapshot or None
            The last snapshot :meth:`frame` was given (None when none was, e.g.
            a resumed run that had nothing left to do).
        elapsed : float
        undenoised : ndarray, shape (n, H, W[, C]), optional
            The run's images before denoising, moved as its inputs are (a run
            that denoised them; :class:`~iastudio.core.session_inputs.RunInputs`):
            their class averages at the run's poses become
            :attr:`Frame.undenoised_means` (:func:`undenoised_means`).

        Returns
        -------
        Frame
            With :attr:`Frame.result`, the invariant cluster means, the plain
            average of each cluster and, for an IA run, kernel attention's
            clusters of the same inputs (a KA run on the CPU).
        """
        res = run.result()
        if last is None or self.mds is None:
            fr = self.frame(last if last is not None else run.snapshot(Stage.DONE))
        else:
            fr = Frame(snapshot=last, order=np.argsort(res.labels, kind="stable"), mds=self.mds,
                       curves=_curves(self.history, res.labels), distance_history=tuple(self.history))
            prepare_display(fr, like=self._last)
        fr.cluster_means = res.cluster_means
        fr.plain_means = plain_means(run.inputs, res.labels, n_clusters=res.n_clusters)
        fr.ka_labels = _ka_labels(run)
        fr.elapsed = elapsed
        fr.result = res
        if undenoised is not None:
            fr.undenoised_means = undenoised_means(undenoised, res, group=run.settings.group)
        return fr


def undenoised_means(images, result: RunResult, *, group: str = "se2") -> np.ndarray:
    """A denoised run's class averages of its images before denoising, at the poses the run found.

    The poses (:attr:`RunResult.image_transforms`, each image onto its
    cluster's invariant mean) are found on the denoised images; the images as
    they were keep the fine detail the denoiser's basis drops, and their
    average divides the noise by the cluster's size
    (:func:`~iastudio.core.cluster_means.pose_averages`; ``ia-cluster``'s
    ``means_undenoised.npy``).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The run's images before denoising, moved as its inputs are
        (:attr:`iastudio.core.preprocess.Canvas.undenoised`, through the
        user's transforms).
    result : RunResult
        The finished run's result (its labels, poses and mirrors).
    group : {"se2", "e2"}
        The run's group: with ``"e2"`` the mirrored images are flipped first.

    Returns
    -------
    ndarray, shape (k, H, W[, C]), float32
        Row ``c`` is cluster ``c``'s average (host NumPy).

    Raises
    ------
    ValueError
        When ``images`` are not one per image of the run, or not of its size.
    """
    images = np.asarray(to_host(images))
    means = np.asarray(result.cluster_means)
    if images.shape[0] != np.asarray(result.labels).size or images.shape[1:] != means.shape[1:]:
        raise ValueError(f"images before denoising of shape {images.shape} for a run of "
                         f"{np.asarray(result.labels).size} images of shape {means.shape[1:]}")
    mirrored = result.mirrored if group == "e2" else None
    out = pose_averages(images, result.labels, result.image_transforms, mirrored=mirrored)
    return np.asarray(to_host(out), dtype=np.float32)


def _check_history(history, working) -> None:
    from .project import HISTORY_ARRAYS, ProjectError

    for h in history:
        if any(h.get(k) is None for k in HISTORY_ARRAYS):
            raise ProjectError("the saved run is incomplete (a step lacks its weights, means, distances "
                               "or clusters)")
        if h["means"].shape[1:] != working.shape[1:]:
            raise ProjectError("the saved run does not match the images (different working size)")


def _saved_result(project, working, beta) -> RunResult | None:
    """The saved result, checked against the images; None when the project holds no complete one."""
    from .attention import RESULT_ARRAYS
    from .project import ProjectError

    r = project.result
    if any(r.get(k) is None for k in RESULT_ARRAYS):
        return None
    history = project.history
    params = project.parameters
    choice = params.get("k_choice")  # checked when the project was loaded
    res = RunResult.from_arrays(
        r, features=history[-1]["means"], iterations=int(history[-1]["iteration"]), beta=beta,
        history=[],  # filled in by frames_from_project: what the frames' builder keeps
        k_choice=None if choice is None else KChoice.from_dict(choice), notes=params.get("run_notes", ()))
    k = res.n_clusters
    means = res.cluster_means
    if k > working.shape[0] or means.shape[0] != k or means.shape[1:] != working.shape[1:]:
        raise ProjectError("the saved result does not match the images")
    return res


def frames_from_project(project, working: np.ndarray) -> tuple[list[Frame], Frame | None]:
    """The frames of a saved run, checked against the images; changes nothing.

    Parameters
    ----------
    project : Project
        As :func:`iastudio.core.project.load_project` gives it.
    working : ndarray, shape (n, H, W[, C])
        The images the run was made on (the project's images with its
        transforms applied).

    Returns
    -------
    frames : list of Frame
        One per saved step, built as during the run (:class:`FrameBuilder`).
    final : Frame or None
        The last frame, with the result, the cluster means and the curves read
        with the result's clusters (as :meth:`FrameBuilder.final` makes them),
        when the project holds a complete result; otherwise None.  Kernel
        attention's clusters are the saved ones (``Project.ka_labels``; None
        in older projects), not recomputed, and so are a denoised run's
        class averages before denoising (``Project.undenoised_means``: the
        images before denoising are not in a project).

    Raises
    ------
    ProjectError
        When the saved run is incomplete or does not match the images.
    """
    if not project.history:
        return [], None
    beta = project.parameters.get("beta_used")
    beta = float("nan") if beta is None else float(beta)
    _check_history(project.history, working)
    res = _saved_result(project, working, beta)
    builder = FrameBuilder()
    frames = []
    for k, h in enumerate(project.history):
        if h["stage"] == Stage.DONE and k + 1 < len(project.history) and project.history[k + 1]["stage"] == Stage.DONE:
            continue  # older projects recorded the finished run's last snapshot twice
        snap = Snapshot(iteration=h["iteration"], stage=Stage(h["stage"]), step=0, n_steps=0,
                        weights=h["weights"], means=h["means"], distances=h["distances"], transforms=None,
                        labels=h["labels"], objective=[], timings={}, progress=1.0, beta=beta)
        frames.append(builder.frame(snap))
    if res is None:
        return frames, None
    final = frames[-1]
    final.order = np.argsort(res.labels, kind="stable")
    prepare_display(final, like=final)
    res.history = list(builder.history)
    final.curves = _curves(builder.history, res.labels)
    final.distance_history = tuple(builder.history)
    ka = project.ka_labels
    final.ka_labels = None if ka is None or np.shape(ka) != (working.shape[0],) else np.asarray(ka, dtype=int)
    final.result = res
    final.cluster_means = res.cluster_means
    final.plain_means = plain_means(working, res.labels, n_clusters=res.n_clusters)
    und = project.undenoised_means
    final.undenoised_means = (None if und is None or np.shape(und) != np.shape(res.cluster_means)
                              else np.asarray(und, dtype=np.float32))
    return frames, final


def book_order(labels, within=None) -> np.ndarray:
    """Image order grouping edited clusters: by cluster id, unassigned images (``-1``) last.

    ``within``: the order the images had (the run's, grouping its clusters); each edited cluster keeps
    it, so the run's clusters merged into one stay blocks of their own inside it (W shows clean
    blocks, not a checkerboard of interleaved images).  ``None``: image order.
    """
    labels = np.asarray(labels, dtype=int)
    key = np.where(labels < 0, labels.max(initial=0) + 1, labels)
    if within is None:
        return grouping_order(key)
    within = np.asarray(within, dtype=int)
    if np.array_equal(np.sort(within), np.arange(labels.size)):
        return within[grouping_order(key[within])]
    return grouping_order(key)  # not an order of these images


def edited_clusters(frame: Frame, labels, ids) -> dict:
    """The clusters of ``labels`` that are not the run's own: ``{cluster id: member indices}``."""
    labels = np.asarray(labels, dtype=int)
    run_labels = frame.result.labels if frame.result is not None else None
    means = frame.cluster_means
    changed = {}
    for c in ids:
        members = labels == c
        same = (run_labels is not None and means is not None and c < len(means)
                and np.array_equal(members, np.asarray(run_labels) == c))
        if not same:
            changed[c] = np.flatnonzero(members)
    return changed


def _book_means(frame: Frame, labels: np.ndarray, ids: list, known: dict | None = None) -> np.ndarray | None:
    """One mean per edited cluster: the run's invariant mean where the cluster is exactly the run's.

    A cluster the edits changed (merged, split, moved into) gets its own invariant mean from ``known``
    (``{cluster_key(members): mean}``, computed by :func:`~iastudio.core.cluster_means.cluster_invariant_means`)
    and, until that is computed, the per-image invariant mean of its medoid: one member's mean, never
    an average of means in different poses (a smear).
    """
    if frame.snapshot.means is None or not ids:
        return None
    known = known or {}
    means = frame.cluster_means
    changed = edited_clusters(frame, labels, ids)
    out = np.zeros((len(ids), *frame.snapshot.means.shape[1:]), dtype=np.float32)
    for row, c in enumerate(ids):
        if c not in changed:
            out[row] = means[c]
            continue
        members = changed[c]
        mean = known.get(cluster_key(members))
        if mean is None:
            mean = frame.snapshot.means[medoid(members, frame.snapshot.distances)]
        out[row] = mean
    return out


def _book_undenoised(frame: Frame, labels: np.ndarray, ids: list,
                     known: dict | None = None) -> tuple[np.ndarray | None, tuple]:
    """The class averages before denoising of the edited clusters, and the clusters that have none.

    A cluster exactly the run's keeps its row of :attr:`Frame.undenoised_means`; a cluster the edits
    changed takes its average from ``known`` (by :func:`~iastudio.core.cluster_means.cluster_key` of
    its members: made at the poses onto its own invariant mean,
    :func:`~iastudio.core.cluster_means.edited_cluster_means`) or, until that is computed, gets zeros
    and is listed: the run's poses put its images onto other clusters' means.
    """
    und = frame.undenoised_means
    if und is None or frame.result is None or not ids:
        return None, ()
    known = known or {}
    run_labels = np.asarray(frame.result.labels)
    out = np.zeros((len(ids), *und.shape[1:]), dtype=np.float32)
    missing = []
    for row, c in enumerate(ids):
        members = labels == c
        if c < len(und) and np.array_equal(members, run_labels == c):
            out[row] = und[c]
        elif (average := known.get(cluster_key(np.flatnonzero(members)))) is not None:
            out[row] = average
        else:
            missing.append(int(c))
    return out, tuple(missing)


def book_frame(frame: Frame, labels, names: dict, *, images: np.ndarray, means: dict | None = None,
               undenoised_means: dict | None = None) -> Frame:
    """The frame redrawn with a person's edited clusters instead of the run's read-out.

    Parameters
    ----------
    frame : Frame
        A frame of the run (a finished run's final frame, or any step).
    labels : array of int, shape (n,)
        Edited cluster per image (:attr:`ClusterBook.labels`); ``-1`` = unassigned.
    names : dict
        ``{cluster id: name}`` (:attr:`ClusterBook.names`).
    images : ndarray, shape (n, H, W[, C])
        The images the run was made on (for the plain averages).
    means : dict, optional
        Invariant means of edited clusters, by :func:`~iastudio.core.cluster_means.cluster_key` of
        their members (see :func:`_book_means`).
    undenoised_means : dict, optional
        Their class averages before denoising, by the same keys (see :func:`_book_undenoised`).

    Returns
    -------
    Frame
        A copy whose snapshot labels are ``labels``, whose order groups them
        (:func:`book_order`, each cluster's images in the frame's order), with
        one invariant mean and one plain average per edited cluster (rows in
        ``cluster_ids`` order, see :func:`_book_means`), the clusters' names, the class averages before denoising of the
        clusters that are the run's own or in ``undenoised_means``
        (:attr:`Frame.undenoised_missing` lists the others), and the convergence curves read with ``labels``
        (within-cluster max and between-cluster min of the edited clusters,
        unassigned images left out; the median is the frame's), and the
        display samples of the new grouping (:func:`prepare_display`, reusing
        the frame's tiles).  The map, ``ka_labels`` and the run's result are
        the frame's own.  ``frame`` is not changed.
    """
    labels = np.asarray(labels, dtype=int)
    if labels.shape != np.asarray(frame.snapshot.labels).shape:
        raise ValueError(f"{labels.size} cluster labels for a frame of {np.asarray(frame.snapshot.labels).size} images")
    ids = sorted(int(c) for c in np.unique(labels) if c >= 0)
    dense = np.full(labels.shape, len(ids), dtype=int)
    for row, c in enumerate(ids):
        dense[labels == c] = row
    plain = None
    if frame.plain_means is not None:
        plain = plain_means(images, dense, n_clusters=len(ids) + 1)[:len(ids)]
    und, missing = _book_undenoised(frame, labels, ids, undenoised_means)
    booked = replace(frame, snapshot=replace(frame.snapshot, labels=labels), order=book_order(labels, frame.order),
                     cluster_means=(_book_means(frame, labels, ids, means)
                                    if frame.cluster_means is not None else None),
                     plain_means=plain, cluster_ids=ids, curves=_book_curves(frame, labels),
                     cluster_names=[str(names.get(c, f"Cluster {c + 1}")) for c in ids],
                     undenoised_means=und, undenoised_missing=missing)
    return prepare_display(booked, like=frame)
