import itertools
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.clustering import (
    cluster_labels,
    eigengap_k,
    eigengaps,
    grouping_order,
    labels_at_threshold,
    local_scaling_affinity,
    read_clusters,
    relabel_by_appearance,
    select_k,
    split_labels,
)
from iastudio.core.weights import (
    attention_weights,
    auto_beta,
    block_diagonality,
    class_share,
    column_normalize,
    local_bandwidth,
    rbf_similarity,
)


def test_columns_sum_to_one_and_rbf_known_answer():
    d = np.array([[0, 1.0], [1.0, 0]])
    g = rbf_similarity(d, 2.0)
    assert g[0, 1] == pytest.approx(np.exp(-2.0))
    w = column_normalize(g)
    np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=1e-5, atol=1e-8)
    assert w[0, 1] == pytest.approx(np.exp(-2) / (1 + np.exp(-2)))
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        rbf_similarity(d, 0)


def test_local_bandwidth_and_auto_weights_known_answer():
    # points on a line, 0.5 apart: every point's nearest neighbour is at 0.5, its 2nd at 0.5 (inner) or 1.0 (ends)
    x = np.arange(6) * 0.5
    d = np.abs(x[:, None] - x[None, :])
    assert_allclose(local_bandwidth(d, neighbor=1), np.full(6, 0.5))
    assert_allclose(local_bandwidth(d, neighbor=2), [1.0, 0.5, 0.5, 0.5, 0.5, 1.0])
    assert auto_beta(d, neighbor=1) == pytest.approx(1 / 0.25)
    w, b = attention_weights(d, "auto", neighbor=1)
    g = np.exp(-d**2 / 0.25)
    assert_allclose(w, g / g.sum(axis=0, keepdims=True))
    assert b == pytest.approx(4.0)
    # no cap at 50 (version 0.1): near copies give a sharp kernel, down to the resampling floor s >= 0.02
    assert auto_beta(d * 0.1, neighbor=1) == pytest.approx(1 / 0.05**2)
    assert auto_beta(d * 1e-3, neighbor=1) == pytest.approx(1 / 0.02**2)
    # an explicit beta is the paper's global RBF, whatever the bandwidth
    w2, b2 = attention_weights(d, 3.0, bandwidth=np.ones(6))
    assert b2 == 3.0
    assert_allclose(w2, column_normalize(rbf_similarity(d, 3.0)))


def test_class_share_and_block_diagonality_known_answers():
    labels = np.repeat(["a", "b", "c"], 6)  # 3 classes of 6
    same = (labels[:, None] == labels[None, :]).astype(float)
    ideal = same / 6
    assert class_share(ideal, labels) == pytest.approx(1.0)
    assert block_diagonality(ideal, labels) == pytest.approx(1.0)
    eye = np.eye(18)  # each image trusts only itself: nothing crosses, but no block is filled in
    assert class_share(eye, labels) == pytest.approx(1.0)
    assert block_diagonality(eye, labels) == pytest.approx(np.sqrt(3 / 18))
    flat = np.full((18, 18), 1 / 18)  # every column spread evenly: a third stays inside the class
    assert class_share(flat, labels) == pytest.approx(1 / 3)
    assert block_diagonality(flat, labels) == pytest.approx(1 / np.sqrt(3))
    half = 0.5 * ideal + 0.5 * flat  # half the weight of every column leaks evenly
    assert class_share(half, labels) == pytest.approx(0.5 + 0.5 / 3)
    import scipy.sparse as sp

    assert block_diagonality(sp.csr_matrix(half), labels) == pytest.approx(block_diagonality(half, labels))


def test_local_bandwidth_floor_for_duplicates():
    d = np.zeros((3, 3))
    d[0, 2] = d[2, 0] = d[1, 2] = d[2, 1] = 1.0  # images 0 and 1 are identical
    s = local_bandwidth(d, neighbor=1)
    assert_allclose(s, [0.02, 0.02, 1.0])
    assert np.isfinite(attention_weights(d, "auto", neighbor=1)[0]).all()
    with pytest.raises(ValueError, match="finite"):
        rbf_similarity(d, np.inf)


def _blocks(sizes, inside=1.0, outside=1e-4):
    lab = np.repeat(np.arange(len(sizes)), sizes)
    a = np.where(lab[:, None] == lab[None, :], inside, outside)
    return a, lab


