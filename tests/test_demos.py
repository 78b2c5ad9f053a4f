import numpy as np
import pytest

from iastudio.core.demos import DEMO_NAMES, load_demo
from iastudio.core.warp import warp


@pytest.mark.parametrize("name,n,k", [("shapes", 18, 3), ("digits", 40, 4), ("threes", 10, 1)])
def test_demo_sets(name, n, k):
    a = load_demo(name, seed=5)
    b = load_demo(f"demo:{name}", seed=5)
    c = load_demo(name, seed=6)
    assert len(a) == n and len(set(a.labels)) == k and a.has_labels
    assert all(np.array_equal(x, y) for x, y in zip(a.images, b.images))
    assert not all(np.array_equal(x, y) for x, y in zip(a.images, c.images))
    # the images are the originals warped by the recorded transforms
    again = warp(a.originals.astype(np.float64), a.true_transforms)
    assert np.abs(np.clip(again, 0, None) - np.stack(a.images)).max() < 1e-4


def test_demo_parameters_follow_the_paper():
    s = load_demo("shapes", seed=0)
    deg = np.rad2deg(s.true_transforms[:, 0])
    assert np.abs(deg).max() <= 65 and np.abs(s.true_transforms[:, 1:]).max() <= 10
    t = load_demo("threes", seed=0)
    deg = np.rad2deg(t.true_transforms[:, 0])
    assert deg.min() >= 0 and deg.max() <= 90
    assert set(t.labels) == {"3"} and len({x.tobytes() for x in t.originals}) == 10


def test_unknown_demo():
    with pytest.raises(ValueError, match="unknown demo"):
        load_demo("faces")
    assert DEMO_NAMES == ("shapes", "digits", "threes")
