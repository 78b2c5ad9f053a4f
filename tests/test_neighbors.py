"""Candidate pruning: invariant features, recall of the true neighbours, sparse W and the pruned run."""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from scipy.sparse.csgraph import connected_components
from sklearn.metrics import adjusted_rand_score

from iastudio.core import se2
from iastudio.core.attention import AttentionRun
from iastudio.core.clustering import (
    MAX_K,
    SCALES,
    _affinity,
    _partitions,
    _spectral,
    eigengaps,
    local_scaling_affinity,
    nearest_pairs,
    read_clusters,
)
from iastudio.core.demos import _digit_images, load_demo
from iastudio.core.neighbors import (
    candidate_pairs,
    invariant_features,
    near_radius,
    nearest_rows,
    probe_pairs,
    pruned_distances,
    resolve_neighbors,
    shared_neighbor_pairs,
    split_probes,
)
from iastudio.core.preprocess import preprocess
from iastudio.core.similarity import invariant_distances, join_pair_results, refine_pairs
from iastudio.core.warp import warp
from iastudio.core.weights import attention_weights, local_bandwidth


@pytest.mark.parametrize("block", [1 << 26, 5_000, 1])
def test_nearest_rows_equals_scikit_learn(block):
    """The device kNN of the candidate search gives scikit-learn's exact neighbours, in its order, blocks or not."""
    from sklearn.neighbors import NearestNeighbors

    rng = np.random.default_rng(3)
    f = rng.normal(size=(300, 24)).astype(np.float32)
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    got = nearest_rows(f, 9, block_elements=block)
    want = NearestNeighbors(n_neighbors=9).fit(f).kneighbors(f, return_distance=False)
    assert_array_equal(got, want)


def test_nearest_rows_breaks_ties_by_index_and_takes_every_row():
    f = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # rows 0, 1, 3 coincide
    assert_array_equal(nearest_rows(f, 3), [[0, 1, 3], [1, 0, 3], [2, 0, 1], [3, 0, 1]])
    assert_array_equal(nearest_rows(f, 4)[2], [2, 0, 1, 3])


def test_resolve_neighbors_rule():
    assert resolve_neighbors("all", 10_000) is None
    assert resolve_neighbors("auto", 300) is None
    assert resolve_neighbors("auto", 301) == 30
    assert resolve_neighbors(10, 500) == 10
    assert resolve_neighbors(10, 11) is None
    with pytest.raises(ValueError, match="neighbors must be at least 1"):
        resolve_neighbors(0, 10)


def test_features_do_not_change_under_rotation_and_shift(shape_images):
    x = shape_images.astype(np.float32)
    tau = se2.random_transforms(3, rotation_range=180, shift_range=5, seed=3)
    moved = np.clip(warp(x, tau), 0, None).astype(np.float32)
    moved /= np.linalg.norm(moved.reshape(3, -1), axis=1)[:, None, None]
    f, g = invariant_features(x), invariant_features(moved)
    same = np.linalg.norm(f - g, axis=1)
    other = np.linalg.norm(f[:, None] - f[None], axis=2)[~np.eye(3, dtype=bool)]
    assert same.max() < 0.25 * other.min()  # a moved copy is far nearer than any other shape


def _turned_digits(classes, per_class, size, rng):
    """Digits turned over the whole circle and shifted by up to 3 px, preprocessed to ``size`` px."""
    orig, _labels = _digit_images(tuple(range(classes)), per_class, rng)
    tau = se2.random_transforms(len(orig), rotation_range=180, shift_range=3, seed=rng)
    return preprocess(list(np.clip(warp(orig, tau), 0, None).astype(np.float32)), size=size).images


@pytest.fixture(scope="module")
def rotated_digits():
    x = _turned_digits(10, 12, 24, np.random.default_rng(1))
    return x, invariant_distances(x)


def test_candidates_recall_the_true_ten_nearest_invariant_neighbours(rotated_digits):
    x, sim = rotated_digits
    n = x.shape[0]
    true = np.argsort(sim.distances + np.diag(np.full(n, np.inf)), axis=1)[:, :10]
    rows, cols = candidate_pairs(x, 30)
    assert (rows < cols).all()
    assert rows.size <= 30 * n
    adj = np.zeros((n, n), dtype=bool)
    adj[rows, cols] = adj[cols, rows] = True
    recall = adj[np.arange(n)[:, None], true].mean()
    assert recall >= 0.95  # measured 0.99 (120 rotated digits, 24 px)


def test_closest_in_rows_known_answer():
    from iastudio.core.clustering import closest_in_rows

    rows, cols = np.array([1, 0, 0, 0, 1]), np.array([2, 3, 1, 2, 0])
    vals = np.array([0.5, 1.0, 1.0, 0.2, 0.5])
    # row 0: column 2 (0.2), then 1 and 3 tie at 1.0 -> column 1; row 1: 0 and 2 tie at 0.5 -> column 0
    assert sorted(closest_in_rows(rows, cols, vals, 2).tolist()) == [0, 2, 3, 4]
    assert sorted(closest_in_rows(rows, cols, vals, 1).tolist()) == [3, 4]
    assert closest_in_rows(rows, cols, vals, 0).size == 0


