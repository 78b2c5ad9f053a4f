"""Reading clusters out of invariant distances: how many, and which.

The affinity is *locally scaled* (Zelnik-Manor & Perona's self-tuning
spectral clustering): ``A_ij = exp(-d_ij^2 / (s_i s_j))`` where ``s_i`` is the
distance from image ``i`` to its ``m``-th nearest neighbour.  Each image sets
its own bandwidth from its own neighbourhood, so a tight class and a loose one
are both seen as classes, and no global bandwidth has to be guessed.

``k="auto"`` (:func:`select_k`) looks at the *eigengap* of the normalised
affinity ``D^-1/2 A D^-1/2`` at the neighbour scales ``m = 1, 2, 3``, smallest
first: when the data holds ``k`` well-separated groups, ``k`` eigenvalues are
close to 1 and the next ones are not.  The first scale whose largest gap is at
least ``min_gap`` (0.4) decides ``k``; the smallest scale comes first so that
classes of two or three images are not swallowed by their neighbours.  When no
scale shows a clear gap the data is ambiguous: ``k`` then comes from the
silhouette (on the distances, of the partitions at ``m = 2``, k = 2 .. 20) and
the choice is reported as unsure (``confidence`` below ``min_gap``) unless that
k stood out (:func:`clear_choice`: it leads every other k's silhouette by
``CLEAR_LEAD`` and its eigengap is ``CLEAR_GAP`` times any other's).  Of the
``k`` whose silhouette is within ``NEAR_TIE`` (0.02) of the best, the one with
the largest eigengap at ``m = 2`` is taken (``settle="eigengap"``, the
default): on such data the silhouette curve is flat at the top (its best three
``k`` often within 0.005), so which of those wins is chance; the eigengap is
read off each image's nearest images, which a pruned run has too.  Two other
rules are options, chosen on the tune split of ``benchmarks/bench_kauto.py``
and not the default because neither found the true k on more holdout sets
(16 of 22 for all three).  ``settle="product"`` takes the ``k`` with the
largest product ``silhouette(k) * (lambda_k - lambda_{k+1})`` at ``m = 2``, of
the ``k`` whose silhouette is positive and within ``PRODUCT_TIE`` (0.15) of the
best: the silhouette (Rousseeuw 1987) weighted by the eigengap heuristic (von
Luxburg 2007, "A tutorial on spectral clustering", section 8.3).  The
silhouette alone prefers too few classes where they are noisy (120
cryo-EM-like views at SNR 0.1: 0.27 at k = 2 against 0.17 at the true 4, gaps
0.07 and 0.15) and the spectrum still shows a (small) gap after the true
``k``; on the tune split it reads 20 of 30 sets (18 for the default), on the
holdout split 16 of 22 (other sets: the noisy particles right, 10 digit
classes wrong, ARI 0.68 -> 0.51), and a full run of those particles with
today's engine still read 2.  ``settle="stability"`` settles the tie by
:func:`partition_stability` instead (the most stable partition; within
``STABLE_TIE`` of it, the best silhouette): with ``near_tie=0.04`` true k on
20 of 30 tune sets, 16 of 22 holdout sets, but it read fewer clusters where
k = 2 came into the tie (real MNIST, 5 classes: k = 2, ARI 0.20, against
k = 4, 0.70).  On 22 sets of a
few hundred rotated digits (``bench_scale.py readout --draws 5``) the eigengap
rule read better than the best silhouette on both paths (holdout ARI 0.651 /
0.625 -> 0.738 / 0.765, every pair / pruned) and a
pruned run's estimated silhouette agrees with the exhaustive run within 0.01
on 9.2 of 12 tune sets (8.0 before) but still on only 5.6 of 10 holdout sets.  A spectrum with an appended zero
lets the gap sit after the last eigenvalue, so ``k = n`` is possible.  Two
absolute checks on unit-norm images come first: when 90 % of the invariant
distances are below 0.1 (cosine above 0.995: copies that differ only by
resampling) the set is one cluster; when no two images are even moderately
alike (every distance above 0.5, cosine below 0.875) every image is its own
cluster.

The affinity keeps only the pairs where one image is among the other's
``NEAREST`` (8) nearest images (or ``m`` nearest, at a wider scale ``m``;
:func:`nearest_pairs`): a pruned run has only each image's nearest distances,
and with every pair the many small affinities of far pairs tipped ambiguous
sets' partitions away from the pruned run's.  Labels come from scikit-learn's
spectral clustering on ``A`` (deterministic ``cluster_qr`` assignment) and are
numbered in order of first appearance.

A pruned run's distances are a sparse K-neighbour graph; the same rules apply
to it with ``s_i`` taken from the image's candidates (its nearest images), the
affinity kept sparse (on each image's nearest candidates) and the eigenvalues found for each
connected part of the graph (dense for small parts, shift-invert Lanczos for
large ones).  The silhouette (of the fallback, of ``k`` given, of the guard)
estimates the pairs off the graph from a random sample of them that the run
aligns too (``probes``: the mean sampled distance between the two clusters),
or where no probe joins two clusters at ``max(r_i, r_j)``, ``r_i`` being
image ``i``'s farthest computed distance; on a complete graph the sparse
path gives exactly the dense one.  What differs: the "same" check is skipped (a
graph holds only each image's nearest distances), and when the first scales
show no gap of even ``FLAT_GAP`` (0.05) *because* the graph falls apart into
tiny groups there -- more than ``max_k`` nearly separate parts even at the
widest first scale (its ``max_k + 1``-th eigenvalue within ``APART`` of 1),
as a set of near-duplicates does, and a graph's eigengaps see only ``k <=
20`` -- the scales ``5, 10, 20`` (``GRAPH_SCALES``, up to the fewest
neighbours any image has) are tried too, ignoring their gap after the first
eigenvalue, and the scale with the largest gap decides.  A graph that holds
together but shows no clear gap goes to the silhouette, as dense distances
do.  With ``k`` given, a bandwidth at
which the graph holds more than ``k`` nearly separate parts (its ``k+1``-th
eigenvalue within ``APART`` of 1) is skipped, the wider scales standing in.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .backend import blas_threads, in_worker, threads
from .weights import graph_affinity, local_bandwidth

__all__ = [
    "KChoice",
    "clear_choice",
    "closest_in_rows",
    "cluster_labels",
    "eigengap_k",
    "eigengaps",
    "grouping_order",
    "labels_at_threshold",
    "local_scaling_affinity",
    "nearest_pairs",
    "partition_stability",
    "read_clusters",
    "relabel_by_appearance",
    "select_k",
    "silhouette",
    "split_labels",
]

SCALES = (1, 2, 3)  # neighbour ranks m tried for the local bandwidth, smallest first
NEAREST = 8  # the read-out's affinity keeps each image's 8 nearest images (or its m nearest, if more)
GRAPH_SCALES = (5, 10, 20)  # further ranks a graph tries when it falls apart at the first (near-duplicates)
APART = 1e-3  # a graph whose (k+1)-th eigenvalue is this close to 1 has more than k separate parts
FLAT_GAP = 0.05  # ... i.e. no gap of even this size (near-duplicates: the graph falls apart into tiny groups)
MIN_GAP = 0.4  # an eigengap at least this large is a clear block structure
MAX_K = 20  # largest k considered by the silhouette fallback
NEAR_TIE = 0.02  # settle="eigengap" / "stability": silhouettes within this of the best are a tie (module docstring)
SETTLE = "eigengap"  # the silhouette fallback's rule: "eigengap", "product" or "stability" (module docstring)
_SETTLES = ("product", "eigengap", "stability")
PRODUCT_TIE = 0.15  # settle="product": only k whose silhouette is within this of the best are candidates
STABILITY_DRAWS = 8  # subsets partition_stability re-cuts to settle a near tie
STABLE_TIE = 0.02  # stabilities within this of the most stable count as equal: the better silhouette decides
DISTINCT = 0.5  # invariant distance (unit-norm images) above which two images are not alike
SAME = 0.1  # invariant distance below which two images show the same thing (resampling differences)
CLEAR_LEAD = 0.02  # a silhouette choice is clear when its silhouette leads every other k by this ...
CLEAR_GAP = 1.25  # ... and its eigengap (at m = 2) is at least this many times any other k's


_METHODS = ("given", "eigengap", "silhouette", "same", "distinct", "trivial", "collapse")  # how k was chosen (KChoice)


@dataclass
class KChoice:
    """How the number of clusters was chosen.

    Attributes
    ----------
    k : int
    scale : int
        The neighbour rank ``m`` of the local bandwidth used for the labels.
    confidence : float
        The eigengap that decided (0..1); below ``MIN_GAP`` the choice is
        unsure (no clear block structure; unless ``clear``) and the candidates
        say what else is plausible.  1.0 when ``k`` was given.
    method : {"given", "eigengap", "silhouette", "same", "distinct", "trivial", "collapse"}
    candidates : list of (int, float)
        The best three ``k`` with their scores (eigengaps, or silhouettes for
        the ``"silhouette"`` method), best first (``"silhouette"``: the chosen
        ``k`` first, which may be up to ``NEAR_TIE`` below the best); with
        ``k`` given, ``k`` and its silhouette (a pruned run: its eigengap).
    stability : float or None
        ``"silhouette"`` with near-tied rivals: how well the chosen partition
        survives leaving a fifth of the images out (:func:`partition_stability`,
        mean ARI, -0.5 .. 1); None where it was not needed.
    clear : bool
        ``"silhouette"`` only: the chosen ``k`` stood out although no scale
        showed a gap of ``MIN_GAP`` -- its silhouette leads every other ``k``
        by at least ``CLEAR_LEAD`` and its eigengap at ``m = 2`` is at least
        ``CLEAR_GAP`` times any other ``k``'s (:func:`clear_choice`).  Such a
        choice is not reported as unsure.
    """

    k: int
    scale: int = 2
    confidence: float = 1.0
    method: str = "given"
    candidates: list = field(default_factory=list)
    stability: float | None = None
    clear: bool = False

    @property
    def unsure(self) -> bool:
        """True when no neighbour scale showed a clear gap and the silhouette's choice did not stand out."""
        return self.confidence < MIN_GAP and not self.clear

    def plausible(self) -> list[int]:
        """Other k worth a look, when unsure: the two best candidates after the chosen one, smallest first."""
        if not self.unsure:
            return []
        return sorted([k for k, _ in self.candidates if k != self.k][:2])

    def describe(self, n_clusters: int | None = None) -> str:
        """``"4 clusters"``, or ``"4 clusters - unsure: 3 or 5 also plausible"`` when the choice was unsure."""
        k = self.k if n_clusters is None else int(n_clusters)
        text = f"{k} cluster{'s' if k != 1 else ''}"
        if self.unsure:
            alt = self.plausible()
            text += " \u2014 unsure" + (f": {' or '.join(str(a) for a in alt)} also plausible" if alt else "")
        return text

    def as_dict(self) -> dict:
        """Plain JSON-able form (``summary.json``)."""
        return {"k": int(self.k), "scale": int(self.scale), "confidence": float(self.confidence),
                "method": self.method, "unsure": bool(self.unsure),
                "stability": None if self.stability is None else float(self.stability), "clear": bool(self.clear),
                "candidates": [{"k": int(k), "score": float(s)} for k, s in self.candidates]}

    @classmethod
    def from_dict(cls, d) -> KChoice:
        """The inverse of :meth:`as_dict` (e.g. from a saved project).

        Raises
        ------
        ValueError
            When ``d`` is not what :meth:`as_dict` writes.
        """
        def number(x, lo, hi, kind=(int, float)):
            if not isinstance(x, kind) or isinstance(x, bool) or not lo <= x <= hi:
                raise ValueError("the k choice is malformed")
            return x

        if not isinstance(d, dict) or d.get("method") not in _METHODS or not isinstance(d.get("candidates"), list) \
                or len(d["candidates"]) > 100 or not all(isinstance(c, dict) for c in d["candidates"]):
            raise ValueError("the k choice is malformed")
        return cls(k=number(d.get("k"), 1, 10**6, int), scale=number(d.get("scale"), 0, 10**6, int),
                   confidence=float(number(d.get("confidence"), -1.0, 1e6)), method=d["method"],
                   candidates=[(number(c.get("k"), 1, 10**6, int), float(number(c.get("score"), -np.inf, np.inf)))
                               for c in d["candidates"]],
                   stability=None if d.get("stability") is None else float(number(d["stability"], -1.0, 1.0)),
                   clear=d.get("clear", False) is True)