@pytest.mark.parametrize("sizes", [(5, 5, 5), (3, 7), (4, 4, 4, 4, 2)])
def test_eigengap_finds_the_blocks(sizes):
    a, lab = _blocks(sizes)
    perm = np.random.default_rng(0).permutation(len(lab))
    a, lab = a[np.ix_(perm, perm)], lab[perm]
    assert eigengap_k(a) == len(sizes)
    got = cluster_labels(a)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(lab, got) == 1.0
    assert got[0] == 0  # numbered by first appearance
    assert np.array_equal(cluster_labels(a, k=1), np.zeros(len(lab)))


def test_relabel_and_grouping():
    assert list(relabel_by_appearance([5, 5, 2, 9, 2])) == [0, 0, 1, 2, 1]
    assert list(grouping_order([1, 0, 1, 0])) == [1, 3, 0, 2]
    with pytest.raises(ValueError, match="k must be between 1 and 3"):
        cluster_labels(np.eye(3), k=4)


def test_two_images_together_or_apart():
    assert eigengap_k(np.array([[1.0, 0.9], [0.9, 1.0]])) == 1
    assert eigengap_k(np.array([[1.0, 0.01], [0.01, 1.0]])) == 2
    assert eigengap_k(np.array([[1.0]])) == 1


def test_eigengap_reaches_k_equals_n():
    assert eigengap_k(np.eye(5)) == 5  # version 0.1 returned 1 and could never return n
    assert eigengap_k(np.ones((5, 5))) == 1


def _points(centres, sizes, spread, seed=0):
    """Distances of Gaussian point clouds (a stand-in for invariant distances)."""
    rng = np.random.default_rng(seed)
    pts = np.concatenate([c + spread * rng.standard_normal((m, len(c))) for c, m in zip(centres, sizes)])
    lab = np.repeat(np.arange(len(sizes)), sizes)
    return np.linalg.norm(pts[:, None] - pts[None, :], axis=-1), lab


def test_local_scaling_affinity_known_answer():
    d = np.array([[0, 1.0, 4.0], [1.0, 0, 3.0], [4.0, 3.0, 0]])
    a = local_scaling_affinity(d, neighbor=1)  # s = (1, 1, 3)
    assert_allclose(a, np.exp(-d**2 / np.outer([1, 1, 3.0], [1, 1, 3.0])))


@pytest.mark.parametrize("sizes", [(3, 3, 3, 3, 3, 3, 3, 3), (2, 2, 2), (20, 10, 6, 3, 3), (8, 8)])
def test_select_k_small_and_unequal_classes(sizes):
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(len(sizes))
    centres = rng.standard_normal((len(sizes), 6)) * 3.0
    d, lab = _points(centres, sizes, spread=0.15)
    d *= 0.4 / np.median(d)  # invariant distances of distinct objects: ~0.4-0.8 on unit-norm images
    choice = select_k(d)
    assert choice.k == len(sizes)
    assert choice.method in ("eigengap", "silhouette")
    assert len(choice.candidates) >= 2
    assert choice.candidates[0][0] == len(sizes)
    got, _ = read_clusters(d)
    assert adjusted_rand_score(lab, got) == 1.0


def test_select_k_one_class_and_all_distinct():
    d, _ = _points([np.zeros(6)], [12], spread=0.02)  # one class: copies with small differences
    got, choice = read_clusters(d)
    assert choice.k == 1
    assert (got == 0).all()
    far = 0.8 + 0.1 * np.random.default_rng(1).random((6, 6))
    far = np.triu(far, 1) + np.triu(far, 1).T  # six images, no two alike
    got, choice = read_clusters(far)
    assert choice.k == 6
    assert choice.method == "distinct"
    assert len(set(got)) == 6


def test_select_k_ambiguous_data_says_it_is_unsure():
    rng = np.random.default_rng(3)
    d, _ = _points(rng.standard_normal((4, 6)) * 0.6, [10] * 4, spread=0.5)  # overlapping clouds
    d *= 0.45 / np.median(d)  # like rotated handwritten digits: 0.2 to 0.6
    choice = select_k(d)
    assert choice.unsure
    assert choice.method == "silhouette"
    assert len(choice.plausible()) >= 1
    assert choice.k not in choice.plausible()
    assert choice.as_dict()["candidates"][0]["k"] == choice.k


