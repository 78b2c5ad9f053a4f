import numpy as np
import pytest

from core.clustering import cluster_labels, eigengap_k, grouping_order, relabel_by_appearance
from core.weights import attention_weights, auto_beta, column_normalize, rbf_similarity


def test_columns_sum_to_one_and_rbf_known_answer():
    d = np.array([[0, 1.0], [1.0, 0]])
    g = rbf_similarity(d, 2.0)
    assert g[0, 1] == pytest.approx(np.exp(-2.0))
    w = column_normalize(g)
    assert np.allclose(w.sum(axis=0), 1.0)
    assert w[0, 1] == pytest.approx(np.exp(-2) / (1 + np.exp(-2)))
    with pytest.raises(ValueError):
        rbf_similarity(d, 0)


def test_auto_beta_rule():
    # 16 points: k = ceil(sqrt(16)/2) = 2; every point's 2nd neighbour at distance 0.5
    x = np.arange(16) * 0.5
    d = np.abs(x[:, None] - x[None, :])
    assert auto_beta(d) == pytest.approx(1 / 0.25)  # edge points' 2nd neighbour is at 1.0 but median is 0.5
    assert auto_beta(d * 1e-3) == pytest.approx(50.0)  # floor keeps the kernel from becoming too sharp
    w, b = attention_weights(d, "auto")
    assert b == auto_beta(d) and np.allclose(w.sum(0), 1)


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
    with pytest.raises(ValueError):
        cluster_labels(np.eye(3), k=4)


def test_two_images_together_or_apart():
    assert eigengap_k(np.array([[1.0, 0.9], [0.9, 1.0]])) == 1
    assert eigengap_k(np.array([[1.0, 0.01], [0.01, 1.0]])) == 2
    assert eigengap_k(np.array([[1.0]])) == 1
