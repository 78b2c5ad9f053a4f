"""Canonical pose for display: upright, centred, heavier half up, the same for any pose of one image."""
import numpy as np
from numpy.testing import assert_allclose

from iastudio.core.pose import canonical_pose, canonical_transforms, intensity_moments
from iastudio.core.warp import warp

S = 48


def _blob(*, heavy_end: bool = True) -> np.ndarray:
    """An elongated Gaussian along the rows, with a heavier lobe at its upper end."""
    r, c = np.mgrid[0:S, 0:S].astype(float)
    ctr = (S - 1) / 2
    img = np.exp(-((r - ctr) ** 2 / (2 * 7.0**2) + (c - ctr) ** 2 / (2 * 2.5**2)))
    if heavy_end:
        img += 0.8 * np.exp(-((r - ctr + 6) ** 2 + (c - ctr) ** 2) / (2 * 2.5**2))
    return img[None]


def _axis_angle(images) -> np.ndarray:
    """Angle (degrees) between each image's principal axis and the row axis, in (-90, 90]."""
    _, _, cov = intensity_moments(images)
    _, vecs = np.linalg.eigh(cov)
    v = vecs[..., :, 1]
    ang = np.degrees(np.arctan2(v[..., 1], v[..., 0]))
    return (ang + 90) % 180 - 90


def _upper_lower_mass(img):
    _, cen, _ = intensity_moments(img[None])
    r0 = cen[0, 0]
    rows = np.arange(S)[:, None]
    return img[(rows < r0).repeat(S, 1)].sum(), img[(rows > r0).repeat(S, 1)].sum()


def test_posed_blob_is_vertical_centred_and_heavier_half_up():
    base = _blob()
    moved = warp(base, np.array([[np.radians(30.0), 4.0, -3.0]]))
    _, cen, _ = intensity_moments(moved)
    assert np.linalg.norm(cen[0] - (S - 1) / 2) > 3  # the test input is really off-centre
    assert abs(_axis_angle(moved)[0]) > 20           # and really tilted
    posed = canonical_pose(moved)
    _, cen, _ = intensity_moments(posed)
    assert_allclose(cen[0], [(S - 1) / 2] * 2, atol=0.3)
    assert_allclose(_axis_angle(posed), [0.0], atol=1.0)
    up, down = _upper_lower_mass(posed[0])
    assert up > down


def test_same_image_in_two_poses_gives_the_same_display():
    base = _blob()
    poses = np.array([[np.radians(30.0), 4.0, -3.0], [np.radians(-140.0), -5.0, 2.0], [np.radians(175.0), 0, 5.0]])
    moved = warp(np.repeat(base, 3, 0), poses)
    posed = canonical_pose(moved)
    peak = posed.max()
    assert_allclose(posed[1], posed[0], atol=0.05 * peak)
    assert_allclose(posed[2], posed[0], atol=0.05 * peak)
    # and it is the upright original (heavier lobe up, as drawn), not its 180-degree turn
    assert_allclose(posed[0], canonical_pose(base)[0], atol=0.05 * peak)
    assert abs(canonical_transforms(base)[0, 0]) < 1e-6


def test_rule_is_heavier_half_up_not_the_drawn_orientation():
    flipped = _blob()[:, ::-1, :].copy()  # heavier lobe at the bottom
    t = canonical_transforms(flipped)
    assert_allclose(abs(t[0, 0]), np.pi, atol=0.02)  # turned half a circle
    up, down = _upper_lower_mass(canonical_pose(flipped)[0])
    assert up > down


def test_round_shape_is_only_centred_and_input_unchanged():
    r, c = np.mgrid[0:S, 0:S].astype(float)
    disc = np.exp(-((r - 30) ** 2 + (c - 15) ** 2) / (2 * 4.0**2))[None]
    before = disc.copy()
    t = canonical_transforms(disc)
    assert t[0, 0] == 0.0
    assert_allclose(t[0, 1:], [15 - (S - 1) / 2, 30 - (S - 1) / 2], atol=0.01)
    assert_allclose(disc, before)
    empty = np.zeros((2, 8, 8))
    assert_allclose(canonical_pose(empty), empty)


def test_channels_share_one_pose():
    base = _blob()
    rgb = np.stack([base[0], 0.5 * base[0], 0.25 * base[0]], -1)[None]
    moved = warp(rgb, np.array([[np.radians(50.0), -3.0, 2.0]]))
    posed = canonical_pose(moved)
    assert posed.shape == moved.shape
    assert_allclose(posed[..., 1], 0.5 * posed[..., 0], atol=1e-6)
    assert_allclose(_axis_angle(posed[..., 0]), [0.0], atol=1.0)