def local_scaling_affinity(distances: np.ndarray, *, neighbor: int = 2, nearest: int | None = None) -> np.ndarray:
    """Self-tuning affinity ``exp(-d_ij^2 / (s_i s_j))``.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric, nonnegative, zero diagonal; or a pruned run's K-neighbour
        graph (its edges only).
    neighbor : int
        ``s_i`` is the distance from ``i`` to its ``neighbor``-th nearest
        other image (on a graph: its ``neighbor``-th nearest candidate).
    nearest : int, optional
        Keep only the pairs where one image is among the other's ``nearest``
        nearest images (a symmetric nearest-neighbour graph, 0 elsewhere;
        see :func:`nearest_pairs`).  None keeps every pair.

    Returns
    -------
    ndarray or scipy.sparse.csr_matrix, shape (n, n)
        Symmetric, ones on the diagonal (sparse in, sparse out: 0 off the graph).

    Examples
    --------
    >>> d = np.abs(np.subtract.outer([0.0, 1.0, 3.0], [0.0, 1.0, 3.0]))
    >>> a = local_scaling_affinity(d, neighbor=1, nearest=1)
    >>> bool(a[0, 2] == 0.0), bool(np.isclose(a[0, 1], np.exp(-1.0 / (1.0 * 1.0))))
    (True, True)
    """
    if sp.issparse(distances):
        bandwidth = local_bandwidth(distances, neighbor=neighbor)
        if nearest is not None:
            distances = nearest_pairs(distances, nearest=nearest)
        return graph_affinity(distances, bandwidth=bandwidth)
    d = np.asarray(distances, dtype=float)
    if d.shape[0] < 2:
        return np.ones_like(d)
    s = local_bandwidth(d, neighbor=neighbor)
    a = np.exp(-(d**2) / np.outer(s, s))
    if nearest is not None and nearest < d.shape[0] - 1:
        a[~nearest_pairs(d, nearest=nearest)] = 0.0
    return a


