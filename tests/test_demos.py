import numpy as np
import pytest

from iastudio.core.demos import DEMO_NAMES, distort, load_demo
from iastudio.core.warp import warp


@pytest.mark.parametrize(("name", "n", "k"),
                         [("shapes", 18, 3), ("digits", 40, 4), ("threes", 10, 1), ("sketches", 18, 3)])
def test_demo_sets(name, n, k):
    a = load_demo(name, seed=5)
    b = load_demo(f"demo:{name}", seed=5)
    c = load_demo(name, seed=6)
    assert len(a) == n
    assert len(set(a.labels)) == k
    assert a.has_labels
    assert all(np.array_equal(x, y) for x, y in zip(a.images, b.images))
    assert not all(np.array_equal(x, y) for x, y in zip(a.images, c.images))
    # the images are the originals warped by the recorded transforms
    again = warp(a.originals.astype(np.float64), a.true_transforms)
    assert np.abs(np.clip(again, 0, None) - np.stack(a.images)).max() < 1e-4


def test_demo_parameters_follow_the_paper():
    s = load_demo("shapes", seed=0)
    deg = np.rad2deg(s.true_transforms[:, 0])
    assert np.abs(deg).max() <= 65
    assert np.abs(s.true_transforms[:, 1:]).max() <= 10
    t = load_demo("threes", seed=0)
    deg = np.rad2deg(t.true_transforms[:, 0])
    assert deg.min() >= 0
    assert deg.max() <= 90
    assert set(t.labels) == {"3"}
    assert len({x.tobytes() for x in t.originals}) == 10


def test_unknown_demo():
    with pytest.raises(ValueError, match="unknown demo"):
        load_demo("faces")
    assert DEMO_NAMES == ("shapes", "digits", "threes", "sketches")


def test_sketches_are_the_shapes_each_redrawn_differently():
    shapes, sketches = load_demo("shapes", seed=1), load_demo("sketches", seed=1)
    assert sketches.labels == shapes.labels
    bases = shapes.originals[::6]
    for c in range(3):  # every copy is its shape, bent a little, and no two copies are alike
        own = sketches.originals[6 * c:6 * c + 6].reshape(6, -1)
        base = bases[c].ravel()
        cos = own @ base / (np.linalg.norm(own, axis=1) * np.linalg.norm(base))
        assert cos.min() > 0.75
        assert cos.max() < 0.985
        assert len({x.tobytes() for x in own}) == 6
    deg = np.rad2deg(sketches.true_transforms[:, 0])
    assert np.abs(deg).max() <= 65
    assert np.abs(sketches.true_transforms[:, 1:]).max() <= 10


def test_distort_known_answers():
    img = np.zeros((32, 32))
    img[10:22, 14:18] = 1.0
    np.testing.assert_allclose(distort(img, amplitude=0.0, smoothness=4.0, seed=0), img)  # no move: the image
    a, b = distort(img, amplitude=2.0, smoothness=4.0, seed=3), distort(img, amplitude=2.0, smoothness=4.0, seed=3)
    np.testing.assert_array_equal(a, b)  # seeded
    assert 0 < np.abs(a - img).max() <= 1.0
    assert a.min() >= 0.0
    # a bar 4 px wide moved by at most 2 px keeps its middle column
    assert (a[12:20, 15:17] > 0.2).all()
    assert (a[:, :11] == 0).all()