def test_shared_neighbor_pairs_known_answer():
    # each image's nearest: 0 -> 1, 1 -> 2, 2 -> 1, 3 -> 2, 4 -> 3: the near graph is the path 0-1-2-3-4
    d = sp.csr_matrix(np.array([[0, 1, 5, 0, 0], [1, 0, 0.9, 0, 0], [5, 0.9, 0, 1, 0],
                                [0, 0, 1, 0, 7], [0, 0, 0, 7, 0.]]))
    rows, cols = shared_neighbor_pairs(d, nearest=1)
    # two steps on the near graph: 0-2 (via 1, already aligned), 1-3 (via 2), 2-4 (via 3)
    assert list(zip(rows.tolist(), cols.tolist())) == [(1, 3), (2, 4)]
    done = d.toarray()
    done[1, 3] = done[3, 1] = 2.0
    rows, cols = shared_neighbor_pairs(d, nearest=1, aligned=sp.csr_matrix(done))
    assert list(zip(rows.tolist(), cols.tolist())) == [(2, 4)]
    assert shared_neighbor_pairs(sp.csr_matrix((3, 3)), nearest=2)[0].size == 0  # nothing aligned yet


def test_shared_neighbor_pairs_stay_few_among_identical_images():
    # 600 identical images (every distance 0), each aligned with 30 others: all pick the same few as
    # their nearest; without a bound on the near graph's degree their shared neighbours multiply
    n, k = 600, 30
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(n), k)
    cols = (rows + rng.integers(1, n, rows.size)) % n
    g = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    g = (g + g.T).tocsr()
    g.data[:] = 0.0  # stored zeros: real zero distances
    new_rows, new_cols = shared_neighbor_pairs(g, nearest=4)
    assert new_rows.size <= 40 * n
    assert (new_rows < new_cols).all()
    aligned = set(zip(*sp.triu(g, 1).nonzero())) | set(zip(*sp.triu(g.T, 1).nonzero()))
    assert not aligned & set(zip(new_rows.tolist(), new_cols.tolist()))  # none aligned yet


def test_shared_neighbor_pairs_keep_each_images_shortest_two_step_paths():
    # a random symmetric graph; the near graph and its walks i -> j -> l written out in loops
    from iastudio.core.clustering import nearest_pairs
    from iastudio.core.neighbors import _closest_per_row

    n = 60
    rng = np.random.default_rng(4)
    r = np.repeat(np.arange(n), 6)
    c = rng.integers(0, n, r.size)
    ok = r != c
    g = sp.csr_matrix((rng.random(ok.sum()) + 0.01, (r[ok], c[ok])), shape=(n, n))
    g = g.maximum(g.T).tocsr()
    near = _closest_per_row(nearest_pairs(g, nearest=2), 4).toarray() > 0
    dense = g.toarray()
    best = {}
    for i in range(n):
        for j in np.flatnonzero(near[i]):
            for m in np.flatnonzero(near[j]):
                if m != i and dense[i, m] == 0:
                    key = (min(i, m), max(i, m))
                    best[key] = min(best.get(key, np.inf), dense[i, j] + dense[j, m])
    everything = shared_neighbor_pairs(g, nearest=2, most=1000)
    assert set(zip(everything[0].tolist(), everything[1].tolist())) == set(best)
    want = set()
    for i in range(n):
        mine = sorted((length, other) for (a, b), length in best.items() if i in (a, b) for other in [a + b - i])
        want |= {(min(i, o), max(i, o)) for _, o in mine[:2]}
    rows, cols = shared_neighbor_pairs(g, nearest=2, most=2)
    assert set(zip(rows.tolist(), cols.tolist())) == want
    assert len(want) < len(best)  # the bound takes effect here
    assert (rows < cols).all()
    assert np.all(np.diff(rows * n + cols) > 0)


def test_pruned_graph_finds_neighbours_the_candidates_missed(rotated_digits):
    x, full = rotated_digits
    n = x.shape[0]
    true = np.argsort(full.distances + np.diag(np.full(n, np.inf)), axis=1)[:, :8]
    rows, cols = candidate_pairs(x, 6)  # few candidates: some true neighbours are missed
    adj = np.zeros((n, n), dtype=bool)
    adj[rows, cols] = adj[cols, rows] = True
    sim, graph, sample = pruned_distances(x, 6)
    on_graph = graph.toarray() > 0
    assert (on_graph | ~adj).all()  # every candidate is on the graph
    before, after = adj[np.arange(n)[:, None], true].mean(), on_graph[np.arange(n)[:, None], true].mean()
    assert after >= before + 0.1  # measured 0.67 -> 0.83
    # the graph and the probes never hold less than the exhaustive distances of their pairs (a pair far from
    # both images is not refined), each image's nearest ones exactly those, and nothing is both
    for part in (graph, sample):
        r, c = part.nonzero()
        assert (np.asarray(part[r, c]).ravel() >= full.distances[r, c] - 1e-6).all()
    assert graph.multiply(sample).nnz == 0
    dense = np.where(on_graph, graph.toarray(), np.inf)
    near = np.argsort(dense, axis=1)[:, :4]
    rows4 = np.repeat(np.arange(n), 4)
    assert_allclose(dense[rows4, near.ravel()], full.distances[rows4, near.ravel()], atol=1e-6)
    assert_allclose(sim.transform(rows4, near.ravel()), full.transforms[rows4, near.ravel()], atol=1e-6)


def test_join_pair_results_equals_aligning_the_pairs_together(rotated_digits):
    x = rotated_digits[0][:12]
    a = invariant_distances(x, pairs=([0, 3, 5], [1, 7, 9]))
    b = invariant_distances(x, pairs=([2, 0], [4, 11]))
    both = invariant_distances(x, pairs=([0, 3, 5, 2, 0], [1, 7, 9, 4, 11]))
    joined = join_pair_results(b, a)
    for i in range(2):
        assert_array_equal(joined.pairs[i], both.pairs[i])
    assert_allclose(joined.distances.toarray(), both.distances.toarray(), atol=1e-6)
    assert_allclose(joined.pair_transforms, both.pair_transforms, atol=1e-6)
    with pytest.raises(ValueError, match="share"):
        join_pair_results(a, a)
    with pytest.raises(ValueError, match="candidate pairs"):
        join_pair_results(a, invariant_distances(x[:3]))