def nearest_pairs(distances, *, nearest: int):
    """The pairs where one image is among the other's ``nearest`` nearest images.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric distances (zero diagonal), or a pruned run's K-neighbour
        graph (an image's nearest are then its nearest computed ones).
    nearest : int
        Neighbours kept per image; ties are broken by index.

    Returns
    -------
    ndarray of bool or scipy.sparse.csr_matrix, shape (n, n)
        Dense in: a symmetric mask, True on the diagonal.  Sparse in: the
        graph's distances on those pairs only (a stored zero stays a zero).

    Examples
    --------
    >>> d = np.abs(np.subtract.outer([0.0, 1.0, 3.0, 10.0], [0.0, 1.0, 3.0, 10.0]))
    >>> nearest_pairs(d, nearest=1).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 1, 0],
           [0, 1, 1, 1],
           [0, 0, 1, 1]])
    """
    k = max(int(nearest), 1)
    if sp.issparse(distances):
        g = sp.coo_matrix(distances)
        off = g.row != g.col
        rows, cols, vals = g.row[off], g.col[off], g.data[off]
        mine = closest_in_rows(rows, cols, vals, k)
        n = g.shape[0]
        kept = np.minimum(rows[mine], cols[mine]).astype(np.int64) * n + np.maximum(rows[mine], cols[mine])
        both = np.isin(np.minimum(rows, cols).astype(np.int64) * n + np.maximum(rows, cols), kept)
        return sp.csr_matrix((vals[both], (rows[both], cols[both])), shape=g.shape)
    d = np.asarray(distances, dtype=float)
    n = d.shape[0]
    order = np.argsort(d + np.diag(np.full(n, np.inf)), axis=1, kind="stable")[:, :k]
    mask = np.zeros((n, n), dtype=bool)
    mask[np.repeat(np.arange(n), order.shape[1]), order.ravel()] = True
    return mask | mask.T | np.eye(n, dtype=bool)


def closest_in_rows(rows, cols, vals, k: int) -> np.ndarray:
    """Positions of each row's ``k`` smallest entries of a sparse matrix's ``(rows, cols, vals)``.

    Ties are broken by column index.

    Examples
    --------
    >>> closest_in_rows(np.array([0, 0, 0, 1]), np.array([1, 2, 3, 0]), np.array([5.0, 1.0, 1.0, 2.0]), 2)
    array([1, 2, 3])
    """
    order = np.lexsort((cols, vals, rows))  # by row, then value, then column
    first = np.searchsorted(rows[order], rows[order], side="left")
    return order[np.arange(order.size) - first < k]


def _affinity(d, m):
    """The read-out's affinity at neighbour scale ``m``: locally scaled, on each image's nearest images."""
    return local_scaling_affinity(d, neighbor=m, nearest=max(NEAREST, m))


def _affinities(d):
    """:func:`_affinity` of ``d`` at any scale ``m``, each computed once, and on a graph each image's
    ``NEAREST`` nearest found once for every scale that keeps them (the scales up to ``NEAREST``)."""
    done, near = {}, {}

    def affinity(m):
        if m not in done:
            if sp.issparse(d):  # local_scaling_affinity's steps, the nearest pairs shared
                k = max(NEAREST, m)
                if k not in near:
                    near[k] = nearest_pairs(d, nearest=k)
                done[m] = graph_affinity(near[k], bandwidth=local_bandwidth(d, neighbor=m))
            else:
                done[m] = _affinity(d, m)
        return done[m]

    return affinity


def _normalised(affinity):
    """``D^-1/2 A D^-1/2`` of the symmetrised affinity (dense or sparse)."""
    a = 0.5 * (affinity + affinity.T)
    s = 1.0 / np.sqrt(np.maximum(np.asarray(a.sum(axis=1)).ravel(), 1e-300))
    if sp.issparse(a):
        return (sp.diags(s) @ a @ sp.diags(s)).tocsr()
    return a * s[:, None] * s[None, :]


_DENSE_PART = 400  # connected parts of a graph up to this size get a dense eigen-decomposition
_EIGEN_TOL = 1e-4  # eigenvalues to ~5e-5, gaps to ~4e-5 (read against 0.05 and 0.4) on crowded 4,000-image spectra
_EIGEN_MAXITER = 300  # restarts of ARPACK before the converged eigenvalues are used as they are


def _top_eigenvalues(m, k: int) -> np.ndarray:
    """The ``k`` largest eigenvalues of one connected part ``m`` of a sparse normalised affinity.

    Never raises: when ARPACK does not converge the eigenvalues it has are
    used, the rest repeat the last one (no false gap).
    """
    ev = _top_eigen(m, k)[0]
    if ev.size == 0:
        ev = np.ones(1)
    return np.concatenate([ev, np.full(k - ev.size, ev[-1])])[:k]


def _top_eigen(m, k: int, *, vectors: bool = False):
    """Up to ``k`` largest eigenvalues (descending) of a part ``m``, and their eigenvectors when asked.

    Dense for small parts, else Lanczos (ARPACK) on ``m`` itself, to a
    tolerance of :data:`_EIGEN_TOL`; where ARPACK does not converge, the pairs
    it has (possibly fewer than ``k``).  Until this version the large parts
    used shift-invert Lanczos around -1 with conjugate gradients for the
    inverse: about 10 times the matrix products for no better accuracy (the
    shift at -1 barely separates the eigenvalues crowded near 1), and it spent
    most of a 10,000-image GPU run's time.
    """
    n = m.shape[0]
    if n <= max(_DENSE_PART, k + 2):
        with blas_threads(1):  # a small matrix: threads cost more than they give (see blas_threads)
            w, v = np.linalg.eigh(m.toarray())
        return w[::-1][:k], (v[:, ::-1][:, :k] if vectors else None)
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    try:
        out = eigsh(m, k=k, which="LA", tol=_EIGEN_TOL, maxiter=_EIGEN_MAXITER, return_eigenvectors=vectors,
                    v0=np.ones(n) / np.sqrt(n))
        mu, v = out if vectors else (out, None)
    except ArpackNoConvergence as exc:
        import logging

        logging.getLogger(__name__).warning("eigengaps: ARPACK converged on %d of %d eigenvalues",
                                            len(exc.eigenvalues), k)
        mu, v = np.asarray(exc.eigenvalues, dtype=float), exc.eigenvectors
    order = np.argsort(-np.real(mu), kind="stable")
    return np.real(np.asarray(mu))[order], (np.real(v[:, order]) if vectors else None)


def _per_part(k: int, n_parts: int, size: int) -> int:
    """How many of a part's leading eigenvalues can be among the ``k`` largest of a graph in ``n_parts`` parts.

    Each connected part has the eigenvalue 1 exactly once (its largest), so
    the ``n_parts`` ones are among the ``k`` largest and a part can add at
    most ``k - n_parts`` more: ``k - n_parts + 1`` of its own, and none is
    computed once there are ``k`` parts.
    """
    return min(size, max(1, k - n_parts + 1))