def test_a_silhouette_choice_that_stands_out_is_not_unsure():
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.clustering import MIN_GAP

    rng = np.random.default_rng(0)
    d, lab = _points(rng.standard_normal((4, 6)), [25] * 4, spread=0.3)  # four clouds, no eigengap of MIN_GAP
    d *= 0.45 / np.median(d)
    got, choice = read_clusters(d)
    assert choice.method == "silhouette"
    assert choice.confidence < MIN_GAP
    assert choice.clear
    assert not choice.unsure
    assert choice.k == 4
    assert adjusted_rand_score(lab, got) == pytest.approx(1.0)
    assert choice.describe() == "4 clusters"
    assert choice.plausible() == []
    assert choice.as_dict()["clear"] is True
    assert choice.as_dict()["unsure"] is False


def test_clear_choice_known_answer():
    from iastudio.core.clustering import clear_choice

    sil = {2: 0.20, 3: 0.25, 4: 0.31}
    gaps = np.array([0.05, 0.06, 0.10, 0.30, 0.04])  # gaps[k - 1]: after eigenvalue k
    assert clear_choice(4, sil, gaps)  # leads by 0.06 in silhouette, 3x the next gap
    assert not clear_choice(4, {**sil, 3: 0.30}, gaps)  # leads by 0.01 only
    assert not clear_choice(4, sil, np.array([0.05, 0.06, 0.10, 0.12, 0.04]))  # gap 1.2x the next
    assert clear_choice(4, sil, np.array([0.05, 0.06, 0.10, 0.12, 0.04]), gap=1.1)
    assert not clear_choice(4, sil, gaps, lead=0.1)
    assert not clear_choice(3, sil, gaps)  # not the best silhouette
    assert not clear_choice(7, {**sil, 7: 0.9}, gaps)  # past the spectrum's end: no gap known
    assert not clear_choice(2, {2: 0.3}, np.zeros(3))  # no gap at all


def test_near_tie_goes_to_the_largest_eigengap():
    from iastudio.core.clustering import NEAR_TIE, _near_tie_k

    sil = {2: 0.300, 3: 0.300 - NEAR_TIE / 2, 4: 0.300 - 2 * NEAR_TIE, 5: 0.290}
    gaps = np.array([0.5, 0.01, 0.03, 0.9, 0.02])  # gaps[k - 1]: after eigenvalue k
    assert _near_tie_k(sil, gaps) == 3  # 2, 3 and 5 tie, 3 has their largest gap; 4 (largest of all) is not near
    assert _near_tie_k(sil, np.array([0.5, 0.04, 0.03, 0.9])) == 2
    assert _near_tie_k(sil, np.array([0.5, 0.03, 0.03, 0.9])) == 2  # equal gaps: the better silhouette
    assert _near_tie_k({2: 0.1, 7: 0.1}, np.array([0.5, 0.01])) == 2  # no gap known past the spectrum's end
    assert _near_tie_k({2: 0.01, 3: -0.005}, np.array([0.5, 0.01, 0.9])) == 2  # a k below 0 never wins
    assert _near_tie_k(sil, gaps, near_tie=0.0) == 2  # no tolerance: the best silhouette


def test_product_k_known_answer():
    from iastudio.core.clustering import _product_k

    gaps = np.array([0.5, 0.02, 0.01, 0.15, 0.03])  # gaps[k - 1]: after eigenvalue k
    flat = {2: 0.300, 3: 0.299, 4: 0.298, 5: 0.297}  # a flat silhouette curve: the gap decides
    assert _product_k(flat, gaps) == 4
    nested = {2: 0.27, 3: 0.19, 4: 0.17, 5: 0.14}  # silhouette prefers 2; 0.17 * 0.15 > 0.27 * 0.02
    assert _product_k(nested, gaps) == 4
    assert _product_k(nested, np.array([0.5, 0.10, 0.01, 0.15])) == 2  # 0.27 * 0.10 > 0.17 * 0.15
    assert _product_k(nested, gaps, near_tie=0.0) == 2  # no tolerance: the best silhouette
    assert _product_k({2: 0.2, 7: 0.3}, np.array([0.5, 0.01])) == 2  # no gap known past the spectrum's end
    assert _product_k({2: 0.3, 3: -0.1}, np.array([0.5, 0.01, 0.9])) == 2  # a k below 0 never wins
    assert _product_k({2: 0.3, 3: 0.2}, np.zeros(3)) == 2  # no gap anywhere: the better silhouette