def test_pair_list_gives_the_exhaustive_distances_of_those_pairs(rotated_digits):
    x, full = rotated_digits
    x = x[:30]
    full_d = full.distances[:30, :30]
    rows, cols = candidate_pairs(x, 5)
    part = invariant_distances(x, pairs=(cols, rows))  # either order
    assert sp.issparse(part.distances)
    assert part.transforms is None
    assert_allclose(part.distances[rows, cols].A1, full_d[rows, cols], atol=1e-6)
    assert_allclose(part.distances.toarray(), part.distances.toarray().T)
    dense = full.transforms[:30, :30]
    assert_allclose(part.transform(rows, cols), dense[rows, cols], atol=1e-6)
    assert_allclose(part.transform(cols, rows), dense[cols, rows], atol=1e-6)
    assert_array_equal(part.transform([3], [3]), np.zeros((1, 3)))  # itself: the identity


def test_sparse_weights_known_answer():
    d = sp.csr_matrix(np.array([[0, 0.5, 0], [0.5, 0, 1.0], [0, 1.0, 0]]))
    w, beta = attention_weights(d, beta=2.0)
    g = np.array([[1, np.exp(-0.5), 0], [np.exp(-0.5), 1, np.exp(-2.0)], [0, np.exp(-2.0), 1]])
    assert sp.issparse(w)
    assert beta == 2.0
    assert_allclose(w.toarray(), g / g.sum(axis=0))
    # beta="auto" on a graph: s_i is the distance to the i-th image's nearest candidate (m = 1)
    w, beta = attention_weights(d, neighbor=1)
    s = np.array([0.5, 0.5, 1.0])
    g = np.array([[1, np.exp(-0.25 / 0.25), 0], [np.exp(-0.25 / 0.25), 1, np.exp(-1.0 / 0.5)],
                  [0, np.exp(-1.0 / 0.5), 1]])
    assert_allclose(w.toarray(), g / g.sum(axis=0))
    assert_allclose(beta, 1.0 / np.median(s**2))
    assert_allclose(local_bandwidth(d, neighbor=2), [0.5, 1.0, 1.0])  # fewer neighbours: the farthest one


def _knn_graph(d, k):
    """The K-nearest-neighbour graph of dense distances, symmetrised (what a pruned run keeps)."""
    n = len(d)
    near = np.argsort(d + np.diag(np.full(n, np.inf)), axis=1)[:, :k]
    rows, cols = np.repeat(np.arange(n), k), near.ravel()
    g = sp.csr_matrix((d[rows, cols], (rows, cols)), shape=(n, n))
    return g.maximum(g.T).tocsr()


def test_sparse_eigengaps_match_the_dense_ones_on_a_complete_graph():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(40, 3))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    full = sp.csr_matrix(d)  # every pair stored
    assert_allclose(eigengaps(local_scaling_affinity(full, neighbor=2), max_k=10),
                    eigengaps(local_scaling_affinity(d, neighbor=2))[:10], atol=1e-8)


def test_sparse_read_out_keeps_small_classes_apart():
    # twelve classes of 3 images on a 5-neighbour graph: each class must stay one cluster
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(12, 6)) * 0.5
    pts = np.repeat(centres, 3, axis=0) + rng.normal(size=(36, 6)) * 0.02
    truth = np.repeat(np.arange(12), 3)
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    g = _knn_graph(d, 5)
    labels, choice = read_clusters(g)
    assert choice.k == 12
    assert not choice.unsure
    assert adjusted_rand_score(truth, labels) == 1.0
    given, _ = read_clusters(g, k=12)
    assert adjusted_rand_score(truth, given) == 1.0


@pytest.mark.parametrize(("name", "k"), [("shapes", 8), ("digits", 12), ("digits", 8)])
def test_pruned_run_agrees_with_the_exhaustive_run(name, k):
    # digits with K = 8 (classes of 10): without the probes the silhouette filled the pairs off the
    # graph at a lower bound and read 8 clusters (ARI 0.59 against 0.93)
    s = load_demo(name, seed=0)
    x = preprocess(s.images, size=32).images
    full = AttentionRun(x, backend="numpy", neighbors="all").run()
    pruned = AttentionRun(x, backend="numpy", neighbors=k).run()
    assert abs(adjusted_rand_score(s.labels, pruned.labels) - adjusted_rand_score(s.labels, full.labels)) <= 0.01
    assert pruned.weights.shape == (len(x), len(x))  # dense view at this size; zeros off the graph
    assert (pruned.weights > 0).sum() < len(x) ** 2  # zeros off the K-neighbour graph
    assert_allclose(pruned.weights.sum(axis=0), 1.0, atol=1e-5)


@pytest.mark.gpu
def test_candidate_search_on_cupy_finds_scikit_learns_neighbours(gpu):
    """On a GPU the feature neighbours come from :func:`nearest_rows` on the device, not scikit-learn."""
    x = preprocess(load_demo("digits", seed=0).images, size=32).images
    rows, cols = candidate_pairs(x, 8)
    g_rows, g_cols = candidate_pairs(gpu.xp.asarray(x), 8)
    ours, theirs = set(zip(g_rows.tolist(), g_cols.tolist())), set(zip(rows.tolist(), cols.tolist()))
    # float32 products on the card against scikit-learn's distances: a near tie at the edge may swap
    assert len(ours & theirs) / len(ours | theirs) > 0.98