def _sparse_top_eigenvalues(affinity, k: int) -> np.ndarray:
    """The ``k`` largest eigenvalues of a sparse affinity's normalised form, part by connected part.

    A graph of well-separated classes falls apart into parts, each with an
    eigenvalue 1; one Lanczos run would miss some of those repeated ones.
    """
    m = _without_negligible(_normalised(sp.csr_matrix(affinity, dtype=float)))
    parts = _connected_parts(m)
    if len(parts) == 1:
        return _top_eigenvalues(m, k)
    if len(parts) >= k:  # k parts or more: the k largest are their eigenvalues 1
        return np.ones(k)
    values = []
    for idx in parts:
        values.append(np.ones(1) if idx.size == 1 else
                      _top_eigenvalues(m[idx][:, idx], _per_part(k, len(parts), idx.size)))
    return np.sort(np.concatenate(values))[::-1][:k]


#: Entries of a normalised affinity below this are dropped before its eigenvalues are found
#: (:func:`_without_negligible`); Gaussian affinities at a small scale hold entries down to 1e-116.
_NEGLIGIBLE = 1e-10


def _without_negligible(m):
    """The sparse normalised affinity ``m`` without its entries below :data:`_NEGLIGIBLE`.

    The dropped part ``E`` is symmetric, so every eigenvalue moves by at most ``||E||_2 <=`` its largest
    absolute row sum (Weyl): with rows of at most a few hundred entries, below 1e-7, far under the
    Lanczos tolerance (:data:`_EIGEN_TOL`).  Where the entries are absent the graph often falls apart into
    parts: on 4,000 rotated digits the read-out's smallest scales split one 3,553-image part into 294 (then
    ``k`` parts give the ``k`` ones at once) instead of a Lanczos run of 2,000 products on a spectrum whose
    24 largest eigenvalues are within 1e-4 of 1.  The bound is checked: should the dropped rows sum to more
    than 1e-6 (rows of ten thousand such entries), nothing is dropped.

    Examples
    --------
    >>> m = sp.csr_matrix(np.array([[0.5, 1e-14], [1e-14, 0.5]]))
    >>> _without_negligible(m).toarray().tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    """
    small = np.abs(m.data) < _NEGLIGIBLE
    if not small.any():
        return m
    dropped = np.bincount(np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))[small], np.abs(m.data[small]),
                          minlength=m.shape[0])
    if dropped.max() > 1e-6:
        return m
    out = m.copy()
    out.data[small] = 0.0
    out.eliminate_zeros()
    return out


def _connected_parts(a) -> list:
    """The images of each connected part of a sparse graph (index arrays, in the order of the parts)."""
    from scipy.sparse.csgraph import connected_components

    _, part = connected_components(a, directed=False)
    order = np.argsort(part, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(part[order])) + 1)


def eigengaps(affinity, *, max_k: int = MAX_K) -> np.ndarray:
    """Gaps ``lambda_k - lambda_{k+1}`` of the normalised affinity, k = 1..n.

    The spectrum (descending) gets a zero appended, so the last gap is the
    smallest eigenvalue itself: for an identity-like affinity (every image
    alone) the largest gap is at ``k = n``.  A sparse affinity (a
    K-neighbour graph of more than ``max_k + 2`` images) gives only the first
    ``max_k`` gaps, from its ``max_k + 1`` largest eigenvalues, found for each
    connected part of the graph (dense for small parts, shift-invert Lanczos
    for large ones).
    """
    if sp.issparse(affinity) and affinity.shape[0] > max_k + 2:
        ev = _sparse_top_eigenvalues(affinity, max_k + 1)
        return ev[:-1] - ev[1:]
    if sp.issparse(affinity):
        affinity = affinity.toarray()
    ev = np.sort(np.linalg.eigvalsh(_normalised(np.asarray(affinity, dtype=float))))[::-1]
    ev = np.append(np.clip(ev, 0.0, None), 0.0)
    return ev[:-1] - ev[1:]


def eigengap_k(affinity: np.ndarray, *, max_k: int | None = None) -> int:
    """Number of clusters at the largest gap of the normalised affinity's spectrum.

    Parameters
    ----------
    affinity : ndarray, shape (n, n)
        Nonnegative similarities.
    max_k : int, optional
        Largest k considered (default: ``n``).

    Returns
    -------
    int
        Between 1 and ``n``.
    """
    n = affinity.shape[0]
    if n == 1:
        return 1
    g = eigengaps(affinity)[: min(n, max_k or n)]
    return int(np.argmax(g)) + 1


def _spectral(affinity, k):
    from sklearn.cluster import SpectralClustering

    n = affinity.shape[0]
    if k == 1:
        return np.zeros(n, dtype=int)
    if k >= n:
        return np.arange(n)
    a = 0.5 * (affinity + affinity.T)
    if sp.issparse(a):  # a K-neighbour graph: part by part where it falls apart, else ARPACK on the sparse matrix
        by_parts = _by_parts(a, [k])
        if k in by_parts:
            return by_parts[k]
        model = SpectralClustering(n_clusters=k, affinity="precomputed", assign_labels="cluster_qr", random_state=0,
                                   eigen_solver="arpack", eigen_tol=1e-8)
        with warnings.catch_warnings():  # well-separated classes are separate components of the graph: expected
            warnings.filterwarnings("ignore", message="Graph is not fully connected")
            return relabel_by_appearance(model.fit_predict(sp.csr_matrix(a)))
    model = SpectralClustering(n_clusters=k, affinity="precomputed", assign_labels="cluster_qr", random_state=0)
    return relabel_by_appearance(model.fit_predict(a + 1e-12))


def _cluster_qr():
    """scikit-learn's ``cluster_qr`` (SpectralClustering's own assignment step; private), or None."""
    try:
        from sklearn.cluster._spectral import cluster_qr
    except ImportError:
        return None
    return cluster_qr


def _part_embedding(a, n_vectors: int) -> np.ndarray:
    """The spectral embedding of a sparse affinity in separate parts, found part by part.

    What :func:`sklearn.manifold.spectral_embedding` computes (the leading
    eigenvectors of the normalised affinity, self-loops left out, divided by
    the square root of the degree), one connected part at a time, the
    vectors of all parts ranked by their eigenvalues.  A graph in ``c``
    separate parts has the eigenvalue 1 ``c`` times, and one Lanczos run
    over the whole graph misses some of those repeated ones: its subspace,
    and the partitions cut from it, are then wrong (a 281-image set whose
    K-neighbour graph fell into 9 parts: at k = 12 a class of 50 was split
    instead of the three parts that each held two classes, ARI 0.88; the
    dense distances gave 1.0, as this does).

    Returns
    -------
    ndarray, shape (n, n_vectors)
        Columns by descending eigenvalue.
    """
    a = sp.csr_matrix(a, dtype=float, copy=True)
    a.setdiag(0.0)
    a.eliminate_zeros()
    n = a.shape[0]
    degree = np.asarray(a.sum(axis=1)).ravel()
    root = np.sqrt(np.where(degree > 0, degree, 1.0))
    found = []  # (eigenvalue, part's images, vector on them)
    parts = _connected_parts(a)
    for idx in parts:
        if idx.size == 1:
            found.append((1.0, idx, np.ones(1)))
            continue
        scale = sp.diags(1.0 / root[idx])
        values, vecs = _top_eigen((scale @ a[idx][:, idx] @ scale).tocsr(), _per_part(n_vectors, len(parts), idx.size),
                                  vectors=True)
        found += [(values[j], idx, vecs[:, j] / root[idx]) for j in range(values.size)]
    found.sort(key=lambda t: -t[0])  # stable: ties keep the parts' order
    maps = np.zeros((n, min(n_vectors, len(found))))
    for col, (_, idx, vec) in enumerate(found[:n_vectors]):
        maps[idx, col] = vec
    return maps