def test_product_rule_reads_nested_classes_the_silhouette_merges():
    """Four classes in two pairs: the silhouette is best at 2 (0.50 against 0.42 at 4), but the
    spectrum of the affinity shows a larger gap after 4; ``settle="product"`` reads 4, every image
    right, and says it is unsure; the best silhouette alone, and the default rule, read 2."""
    from sklearn.metrics import adjusted_rand_score

    centres = [np.r_[2.0 * x, 1.2 * y, np.zeros(4)] for x in (-1, 1) for y in (-1, 1)]
    d, lab = _points(centres, [12] * 4, spread=0.5, seed=3)
    d *= 0.45 / np.median(d)
    gaps = eigengaps(local_scaling_affinity(d, neighbor=2, nearest=8))
    choice = select_k(d, settle="product")
    assert choice.method == "silhouette"
    assert choice.unsure
    assert choice.k == 4
    assert 2 in choice.plausible()
    sil = dict(choice.candidates)
    assert sil[2] > sil[4] + 0.05  # the silhouette alone prefers 2
    assert sil[4] * gaps[3] > sil[2] * gaps[1]
    assert select_k(d, near_tie=0.0).k == 2
    assert select_k(d).k == select_k(d, settle="eigengap").k == 2  # the default: 4 is not within its tie
    got, again = read_clusters(d, settle="product")
    assert again == choice
    assert adjusted_rand_score(lab, got) == 1.0


@pytest.mark.slow
def test_near_tied_silhouettes_are_settled_by_the_eigengap():
    """Overlapping clouds (flat silhouette curves): the k taken is within NEAR_TIE of the best silhouette
    with the largest gap there, it differs from the best silhouette's on some sets, and here (6 classes,
    the best silhouette often at 2) it reads the classes better than the best silhouette alone."""
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core import clustering

    scores, changed, default = {}, 0, clustering.NEAR_TIE
    for near_tie in (default, 0.0):
        aris = []
        for seed in range(24):
            rng = np.random.default_rng(seed)
            d, lab = _points(rng.standard_normal((6, 6)) * 0.6, [12] * 6, spread=0.5, seed=seed)
            d *= 0.45 / np.median(d)
            got, choice = read_clusters(d, near_tie=near_tie, settle="eigengap")
            aris.append(adjusted_rand_score(lab, got))
            assert select_k(d, near_tie=near_tie, settle="eigengap") == choice
            if near_tie and choice.method == "silhouette":
                best = max(s for _, s in choice.candidates)
                assert choice.candidates[0][0] == choice.k
                assert choice.candidates[0][1] >= best - near_tie
                gaps = clustering.eigengaps(clustering._affinity(d, choice.scale))
                rivals = [k for k, s in choice.candidates[1:] if s >= best - near_tie]
                assert all(gaps[choice.k - 1] >= gaps[k - 1] for k in rivals)
                changed += choice.k != max(choice.candidates, key=lambda t: t[1])[0]
                # the gaps at m = 2 are found even when the scales tried for a clear gap leave 2 out
                assert select_k(d, scales=(1,), settle="eigengap").k == choice.k
        scores[near_tie] = np.mean(aris)
    assert changed >= 5  # the rule decided some of these sets (9 of 24)
    assert scores[default] > scores[0.0] + 0.03  # measured: 0.45 against 0.38


def test_read_clusters_with_k_given():
    d, _lab = _points(np.eye(6)[:3] * 5, [4, 4, 4], spread=0.2)
    got, choice = read_clusters(d, k=3)
    assert choice.method == "given"
    assert choice.k == 3
    assert len(set(got)) == 3
    assert (read_clusters(d, k=1)[0] == 0).all()
    assert len(set(read_clusters(d, k=12)[0])) == 12
    with pytest.raises(ValueError, match="k must be between 1 and 12"):
        read_clusters(d, k=13)