@pytest.mark.gpu
def test_pruned_run_on_cupy_gives_the_numpy_labels(gpu):
    s = load_demo("digits", seed=0)
    x = preprocess(s.images, size=32).images
    a = AttentionRun(x, backend="numpy", neighbors=12).run()
    b = AttentionRun(x, backend=gpu, neighbors=12).run()
    assert_array_equal(b.labels, a.labels)  # measured on an H200 (benchmarks/gpu_check.py)
    assert np.abs(b.input_distances - a.input_distances).max() < 1e-3


def test_cli_neighbors_option(tmp_path, capsys):
    import json

    from iastudio.core.cli import main

    out = tmp_path / "o"
    assert main(["demo:shapes", "--size", "24", "--iterations", "1", "--neighbors", "6", "--quiet",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parameters"]["neighbors"] == 6
    assert summary["metrics"]["ari"] == 1.0
    w = np.load(out / "weights.npy", allow_pickle=False)
    assert w.shape == (18, 18)
    assert (w > 0).sum() < 18 * 18
    with pytest.raises(SystemExit) as err:
        main(["demo:shapes", "--neighbors", "0"])
    assert err.value.code == 2
    assert "--neighbors must be at least 1" in capsys.readouterr().err


def test_sparse_read_out_counts_every_separate_class():
    # 16 well-separated classes of 40: the K-neighbour graph falls apart into 16 parts, each with an
    # eigenvalue 1 -- one Lanczos run over the whole graph missed some of them (k = 11 or 12)
    rng = np.random.default_rng(2)
    truth = np.repeat(np.arange(16), 40)
    pts = rng.normal(size=(16, 12))[truth] * 3.0 + rng.normal(size=(640, 12)) * 0.1
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1) / 10.0
    g = _knn_graph(d, 10)
    rows, cols = sp.triu(g, 1).nonzero()
    probes = probe_pairs((rows, cols), len(d))  # what a pruned run aligns besides its candidates
    sample = sp.csr_matrix((d[probes], probes), shape=d.shape)
    labels, choice = read_clusters(g, probes=sample + sample.T)
    assert choice.k == 16
    assert adjusted_rand_score(truth, labels) == 1.0


def _near_copies():
    """4 classes of 30 images, each image with three near-copies: distances (480, 480) and classes."""
    rng = np.random.default_rng(3)
    cls = np.repeat(np.arange(4), 30)
    base = rng.normal(size=(4, 10))[cls] * 0.15 + rng.normal(size=(120, 10)) * 0.03
    pts = np.repeat(base, 4, axis=0) + rng.normal(size=(480, 10)) * 0.001
    return np.linalg.norm(pts[:, None] - pts[None], axis=-1), np.repeat(cls, 4)


def test_sparse_read_out_sees_classes_through_near_duplicates():
    # every image has three near-copies (invariant distance ~0.003, under the bandwidth floor): at the
    # neighbour scales 1-3 the graph falls apart into quadruplets; the wider scales still find the 4 classes
    d, truth = _near_copies()
    labels, choice = read_clusters(_knn_graph(d, 30))
    assert choice.k == 4
    assert adjusted_rand_score(truth, labels) == 1.0


def test_a_graph_that_holds_together_without_a_gap_goes_to_the_silhouette_like_dense_distances():
    # 8 overlapping clouds: no eigengap of even 0.05 at the scales 1-3, but the graph does not fall apart
    # there (no near-copies).  The wider scales are for graphs that do: here one of them showed a weak
    # gap at k = 8 and the graph disagreed with the dense read-out (k = 4 by silhouette).  With every
    # pair off the graph a probe the estimate pools each cluster pair's probes (not exact per image:
    # 0.41 against 0.37 at k = 4), but it ranks k = 4 first here too, by ~0.05: the dense k and labels
    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(8), 30)
    pts = rng.standard_normal((8, 6))[truth] + rng.standard_normal((240, 6)) * 0.5
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    d *= 0.45 / np.median(d[np.triu_indices(240, 1)])
    g = _knn_graph(d, 30)
    off = g.toarray() == 0
    np.fill_diagonal(off, False)
    dense_labels, dense = read_clusters(d)
    labels, choice = read_clusters(g, probes=sp.csr_matrix(np.where(off, d, 0.0)))
    assert dense.method == choice.method == "silhouette"
    assert choice.k == dense.k == 4
    assert_array_equal(labels, dense_labels)


def test_a_graph_in_parts_that_hold_two_classes_gives_the_dense_partitions():
    # 12 unequal classes, three small ones next to bigger ones: the nearest-8 graph falls into 9 parts.
    # One Lanczos run over such a graph missed some of its repeated eigenvalues 1, and its partitions
    # for k > 9 split a big class instead of a part holding two (the read-out then took another k than
    # the dense one on 5 of 6 such sets); embedded part by part, every k gives the dense partition
    rng = np.random.default_rng(0)
    sizes = [60, 50, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5]
    centres = rng.standard_normal((12, 8)) * 3.0
    for small, big in ((10, 3), (11, 4), (9, 8)):
        centres[small] = centres[big] + rng.standard_normal(8) * 0.6
    truth = np.repeat(np.arange(12), sizes)
    pts = centres[truth] + rng.standard_normal((truth.size, 8)) * 0.12
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    g = _knn_graph(d, 30)
    off = g.toarray() == 0
    np.fill_diagonal(off, False)
    assert connected_components(_affinity(g, 2), directed=False)[0] == 9
    dense_parts, graph_parts = _partitions(_affinity(d, 2), range(9, 16)), _partitions(_affinity(g, 2), range(9, 16))
    for k in range(10, 16):  # above the parts (at 9 itself, eigenvalues within 1e-15 of 1 are tied)
        assert_array_equal(graph_parts[k], dense_parts[k])
    dense_labels, dense = read_clusters(d)
    labels, choice = read_clusters(g, probes=sp.csr_matrix(np.where(off, d, 0.0)))
    assert choice.k == dense.k
    assert_array_equal(labels, dense_labels)


