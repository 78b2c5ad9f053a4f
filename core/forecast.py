"""What the next iteration's means would look like to the read-out, forecast from the distances and W.

An IA iteration replaces each image ``v_j`` by its invariant mean
``mu_j = sum_a W_aj (v_a o tau_aj)`` (the columns of W sum to 1) and aligns the
means again -- a mean stage and a similarity stage, most of a run.  If the
images were points of a Euclidean space, already aligned, the distances
between the means would follow from the distances ``d_ab`` between the images
and W alone: with ``S_ab = d_ab**2`` and ``Q = W^T S W``,

    ``|mu_i - mu_j|**2 = Q_ij - Q_ii / 2 - Q_jj / 2``

(the norms cancel because each column of W sums to 1).  Invariant distances
are not exactly Euclidean (each pair has its own best alignment), so this is a
*forecast* of the next iteration's distances, cheap (matrix products of W and
the distances it is made from, no warp), and :class:`~iastudio.core.attention.AttentionRun`
uses it to decide the guard's question before paying for the iteration.

On a pruned run (a sparse K-neighbour graph) a squared distance that was not
computed counts at the mean squared distance of the run's random sample of
pairs off the graph (its *probes*); the forecast is given for the graph's
pairs and the probes' pairs, the pairs the read-out and the silhouette use.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .backend import threads, to_host
from .warp import parallel_map

__all__ = ["forecast_mean_distances"]


def _entries(weights, mass):
    """W as a sparse matrix, each column cut to the weights that hold ``mass`` of it (as the means do)."""
    from .invariant_mean import weight_entries

    src, col, w = weight_entries(weights, mass=mass)
    n, m = weights.shape
    return sp.csc_matrix((w, (src, col)), shape=(n, m))


def _from_q(q_pairs, q_diag, rows, cols):
    """Squared-distance formula on chosen pairs, clipped at 0 (rounding), as distances."""
    d2 = q_pairs - 0.5 * q_diag[rows] - 0.5 * q_diag[cols]
    return np.sqrt(np.maximum(d2, 0.0))


def forecast_mean_distances(distances, weights, *, probes=None, mass: float = 0.999):
    """Distances between the invariant means of the next iteration, forecast from ``distances`` and ``weights``.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        The current invariant distances (dense), or a pruned run's K-neighbour
        graph of them (sparse, symmetric; the diagonal is not stored).
    weights : ndarray or scipy.sparse matrix, shape (n, n)
        W, column ``j`` the weights of mean ``j`` (each column sums to 1;
        :func:`iastudio.core.weights.attention_weights`).
    probes : scipy.sparse matrix, shape (n, n), optional
        A pruned run's random sample of distances off the graph
        (:func:`iastudio.core.neighbors.probe_pairs`): the mean of their squares
        stands in for every pair that was not computed.  Without it, the
        largest computed distance does.
    mass : float
        Each column of W keeps its largest weights up to this fraction of its
        total, as the mean stage does (``weight_mass``).

    Returns
    -------
    distances : ndarray or scipy.sparse.csr_matrix, shape (n, n)
        The forecast distances between the means, dense for dense input; on a
        graph, on the graph's pairs.
    probes : scipy.sparse.csr_matrix or None
        On a graph with ``probes``: the forecast on the probes' pairs.

    Notes
    -----
    Exact when the images are aligned points of a Euclidean space and
    ``distances`` are their Euclidean distances (every pair computed, ``mass=1``).

    Examples
    --------
    >>> x = np.array([[0.0], [1.0], [3.0]])
    >>> d = np.abs(x - x.T)
    >>> w = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    >>> forecast_mean_distances(d, w, mass=1.0)[0].round(3)
    array([[0. , 0. , 2.5],
           [0. , 0. , 2.5],
           [2.5, 2.5, 0. ]])
    """
    if not sp.issparse(distances):
        d = np.asarray(to_host(distances), dtype=float)
        w = _entries(weights, mass).toarray() if mass < 1.0 else np.asarray(to_host(weights), dtype=float)
        q = w.T @ (d**2) @ w
        diag = np.diag(q).copy()
        out = np.sqrt(np.maximum(q - 0.5 * diag[:, None] - 0.5 * diag[None, :], 0.0))
        np.fill_diagonal(out, 0.0)
        return out, None
    g = sp.csr_matrix(distances, dtype=float)
    n = g.shape[0]
    p = None if probes is None else sp.csr_matrix(probes, dtype=float)
    fill = float(np.mean(p.data ** 2)) if p is not None and p.nnz else float(g.data.max() ** 2) if g.nnz else 0.0
    coo = g.tocoo()
    off = coo.row != coo.col
    # S = s + fill * (1 1^T - I); the 1 1^T term cancels in the formula (columns of W sum to 1), the
    # -fill I term is s's diagonal: q = W^T (s - fill I) W
    s = sp.csr_matrix((np.r_[coo.data[off] ** 2 - fill, np.full(n, -fill)],
                       (np.r_[coo.row[off], np.arange(n)], np.r_[coo.col[off], np.arange(n)])), shape=(n, n))
    w = _entries(weights, mass).tocsc()
    right = s.tocsc() @ w  # CSC, the columns :func:`_product_entries` reads
    wanted = [g] if p is None else [g, p]
    diag = np.asarray(w.multiply(right).sum(axis=0)).ravel()  # q_ii = w_i . (s - fill I) w_i
    pairs = []
    for pattern in wanted:
        pc = pattern.tocoo()
        keep = pc.row != pc.col
        pairs.append((pc.row[keep], pc.col[keep]))
    vals = np.split(_product_entries(w, right, np.concatenate([r for r, _ in pairs]),
                                     np.concatenate([c for _, c in pairs])), [pairs[0][0].size])
    out = [sp.csr_matrix((_from_q(v, diag, r, c), (r, c)), shape=(n, n)) for (r, c), v in zip(pairs, vals)]
    return out[0], (out[1] if p is not None else None)


def _product_entries(a, b, rows, cols, *, block_elements: int = 1 << 22) -> np.ndarray:
    """``(a^T b)[rows, cols]`` of two sparse ``(n, n)`` matrices, without the product itself.

    ``a^T b`` of two graphs' weights fills in far beyond the entries the
    forecast reads (at 10,000 images about 10^8 against 4 10^5).  Each entry
    is the dot product of column ``rows`` of ``a`` (sparse) with column
    ``cols`` of ``b``, read from a dense block of ``b``'s columns; the blocks
    run on every thread.
    """
    a, b = sp.csc_matrix(a), sp.csc_matrix(b)
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    out = np.zeros(rows.size)
    if not rows.size:
        return out
    n = b.shape[0]
    order = np.argsort(cols, kind="stable")
    width = max(1, min(int(block_elements) // max(n, 1), -(-b.shape[1] // threads())))  # a block per thread at least
    edges = np.searchsorted(cols[order], np.arange(0, b.shape[1] + width, width))

    def block(m):
        lo, hi = int(edges[m]), int(edges[m + 1])
        if hi == lo:
            return
        pick = order[lo:hi]
        c0 = m * width
        dense = b[:, c0:c0 + width].toarray()  # (n, width)
        start, count = a.indptr[rows[pick]], np.diff(a.indptr)[rows[pick]]
        total = int(count.sum())
        if total == 0:
            return
        first = np.cumsum(count) - count  # where each entry's terms begin
        flat = np.repeat(start - first, count) + np.arange(total)  # positions in a.indices / a.data
        terms = a.data[flat] * dense[a.indices[flat], np.repeat(cols[pick] - c0, count)]
        nonempty = count > 0
        out[pick[nonempty]] = np.add.reduceat(terms, first[nonempty])

    parallel_map(block, range(edges.size - 1))
    return out