def test_labels_at_threshold_single_linkage_known_answer():
    x = np.array([0.0, 1.0, 2.0, 10.0, 10.5, 30.0])  # points on a line: chains 0-1-2, 3-4, and 5 alone
    d = np.abs(x[:, None] - x[None])
    assert labels_at_threshold(d, threshold=1.0).tolist() == [0, 0, 0, 1, 1, 2]
    assert labels_at_threshold(d, threshold=0.9).tolist() == [0, 1, 2, 3, 3, 4]
    assert labels_at_threshold(d, threshold=8.0).tolist() == [0, 0, 0, 0, 0, 1]  # chained through 2 -> 10
    assert labels_at_threshold(d, threshold=25.0).tolist() == [0] * 6
    order = [5, 3, 0, 4, 1, 2]  # numbered by first appearance whatever the order
    assert labels_at_threshold(d[np.ix_(order, order)], threshold=1.0).tolist() == [0, 1, 2, 1, 2, 2]


def test_split_labels_splits_only_the_members():
    d, lab = _points(np.eye(6)[:3] * 5, [4, 4, 4], spread=0.2)
    members = np.flatnonzero(lab != 2)  # two of the three groups
    parts = split_labels(d, members, k=2)
    assert parts.shape == members.shape
    assert sorted(set(parts)) == [0, 1]
    assert relabel_by_appearance(lab[members]).tolist() == parts.tolist()
    assert (split_labels(d, members, k=1) == 0).all()


def test_k_choice_round_trips_exactly():
    # a confidence just under the "unsure" line must stay under it after saving and reopening
    from iastudio.core.clustering import KChoice

    choice = KChoice(4, 2, 0.39996, "eigengap", [(4, 0.39996), (3, 0.123456789)])
    back = KChoice.from_dict(json.loads(json.dumps(choice.as_dict())))
    assert back == choice
    assert back.unsure


@pytest.mark.parametrize("graph", [False, True])
def test_one_embedding_gives_every_ks_partition_of_its_own_fit(graph, monkeypatch):
    """The silhouette fallback cuts one spectral embedding at each k: the partitions of a fit per k."""
    import sys

    import scipy.sparse as sp

    from iastudio.core import clustering

    rng = np.random.default_rng(0)  # 6 overlapping clouds (one connected graph: no degenerate eigenvalues)
    truth = np.repeat(np.arange(6), 25)
    pts = rng.standard_normal((6, 5))[truth] * 0.9 + rng.standard_normal((150, 5)) * 0.5
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    if graph:  # each point's 30 nearest, as a pruned run keeps
        near = np.argsort(d + np.diag(np.full(150, np.inf)), axis=1)[:, :30]
        g = sp.csr_matrix((d[np.arange(150)[:, None], near].ravel(), (np.repeat(np.arange(150), 30), near.ravel())),
                          shape=d.shape)
        d = g.maximum(g.T).tocsr()
    aff = clustering._affinity(d, 2)
    ks = range(1, 21)
    shared = clustering._partitions(aff, ks)
    assert sorted(shared) == list(ks)
    for k in ks:
        own = clustering._spectral(aff, k)
        assert_allclose(shared[k], own, err_msg=f"k = {k}")
        assert len(np.unique(own)) == k
    if graph:  # a graph in three separate parts: cut part by part from k = 3 (the parts) on
        three = sp.block_diag([aff, aff, aff]).tocsr()
        parts = clustering._partitions(three, [3, 5])
        assert_allclose(parts[3], np.repeat(np.arange(3), 150))
        assert len(np.unique(parts[5])) == 5
        assert all(len(np.unique(parts[5][p * 150:(p + 1) * 150])) < 5 for p in range(3))  # no cluster across parts
        assert all(len(np.unique(np.repeat(np.arange(3), 150)[parts[5] == c])) == 1 for c in range(5))
    calls = []  # fewer clusters than parts (eigenvalue 1 thrice: any 2 of them as good): a fit per k, as before
    monkeypatch.setattr(clustering, "_spectral", lambda a, k: calls.append(k) or np.full(a.shape[0], k))
    if graph:
        parts = clustering._partitions(three, [2, 5])
        assert calls == [2]
        assert (parts[2] == 2).all()
        assert len(np.unique(parts[5])) == 5
    calls.clear()  # where scikit-learn has no cluster_qr where it is looked for: a fit per k
    monkeypatch.setitem(sys.modules, "sklearn.cluster._spectral", None)
    fitted = clustering._partitions(aff, [2, 5])
    assert calls == [2, 5]
    assert all((fitted[k] == k).all() for k in (2, 5))