def _by_parts(a, ks) -> dict:
    """Partitions of a sparse symmetric affinity that falls apart, for each ``k`` of ``ks`` it can be cut at.

    With ``c`` separate parts and ``k >= c`` the ``k`` leading vectors of
    :func:`_part_embedding` span a well-defined subspace (the parts, then
    their best inner splits), cut by ``cluster_qr`` as SpectralClustering
    does.  For ``k < c`` (fewer clusters than parts) no subspace is better
    than another: those ``k`` are left out (the caller fits them one by
    one), as is everything on a connected graph or without ``cluster_qr``.
    """
    from scipy.sparse.csgraph import connected_components

    n = a.shape[0]
    cluster_qr = _cluster_qr()
    n_parts = connected_components(a, directed=False)[0]
    ks = [k for k in ks if max(n_parts, 2) <= k < n]
    if cluster_qr is None or n_parts == 1 or not ks:
        return {}
    maps = _part_embedding(a, max(ks))
    return _cuts(maps, [k for k in ks if k <= maps.shape[1]], cluster_qr)


def _cuts(maps, ks, cluster_qr) -> dict:
    """``cluster_qr`` of the leading ``k`` columns of ``maps`` for each ``k`` of ``ks``, relabelled."""
    return _each_k(lambda k: relabel_by_appearance(cluster_qr(maps[:, :k])), ks)


def _each_k(fn, ks) -> dict:
    """``{k: fn(k)}``, the ``k`` on every thread of the engine's count (each ``fn(k)`` independent of the others).

    For the read-out's work per ``k`` that LAPACK, ARPACK, SuperLU or NumPy do with the GIL released
    (a pivoted QR, a spectral fit, a silhouette's sorts).  A pool of its own, not the engine's: the
    window re-reads clusters on its thread and must not queue behind a running computation.
    """
    ks = list(ks)
    workers = min(threads(), len(ks))
    if workers > 1 and not in_worker():
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ia-cuts") as pool:
            return dict(zip(ks, pool.map(fn, ks)))
    return {k: fn(k) for k in ks}


def _partitions(affinity, ks) -> dict:
    """:func:`_spectral`'s partitions for several ``k`` at once: one spectral embedding, cut at each ``k``.

    ``SpectralClustering(assign_labels="cluster_qr")`` embeds the images on
    the ``k`` leading eigenvectors and assigns them with scikit-learn's
    ``cluster_qr``, which depends only on the subspace the vectors span; the
    leading ``k`` of one embedding with ``max(ks)`` vectors span the same
    one wherever ``lambda_k > lambda_{k+1}``.  So one eigen-decomposition
    serves every ``k`` (the silhouette fallback tries 19; on a 4,000-image
    graph one fit took 5.4 s).  A graph in several separate parts is
    embedded part by part (:func:`_part_embedding`); for fewer clusters
    than parts any subspace of their vectors is as good as another: there,
    and where scikit-learn no longer has ``cluster_qr`` where it is looked
    for, each ``k`` is fitted on its own (as before; slower).
    """
    from scipy.sparse.csgraph import connected_components
    from sklearn.manifold import spectral_embedding

    ks = list(ks)
    n = affinity.shape[0]
    cluster_qr = _cluster_qr()
    inside = [k for k in ks if 1 < k < n]
    a = 0.5 * (affinity + affinity.T)
    if cluster_qr is None or not inside:
        return _fitted_rest(affinity, ks, {})
    if sp.issparse(a) and connected_components(a, directed=False)[0] > 1:
        return _fitted_rest(affinity, ks, _by_parts(a, inside))
    with warnings.catch_warnings():  # well-separated classes are separate components of the graph: expected
        warnings.filterwarnings("ignore", message="Graph is not fully connected")
        if sp.issparse(a):  # the options _spectral gives SpectralClustering
            maps = spectral_embedding(sp.csr_matrix(a), n_components=max(inside), eigen_solver="arpack",
                                      eigen_tol=1e-8, random_state=0, drop_first=False)
        else:
            maps = spectral_embedding(a + 1e-12, n_components=max(inside), random_state=0, drop_first=False)
    cuts = _cuts(maps, inside, cluster_qr)
    return _fitted_rest(affinity, ks, cuts)


def _fitted_rest(affinity, ks, done) -> dict:
    """``done`` for each ``k`` of ``ks``, and a :func:`_spectral` fit of its own for the others (on every thread)."""
    rest = _each_k(lambda k: _spectral(affinity, k), [k for k in ks if k not in done])
    return {k: done[k] if k in done else rest[k] for k in ks}


def partition_stability(distances, partitions, *, scale: int = 2, draws: int = 8, fraction: float = 0.8,
                        seed: int = 0) -> dict:
    """How well each partition survives leaving images out: its mean agreement with re-cut subsets.

    For each of ``draws`` random subsets of ``fraction`` of the images the
    read-out's affinity (neighbour scale ``scale``) is rebuilt from the
    subset's own distances and cut into each ``k`` of ``partitions`` (one
    spectral embedding per subset, as :func:`_partitions`); the score of
    ``k`` is the mean adjusted Rand index between that cut and the full
    partition restricted to the subset.  A ``k`` that follows the data's
    structure is cut the same way from most subsets (near 1); a ``k`` that
    splits a class or merges two where the data has no boundary is cut
    differently each time (Ben-Hur, Elisseeff & Guyon 2002; Lange et al. 2004).

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Dense distances, or a pruned run's K-neighbour graph (the subset's
        graph is the edges between its images).
    partitions : dict of int to array of int
        The full set's labels for each ``k`` to score.
    scale : int
        Neighbour rank of the local bandwidth.
    draws : int
    fraction : float
        Share of the images in each subset, 0 < fraction < 1.
    seed : int

    Returns
    -------
    dict of int to float
        ``k`` to its mean agreement (-0.5 .. 1).

    Examples
    --------
    >>> x = np.r_[np.zeros(10), np.ones(10) * 5.0] + np.linspace(0.0, 0.5, 20)
    >>> d = np.abs(x[:, None] - x[None, :])
    >>> s = partition_stability(d, {2: np.repeat([0, 1], 10)})
    >>> round(s[2], 6)
    1.0
    """
    from sklearn.metrics import adjusted_rand_score

    sparse = sp.issparse(distances)
    d = sp.csr_matrix(distances, dtype=float) if sparse else np.asarray(distances, dtype=float)
    n = d.shape[0]
    size = int(round(fraction * n))
    ks = sorted(int(k) for k in partitions)
    if not ks:
        return {}
    if size <= max(ks) + 1:
        return {k: 0.0 for k in ks}
    rng = np.random.default_rng(seed)
    scores = {k: [] for k in ks}
    for _ in range(int(draws)):
        idx = np.sort(rng.choice(n, size=size, replace=False))
        sub = d[idx][:, idx] if sparse else d[np.ix_(idx, idx)]
        cuts = _partitions(_affinity(sub, min(scale, size - 1)), ks)
        for k in ks:
            scores[k].append(adjusted_rand_score(np.asarray(partitions[k])[idx], cuts[k]))
    return {k: float(np.mean(v)) for k, v in scores.items()}


