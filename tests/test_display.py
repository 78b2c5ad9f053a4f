"""What the views draw, prepared off the GUI thread: samples, W's block, 8-bit upright tiles, the mosaic."""
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.display import (
    BACKGROUND,
    KEEP_MAX,
    even_sample,
    mosaic,
    sample_with,
    tile_levels,
    upright_tiles,
    weight_block,
)
from iastudio.core.pose import canonical_pose


def test_even_sample_known_answer():
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    # cluster 0: 3 of 6 at positions linspace(0, 5, 3) = 0, 2, 5; cluster 1: both (at least two)
    assert even_sample(np.arange(8), labels, limit=4).tolist() == [0, 2, 5, 6, 7]
    assert even_sample(np.arange(8), labels, limit=4, keep=[3]).tolist() == [0, 2, 3, 5, 6, 7]
    order = np.array([7, 6, 5, 4, 3, 2, 1, 0])  # labels indexed by image, order by position
    assert even_sample(order, labels[::-1], limit=4).tolist() == [7, 5, 2, 1, 0]
    assert even_sample(np.arange(3), np.zeros(3, int), limit=3).tolist() == [0, 1, 2]  # small: all


def test_sample_with_adds_the_missing_kept_images_in_order():
    order = np.array([4, 0, 3, 1, 2])
    sample = np.array([4, 3, 2])
    assert sample_with(order, sample, []) is sample
    assert sample_with(order, sample, [3, 4]) is sample  # nothing missing: the same object
    assert sample_with(order, sample, [1, 0]).tolist() == [4, 0, 3, 1, 2]
    too_many = np.arange(KEEP_MAX + 1)
    assert sample_with(np.arange(KEEP_MAX + 10), np.array([0]), too_many).tolist() == [0]  # not added


def test_weight_block_known_answer_sparse_and_dense():
    dense = np.arange(16, dtype=float).reshape(4, 4)
    dense[1, 2] = 0.0
    ids = np.array([2, 1])
    want = np.array([[10, 9], [0, 5]], np.float32)
    for w in (dense, sp.csr_matrix(dense), sp.coo_matrix(dense)):
        got = weight_block(w, ids)
        assert got.dtype == np.float32
        assert_array_equal(got, want)


def test_tile_levels_known_answer():
    imgs = np.zeros((3, 2, 2), np.float32)
    imgs[0] = [[1.0, 0.5], [0.0, -1.0]]  # scaled to its own max; negatives are 0
    imgs[1] = [[2.0, 4.0], [1.0, 0.0]]
    # imgs[2]: all 0 stays 0
    got = tile_levels(imgs)
    assert got.dtype == np.uint8
    assert_array_equal(got[0], [[255, 128], [0, 0]])
    assert_array_equal(got[1], [[128, 255], [64, 0]])
    assert_array_equal(got[2], 0)
    rgb = np.stack([imgs, imgs, imgs], axis=-1)  # colour: the mean of the channels
    assert_array_equal(tile_levels(rgb), got)
    assert tile_levels(np.zeros((0, 5, 5))).shape == (0, 5, 5)


def test_upright_tiles_are_the_upright_means_scaled():
    img = np.zeros((2, 16, 16))
    img[0, 7:9, 2:14] = 1.0  # a horizontal bar: stood upright
    img[1, 2:14, 7:9] = 0.5
    got = upright_tiles(img)
    assert_array_equal(got, tile_levels(canonical_pose(img)))
    assert got[0, 2:14, 7:9].mean() > 200
    assert got[0, 7:9, 2].max() < 60


def test_mosaic_known_layout():
    tiles = np.stack([np.full((2, 3), v, np.uint8) for v in (10, 20, 30)])
    out = mosaic(tiles, 2, pad=1)
    assert out.shape == (2 * 3 + 1, 2 * 4 + 1)
    assert_array_equal(out[1:3, 1:4], 10)  # tile k at (pad + r (h + pad), pad + c (w + pad))
    assert_array_equal(out[1:3, 5:8], 20)
    assert_array_equal(out[4:6, 1:4], 30)
    assert_array_equal(out[4:6, 5:8], BACKGROUND)  # the empty cell
    assert_array_equal(out[0], BACKGROUND)
    assert_array_equal(out[:, 4], BACKGROUND)
    assert mosaic(tiles).shape == (2 * 4 + 2, 2 * 5 + 2)  # default: ceil(sqrt(3)) = 2 columns, pad 2
    assert_array_equal(mosaic(np.zeros((0, 4, 4), np.uint8)), np.full((8, 8), BACKGROUND))


def test_colour_top_is_not_set_by_an_image_alone_in_its_cluster():
    from iastudio.core.display import colour_top
    from iastudio.core.frames import weight_range

    blocks = np.kron(np.eye(3), np.full((30, 30), 1 / 30))  # three clusters of 30: W_ij = 1/30 inside
    assert_allclose(colour_top(blocks), 1 / 30)  # nothing stands out: the largest W_ij
    w = np.zeros((91, 91))
    w[:90, :90] = blocks
    w[90, 90] = 0.3  # a blank image, alone: its own weight, 9 times the rest
    assert_allclose(colour_top(w), 1 / 30)
    assert_allclose(colour_top(sp.csr_matrix(w)), 1 / 30)  # a sparse W: its stored entries
    w[90, 90] = 1.2 / 30  # not far above the rest: the scale still reaches it
    assert_allclose(colour_top(w), 1.2 / 30)
    small = np.kron(np.eye(250), np.full((4, 4), 1 / 4))  # 250 clusters of 4: W_ij = 1/4 in every column
    assert_allclose(colour_top(small), 1 / 4)
    small[0, 0] = 0.9  # one column above the rest: still the clusters' scale
    assert_allclose(colour_top(small), 1 / 4)
    assert colour_top(np.zeros((0, 0))) == 1e-6
    assert colour_top(sp.csr_matrix((3, 3))) == 1e-6
    frames = [SimpleNamespace(snapshot=SimpleNamespace(weights=x)) for x in (blocks, 2 * blocks, None)]
    assert_allclose(weight_range(frames), (0.0, 2 / 30))