def test_a_graph_in_parts_is_embedded_part_by_part_as_the_whole_eigenproblem_says():
    """Known answer: the leading vectors of the normalised affinity (self-loops left out), over sqrt(degree)."""
    import scipy.sparse as sp

    from iastudio.core import clustering

    rng = np.random.default_rng(1)
    blocks = []
    for size in (40, 25, 1, 30):  # three parts and one lone image
        pts = rng.standard_normal((size, 3)) + (rng.standard_normal(3) * 0.8 if size > 1 else 0)
        blocks.append(np.exp(-np.linalg.norm(pts[:, None] - pts[None], axis=-1) ** 2))
    a = sp.block_diag(blocks).tocsr()
    maps = clustering._part_embedding(a, 9)
    assert maps.shape == (96, 9)
    dense = a.toarray()
    np.fill_diagonal(dense, 0.0)
    degree = dense.sum(axis=1)
    root = np.sqrt(np.where(degree > 0, degree, 1.0))
    values, vectors = np.linalg.eigh(dense / root[:, None] / root[None, :] + np.diag(degree == 0))
    values, vectors = values[::-1], vectors[:, ::-1]
    assert values[3] > 0.999
    assert values[8] - values[9] > 1e-3
    for k in (4, 9):  # where lambda_k > lambda_{k+1} the subspace is the whole eigenproblem's
        ours = np.linalg.qr(maps[:, :k] * root[:, None])[0]
        assert_allclose(ours @ ours.T, vectors[:, :k] @ vectors[:, :k].T, atol=1e-8)
    starts = np.cumsum([0, 40, 25, 1, 30])
    for col in range(4):  # eigenvalue 1: constant on one part (u = x / sqrt(degree)), zero elsewhere
        on = np.flatnonzero(maps[:, col])
        assert any(on.tolist() == list(range(lo, hi)) for lo, hi in itertools.pairwise(starts))
        assert_allclose(maps[on, col], maps[on[0], col])


def _knn_affinity(rng, sizes, k=10):
    """A k-nearest-neighbour affinity of separate point clouds, ones on the diagonal (as the read-out's)."""
    import scipy.sparse as sp

    blocks = []
    for size in sizes:
        pts = rng.standard_normal((size, 3))
        d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        kk = min(k, size - 1)
        near = np.argsort(d, axis=1)[:, 1:kk + 1]
        rows, cols = np.repeat(np.arange(size), kk), near.ravel()
        g = sp.csr_matrix((np.exp(-d[rows, cols] ** 2), (rows, cols)), shape=(size, size))
        blocks.append(g.maximum(g.T) + sp.identity(size))
    return sp.block_diag(blocks).tocsr()


def test_sparse_top_eigenvalues_match_the_whole_dense_spectrum(monkeypatch):
    """Known answer: the k largest eigenvalues of the normalised affinity, parts above 400 images by Lanczos."""
    from iastudio.core import clustering

    rng = np.random.default_rng(3)
    a = _knn_affinity(rng, (650, 450, 30, 12, 1))  # two parts for Lanczos, two dense ones, a lone image
    asked = []
    real = clustering._top_eigenvalues
    monkeypatch.setattr(clustering, "_top_eigenvalues", lambda m, k: asked.append((m.shape[0], k)) or real(m, k))
    got = clustering._sparse_top_eigenvalues(a, 21)
    dense = np.sort(np.linalg.eigvalsh(clustering._normalised(a).toarray()))[::-1][:21]
    assert_allclose(got, dense, atol=1e-4)
    assert_allclose(got[:5], 1.0)
    assert got[5] < 1 - 1e-3  # five parts (the lone image one of them): eigenvalue 1 five times, then the spectra
    # each part is asked only for what can reach the top: 21 - 5 parts + 1 of its own
    assert sorted(asked) == [(12, 12), (30, 17), (450, 17), (650, 17)]
    # 21 parts or more: the 21 largest are their eigenvalues 1, and nothing is computed
    asked.clear()
    many = _knn_affinity(rng, (8,) * 21 + (500,), k=5)
    assert_allclose(clustering._sparse_top_eigenvalues(many, 21), 1.0)
    assert asked == []
    assert_allclose(np.sort(np.linalg.eigvalsh(clustering._normalised(many).toarray()))[::-1][:21], 1.0, atol=1e-10)