def silhouette(distances, labels, *, probes=None) -> float | None:
    """Mean silhouette of a partition on precomputed distances; None for 1 cluster or n clusters.

    On a sparse K-neighbour graph the pairs off the graph are estimated: from
    ``probes`` (a pruned run's random sample of them,
    :func:`iastudio.core.neighbors.probe_pairs`) as the mean sampled distance
    between the two clusters, or, for clusters no probe joins, at
    ``max(r_i, r_j)``, ``r_i`` being image ``i``'s farthest computed distance
    (see :func:`_graph_silhouette`); on a complete graph this is the dense
    silhouette.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
    labels : array of int, shape (n,)
    probes : scipy.sparse matrix, shape (n, n), optional
        Distances of random pairs off the graph (symmetric).

    Returns
    -------
    float or None
    """
    from sklearn.metrics import silhouette_score

    labels = np.asarray(labels)
    if not 1 < len(np.unique(labels)) < len(labels):
        return None
    if sp.issparse(distances):
        return _graph_silhouette(sp.csr_matrix(distances), labels,
                                 None if probes is None else sp.csr_matrix(probes))
    return float(silhouette_score(distances, labels, metric="precomputed"))


def _edges(g):
    """Rows, columns and values of a sparse matrix's off-diagonal entries."""
    rows = np.repeat(np.arange(g.shape[0]), np.diff(g.indptr))
    off = rows != g.indices
    return rows[off], g.indices[off], g.data[off]


def _graph_silhouette(g, labels, probes=None) -> float:
    """Silhouette on a K-neighbour graph, the pairs off it estimated.

    Image ``i``'s summed distance to cluster ``c`` is its computed distances
    to ``c`` (on the graph, and its own probes) plus, for each member it has
    none to, an estimate: the mean ``probes`` distance between ``i``'s cluster
    and ``c`` when some probe joins them (a random sample of exactly those
    pairs: unbiased; with every pair off the graph a probe, the silhouette is
    exact), else
    ``max(r_i, r_j)`` with ``r_i`` image ``i``'s farthest computed distance (a
    pair neither image counted among its nearest is at least about that far;
    a lower bound, so partitions into many small clusters look better than
    they are).  On a complete graph this is the dense silhouette.  Sorted
    ``r`` and prefix sums give the filled-in sums: O(n k log n + edges), no
    n x n array.
    """
    n = g.shape[0]
    rows, cols, dist = _edges(g)
    r = np.zeros(n)
    np.maximum.at(r, rows, dist)
    _, lab = np.unique(labels, return_inverse=True)
    counts = np.bincount(lab)
    sums = np.empty((n, counts.size))
    for c in range(counts.size):  # sum over j in c of max(r_i, r_j), every i at once
        rc = np.sort(r[lab == c])
        prefix = np.concatenate([[0.0], np.cumsum(rc)])
        below = np.searchsorted(rc, r, side="right")
        sums[:, c] = r * below + (prefix[-1] - prefix[below])
    sums[np.arange(n), lab] -= r  # the image itself
    np.add.at(sums, (rows, lab[cols]), dist - np.maximum(r[rows], r[cols]))  # computed pairs as they are
    if probes is not None and probes.nnz:
        near, hits = np.zeros_like(sums), np.zeros_like(sums)
        p_rows, p_cols, p_dist = _edges(probes)
        for r_, c_, d_ in ((rows, cols, dist), (p_rows, p_cols, p_dist)):  # every distance known, as it is
            np.add.at(near, (r_, lab[c_]), d_)
            np.add.at(hits, (r_, lab[c_]), 1.0)
        total, seen = np.zeros((counts.size,) * 2), np.zeros((counts.size,) * 2)
        np.add.at(total, (lab[p_rows], lab[p_cols]), p_dist)
        np.add.at(seen, (lab[p_rows], lab[p_cols]), 1.0)
        missing = counts[None, :] - hits
        missing[np.arange(n), lab] -= 1.0
        sampled = (total / np.maximum(seen, 1.0))[lab]
        sums = np.where(seen[lab] > 0, near + missing * sampled, sums)
    own = counts[lab] - 1
    a = sums[np.arange(n), lab] / np.maximum(own, 1)
    mean = sums / counts
    mean[np.arange(n), lab] = np.inf
    b = mean.min(axis=1)
    top = np.maximum(a, b)
    scores = np.where((own > 0) & (top > 0), (b - a) / np.where(top > 0, top, 1.0), 0.0)
    return float(scores.mean())


def _silhouette(distances, labels, probes=None):
    s = silhouette(distances, labels, probes=probes)
    return -1.0 if s is None else s


def select_k(distances, *, scales=SCALES, min_gap: float = MIN_GAP, max_k: int = MAX_K, probes=None,
             near_tie: float | None = None, settle: str = SETTLE) -> KChoice:
    """Choose the number of clusters from invariant distances (see the module docstring).

    Without a clear eigengap the silhouette decides: of the k within
    ``near_tie`` of its best, the one with the largest eigengap
    (``settle="eigengap"``).

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Dense distances, or a pruned run's K-neighbour graph (see the module
        docstring for what differs there).
    scales : tuple of int
        Neighbour ranks tried for the local bandwidth, smallest first.
    min_gap : float
        Eigengap that counts as a clear structure.
    max_k : int
        Largest k the silhouette fallback tries (on a graph: also the eigengaps).
    probes : scipy.sparse matrix, optional
        A pruned run's random sample of distances off the graph (for the silhouette).
    near_tie : float, optional
        Only the k whose silhouette is this close to the best are
        candidates (0: the best silhouette decides).  Default:
        ``PRODUCT_TIE`` (0.15) for ``settle="product"``, ``NEAR_TIE`` (0.02)
        for the others.
    settle : {"product", "eigengap", "stability"}
        How the candidates are settled: the largest eigengap (default), the
        largest product of silhouette and eigengap, or the most stable
        partition (:func:`partition_stability`; within ``STABLE_TIE`` of it,
        the best silhouette).

    Returns
    -------
    KChoice
    """
    _check_settle(settle)
    return _select(distances, scales=scales, min_gap=min_gap, max_k=max_k, probes=probes, near_tie=near_tie,
                   settle=settle)[0]


