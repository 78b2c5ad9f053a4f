"""The invariant means of clusters a person made (core/cluster_means.py) and how the views use them."""
import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import sparse

from iastudio.core.cluster_means import cluster_invariant_means, cluster_key, medoid
from iastudio.core.demos import load_demo
from iastudio.core.frames import FrameBuilder
from iastudio.core.preprocess import preprocess
from iastudio.core.session import Session, stream_run
from iastudio.core.similarity import invariant_distances


@pytest.fixture(scope="module")
def shapes():
    d = load_demo("shapes")
    return preprocess(d.images, size=32).images, np.asarray(d.labels)


def test_medoid_is_the_member_closest_to_the_others():
    d = np.array([[0, 1, 2, 9], [1, 0, 1, 9], [2, 1, 0, 9], [9, 9, 9, 0]], float)
    assert medoid([0, 1, 2], d) == 1
    assert medoid([0, 1, 2, 3], d) == 1
    assert medoid([3, 2], d) == 3  # two members: the first
    assert medoid([2, 0, 1], None) == 2
    graph = sparse.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]], float))
    assert medoid([0, 1, 2, 3], graph) == 1  # the most ties on a pruned graph


def test_cluster_key_ignores_order_and_repeats():
    assert cluster_key([3, 1, 2]) == cluster_key(np.array([1, 2, 3, 3]))
    assert cluster_key([1, 2]) != cluster_key([1, 3])


def test_the_mean_of_turned_copies_is_the_shape_not_a_smear(shapes):
    images, labels = shapes
    members = np.flatnonzero(labels == labels[0])
    means = cluster_invariant_means(images, [members, members[:1]])
    assert means.shape == (2, *images.shape[1:])
    assert_allclose(means[1], images[members[0]])  # one member: that image
    smear = images[members].mean(axis=0)
    d = invariant_distances(np.stack([means[0], images[members[0]], smear / np.linalg.norm(smear)])).distances
    assert d[0, 1] < 0.05  # the shape itself (a copy of it, up to pose)
    assert d[2, 1] > 0.3  # where the plain average of the turned copies is far from it
    with pytest.raises(ValueError, match="no images"):
        cluster_invariant_means(images, [np.array([], int)])


def test_an_edited_cluster_gets_its_own_invariant_mean(shapes):
    s = Session(size=24)
    s.load_demo("shapes")
    run = s.start(backend="numpy", iterations=1, clusters=3)
    for item in stream_run(run, FrameBuilder()):
        s.take(item)
    assert s.missing_cluster_means() == []  # the run's own clusters have their means
    labels = np.asarray(s.book.labels)
    target = int(labels[0])
    moved = int(np.flatnonzero(labels != target)[0])
    assert s.move_images([moved], target)
    missing = s.missing_cluster_means()
    assert len(missing) == 2
    assert any(moved in m for m in missing)
    means = cluster_invariant_means(s.working, missing, **s.alignment_options())
    s.set_cluster_means(missing, means)
    assert s.missing_cluster_means() == []
    s.discard_run()
    assert s.cluster_means == {}