def test_partition_stability_known_answer():
    """Two groups far apart: every subset is cut the same way (1.0); a cut through one group that
    the data does not show, and random labels, are not."""
    from iastudio.core.clustering import partition_stability

    d, lab = _points(np.array([[0.0, 0.0], [10.0, 0.0]]), [15, 15], spread=0.5, seed=2)
    wrong = np.where(np.arange(30) < 8, 0, 1)  # splits the first group, merges the rest with the second
    noise = np.random.default_rng(0).integers(0, 2, 30)
    s = partition_stability(d, {2: lab}, draws=6)
    assert_allclose(s[2], 1.0)
    assert partition_stability(d, {2: wrong}, draws=6)[2] < 0.8
    assert abs(partition_stability(d, {2: noise}, draws=6)[2]) < 0.3
    assert partition_stability(d[:4, :4], {3: lab[:4]}) == {3: 0.0}  # too few images to re-cut into 3


def test_stable_k_settles_near_ties_by_stability_then_silhouette():
    from iastudio.core.clustering import STABLE_TIE, _near_ties, _stable_k

    sil = {3: 0.66, 4: 0.63, 5: 0.52, 2: 0.41}
    assert _near_ties(sil, 0.04) == [3, 4]
    assert _near_ties(sil, 0.0) == [3]
    assert _stable_k(sil, {3: 0.80, 4: 1.00}) == 4  # clearly more stable wins over a better silhouette
    assert _stable_k(sil, {3: 1.0 - STABLE_TIE / 2, 4: 1.00}) == 3  # equally stable: the better silhouette
    assert _stable_k(sil, {4: None}) == 4  # one candidate: taken


def test_stability_settle_reads_the_true_k_and_reports_it():
    """Three separated groups seen through a flat silhouette tolerance: with every k tied, the most
    stable partition is the true one, and the choice says how stable it was."""
    rng = np.random.default_rng(5)
    d, _lab = _points(rng.standard_normal((3, 6)) * 3.0, [12, 12, 12], spread=0.6, seed=5)
    d *= 0.4 / np.median(d)  # invariant distances of distinct objects: ~0.4-0.8 on unit-norm images
    choice = select_k(d, scales=(1,), min_gap=2.0, near_tie=1.0, settle="stability")  # force the silhouette
    assert choice.method == "silhouette"
    assert choice.k == 3
    assert choice.stability is not None
    assert choice.stability > 0.95
    assert select_k(d, scales=(1,), min_gap=2.0, near_tie=1.0, settle="eigengap").stability is None
    with pytest.raises(ValueError, match="settle"):
        select_k(d, settle="vote")
    with pytest.raises(ValueError, match="settle"):
        read_clusters(d, settle="vote")


def test_unsure_choice_is_reported_as_unsure():
    from iastudio.core.clustering import KChoice

    unsure = KChoice(4, 2, 0.1, "silhouette", [(4, 0.3), (3, 0.29), (5, 0.28)], stability=0.91)
    assert unsure.describe() == "4 clusters \u2014 unsure: 3 or 5 also plausible"
    d = unsure.as_dict()
    assert d["unsure"] is True
    assert d["stability"] == 0.91
    assert KChoice.from_dict(json.loads(json.dumps(d))) == unsure
    # the two best alternatives, named smallest first (the trial read "4 or 2")
    later = KChoice(3, 2, 0.1, "silhouette", [(3, 0.3), (4, 0.29), (2, 0.28), (5, 0.27)])
    assert later.plausible() == [2, 4]
    assert later.describe() == "3 clusters \u2014 unsure: 2 or 4 also plausible"
    sure = KChoice(4, 2, 0.6, "eigengap", [(4, 0.6)])
    assert sure.describe() == "4 clusters"
    assert sure.as_dict()["unsure"] is False
    assert KChoice.from_dict({k: v for k, v in sure.as_dict().items() if k != "stability"}) == sure  # older files
    clear = KChoice(4, 2, 0.1, "silhouette", [(4, 0.3), (3, 0.2)], clear=True)
    assert clear.describe() == "4 clusters"
    assert not clear.unsure
    assert KChoice.from_dict(json.loads(json.dumps(clear.as_dict()))) == clear
    assert KChoice.from_dict({k: v for k, v in clear.as_dict().items() if k != "clear"}).unsure  # before `clear`
    assert KChoice.from_dict({**clear.as_dict(), "clear": "yes"}).unsure  # only a JSON true counts
    with pytest.raises(ValueError, match="malformed"):
        KChoice.from_dict({**d, "stability": 7.0})


