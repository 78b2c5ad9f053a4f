"""Known answers of the manifold map: classical MDS and its Procrustes alignment."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.embedding import classical_mds, procrustes_align


def _pairwise(points):
    return np.linalg.norm(points[:, None] - points[None], axis=-1)


def _rotation(deg):
    t = np.deg2rad(deg)
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def test_mds_reproduces_planar_points_up_to_rotation():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(12, 2)) * [3.0, 1.0]  # unequal spread: two distinct eigenvalues
    xy = classical_mds(_pairwise(pts))
    assert xy.shape == (12, 2)
    assert_allclose(xy.mean(axis=0), 0.0, atol=1e-12)
    assert_allclose(_pairwise(xy), _pairwise(pts), atol=1e-9)
    # the map is the centred points turned by an orthogonal matrix
    centred = pts - pts.mean(axis=0)
    r, *_ = np.linalg.lstsq(centred, xy, rcond=None)
    assert_allclose(r @ r.T, np.eye(2), atol=1e-9)


def test_mds_of_collinear_points_pads_the_missing_axis():
    pts = np.array([[0.0], [1.0], [3.0], [7.0]])
    xy = classical_mds(_pairwise(pts))
    assert_allclose(np.abs(xy[:, 0]), np.abs(pts[:, 0] - pts.mean()), atol=1e-9)
    assert_allclose(xy[:, 1], 0.0, atol=1e-6)


def test_procrustes_returns_a_rotated_copy():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(9, 2))
    a -= a.mean(axis=0)
    target = a @ _rotation(73.0).T + [5.0, -2.0]  # turned and shifted
    assert_allclose(procrustes_align(a, target), target - target.mean(axis=0), atol=1e-12)


@pytest.mark.parametrize("deg", [30.0, 180.0])
def test_mds_aligned_to_the_previous_map_returns_it(deg):
    rng = np.random.default_rng(2)
    pts = rng.normal(size=(10, 2)) * [2.0, 1.0]
    previous = (pts - pts.mean(axis=0)) @ _rotation(deg).T
    assert_allclose(classical_mds(_pairwise(pts), previous=previous), previous, atol=1e-9)
    # a previous map of another size is ignored
    assert classical_mds(_pairwise(pts), previous=previous[:5]).shape == (10, 2)
