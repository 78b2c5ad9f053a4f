"""Candidate neighbours from rotation- and translation-invariant features.

Aligning every pair of ``n`` images costs ``n^2``; for thousands of images
only each image's nearest neighbours matter to W (the RBF weight of a far
image is negligible).  Candidates are found cheaply, as in ASPIRE's
rotationally-invariant class averaging:

1. **Features.**  ``|F(v)|``, the Fourier magnitude, does not change when
   ``v`` is shifted; in polar coordinates a rotation of ``v`` shifts it along
   the angle, so the magnitude of its Fourier series along the angle (the
   angular power spectrum of every ring) does not change either.  The
   feature vector of an image is that spectrum, unit-norm.
2. **Neighbours.**  The exact nearest neighbours on the features
   (:func:`nearest_rows`: blocks of one matrix product) give every image
   ``3 K`` neighbours; they are re-ranked by the best circular correlation
   of the polar magnitudes over every rotation (phase along the angle kept),
   and the top ``K`` are the image's candidates.  The union of the
   candidate lists is the graph on which the full alignment (global search
   + refinement) runs.
3. **Shared neighbours.**  The features miss a few true neighbours (a
   digit's nearest image can rank 40th by feature).  Two images that share
   a near neighbour are often near each other (the step of nearest-neighbour
   descent), so the pairs of images with a common neighbour among their
   ``SHARED_NEAREST`` nearest *aligned* images are aligned too
   (:func:`shared_neighbor_pairs`, about 4 more pairs per image).

On that graph W, its column sums and the affinity of the read-out are sparse
(:func:`iastudio.core.weights.attention_weights` and
:func:`iastudio.core.clustering.read_clusters` take the graph as it is).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .backend import array_module, fft_module, threads, to_host
from .clustering import closest_in_rows, nearest_pairs
from .similarity import invariant_distances, join_pair_results, polar_magnitudes, refine_pairs, sharing_preparation
from .warp import parallel_map
from .weights import graph_affinity

__all__ = [
    "AUTO_ALL_PAIRS_MAX",
    "AUTO_K",
    "candidate_pairs",
    "graph_curves",
    "graph_map",
    "invariant_features",
    "near_radius",
    "nearest_rows",
    "probe_pairs",
    "pruned_distances",
    "resolve_neighbors",
    "shared_neighbor_pairs",
    "split_probes",
]

#: ``neighbors="auto"``: every pair up to this many images, ``AUTO_K`` candidates above.
AUTO_ALL_PAIRS_MAX = 300
AUTO_K = 30
#: random pairs off the candidate graph aligned per image, for the read-out's silhouette
PROBES = 5
#: ... and at least this many in all (every pair off the graph where there are fewer)
MIN_PROBES = 2000
#: images sharing one of their this many nearest aligned neighbours are aligned too
SHARED_NEAREST = 4
#: ... of which each image keeps this many, those with the shortest two-step paths (a pair either keeps)
SHARED_MOST = 8


def resolve_neighbors(neighbors, n: int) -> int | None:
    """The number of candidates per image, or ``None`` for every pair.

    Parameters
    ----------
    neighbors : int, "all" or "auto"
        ``"auto"``: every pair up to :data:`AUTO_ALL_PAIRS_MAX` images,
        :data:`AUTO_K` candidates above.
    n : int
        Number of images.

    Returns
    -------
    int or None
        ``None`` when every pair is aligned (also when ``K >= n - 1``).

    Examples
    --------
    >>> resolve_neighbors("auto", 100), resolve_neighbors("auto", 1000), resolve_neighbors(5, 4)
    (None, 30, None)
    """
    if neighbors in (None, "all"):
        return None
    if neighbors == "auto":
        return None if n <= AUTO_ALL_PAIRS_MAX else AUTO_K
    k = int(neighbors)
    if k < 1:
        raise ValueError("neighbors must be at least 1, 'all' or 'auto'")
    return None if k >= n - 1 else k


def _polar_magnitudes(images, n_rings, n_angles):
    """``|F(v)|`` on a polar grid, ``sqrt(radius)``-weighted and unit-norm: (n, rings, angles), on the device."""
    xp = array_module(images)
    n, h, w = images.shape[:3]
    p = 2 * max(h, w)
    n_rings = n_rings or max(8, max(h, w) // 2)
    radii = np.linspace(1.0, 0.45 * p, n_rings)
    phi = 2 * np.pi * np.arange(n_angles) / n_angles
    centre = p // 2
    rows, cols = centre + radii[:, None] * np.cos(phi), centre + radii[:, None] * np.sin(phi)
    weight = xp.asarray(np.sqrt(radii), dtype=np.float32)[:, None]
    out = xp.empty((n, n_rings, n_angles), dtype=np.float32)
    step = max(1, (1 << 22) // (p * p))
    if xp is np and n > 1:  # a block per thread at least
        step = min(step, -(-n // threads()))

    def block(lo):
        blk = xp.asarray(images[lo:lo + step], dtype=np.float32)
        polar = polar_magnitudes(blk, p, rows, cols)
        out[lo:lo + step] = polar.reshape(-1, n_rings, n_angles) * weight

    starts = range(0, n, step)
    if xp is np:  # the blocks on every thread (each image's spectrum is its own)
        parallel_map(block, starts)
    else:
        for lo in starts:
            block(lo)
    out /= xp.maximum(xp.sqrt((out * out).sum(axis=(1, 2))), 1e-12)[:, None, None]
    return out


def invariant_features(images, *, n_rings: int | None = None, n_angles: int = 64) -> np.ndarray:
    """Rotation- and translation-invariant feature vectors (host, float32).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Unit-norm images on one canvas (NumPy or CuPy).
    n_rings : int, optional
        Radii sampled in the Fourier plane (default: ``max(8, H // 2)``).
    n_angles : int
        Angles per ring.

    Returns
    -------
    ndarray, shape (n, n_rings * (n_angles // 2 + 1))
        The angular power spectrum of every ring of ``|F|``, unit-norm:
        unchanged by any rotation about the centre and any shift.
    """
    polar = _polar_magnitudes(images, n_rings, n_angles)
    xp = array_module(polar)
    power = to_host(xp.abs(fft_module(xp).rfft(polar, axis=2)), np.float32)
    power = power.reshape(power.shape[0], -1)
    return power / np.maximum(np.linalg.norm(power, axis=1, keepdims=True), 1e-12)


def candidate_pairs(images, k: int, *, oversample: int = 3, n_angles: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``i < j`` where ``j`` is among ``i``'s ``k`` candidates or vice versa.

    Two stages, both invariant to rotation and shift: the ``oversample * k``
    nearest neighbours of :func:`invariant_features` (:func:`nearest_rows`, on the
    device the images are on), re-ranked by the best
    circular correlation of the polar Fourier magnitudes over all rotations
    (the score the global search of :mod:`iastudio.core.similarity` starts from);
    the top ``k`` are kept.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Unit-norm images on one canvas (NumPy or CuPy).
    k : int
        Candidates per image (itself not counted).
    oversample : int
        How many more feature neighbours are re-ranked.
    n_angles : int
        Angles per polar ring.

    Returns
    -------
    rows, cols : ndarray of int, shape (P,)
        Unique pairs with ``rows < cols``, sorted; ``P <= n k``.
    """
    n = images.shape[0]
    k = min(int(k), n - 1)
    polar = _polar_magnitudes(images, None, n_angles)
    xp = array_module(polar)
    fft = fft_module(xp)
    q = fft.rfft(polar, axis=2)  # (n, R, F)
    feats = to_host(xp.abs(q), np.float32).reshape(n, -1)
    feats /= np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
    k1 = min(n - 1, max(k, oversample * k))
    idx = nearest_rows(xp.asarray(feats), k1 + 1)  # on a device: the products there, not n^2 distances on the host
    top = np.empty((n, k), dtype=np.int64)
    step = max(1, (1 << 22) // (k1 * q.shape[1] * q.shape[2]))

    def rerank(lo):
        hi = min(n, lo + step)
        cand = idx[lo:hi]
        g = (xp.conj(q[lo:hi])[:, None] * q[xp.asarray(cand)]).sum(axis=2)  # (b, c, F)
        score = to_host(fft.irfft(g, n=n_angles, axis=2).max(axis=2), np.float64)  # best rotation
        score[cand == np.arange(lo, hi)[:, None]] = -np.inf  # not itself
        order = np.argsort(-score, axis=1, kind="stable")[:, :k]
        top[lo:hi] = np.take_along_axis(cand, order, axis=1)

    starts = range(0, n, step)
    if xp is np:  # the blocks on every thread
        parallel_map(rerank, starts)
    else:
        for lo in starts:
            rerank(lo)
    rows = np.repeat(np.arange(n), k)
    cols = top.ravel()
    a, b = np.minimum(rows, cols), np.maximum(rows, cols)
    key = np.unique(a[a != b].astype(np.int64) * n + b[a != b])
    return key // n, key % n


def nearest_rows(feats, k: int, *, block_elements: int = 1 << 26) -> np.ndarray:
    """Each row's ``k`` nearest rows (itself included) by Euclidean distance, exact, nearest first.

    For unit-norm rows the distance falls as the inner product rises, so a
    block of rows is one matrix product with all rows and a partial sort of
    each row of the product, on the device the rows are on (NumPy or CuPy);
    no ``n x n`` array is held.  On NumPy the blocks run on every thread.  It
    gives scikit-learn's :class:`~sklearn.neighbors.NearestNeighbors` answer
    (brute force, the same matrix product) without importing scikit-learn,
    whose first import is 1 to 2 s of one core at the start of a run.

    Parameters
    ----------
    feats : ndarray, shape (n, F)
        Unit-norm feature rows (NumPy or CuPy).
    k : int
        Neighbours per row, ``1 <= k <= n``.
    block_elements : int
        Entries of the product computed at once (rows per block = this / n).

    Returns
    -------
    ndarray of int, shape (n, k)
        On the host; ties are broken by the smaller index.

    Examples
    --------
    >>> f = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    >>> nearest_rows(f, 2)
    array([[0, 1],
           [1, 0],
           [2, 1]])
    """
    xp = array_module(feats)
    n = feats.shape[0]
    k = int(k)
    out = np.empty((n, k), dtype=np.int64)
    step = max(1, int(block_elements) // max(n, 1))
    if xp is np and n > 1:  # a block per thread at least: the product and its partial sort on every core
        step = min(step, -(-n // threads()))

    def block(lo):
        sim = feats[lo:lo + step] @ feats.T  # (b, n): larger is nearer
        sim[xp.arange(sim.shape[0]), xp.arange(lo, lo + sim.shape[0])] = xp.inf  # itself first
        if k < n:
            part = xp.sort(xp.argpartition(-sim, k - 1, axis=1)[:, :k], axis=1)  # by index, for the ties
        else:
            part = xp.broadcast_to(xp.arange(n), sim.shape)
        order = xp.argsort(-xp.take_along_axis(sim, part, axis=1), axis=1, kind="stable")
        out[lo:lo + sim.shape[0]] = to_host(xp.take_along_axis(part, order, axis=1), np.int64)

    starts = range(0, n, step)
    if xp is np:  # the blocks on every thread (BLAS on one thread inside each)
        parallel_map(block, starts)
    else:
        for lo in starts:
            block(lo)
    return out


def probe_pairs(pairs, n: int, *, per_image: int = PROBES, at_least: int = MIN_PROBES, seed: int = 0):
    """Random pairs off the candidate graph: a sample of the distances it leaves out.

    A silhouette needs every image's mean distance to every cluster; the
    graph holds only each image's nearest distances.  Aligning a few random
    other pairs per image gives, pooled over a cluster, an unbiased estimate
    of the mean distance between two clusters beyond the graph
    (:func:`iastudio.core.clustering.silhouette` uses it).  The sample has
    at least about ``at_least`` pairs, so that its precision does not fall
    with ``n``; where the graph leaves out no more than that, every pair it
    leaves out is a probe (the silhouette is then exact).

    Parameters
    ----------
    pairs : tuple of ndarray
        ``(rows, cols)`` of the candidate graph, ``rows < cols``.
    n : int
        Number of images.
    per_image : int
        Random partners drawn per image (pairs already on the graph and
        repeats are dropped), raised to ``ceil(at_least / n)``.
    at_least : int
        Pairs wanted in all.
    seed : int
        Seed of the draw (a run is reproducible).

    Returns
    -------
    rows, cols : ndarray of int
        Unique pairs with ``rows < cols``, sorted, none on the graph.

    Examples
    --------
    >>> rows, cols = probe_pairs((np.array([0]), np.array([1])), 4, per_image=3)
    >>> bool((rows < cols).all()) and (0, 1) not in set(zip(rows.tolist(), cols.tolist()))
    True
    """
    if n < 2 or per_image < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    on_graph = np.unique(np.asarray(pairs[0], np.int64) * n + np.asarray(pairs[1], np.int64))
    if n * (n - 1) // 2 - on_graph.size <= at_least:  # few left out: all of them
        rows, cols = np.triu_indices(n, 1)
        key = rows.astype(np.int64) * n + cols
    else:
        rng = np.random.default_rng(seed)
        i = np.repeat(np.arange(n, dtype=np.int64), max(per_image, -(-at_least // n)))
        j = rng.integers(0, n - 1, i.size)
        j += j >= i  # never the image itself
        key = np.unique(np.minimum(i, j) * n + np.maximum(i, j))
    key = key[~np.isin(key, on_graph)]
    return key // n, key % n


def shared_neighbor_pairs(distances, *, nearest: int = SHARED_NEAREST, aligned=None, most: int = SHARED_MOST):
    """The pairs not yet aligned whose two images share a near neighbour.

    ``i`` and ``l`` form such a pair when some image ``j`` is near both,
    "near" meaning that one of the two is among the other's ``nearest``
    nearest aligned images (the symmetric graph of
    :func:`iastudio.core.clustering.nearest_pairs`): two steps on that graph,
    each image keeping its ``2 nearest`` closest near images (identical
    images, all at distance 0, would otherwise give nearly every pair among
    them).  Of an image's new pairs, the ``most`` with the shortest two-step
    path ``d(i, j) + d(j, l)`` are kept (a pair stays when either of its
    images keeps it): on sets whose images are all about equally near each
    other (thousands of particles of a few views) the two steps reach a dozen
    new images per image, few of which end among its nearest.

    Parameters
    ----------
    distances : scipy.sparse matrix, shape (n, n)
        A pruned run's aligned distances on its candidate graph (symmetric;
        a stored zero is a real zero distance).
    nearest : int
        Nearest aligned neighbours per image that count as near.
    aligned : scipy.sparse matrix, shape (n, n), optional
        Pairs already aligned (its stored entries), left out; default: those
        of ``distances``.
    most : int
        New pairs kept per image, by the shortest two-step path.

    Returns
    -------
    rows, cols : ndarray of int
        Unique pairs with ``rows < cols``, sorted.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> d = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0.]]))
    >>> [p.tolist() for p in shared_neighbor_pairs(d, nearest=1)]
    [[0], [2]]
    """
    d = sp.csr_matrix(distances)
    n = d.shape[0]
    near = _closest_per_row(nearest_pairs(d, nearest=nearest), 2 * nearest).tocoo()
    near = sp.csr_matrix((np.asarray(d[near.row, near.col]).ravel() if near.nnz else np.zeros(0),
                          (near.row, near.col)), shape=d.shape)
    a, b, path = _two_steps(near)  # i -> j -> l: at most (2 nearest)^2 per image, however many images pick j
    done = sp.csr_matrix(d if aligned is None else aligned)
    done_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(done.indptr))
    done_key = np.minimum(done_rows, done.indices) * n + np.maximum(done_rows, done.indices)  # either triangle
    key = np.minimum(a, b) * n + np.maximum(a, b)
    keep = (a != b) & ~np.isin(key, done_key)
    key, path = key[keep], path[keep]
    order = np.lexsort((path, key))  # each pair's shortest path first
    key, first = np.unique(key[order], return_index=True)
    path = path[order][first]
    lo, hi = key // n, key % n
    chosen = closest_in_rows(np.concatenate([lo, hi]), np.concatenate([hi, lo]), np.concatenate([path, path]), most)
    key = key[np.unique(chosen % max(1, key.size))]
    return key // n, key % n


def _two_steps(near):
    """Every walk ``i -> j -> l`` on the CSR graph ``near``: ``(i, l, d(i, j) + d(j, l))`` (int64, int64, float)."""
    coo = near.tocoo()
    per = np.diff(near.indptr)[coo.col]  # the steps out of each first step's end
    start = np.repeat(near.indptr[coo.col] - np.cumsum(per) + per, per) + np.arange(per.sum())
    return (np.repeat(coo.row.astype(np.int64), per), near.indices[start].astype(np.int64),
            np.repeat(coo.data, per) + near.data[start])


def _closest_per_row(g, m: int):
    """Each row's ``m`` smallest stored entries (ties by column) as a 0/1 matrix.

    Bounds the near graph's degree: among identical images (every distance 0)
    all pick the same few as their nearest, which would otherwise be near
    hundreds of images each and make their pairs quadratic in number.
    """
    g = sp.coo_matrix(g)
    keep = closest_in_rows(g.row, g.col, g.data, m)
    return sp.csr_matrix((np.ones(keep.size), (g.row[keep], g.col[keep])), shape=g.shape)


def pruned_distances(images, k: int, *, on_progress=None, **options):
    """The invariant distances of a pruned run: its graph and its probes.

    Aligns each image's ``k`` candidates (:func:`candidate_pairs`), then
    the pairs of images that share a near neighbour on that graph
    (:func:`shared_neighbor_pairs`) together with the probes
    (:func:`probe_pairs`), drawn from the pairs left off the final graph so
    that they sample exactly those.  Each stage runs the global search on all
    its pairs and the Gauss-Newton refinement only on the pairs within
    :func:`near_radius` of either image, measured on the grid search's estimated
    distances (``invariant_distances(estimate=True)``: the residual of the binned
    images, a quarter of the pixels; :func:`iastudio.core.similarity.refine_pairs`);
    the others keep the grid search's transform and the residual there.  With a
    Dask ``client`` every pair is refined, on the workers.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Unit-norm images on one canvas (NumPy or CuPy).
    k : int
        Candidates per image.
    on_progress : callable(fraction), optional
    **options
        Passed to :func:`iastudio.core.similarity.invariant_distances`
        (``angle_step``, ``rotation_range``, ``client``, ...).

    Returns
    -------
    sim : SimilarityResult
        Every pair aligned (sparse).
    graph, sample : scipy.sparse.csr_matrix, shape (n, n)
        The distances of the graph (candidates and shared-neighbour pairs)
        and of the probes (see :func:`split_probes`).
    """
    progress = on_progress or (lambda f: None)
    with sharing_preparation():  # both stages align pairs of the same images: prepared once
        return _pruned_stages(images, k, progress, options)


def _pruned_stages(images, k, progress, options):
    """The stages of :func:`pruned_distances` (inside its :func:`~iastudio.core.similarity.sharing_preparation`)."""
    n = images.shape[0]
    steps = options.pop("refine_steps", 6)
    near_only = steps > 0 and options.get("client") is None  # a Dask run refines every pair, on its workers
    options["refine_steps"] = 0 if near_only else steps  # near-only: the refinement follows, by refine_pairs
    options["estimate"] = near_only  # ... which computes the distances the grid search only estimates

    search = 0.7 if near_only else 1.0  # the part of a stage's time before its refinement (about)

    def refined(result, radius, lo, hi, also=None):
        """``result`` refined where near (:func:`near_radius`), and which pairs were."""
        rows, cols = result.pairs
        d = np.asarray(result.distances[rows, cols], dtype=float).ravel()
        select = d <= np.maximum(radius[rows], radius[cols])
        if also is not None:
            select |= np.isin(rows.astype(np.int64) * n + cols, also)
        return refine_pairs(images, result, select, steps=steps, estimated=True,
                            on_progress=lambda f: progress(lo + (hi - lo) * (search + (1 - search) * f))), select

    pairs = candidate_pairs(images, k)
    share = pairs[0].size / max(1, pairs[0].size + SHARED_NEAREST * n + max(PROBES * n, MIN_PROBES))  # expected
    first = invariant_distances(images, pairs=pairs, on_progress=lambda f: progress(share * search * f), **options)
    scale = 1.0  # the second stage's estimates against the first's refined radii: their ratio to the images' residual
    if near_only:
        estimates = first
        first, select = refined(first, near_radius(first.distances), 0.0, share)
        scale = _estimate_ratio(estimates, first, ~select)
    shared = shared_neighbor_pairs(first.distances)
    key = np.union1d(pairs[0] * n + pairs[1], shared[0] * n + shared[1])
    probes = probe_pairs((key // n, key % n), n)  # a random sample of the pairs left off the final graph
    key = np.union1d(shared[0] * n + shared[1], probes[0] * n + probes[1])
    if key.size:
        more = invariant_distances(images, pairs=(key // n, key % n),
                                   on_progress=lambda f: progress(share + (1 - share) * search * f), **options)
        if near_only:  # the probes are refined too: the read-out's silhouettes average over them
            more, _ = refined(more, scale * near_radius(first.distances), share, 1.0,
                              also=probes[0].astype(np.int64) * n + probes[1])
        first = join_pair_results(first, more)
    graph, sample = split_probes(first.distances, probes)
    progress(1.0)
    return first, graph, sample


def _estimate_ratio(estimates, exact, both) -> float:
    """Median of ``estimates / exact`` over the pairs ``both`` with an exact distance above 0 (1 below 20 pairs).

    The pruned path's grid-search distances are estimates (the binned images' residual,
    ``invariant_distances(estimate=True)``: 3-4 % below the images' on rotated digits and
    particles; 0.93-0.98 of them from the 1st to the 99th percentile); its second stage
    compares them with radii of the first stage's computed distances, scaled by this.
    """
    rows, cols = exact.pairs
    a = np.asarray(estimates.distances[rows, cols], dtype=float).ravel()[both]
    b = np.asarray(exact.distances[rows, cols], dtype=float).ravel()[both]
    ok = b > 0
    return float(np.median(a[ok] / b[ok])) if np.count_nonzero(ok) >= 20 else 1.0


#: The pruned path refines (Gauss-Newton) only the pairs whose grid-search distance is at most
#: ``REFINE_MARGIN`` times the ``REFINE_NEAREST``-th nearest of either image (:func:`near_radius`).
REFINE_NEAREST = 10
REFINE_MARGIN = 1.15


def near_radius(distances, *, nearest: int = REFINE_NEAREST, margin: float = REFINE_MARGIN) -> np.ndarray:
    """Each image's ``nearest``-th smallest distance on a graph, times ``margin``.

    The pairs the pruned path refines (:func:`pruned_distances`): those whose distance
    after the global search is within the radius of either image.  The refinement
    lowers a distance by a few per cent on most pairs (where the grid's distance was only
    estimated, it may raise one, by at most 0.2 % where measured: :func:`pruned_distances`),
    so a pair outside both radii stays outside the images' ``nearest`` neighbours, which
    are all that W, the read-out's 8-nearest graph and its bandwidths weigh.

    Parameters
    ----------
    distances : scipy.sparse matrix, shape (n, n)
        Symmetric; absent entries were not computed (stored zeros are real zeros).
    nearest : int
        Which neighbour's distance (1: the nearest).
    margin : float
        Factor on that distance.

    Returns
    -------
    ndarray, shape (n,)
        ``inf`` for an image with fewer than ``nearest`` pairs on the graph.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> d = sp.csr_matrix(np.array([[0, 1, 2, 4], [1, 0, 3, 0], [2, 3, 0, 5], [4, 0, 5, 0]], float))
    >>> near_radius(d, nearest=2, margin=1.0).tolist()
    [2.0, 3.0, 3.0, 5.0]
    """
    d = sp.csr_matrix(distances)
    n = d.shape[0]
    counts = np.diff(d.indptr)
    rows = np.repeat(np.arange(n), counts)
    keep = d.indices != rows  # the diagonal is not a neighbour
    rows, values = rows[keep], d.data[keep]
    counts = np.bincount(rows, minlength=n)
    order = np.lexsort((values, rows))
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.full(n, np.inf)
    ok = counts >= nearest
    out[ok] = values[order][start[ok] + nearest - 1] * margin
    return out


def split_probes(distances, probes):
    """Separate a run's distances into the candidate graph and the probe pairs.

    Parameters
    ----------
    distances : scipy.sparse matrix, shape (n, n)
        Symmetric distances of the candidate pairs and the probes together.
    probes : tuple of ndarray
        ``(rows, cols)`` from :func:`probe_pairs`.

    Returns
    -------
    graph, sample : scipy.sparse.csr_matrix, shape (n, n)
        Both symmetric; a stored zero stays a (real) zero distance.
    """
    d = sp.coo_matrix(distances)
    n = d.shape[0]
    key = np.minimum(d.row, d.col).astype(np.int64) * n + np.maximum(d.row, d.col)
    is_probe = np.isin(key, np.asarray(probes[0], np.int64) * n + np.asarray(probes[1], np.int64))

    def part(m):
        return sp.csr_matrix((d.data[m], (d.row[m], d.col[m])), shape=d.shape)

    return part(~is_probe), part(is_probe)


_MAP_TOL = 1e-8  # relative accuracy of the map's eigenvalues (a picture: far below a pixel)
_MAP_MAXITER = 300  # ARPACK restarts before the map is made by LOBPCG instead (bounded, never raises)


def graph_map(distances, previous=None, *, tol: float = _MAP_TOL, maxiter: int = _MAP_MAXITER) -> np.ndarray:
    """2-D coordinates of the images of a K-neighbour graph of distances (the sparse stand-in for MDS).

    The two leading non-trivial eigenvectors of the normalised affinity
    ``exp(-d^2 / median(d)^2)`` (a spectral embedding, ARPACK), scaled by the
    median distance and, when ``previous`` has the same shape,
    Procrustes-aligned to it so that the map does not jump between frames.

    Parameters
    ----------
    distances : scipy.sparse matrix, shape (n, n)
    previous : ndarray, shape (n, 2), optional
    tol : float
        Relative accuracy of the eigenvalues (ARPACK's ``tol``).
    maxiter : int
        ARPACK restarts at most.  When ARPACK has not converged by then (a
        crowded spectrum: many nearly separate groups), the eigenvectors are
        refined by at most 200 LOBPCG iterations started from ``previous``
        (or from ARPACK's last vectors) and used as they are: the map is
        always made, in bounded time, and a warning is logged.

    Returns
    -------
    ndarray, shape (n, 2)
    """
    from scipy.linalg import orthogonal_procrustes
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    d = sp.csr_matrix(distances)
    n = d.shape[0]
    if n < 4 or d.nnz == 0:
        return np.zeros((n, 2))
    scale = float(np.median(d.data)) or 1.0
    a = graph_affinity(d, beta=1.0 / scale**2)
    a = (0.5 * (a + a.T)).tocsr()
    deg = np.asarray(a.sum(axis=1)).ravel()
    s = sp.diags(1.0 / np.sqrt(np.maximum(deg, 1e-300)))
    m = (s @ a @ s).tocsr()
    try:
        vals, vecs = eigsh(m, k=3, which="LA", v0=np.ones(n) / np.sqrt(n), tol=tol, maxiter=maxiter)
    except ArpackNoConvergence:
        vals, vecs = _lobpcg_top3(m, np.sqrt(np.maximum(deg, 1e-300)), previous)
    top = np.argsort(vals)[::-1][1:3]  # the leading one is the trivial sqrt(degree)
    coords = (s @ vecs[:, top]) * scale * np.sqrt(n)
    if previous is not None and np.shape(previous) == coords.shape:
        r, _ = orthogonal_procrustes(coords, previous - previous.mean(0))
        coords = coords @ r
    return coords


def _lobpcg_top3(m, root_degree, previous):
    """The 3 largest eigenpairs of ``m`` by at most 200 LOBPCG iterations (ARPACK did not converge).

    Started from ``sqrt(degree)`` (the leading eigenvector), the previous map
    in the normalised basis (``previous * sqrt(degree)``) when there is one,
    and fixed pseudo-random vectors; LOBPCG's best vectors are used as they are.
    """
    import logging
    import warnings

    from scipy.sparse.linalg import lobpcg

    n = m.shape[0]
    start = [root_degree]
    if previous is not None and np.shape(previous) == (n, 2):
        start += [np.asarray(previous, float)[:, j] * root_degree for j in range(2)]
    rng = np.random.default_rng(0)
    while len(start) < 6:  # a block wider than 3 converges faster in a crowded spectrum
        start.append(rng.standard_normal(n))
    x = np.column_stack(start)
    x /= np.maximum(np.linalg.norm(x, axis=0), 1e-300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged: the best vectors found are used
        vals, vecs = lobpcg(m, x, largest=True, tol=1e-6, maxiter=200)
    logging.getLogger(__name__).warning("graph_map: ARPACK did not converge; the map is LOBPCG's (200 iterations "
                                        "at most)")
    order = np.argsort(vals)[::-1][:3]
    return vals[order], vecs[:, order]


def graph_curves(history, labels) -> dict:
    """Within-cluster max, between-cluster min and median distance per iteration, on the computed pairs only.

    The sparse counterpart of :func:`iastudio.core.report.convergence_curves`:
    each entry of ``history`` is a sparse (or dense) distance matrix; only its
    stored off-diagonal entries count.
    """
    labels = np.asarray(labels)
    out = {"within_max": [], "between_min": [], "median": []}
    for d in history:
        c = sp.coo_matrix(d)
        off = c.row != c.col
        row, col, val = c.row[off], c.col[off], c.data[off].astype(float)
        assigned = (labels[row] >= 0) & (labels[col] >= 0)  # unassigned images (< 0) count in the median only
        same = (labels[row] == labels[col]) & assigned
        between = (labels[row] != labels[col]) & assigned
        out["within_max"].append(float(val[same].max()) if same.any() else float("nan"))
        out["between_min"].append(float(val[between].min()) if between.any() else float("nan"))
        out["median"].append(float(np.median(val)) if val.size else float("nan"))
    return out