def _check_settle(settle):
    if settle not in _SETTLES:
        raise ValueError(f"settle must be one of {', '.join(map(repr, _SETTLES))}, not {settle!r}")


def _select(distances, *, scales, min_gap, max_k, probes, near_tie=None, settle=SETTLE):
    """:func:`select_k`, and the partition its silhouette scored (None where k came from elsewhere)."""
    sparse = sp.issparse(distances)
    d = sp.csr_matrix(distances, dtype=float) if sparse else np.asarray(distances, dtype=float)
    n = d.shape[0]
    if n == 1:
        return KChoice(1, 1, 1.0, "trivial", [(1, 1.0)]), None
    off = d.data if sparse else d[~np.eye(n, dtype=bool)]
    if off.size == 0:
        return KChoice(n, 1, 1.0, "distinct", [(n, float("inf"))]), None
    if not sparse and np.percentile(off, 90) < SAME:
        return KChoice(1, 1, 1.0, "same", [(1, float(np.percentile(off, 90)))]), None
    if off.min() > DISTINCT:
        return KChoice(n, 1, 1.0, "distinct", [(n, float(off.min()))]), None
    if n == 2:
        return KChoice(1, 1, 1.0, "distinct", [(1, float(off.min()))]), None
    strongest, flat, apart, gaps = None, False, False, {}
    affinity = _affinities(d)
    for m in tuple(scales) + (GRAPH_SCALES if sparse else ()):
        if m >= n or (m > scales[-1] and (not apart or strongest.confidence >= FLAT_GAP
                                          or m > np.diff(d.indptr).min())):
            break
        g = gaps[m] = eigengaps(affinity(m), max_k=max_k)
        if m == scales[-1]:  # 1 - lambda_{max_k+1}: more than max_k near-separate parts even at this scale?
            apart = sparse and g.size == max_k and g.sum() < APART
        flat = flat or m > scales[-1]
        if m > scales[-1]:  # a wide bandwidth always shows a gap after the first eigenvalue: not evidence of k = 1
            g = np.concatenate([[0.0], g[1:]])
        top = np.argsort(-g)[:3]
        choice = KChoice(int(top[0]) + 1, m, float(g[top[0]]), "eigengap", [(int(t) + 1, float(g[t])) for t in top])
        if choice.confidence >= min_gap:
            return choice, None
        if strongest is None or choice.confidence > strongest.confidence:
            strongest = choice
    if flat:  # a graph of near-duplicates: its wider scales decide (the silhouette would only see the copies)
        return strongest, None
    m = min(2, n - 1)
    parts = _partitions(affinity(m), range(2, min(n - 1, max_k) + 1))
    sil = _each_k(lambda k: _silhouette(d, parts[k], probes), parts)
    if not sil or max(sil.values()) <= 0:
        return KChoice(1, m, strongest.confidence, "silhouette", [(1, 0.0)]), np.zeros(n, dtype=int)
    stability = None
    if near_tie is None:
        near_tie = PRODUCT_TIE if settle == "product" else NEAR_TIE
    if m not in gaps:
        gaps[m] = eigengaps(affinity(m), max_k=max_k)
    at_m = gaps[m]
    if settle in ("eigengap", "product"):
        k = (_near_tie_k if settle == "eigengap" else _product_k)(sil, at_m, near_tie)
    else:
        near = _near_ties(sil, near_tie)
        stable = {near[0]: None}
        if len(near) > 1:
            stable = partition_stability(d, {j: parts[j] for j in near}, scale=m, draws=STABILITY_DRAWS)
        k = _stable_k(sil, stable)
        stability = stable[k]
    ranked = [(k, sil[k]), *sorted(((j, s) for j, s in sil.items() if j != k), key=lambda t: -t[1])[:2]]
    choice = KChoice(int(k), m, strongest.confidence, "silhouette", [(int(j), float(s)) for j, s in ranked],
                     stability=stability, clear=clear_choice(int(k), sil, at_m))
    return choice, parts[choice.k]


def clear_choice(k: int, sil: dict, gaps: np.ndarray, *, lead: float = CLEAR_LEAD, gap: float = CLEAR_GAP) -> bool:
    """Whether a silhouette-chosen ``k`` stands out from every other ``k``.

    Parameters
    ----------
    k : int
        The chosen number of clusters.
    sil : dict
        Each tried ``k``'s silhouette.
    gaps : ndarray
        ``gaps[j - 1]`` is the eigengap ``lambda_j - lambda_{j+1}`` at the
        scale the partitions were cut at.
    lead : float
        How far ``k``'s silhouette must lead every other ``k``'s.
    gap : float
        How many times every other ``j``'s eigengap ``k``'s must be.

    Returns
    -------
    bool
        True when both hold (a ``k`` past the spectrum's end has no gap: False).

    Notes
    -----
    Chosen on the tune split of ``benchmarks/bench_kauto.py`` (both stored
    read-outs): the most right silhouette choices cleared with no wrong one
    cleared.  In full default runs of the holdout split it clears 7 of the 11
    right silhouette choices and none of the 13 wrong ones (``docs/quality.md``).
    """
    if k > gaps.size or k not in sil:
        return False
    others_sil = [s for j, s in sil.items() if j != k]
    others_gap = np.delete(gaps, k - 1)
    sil_ok = not others_sil or sil[k] >= max(others_sil) + lead
    gap_ok = others_gap.size == 0 or gaps[k - 1] >= gap * others_gap.max()
    return bool(sil_ok and gap_ok and gaps[k - 1] > 0)


def _near_ties(sil: dict, near_tie: float = NEAR_TIE) -> list:
    """The k whose silhouette is within ``near_tie`` of the best (and above 0), best silhouette first."""
    best = max(sil.values())
    return sorted((k for k, s in sil.items() if s >= best - near_tie and s > 0), key=lambda k: (-sil[k], k))


def _stable_k(sil: dict, stable: dict) -> int:
    """Of the near-tied ``k`` (keys of ``stable``), the most stable; within ``STABLE_TIE`` of it, the best silhouette.

    ``stable`` maps each near-tied k to its :func:`partition_stability`
    (None for a single candidate: it is taken); equal silhouettes go to the
    smaller k.
    """
    ks = list(stable)
    if len(ks) == 1:
        return ks[0]
    top = max(stable.values())
    return max((k for k in ks if stable[k] >= top - STABLE_TIE), key=lambda k: (sil[k], -k))


def _near_tie_k(sil: dict, gaps: np.ndarray, near_tie: float = NEAR_TIE) -> int:
    """The silhouette fallback's k: of those within ``near_tie`` of the best silhouette, the largest eigengap.

    ``sil`` maps k to the silhouette of its partition (the best one above 0),
    ``gaps[k - 1]`` is ``lambda_k - lambda_{k+1}`` of the affinity those
    partitions were cut from; only positive silhouettes count, and equal gaps
    go to the better silhouette.
    """
    best = max(sil.values())
    near = [k for k, s in sil.items() if s >= best - near_tie and s > 0]
    return max(near, key=lambda k: (gaps[k - 1] if k <= gaps.size else -np.inf, sil[k]))