def test_graph_silhouette_fills_the_missing_pairs_known_answer():
    # a pair off the graph counts at max(r_i, r_j), r_i = image i's farthest computed distance;
    # on a complete graph that is the dense silhouette
    from sklearn.metrics import silhouette_score

    from iastudio.core.clustering import silhouette

    rng = np.random.default_rng(5)
    pts = rng.normal(size=(40, 3))
    pts[:20] += 4.0
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    labels = np.repeat([0, 1], 20)
    labels[:4] = 2
    assert_allclose(silhouette(sp.csr_matrix(d), labels), silhouette_score(d, labels, metric="precomputed"))
    g = _knn_graph(d, 6)
    on = g.toarray() > 0
    r = np.where(on, d, 0.0).max(axis=1)
    filled = np.where(on, d, np.maximum(r[:, None], r[None, :]))
    np.fill_diagonal(filled, 0.0)
    assert_allclose(silhouette(g, labels), silhouette_score(filled, labels, metric="precomputed"))
    every_other = sp.csr_matrix(np.where(on, 0.0, d))  # every pair off the graph probed: exact
    assert_allclose(silhouette(g, labels, probes=every_other), silhouette_score(d, labels, metric="precomputed"))


def test_ambiguous_sparse_read_out_follows_the_dense_rules():
    # overlapping clouds: no clear eigengap, so the dense path picks k by silhouette; on the complete
    # graph the sparse path must give the same k and labels, with k found and with k given
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((4, 6)) * 0.6
    truth = np.repeat(np.arange(4), 15)
    pts = centres[truth] + rng.standard_normal((60, 6)) * 0.5
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    d *= 0.45 / np.median(d[np.triu_indices(60, 1)])
    dense_labels, dense = read_clusters(d)
    assert dense.method == "silhouette"
    full_labels, full = read_clusters(sp.csr_matrix(d))
    assert (full.k, full.method) == (dense.k, dense.method)
    assert adjusted_rand_score(dense_labels, full_labels) == 1.0
    a, given = read_clusters(d, k=4)
    b, sparse_given = read_clusters(sp.csr_matrix(d), k=4)
    assert sparse_given.scale == given.scale
    assert adjusted_rand_score(a, b) == 1.0


def test_sparse_read_out_with_k_given_skips_bandwidths_that_fall_apart():
    # near-copies: at the neighbour scales 1-3 the graph is hundreds of separate quadruplets, and a
    # spectral partition of it into k = 4 split off a few of them (ARI ~0); a wider scale is used instead
    d, truth = _near_copies()
    labels, choice = read_clusters(_knn_graph(d, 30), k=4)
    assert choice.scale > 3
    assert adjusted_rand_score(truth, labels) == 1.0


def test_probe_pairs_are_random_pairs_off_the_graph():
    rows, cols = candidate_pairs(preprocess(load_demo("shapes", seed=0).images, size=24).images, 3)
    n = 18
    p_rows, p_cols = probe_pairs((rows, cols), n, per_image=4, at_least=0)
    assert (p_rows < p_cols).all()
    assert p_rows.size <= 4 * n
    assert p_rows.size > n
    assert not set(zip(p_rows.tolist(), p_cols.tolist())) & set(zip(rows.tolist(), cols.tolist()))
    again = probe_pairs((rows, cols), n, per_image=4, at_least=0)
    assert_array_equal(again[0], p_rows)  # reproducible
    assert_array_equal(again[1], p_cols)
    assert probe_pairs((rows, cols), 1)[0].size == 0


def test_probe_pairs_keep_a_minimum_sample():
    graph = (np.array([0, 0, 1]), np.array([1, 2, 2]))
    rows, cols = probe_pairs(graph, 18, at_least=200)  # 150 pairs off the graph, fewer than 200: all of them
    assert rows.size == 18 * 17 // 2 - 3
    assert (0, 1) not in set(zip(rows.tolist(), cols.tolist()))
    rows, cols = probe_pairs(graph, 400, per_image=2, at_least=4000)  # 10 partners drawn per image
    assert 3500 < rows.size <= 4000


def test_split_probes_known_answer():
    rows, cols = np.array([0, 1, 0, 2, 1, 2, 0, 3, 2, 3]), np.array([1, 0, 2, 0, 2, 1, 3, 0, 3, 2])
    vals = np.array([0.5, 0.5, 0.0, 0.0, 0.7, 0.7, 2.0, 2.0, 0.9, 0.9])  # 0 -- 2: a stored zero, a real 0 distance
    d = sp.csr_matrix((vals, (rows, cols)), shape=(4, 4))
    graph, sample = split_probes(d, (np.array([0]), np.array([3])))
    assert_allclose(sample.toarray()[[0, 3], [3, 0]], [2.0, 2.0])
    assert sample.nnz == 2
    assert graph.nnz == d.nnz - 2 == 8
    assert graph[0, 3] == 0
    assert_allclose((graph + sample).toarray(), d.toarray())