def _graph_in_parts(seed=0, per=30, parts=4):
    """A K-neighbour-like graph of ``parts`` separate groups (no edges between them), each a noisy clique."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    n = per * parts
    rows, cols = np.triu_indices(per, 1)
    r = np.concatenate([rows + g * per for g in range(parts)])
    c = np.concatenate([cols + g * per for g in range(parts)])
    d = rng.uniform(0.5, 1.5, r.size)
    return sp.csr_matrix((np.r_[d, d], (np.r_[r, c], np.r_[c, r])), shape=(n, n))


@pytest.mark.parametrize("sparse", [True, False])
def test_the_readouts_shared_affinities_equal_each_scales_own(sparse):
    from iastudio.core.clustering import _affinities, _affinity

    g = _graph_in_parts(seed=1)
    d = g if sparse else g.toarray() + np.where(g.toarray() == 0, 3.0, 0.0) * (1 - np.eye(g.shape[0]))
    shared = _affinities(d)
    for m in (2, 1, 3, 12, 2):  # a scale asked for again, and one beyond NEAREST (its own nearest pairs)
        got, want = shared(m), _affinity(d, m)
        got, want = (got.toarray(), want.toarray()) if sparse else (got, want)
        assert_allclose(got, want, rtol=1e-12)
    assert shared(2) is shared(2)


def test_partitions_fitted_on_threads_equal_the_fits_one_by_one(monkeypatch):
    """Fewer clusters than separate parts: each k is a spectral fit of its own, now on every thread."""
    from iastudio.core import backend, clustering

    a = clustering._affinity(_graph_in_parts(seed=2, parts=5), 2)
    one_by_one = {k: clustering._spectral(a, k) for k in (2, 3, 4)}
    names = []
    real = clustering._spectral

    def spectral(*args):
        import threading

        names.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(clustering, "_spectral", spectral)
    with backend.use_threads(2):
        parts = clustering._partitions(a, range(2, 9))
    for k in (2, 3, 4):
        assert np.array_equal(parts[k], one_by_one[k])
    assert len(names) == 3
    assert all(name.startswith("ia-cuts") for name in names)
    assert [len(set(parts[k].tolist())) for k in range(2, 9)] == list(range(2, 9))


def test_negligible_links_are_dropped_before_the_eigenvalues(monkeypatch):
    """Parts joined only by entries of 1e-14 (a Gaussian affinity at a small scale): dropped, the graph
    falls apart and its eigenvalues 1 need no Lanczos run; they equal the whole dense spectrum's."""
    from iastudio.core import clustering

    rng = np.random.default_rng(5)
    a = _knn_affinity(rng, (30,) * 23, k=5).tolil()
    starts = np.arange(0, 23 * 30, 30)
    for s0, s1 in itertools.pairwise(starts):  # each part's first image linked to the next part's, faintly
        a[s0, s1] = a[s1, s0] = 1e-14
    a = a.tocsr()
    asked = []
    real = clustering._top_eigenvalues
    monkeypatch.setattr(clustering, "_top_eigenvalues", lambda m, k: asked.append((m.shape[0], k)) or real(m, k))
    got = clustering._sparse_top_eigenvalues(a, 21)
    dense = np.sort(np.linalg.eigvalsh(clustering._normalised(a).toarray()))[::-1][:21]
    assert asked == []  # 23 parts once the faint links are gone: the 21 largest are their ones
    assert_allclose(got, dense, atol=1e-10)
    # links above the threshold stay: one part, Lanczos on it
    b = a.tolil()
    for s0, s1 in itertools.pairwise(starts):
        b[s0, s1] = b[s1, s0] = 1e-3
    clustering._sparse_top_eigenvalues(b.tocsr(), 21)
    assert [n for n, _ in asked] == [a.shape[0]]
