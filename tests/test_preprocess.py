import numpy as np
import pytest

from core.preprocess import canvas_to_original, content_radius, preprocess
from core.warp import warp


def test_content_stays_inside_under_any_rotation():
    img = np.zeros((40, 90))
    img[5:35, 3:87] = 1.0  # wide content reaching the corners
    c = preprocess([img], size=64)
    assert c.size >= 64
    v = c.images[0]
    total = (v.astype(np.float64) ** 2).sum()
    assert total == pytest.approx(1.0, rel=1e-5)
    for th in np.deg2rad([17, 45, 90, 133, 200]):
        rot = warp(v[None].astype(np.float64), np.array([[th, 0, 0]]))[0]
        # the norm is kept (nothing rotates out of the canvas)
        assert (rot**2).sum() == pytest.approx(total, rel=0.03)
    assert content_radius(v) <= c.size / 2


def test_invert_background_and_unit_norm():
    paper = np.full((20, 20), 0.9)
    paper[8:12, 5:15] = 0.1  # dark stroke on light paper
    c = preprocess([paper], size=20, invert=True)
    v = c.images[0]
    assert v[0, 0] == 0.0  # background subtracted to zero
    assert v.max() == v[c.size // 2, c.size // 2]  # the stroke is now the bright part
    assert np.linalg.norm(v) == pytest.approx(1.0, rel=1e-5)


def test_colour_kept_or_grayed():
    rgb = np.zeros((10, 10, 3))
    rgb[3:7, 3:7, 0] = 1.0
    assert preprocess([rgb], size=16).images.shape[-1] != 3
    c = preprocess([rgb], size=16, grayscale=False)
    assert c.images.shape[-1] == 3 and c.images[..., 1:].max() == 0


def test_transform_reported_in_original_pixels():
    img = np.zeros((100, 50))
    img[40:60, 20:30] = 1.0
    c = preprocess([img], size=50)  # scale 0.5
    assert c.scale[0] == pytest.approx(0.5)
    t = canvas_to_original(np.array([np.pi / 6, 2.0, -3.0]), c, 0)
    assert t["theta_deg"] == pytest.approx(30.0)
    assert (t["tx_px"], t["ty_px"]) == pytest.approx((4.0, -6.0))
    assert (t["center_row"], t["center_col"]) == pytest.approx((49.5, 24.5), abs=1.0)


def test_bad_size_rejected():
    with pytest.raises(ValueError, match="at least 8"):
        preprocess([np.ones((4, 4))], size=4)