def test_graph_silhouette_estimates_the_pairs_off_the_graph_from_probes():
    # two clusters 1.0 apart (every pair across), tight inside: the graph holds the pairs inside and a
    # few across; probes sample the rest across, so the estimate is exact -- the dense silhouette.
    # Filling them at max(r_i, r_j) (the farthest computed distance) instead under-rates the partition.
    from sklearn.metrics import silhouette_score

    from iastudio.core.clustering import silhouette

    rng = np.random.default_rng(1)
    labels = np.repeat([0, 1], 10)
    d = np.where(labels[:, None] == labels[None, :], rng.uniform(0.1, 0.3, (20, 20)), 1.0)
    d = np.triu(d, 1) + np.triu(d, 1).T
    on = labels[:, None] == labels[None, :]
    on[0, 10] = on[10, 0] = True  # one pair across on the graph
    probe = np.zeros_like(on)
    probe[[1, 2, 3], [12, 15, 19]] = True
    probe |= probe.T
    graph, sample = sp.csr_matrix(np.where(on, d, 0.0)), sp.csr_matrix(np.where(probe, d, 0.0))
    dense = silhouette_score(d, labels, metric="precomputed")
    assert_allclose(silhouette(graph, labels, probes=sample), dense)
    assert silhouette(graph, labels) < dense - 0.1


def test_threshold_and_split_work_on_a_graph():
    # a run above 2,000 images keeps its distances sparse: re-reading at a threshold follows the
    # graph's edges (single linkage along them), and splitting a cluster reads its members' graph
    from iastudio.core.clustering import labels_at_threshold, split_labels

    rng = np.random.default_rng(4)
    truth = np.repeat(np.arange(3), 12)
    pts = rng.normal(size=(3, 5))[truth] * 4.0 + rng.normal(size=(36, 5)) * 0.2
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    full = sp.csr_matrix(d)
    assert_array_equal(labels_at_threshold(full, threshold=2.0), labels_at_threshold(d, threshold=2.0))
    assert adjusted_rand_score(truth, labels_at_threshold(_knn_graph(d, 4), threshold=2.0)) == 1.0
    members = np.flatnonzero(truth < 2)
    assert adjusted_rand_score(truth[members], split_labels(_knn_graph(d, 6), members, k=2)) == 1.0


def test_nearest_pairs_known_answer_dense_and_sparse():
    # points on a line at 0, 1, 3, 10 and a copy of the first (distance 0): each keeps its nearest one
    x = np.array([0.0, 1.0, 3.0, 10.0, 0.0])
    d = np.abs(np.subtract.outer(x, x))
    mask = nearest_pairs(d, nearest=1)
    expect = {(0, 4), (1, 0), (2, 1), (3, 2)}  # 0 <-> its copy 4, 1 -> 0, 3 -> 1, 10 -> 3
    want = np.eye(5, dtype=bool)
    for i, j in expect:
        want[i, j] = want[j, i] = True
    assert_array_equal(mask, want)
    rows, cols = np.nonzero(~np.eye(5, dtype=bool))
    g = sp.csr_matrix((d[rows, cols], (rows, cols)), shape=d.shape)  # every pair stored, 0 <-> 4 a stored zero
    kept = nearest_pairs(g, nearest=1)
    assert_array_equal(kept.toarray() > 0, want & ~np.eye(5, dtype=bool) & (d > 0))
    assert kept[0, 4] == 0.0
    assert kept.nnz == 2 * len(expect)
    # the read-out's affinity is 0 off those pairs, the same from dense distances and from the graph
    a = local_scaling_affinity(d, neighbor=1, nearest=1)
    assert_allclose(local_scaling_affinity(kept, neighbor=1).toarray(), a)
    assert (a[~want] == 0).all()
    assert (a[want] > 0).all()


def test_read_out_sees_the_same_affinity_on_the_graph_as_on_every_pair(rotated_digits):
    # 120 rotated digits: within- and between-class distances overlap, so the many small affinities of
    # far pairs used to tip the dense spectral partition away from the graph's.  The read-out keeps
    # each image's nearest 8 on both paths: a graph holding those gives the same spectrum and partition
    x, sim = rotated_digits
    d, n = sim.distances, x.shape[0]
    graph = _knn_graph(d, 30)
    for m in SCALES:
        dense_aff, graph_aff = _affinity(d, m), _affinity(graph, m)
        assert (dense_aff > 0).sum() < 0.2 * n * n  # a sparse nearest-neighbour graph, not every pair
        assert_allclose(graph_aff.toarray(), dense_aff)
        assert_allclose(eigengaps(graph_aff), eigengaps(dense_aff)[:MAX_K], atol=1e-3)
        assert adjusted_rand_score(_spectral(dense_aff, 10), _spectral(graph_aff, 10)) == 1.0


def test_near_radius_is_each_images_nth_nearest_distance_times_the_margin():
    d = np.array([[0, 1, 2, 4], [1, 0, 3, 0], [2, 3, 0, 5], [4, 0, 5, 0]], float)
    r, c = d.nonzero()
    r, c = np.append(r, 1), np.append(c, 1)  # a stored zero on the diagonal is not a neighbour
    g = sp.csr_matrix((d[r, c], (r, c)), shape=d.shape)
    assert g.nnz == 11
    assert_allclose(near_radius(g, nearest=2, margin=1.5), [3.0, 4.5, 4.5, 7.5])
    assert_allclose(near_radius(g, nearest=1, margin=1.0), [1.0, 1.0, 2.0, 4.0])
    assert np.isinf(near_radius(g, nearest=3, margin=1.0)[[1, 3]]).all()  # fewer than 3 pairs