def _product_k(sil: dict, gaps: np.ndarray, near_tie: float = np.inf) -> int:
    """The silhouette fallback's k: the largest product of silhouette and eigengap.

    ``sil`` maps k to the silhouette of its partition (the best one above 0),
    ``gaps[k - 1]`` is ``lambda_k - lambda_{k+1}`` of the affinity those
    partitions were cut from.  Only k with a positive silhouette within
    ``near_tie`` of the best are candidates; a k past the spectrum's end
    has no gap (product 0), and equal products go to the better silhouette,
    then the smaller k.
    """
    best = max(sil.values())
    near = [k for k, s in sil.items() if s >= best - near_tie and s > 0]
    return max(near, key=lambda k: (sil[k] * (gaps[k - 1] if k <= gaps.size else 0.0), sil[k], -k))


def read_clusters(distances, *, k="auto", scales=SCALES, probes=None,
                  near_tie: float | None = None, settle: str = SETTLE) -> tuple[np.ndarray, KChoice]:
    """Labels and the :class:`KChoice` from invariant distances.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Dense distances, or a pruned run's K-neighbour graph.
    k : int or "auto"
        With a given ``k`` the neighbour scale whose partition has the best
        silhouette is used (on a graph: among the scales at which it does not
        fall apart into more than ``k`` parts).
    probes : scipy.sparse matrix, optional
        A pruned run's random sample of distances off the graph
        (:func:`iastudio.core.neighbors.probe_pairs`), for the silhouette.
    near_tie : float, optional
        ``k="auto"``: only the k whose silhouette is this close to the best
        are candidates (0: the best silhouette decides; default: see
        :func:`select_k`).
    settle : {"product", "eigengap", "stability"}
        ``k="auto"``: how the candidates are settled (:func:`select_k`).

    Returns
    -------
    labels : ndarray of int, shape (n,)
    choice : KChoice
    """
    sparse = sp.issparse(distances)
    d = sp.csr_matrix(distances, dtype=float) if sparse else np.asarray(distances, dtype=float)
    n = d.shape[0]
    if k == "auto":
        _check_settle(settle)
        choice, labels = _select(d, scales=scales, min_gap=MIN_GAP, max_k=MAX_K, probes=probes, near_tie=near_tie,
                                 settle=settle)
        if choice.method in ("same", "distinct", "trivial"):
            return (np.arange(n) if choice.k == n else np.zeros(n, dtype=int)), choice
        return (_spectral(_affinity(d, choice.scale), choice.k) if labels is None else labels), choice
    k = int(k)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and {n}")
    if k in (1, n) or n < 3:
        return (np.zeros(n, dtype=int) if k == 1 else np.arange(n)), KChoice(k, 1)
    best, widest = None, None
    for m in tuple(scales) + (GRAPH_SCALES if sparse else ()):
        if m >= n or (m > scales[-1] and (best is not None or m > np.diff(d.indptr).min())):
            break
        aff = _affinity(d, m)
        widest = (m, aff)
        if sparse and _apart(aff, k):  # more near-separate parts than clusters (near-duplicates): no k-partition
            continue
        labels = _spectral(aff, k)
        score = _silhouette(d, labels, probes)
        if best is None or score > best[0]:
            best = (score, labels, m)
    if best is None:  # every bandwidth tried leaves more parts than clusters: the widest
        labels = _spectral(widest[1], k)
        best = (_silhouette(d, labels, probes), labels, widest[0])
    return best[1], KChoice(k, best[2], 1.0, "given", [(k, best[0])])


def _apart(affinity, k: int) -> bool:
    """True when a sparse affinity holds more than ``k`` (nearly) separate parts.

    Its ``(k + 1)``-th eigenvalue (normalised) is then within ``APART`` of 1:
    a spectral partition into ``k`` clusters would only split off tiny groups.
    """
    if affinity.shape[0] <= k + 2:
        return False
    return bool(_sparse_top_eigenvalues(affinity, k + 1)[k] > 1.0 - APART)


def labels_at_threshold(distances: np.ndarray, *, threshold: float) -> np.ndarray:
    """Clusters of images joined by chains of distances at most ``threshold``.

    Single linkage (SciPy): two images share a cluster when a path of
    pairwise distances, each at most ``threshold``, links them.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric, zero diagonal; or a pruned run's K-neighbour graph (the
        chains then run along its edges: the connected parts of the edges at
        most ``threshold``).
    threshold : float

    Returns
    -------
    ndarray of int, shape (n,)
        Numbered in order of first appearance.
    """
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    if sp.issparse(distances):
        from scipy.sparse.csgraph import connected_components

        g = sp.csr_matrix(distances, dtype=float)
        near = sp.csr_matrix(((g.data <= threshold).astype(float), g.indices, g.indptr), shape=g.shape)
        near.eliminate_zeros()
        return relabel_by_appearance(connected_components(near, directed=False)[1])
    d = np.asarray(distances, dtype=float)
    if d.shape[0] < 2:
        return np.zeros(d.shape[0], dtype=int)
    z = linkage(squareform(d, checks=False), method="single")
    return relabel_by_appearance(fcluster(z, t=float(threshold), criterion="distance") - 1)


def split_labels(distances: np.ndarray, members, *, k: int) -> np.ndarray:
    """Split a subset of the images into ``k`` clusters (:func:`read_clusters` on their distances).

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Distances between all images (or a pruned run's K-neighbour graph).
    members : sequence of int
        The images to split.
    k : int
        Number of parts, ``1 <= k <= len(members)``.

    Returns
    -------
    ndarray of int, shape (len(members),)
        The part of each member, ``0 .. k - 1``.
    """
    members = np.asarray(members, dtype=int)
    if sp.issparse(distances):
        sub = sp.csr_matrix(distances, dtype=float)[members][:, members]
    else:
        sub = np.asarray(distances, dtype=float)[np.ix_(members, members)]
    labels, _ = read_clusters(sub, k=int(k))
    return labels


def relabel_by_appearance(labels) -> np.ndarray:
    """Renumber labels 0, 1, ... in order of first appearance."""
    labels = np.asarray(labels)
    _, first = np.unique(labels, return_index=True)
    order = labels[np.sort(first)]
    mapping = {lab: i for i, lab in enumerate(order)}
    return np.array([mapping[lab] for lab in labels], dtype=int)


def cluster_labels(affinity: np.ndarray, *, k="auto") -> np.ndarray:
    """Cluster labels from an affinity matrix (spectral clustering).

    Parameters
    ----------
    affinity : ndarray, shape (n, n)
    k : int or "auto"
        ``"auto"``: :func:`eigengap_k` (at most 20 clusters).

    Returns
    -------
    ndarray of int, shape (n,)
    """
    n = affinity.shape[0]
    kk = eigengap_k(affinity, max_k=MAX_K) if k == "auto" else int(k)
    if not 1 <= kk <= n:
        raise ValueError(f"k must be between 1 and {n}")
    return _spectral(affinity, kk)


def grouping_order(labels) -> np.ndarray:
    """Indices that put images of the same cluster next to each other (stable)."""
    return np.argsort(np.asarray(labels), kind="stable")
