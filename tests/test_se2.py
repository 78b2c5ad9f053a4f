import numpy as np

from iastudio.core import se2
from iastudio.core.warp import warp
from tests.conftest import smooth_blob


def test_compose_with_inverse_is_identity():
    p = se2.random_transforms(20, rotation_range=180, shift_range=5, seed=1)
    ident = se2.compose(p, se2.invert(p))
    np.testing.assert_allclose(ident, 0, atol=1e-12, rtol=1e-5)
    np.testing.assert_allclose(se2.compose(se2.invert(p), p), 0, atol=1e-12, rtol=1e-5)


def test_compose_matches_point_mapping():
    a, b = np.array([0.3, 1.0, -2.0]), np.array([-1.1, 0.5, 3.0])
    c = (15.5, 15.5)
    pts = np.array([[0.0, 0.0], [3.0, 7.0], [20.0, 4.0]])
    expected = se2.apply_to_points(a, se2.apply_to_points(b, pts, c), c)
    np.testing.assert_allclose(se2.apply_to_points(se2.compose(a, b), pts, c), expected, rtol=1e-5, atol=1e-8)


def test_random_transforms_reproducible_and_in_range():
    a = se2.random_transforms(500, rotation_range=65, shift_range=10, seed=3)
    b = se2.random_transforms(500, rotation_range=65, shift_range=10, seed=3)
    assert np.array_equal(a, b)
    assert np.abs(np.rad2deg(a[:, 0])).max() <= 65
    assert np.abs(a[:, 1:]).max() <= 10
    c = se2.random_transforms(500, rotation_range=(0, 90), shift_range=(4, 8), seed=3)
    assert np.rad2deg(c[:, 0]).min() >= 0
    assert np.rad2deg(c[:, 0]).max() <= 90
    assert np.abs(c[:, 1:]).min() >= 4
    assert np.abs(c[:, 1:]).max() <= 8


def test_warp_of_warp_is_warp_of_composition():
    img = smooth_blob(48, seed=2)[None]
    a, b = np.array([[0.4, 1.5, -0.7]]), np.array([[-0.9, -2.0, 1.2]])
    two = warp(warp(img, a), b)
    one = warp(img, se2.compose(a, b))
    assert np.abs(two - one).max() < 0.02 * np.abs(one).max()


def test_degree_conversions_round_trip():
    p = np.array([[np.pi / 2, 1.0, 2.0]])
    np.testing.assert_allclose(se2.to_degrees(p)[0], [90, 1, 2], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(se2.from_degrees(se2.to_degrees(p)), p, rtol=1e-5, atol=1e-8)