def test_refine_pairs_refines_the_selected_pairs_as_the_full_alignment_does(rotated_digits):
    x, _ = rotated_digits
    rng = np.random.default_rng(3)
    rows, cols = rng.integers(0, x.shape[0], 60), rng.integers(0, x.shape[0], 60)
    coarse = invariant_distances(x, pairs=(rows, cols), refine_steps=0)
    full = invariant_distances(x, pairs=(rows, cols))
    r, c = coarse.pairs
    select = np.arange(r.size) % 3 == 0
    fine = refine_pairs(x, coarse, select)
    d_coarse, d_full, d_fine = (np.asarray(m.distances[r, c]).ravel() for m in (coarse, full, fine))
    assert_allclose(d_fine[select], d_full[select], atol=1e-6)
    assert_allclose(fine.pair_transforms[select], full.pair_transforms[select], atol=1e-6)
    assert_array_equal(d_fine[~select], d_coarse[~select])
    assert (d_fine <= d_coarse + 1e-9).all()
    assert (d_coarse[select] > d_full[select] + 1e-4).any()  # the refinement did move them
    with pytest.raises(ValueError, match="one entry per pair"):
        refine_pairs(x, coarse, select[:-1])


@pytest.fixture(scope="module")
def digits_48():
    """Rotated digits on 48-px canvases: sizes the translation search and the refinement bin."""
    rng = np.random.default_rng(4)
    x = _turned_digits(5, 6, 48, rng)
    rows, cols = rng.integers(0, x.shape[0], 80), rng.integers(0, x.shape[0], 80)
    return x, invariant_distances(x, pairs=(rows, cols), refine_steps=0), invariant_distances(x, pairs=(rows, cols))


def test_refine_pairs_on_binned_sizes_steps_on_the_binned_images_to_the_same_distances(digits_48, monkeypatch):
    from iastudio.core import similarity

    x, coarse, full = digits_48
    assert similarity._search_bin(*x.shape[1:3]) == 2
    sizes = []
    refine = similarity._refine_in_blocks

    def spy(images, *args):
        sizes.append(images.shape[1])
        return refine(images, *args)

    monkeypatch.setattr(similarity, "_refine_in_blocks", spy)
    r, c = coarse.pairs
    select = np.arange(r.size) % 2 == 0
    fine = refine_pairs(x, coarse, select)
    assert sizes == [24]  # the steps on the binned images only
    d_coarse, d_full, d_fine = (np.asarray(m.distances[r, c]).ravel() for m in (coarse, full, fine))
    assert (d_fine <= d_coarse + 1e-9).all()
    assert_array_equal(d_fine[~select], d_coarse[~select])
    # the distances of the refinement on the images themselves, to a few times its stopping rule (5e-4 of d)
    ratio = d_fine[select] / d_full[select]
    assert (ratio <= 1.005).all()
    assert np.median(np.abs(ratio - 1.0)) < 1e-3
    assert (d_coarse[select] > d_full[select] * 1.001).mean() > 0.5  # and the refinement did move them
    # the distance is the images' own residual at the transform found
    warped = warp(x, fine.pair_transforms[select][:5], index=r[select][:5])
    assert_allclose(d_fine[select][:5], np.linalg.norm((warped - x[c[select][:5]]).reshape(5, -1), axis=1),
                    rtol=1e-5)


def test_estimated_distances_are_the_binned_images_residual_at_the_grid_transform(digits_48):
    from iastudio.core import similarity

    x, coarse, _ = digits_48
    r, c = coarse.pairs
    est = invariant_distances(x, pairs=(r, c), refine_steps=0, estimate=True)
    assert_array_equal(est.pair_transforms, coarse.pair_transforms)  # the same grid search
    assert similarity._search_bin(*x.shape[1:3]) == 2
    binned = similarity._binned(x, 2)
    at = coarse.pair_transforms.copy()
    at[:, 1:] /= 2  # the binned images' pixels
    warped = warp(binned, at, index=r)
    expect = 2.0 * np.linalg.norm((warped - binned[c]).reshape(r.size, -1), axis=1)
    d_est, d_coarse = (np.asarray(m.distances[r, c]).ravel() for m in (est, coarse))
    assert_allclose(d_est, expect, rtol=1e-5, atol=1e-7)
    ratio = d_est / d_coarse
    assert 0.9 < np.median(ratio) < 1.0  # near the images' own
    assert np.ptp(np.percentile(ratio, [5, 95])) < 0.08
    with pytest.raises(ValueError, match="refine_steps=0"):
        invariant_distances(x, pairs=(r, c), estimate=True)


def test_refine_pairs_of_estimates_computes_every_distance_on_the_images(digits_48):
    x, coarse, _ = digits_48
    r, c = coarse.pairs
    est = invariant_distances(x, pairs=(r, c), refine_steps=0, estimate=True)
    select = np.arange(r.size) % 2 == 0
    fine = refine_pairs(x, est, select, estimated=True)
    exact = refine_pairs(x, coarse, select)
    d_fine, d_exact, d_coarse = (np.asarray(m.distances[r, c]).ravel() for m in (fine, exact, coarse))
    # the pairs left: the images' residual at the grid transform, as without estimates
    assert_allclose(d_fine[~select], d_coarse[~select], rtol=1e-6)
    assert_array_equal(fine.pair_transforms[~select], coarse.pair_transforms[~select])
    # the refined ones: the images' residual at the binned steps' transform, taken even where it is worse
    kept = d_exact[select] < d_coarse[select]
    assert kept.any()
    assert_allclose(d_fine[select][kept], d_exact[select][kept], rtol=1e-6)
    warped = warp(x, fine.pair_transforms[select], index=r[select])
    assert_allclose(d_fine[select], np.linalg.norm((warped - x[c[select]]).reshape(select.sum(), -1), axis=1),
                    rtol=1e-5)


