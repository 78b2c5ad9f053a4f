"""aligned_images: run transforms, hand-moved images, mirrored and unassigned images (known answers)."""
import numpy as np
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core import se2
from iastudio.core.alignment import aligned_images
from iastudio.core.clusterbook import UNASSIGNED
from iastudio.core.preprocess import unit_norm
from iastudio.core.warp import warp


def _shape(kind):
    """A smooth L or T on a 32-px canvas (no rotational symmetry), unit norm."""
    from scipy.ndimage import gaussian_filter

    img = np.zeros((32, 32))
    if kind == "L":
        img[8:24, 10:14] = 1.0
        img[20:24, 14:23] = 1.0
    else:
        img[9:13, 8:24] = 1.0
        img[13:24, 14:18] = 1.0
    return unit_norm(gaussian_filter(img, 1.0)[None])[0]


def _cos(a, b):
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def _setup():
    """Two 'cluster means' and images made from them by known transforms."""
    a, b = _shape("L"), _shape("T")
    sigma = np.array([[0.7, 1.5, -1.0], [-2.0, 0.0, 2.0], [0.0, 0.0, 0.0], [1.2, -1.0, 0.5]])
    srcs = np.stack([a, a, b, b])
    images = warp(srcs, sigma).astype(np.float32)  # image i is its mean seen through sigma_i
    taus = se2.invert(sigma)  # what a run finds: warp(image_i, tau_i) ~ its mean
    return a, b, images, taus


def test_run_transforms_bring_each_image_onto_its_mean():
    a, b, images, taus = _setup()
    labels = np.array([0, 0, 1, 1])
    out = aligned_images(images, labels, run_labels=labels, transforms=taus, means=np.stack([a, b]))
    assert out.dtype == np.float32
    assert out.shape == images.shape
    for i, mean in enumerate([a, a, b, b]):
        assert_allclose(out[i], warp(images[i][None], taus[i][None])[0], rtol=1e-6, atol=1e-7)
        assert _cos(out[i], mean) > 0.97, i
    assert _cos(images[0], a) < 0.9  # the test images really are turned


def test_unassigned_images_stay_and_mirrored_ones_are_flipped_first():
    _a, b, images, taus = _setup()
    labels = np.array([0, UNASSIGNED, 1, 1])
    flipped = images.copy()
    flipped[3] = images[3][:, ::-1]  # the run found image 3 mirrored: flip, then its transform
    mirrored = np.array([False, False, False, True])
    out = aligned_images(flipped, labels, run_labels=np.array([0, 0, 1, 1]), transforms=taus, mirrored=mirrored)
    assert_array_equal(out[1], flipped[1])
    assert_allclose(out[3], out_expected := warp(images[3][None], taus[3][None])[0], rtol=1e-6, atol=1e-7)
    assert _cos(out_expected, b) > 0.97


def test_a_moved_image_is_aligned_onto_the_mean_of_its_new_cluster():
    a, b, images, taus = _setup()
    run_labels = np.array([0, 0, 1, 1])
    moved = np.concatenate([images, np.rot90(a)[None].copy()])  # a copy of mean a, turned a quarter
    labels = np.append(run_labels, 0)  # the user put it in cluster 0; the run had it in cluster 1
    out = aligned_images(moved, labels, run_labels=np.append(run_labels, 1),
                         transforms=np.vstack([taus, [[3.0, 5.0, 5.0]]]), means=np.stack([a, b]))
    assert _cos(moved[4], a) < 0.9
    assert _cos(out[4], a) > 0.98


def test_a_moved_image_in_a_new_cluster_is_aligned_onto_a_member():
    a, b, images, taus = _setup()
    extra = np.stack([a, np.rot90(a).copy()])  # a new cluster 2 made by hand of two copies of a
    imgs = np.concatenate([images, extra])
    labels = np.array([0, 0, 1, 1, 2, 2])
    run_labels = np.array([0, 0, 1, 1, 0, 1])
    out = aligned_images(imgs, labels, run_labels=run_labels, transforms=np.vstack([taus, np.zeros((2, 3))]),
                         means=np.stack([a, b]))
    assert _cos(out[5], imgs[4]) > 0.98  # onto the first other member of cluster 2
    assert _cos(out[4], imgs[5]) > 0.98


def test_inspect_pair_recovers_a_known_rotation_and_shift():
    from iastudio.core.alignment import inspect_pair
    from iastudio.core.demos import base_shapes
    from iastudio.core.preprocess import apply_transforms, preprocess

    v = preprocess(base_shapes()[0][:1], size=48).images
    moved = apply_transforms(v, np.array([[np.deg2rad(40.0), 3.0, -2.0]]))
    info = inspect_pair(moved[0], v[0], angle_step=5.0)
    assert info["score"] > 0.99
    assert info["distance"] < 0.1
    np.testing.assert_allclose(info["aligned"], v[0], atol=0.08)
    np.testing.assert_allclose(info["difference"], np.abs(info["aligned"] - v[0]))
