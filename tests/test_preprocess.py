import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.preprocess import apply_transforms, canvas_to_original, content_radius, preprocess, unit_norm
from iastudio.core.warp import warp


def test_content_stays_inside_under_any_rotation():
    img = np.zeros((40, 90))
    img[5:35, 3:87] = 1.0  # wide content reaching the corners
    c = preprocess([img], size=64, scale="frame")
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
    assert c.images.shape[-1] == 3
    assert c.images[..., 1:].max() == 0


def test_transform_reported_in_original_pixels():
    img = np.zeros((100, 50))
    img[40:60, 20:30] = 1.0
    c = preprocess([img], size=50, scale="frame")  # scale 0.5
    assert c.scale[0] == pytest.approx(0.5)
    t = canvas_to_original(np.array([np.pi / 6, 2.0, -3.0]), c, 0)
    assert t["theta_deg"] == pytest.approx(30.0)
    assert (t["tx_px"], t["ty_px"]) == pytest.approx((4.0, -6.0))
    assert (t["center_row"], t["center_col"]) == pytest.approx((49.5, 24.5), abs=1.0)


def test_bad_size_rejected():
    with pytest.raises(ValueError, match="at least 8"):
        preprocess([np.ones((4, 4))], size=4)


def _object(scale, frame, shift=(0, 0)):
    """The demo key, ``scale`` times its pixels, placed in a ``frame`` x ``frame`` file."""
    from skimage.transform import rescale

    from iastudio.core.demos import base_shapes

    key = rescale(base_shapes()[0][2], scale, order=1, anti_aliasing=True)
    img = np.zeros((frame, frame))
    h = key.shape[0]
    r, c = (frame - h) // 2 + shift[0], (frame - h) // 2 + shift[1]
    img[r:r + h, c:c + h] = key
    return img


def test_content_scale_makes_frame_size_irrelevant():
    from iastudio.core.similarity import invariant_distances

    a = _object(1.0, 80)
    b = _object(2.0, 200, shift=(25, -30))  # the same object at twice the pixels, off-centre, in a big file
    c = _object(0.75, 50)
    content = preprocess([a, b, c], size=40)
    assert content.size == 40
    d = invariant_distances(content.images).distances
    assert d.max() < 0.1  # the same thing, whatever the file
    frame = preprocess([a, b, c], size=40, scale="frame")
    assert invariant_distances(frame.images).distances.max() > 0.3  # version 0.1: three different scales
    # the object's centroid lands on the canvas centre and the scale is reported
    assert content.scale[1] == pytest.approx(content.scale[0] / 2, rel=0.05)


def test_content_scale_transform_maps_back_to_the_original():
    img = _object(1.0, 90, shift=(6, -4))
    c = preprocess([img], size=40)
    t = canvas_to_original(np.zeros(3), c, 0)
    # the canvas centre (rotation centre) maps to the object's centroid in the original file
    from iastudio.core.preprocess import content_frame

    centroid, _ = content_frame(img)
    assert (t["center_row"], t["center_col"]) == pytest.approx(tuple(centroid), abs=1.0)


def test_blank_and_non_finite_images():
    blank = np.zeros((30, 30))
    c = preprocess([blank, _object(1.0, 70)], size=32)
    assert c.images[0].max() == 0  # stays blank, no division by zero
    bad = _object(1.0, 70)
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="image 1 holds NaN"):
        preprocess([blank, bad], size=32)


def test_large_files_find_their_object_on_a_reduced_copy():
    from iastudio.core.preprocess import content_frame

    big = np.zeros((3000, 2600), np.float32)
    big[1200:1500, 700:900] = 1.0  # an L-shaped object off-centre in a big file
    big[1400:1500, 900:1200] = 1.0
    small = big.reshape(300, 10, 260, 10).mean(axis=(1, 3))
    (cb, rb), (cs, rs) = content_frame(big), content_frame(small)
    assert_allclose(cb, (cs + 0.5) * 10 - 0.5, rtol=0.01)
    assert rb == pytest.approx(rs * 10, rel=0.02)
    c = preprocess([big, small], size=40)
    assert c.scale[0] == pytest.approx(c.scale[1] / 10, rel=0.02)  # the same object gets the same size


def test_unit_norm_known_answer():
    x = np.array([[[3.0, 4.0]], [[0.0, 0.0]], [[0.0, -2.0]]])
    out = unit_norm(x)
    assert out.dtype == np.float32
    assert out.shape == x.shape
    assert_allclose(out, [[[0.6, 0.8]], [[0.0, 0.0]], [[0.0, -1.0]]], rtol=1e-7)
    rgb = np.ones((2, 2, 2, 3))
    assert_allclose(np.sqrt((unit_norm(rgb) ** 2).reshape(2, -1).sum(1)), 1.0, rtol=1e-6)
    assert x[0, 0, 0] == 3.0  # the input is not changed


def test_apply_transforms_rotates_clips_and_renormalises():
    img = np.zeros((16, 16), np.float32)
    img[4:12, 7:9] = 1.0  # a bar along the rows
    base = unit_norm(np.stack([img, img.T]))
    quarter = np.array([[np.pi / 2, 0.0, 0.0], [0.0, 0.0, 0.0]])
    out = apply_transforms(base, quarter)
    assert out.min() >= 0
    assert out.dtype == np.float32
    assert_allclose(np.sqrt((out.astype(float) ** 2).reshape(2, -1).sum(1)), 1.0, rtol=1e-6)
    assert_allclose(out[1], base[1], atol=1e-6)  # the identity keeps the image
    assert_allclose(out[0], base[1], atol=1e-5)  # a quarter turn of the bar is the transposed bar
    one = apply_transforms(base, quarter[:1], index=[0])
    assert_allclose(one[0], out[0])


def test_canvas_take_known_answer():
    from iastudio.core.preprocess import Canvas

    rng = np.random.default_rng(0)
    images = [rng.random((10 + i, 12)) for i in range(4)]
    c = preprocess(images, size=16)
    part = c.take([3, 1])
    assert_allclose(part.images, c.images[[3, 1]])
    assert_allclose(part.scale, c.scale[[3, 1]])
    assert_allclose(part.offset, c.offset[[3, 1]])
    assert part.original_shape == [(13, 12), (11, 12)]
    assert part.denoise is None
    embedded = Canvas(c.images, c.scale, c.offset, [])  # a project's canvases: no original shapes
    assert embedded.take([0]).original_shape == []
    assert len(c.take([])) == 0