def test_pruned_distances_on_binned_sizes_are_the_images_residuals(monkeypatch):
    from iastudio.core import neighbors

    x = _turned_digits(5, 24, 48, np.random.default_rng(5))  # 48 px: binned; enough pairs left unrefined
    ratios = []
    ratio = neighbors._estimate_ratio
    monkeypatch.setattr(neighbors, "_estimate_ratio", lambda *a: ratios.append(ratio(*a)) or ratios[-1])
    sim, _, _ = pruned_distances(x, 30)  # 30 candidates: far ones too, left unrefined
    r, c = sim.pairs
    warped = warp(x, sim.pair_transforms, index=r)
    # every distance is the images' own residual at its transform, never the binned estimate
    assert_allclose(np.asarray(sim.distances[r, c]).ravel(),
                    np.linalg.norm((warped - x[c]).reshape(r.size, -1), axis=1), rtol=1e-5, atol=1e-7)
    assert len(ratios) == 1
    assert 0.9 < ratios[0] < 1.0  # the binned estimates are a little below the images' residual


def test_estimate_ratio_is_the_median_over_the_pairs_both_have():
    from iastudio.core.neighbors import _estimate_ratio
    from iastudio.core.similarity import SimilarityResult

    n = 30
    rows, cols = np.triu_indices(n, 1)
    exact_d = np.linspace(0.5, 1.0, rows.size)
    factor = np.where(np.arange(rows.size) % 3 == 0, 0.9, 0.95)

    def result(d):
        m = sp.csr_matrix((d, (rows, cols)), shape=(n, n))
        return SimilarityResult(distances=(m + m.T).tocsr(), transforms=None, pairs=(rows, cols),
                                pair_transforms=np.zeros((rows.size, 3)))

    both = np.ones(rows.size, dtype=bool)
    assert _estimate_ratio(result(exact_d * factor), result(exact_d), both) == pytest.approx(0.95)
    both[:] = False
    both[::3] = True
    assert _estimate_ratio(result(exact_d * factor), result(exact_d), both) == pytest.approx(0.9)
    both[20:] = False  # 7 pairs: too few to tell
    assert _estimate_ratio(result(exact_d * factor), result(exact_d), both) == 1.0


def test_refine_pairs_keeps_the_grid_transform_where_the_binned_steps_lead_off(digits_48, monkeypatch):
    from iastudio.core import similarity

    x, coarse, _ = digits_48
    rng = np.random.default_rng(0)
    # coarse images of other digits: their steps lead anywhere
    monkeypatch.setattr(similarity, "_binned", lambda images, b: rng.permutation(images[:, ::b, ::b]))
    r, c = coarse.pairs
    fine = refine_pairs(x, coarse, np.ones(r.size, dtype=bool), steps=1)
    d_coarse, d_fine = (np.asarray(m.distances[r, c]).ravel() for m in (coarse, fine))
    assert (d_fine <= d_coarse + 1e-9).all()
    stayed = d_fine == d_coarse
    assert stayed.any()  # some pairs kept the grid search's distance ...
    assert_array_equal(fine.pair_transforms[stayed], coarse.pair_transforms[stayed])  # ... and its transform


def test_the_pruned_path_prepares_its_images_once_for_both_stages(rotated_digits, monkeypatch):
    from iastudio.core import similarity

    x, _ = rotated_digits
    made = []
    real = similarity._Aligner

    class Counted(real):
        def __init__(self, images, **opts):
            made.append(images.shape)
            super().__init__(images, **opts)

    monkeypatch.setattr(similarity, "_Aligner", Counted)
    pruned_distances(x, 10)
    assert made == [x.shape]  # the candidates and the shared-neighbour pairs: one preparation
    assert getattr(similarity._SHARED, "aligners", None) is None  # dropped after the block
    invariant_distances(x, pairs=([0], [1]))
    invariant_distances(x, pairs=([0], [1]))
    assert len(made) == 3  # outside the block every call prepares its own


def test_the_pruned_path_refines_only_near_pairs_and_keeps_every_images_nearest(rotated_digits):
    x, full = rotated_digits
    _, graph, sample = pruned_distances(x, 30)
    r, c = graph.nonzero()
    got, exact = np.asarray(graph[r, c]).ravel(), full.distances[r, c]
    assert (got >= exact - 1e-6).all()
    assert (got > exact + 1e-4).mean() > 0.1  # far pairs were left at the grid search's distance
    pr, pc = sample.nonzero()  # the probes, which the read-out's silhouettes average over, are all refined
    assert_allclose(np.asarray(sample[pr, pc]).ravel(), full.distances[pr, pc], atol=1e-6)
    on_graph = graph.toarray() > 0
    mine = np.argsort(np.where(on_graph, graph.toarray(), np.inf), axis=1)[:, :8]
    theirs = np.argsort(np.where(on_graph, full.distances, np.inf), axis=1)[:, :8]
    same = [set(a) == set(b) for a, b in zip(mine, theirs)]
    assert np.mean(same) >= 0.95
