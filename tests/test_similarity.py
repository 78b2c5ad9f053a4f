import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core import se2
from iastudio.core.similarity import angle_grid, invariant_distances, plain_distances
from iastudio.core.warp import warp


@pytest.mark.parametrize("seed", range(4))
def test_known_transform_recovered_anywhere_on_the_circle(shape_images, seed):
    rng = np.random.default_rng(seed)
    base = shape_images[seed % 3]
    tau = np.array([rng.uniform(-np.pi, np.pi), rng.uniform(-8, 8), rng.uniform(-8, 8)])
    moved = warp(base[None], tau[None])[0]
    imgs = np.stack([base, moved]).astype(np.float32)
    res = invariant_distances(imgs)
    t = res.transforms[0, 1]  # v_0 o t ~ v_1 = base o tau  ->  t = tau
    assert abs(np.rad2deg(se2.wrap_angle(t[0] - tau[0]))) < 0.5
    assert np.abs(t[1:] - tau[1:]).max() < 0.25
    assert res.distances[0, 1] < 0.02
    np.testing.assert_allclose(res.transforms[1, 0], se2.invert(t), rtol=1e-5, atol=1e-8)
    assert res.distances[1, 0] == res.distances[0, 1]
    assert res.distances[0, 0] == 0


def test_rotation_range_restricts_the_search(shape_images):
    base = shape_images[1]
    moved = warp(base[None], np.array([[np.deg2rad(120), 0, 0]]))[0]
    imgs = np.stack([base, moved]).astype(np.float32)
    full = invariant_distances(imgs)
    limited = invariant_distances(imgs, rotation_range=65)
    assert full.distances[0, 1] < 0.02
    assert abs(np.rad2deg(limited.transforms[0, 1, 0])) <= 65 + 1e-6
    assert limited.distances[0, 1] > 10 * full.distances[0, 1]


def test_candidates_agree_with_exhaustive_grid_on_same_class_pairs(shape_images):
    tau = se2.random_transforms(6, rotation_range=180, shift_range=5, seed=2)
    imgs = warp(np.repeat(shape_images, 2, axis=0), tau).astype(np.float32)
    fast = invariant_distances(imgs)
    slow = invariant_distances(imgs, candidates=None)
    same = np.repeat(np.arange(3), 2)
    mask = same[:, None] == same[None, :]
    assert np.abs(fast.distances - slow.distances)[mask].max() < 0.01
    assert (fast.distances[~mask] > 0.3).all()  # different shapes stay far apart


def test_angle_grid():
    a, ok = angle_grid(5.0)
    assert a.size == 72
    assert ok.all()
    a, ok = angle_grid(10.0, rotation_range=30)
    np.testing.assert_allclose(np.sort(np.rad2deg(a[ok])), [-30, -20, -10, 0, 10, 20, 30], rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="angle step must be > 0"):
        angle_grid(0)


def test_plain_distances_known_answer():
    x = np.zeros((2, 4, 4))
    x[0, 0, 0] = 1
    x[1, 3, 3] = 1
    d = plain_distances(x)
    assert d[0, 1] == pytest.approx(np.sqrt(2))
    assert d[0, 0] == 0


def test_pair_chunks_give_the_same_answer(shape_images, monkeypatch):
    import iastudio.core.similarity as cs

    tau = se2.random_transforms(6, rotation_range=180, shift_range=4, seed=5)
    imgs = warp(np.repeat(shape_images, 2, axis=0), tau).astype(np.float32)
    whole = invariant_distances(imgs)
    monkeypatch.setattr(cs, "_PAIR_CHUNK", 4)  # 15 pairs in 4 chunks
    seen = []
    chunked = invariant_distances(imgs, on_progress=seen.append)
    np.testing.assert_allclose(chunked.distances, whole.distances, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(chunked.transforms, whole.transforms, atol=1e-6, rtol=1e-5)
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


def test_mirror_group_recovers_reflection_rotation_and_shift():
    from iastudio.core.demos import load_demo
    from iastudio.core.preprocess import preprocess

    s = load_demo("shapes", seed=0)
    x = preprocess([s.images[i] for i in (0, 6, 12)], size=40).images  # horse, seven, key
    tau = np.array([[0.7, 2.0, -1.5]])
    y = warp(np.ascontiguousarray(x[[1], :, ::-1]), tau)  # the seven, mirrored, rotated 40 deg and shifted
    y = (y / np.linalg.norm(y)).astype(np.float32)
    stack = np.concatenate([x, y])
    plain = invariant_distances(stack)
    e2 = invariant_distances(stack, group="e2")
    assert plain.distances[1, 3] > 0.3
    assert not plain.mirrored.any()
    assert e2.distances[1, 3] < 0.02
    assert e2.mirrored[1, 3]
    assert e2.mirrored[3, 1]
    assert_allclose(e2.transforms[1, 3], tau[0], atol=0.01)  # flip(v_1) o tau ~ v_3
    back = warp(np.ascontiguousarray(stack[[3], :, ::-1]), e2.transforms[3, 1][None])[0]
    assert np.linalg.norm(back - stack[1]) < 0.05  # and the reverse transform holds
    assert_allclose(se2.mirror_conjugate(se2.mirror_conjugate(tau)), tau)
    assert (e2.distances <= plain.distances + 1e-9).all()


def test_binned_averages_blocks_and_keeps_channels():
    from iastudio.core.similarity import _binned

    x = np.arange(32.0).reshape(2, 4, 4)
    assert_allclose(_binned(x, 2)[1], [[18.5, 20.5], [26.5, 28.5]])
    colour = np.stack([x, 2 * x], axis=-1)  # (2, 4, 4, 2)
    assert_allclose(_binned(colour, 2)[..., 1], 2 * _binned(x, 2))
    assert _binned(x, 1) is x
    with pytest.raises(ValueError, match="divisible"):
        _binned(np.zeros((1, 5, 4)), 2)


@pytest.mark.parametrize("seed", range(3))
def test_binned_search_alone_lands_within_a_pixel_and_the_refinement_on_the_answer(shape_images, seed):
    from iastudio.core import similarity

    rng = np.random.default_rng(10 + seed)
    base = shape_images[seed]
    # shifts that are not multiples of the 2-px bins, on a grid angle (5 degrees) and off it
    tau = np.array([np.deg2rad(5.0 * rng.integers(-35, 36) + 1.3), rng.uniform(-7, 7), rng.uniform(-7, 7)])
    imgs = np.stack([base, warp(base[None], tau[None])[0]]).astype(np.float32)
    assert imgs.shape[1] >= similarity.BIN_MIN  # the binned search runs here
    coarse = invariant_distances(imgs, refine_steps=0).transforms[0, 1]
    assert abs(np.rad2deg(se2.wrap_angle(coarse[0] - tau[0]))) <= 2.5 + 1e-6  # the nearest grid angle
    assert np.abs(coarse[1:] - tau[1:]).max() < 1.0
    fine = invariant_distances(imgs)
    assert_allclose(fine.transforms[0, 1, 1:], tau[1:], atol=0.1)
    assert fine.distances[0, 1] < 0.02


@pytest.mark.parametrize("colour", [False, True])
def test_translation_search_of_half_turn_twins_equals_warping_them(colour):
    """Angles half a turn apart share one warp: the twin's scores and shifts are those of warping it."""
    import scipy.fft

    from iastudio.core import similarity

    rng = np.random.default_rng(3)
    imgs = rng.random((4, 14, 10, 3) if colour else (4, 14, 10)).astype(np.float32)
    angles, _ = angle_grid(5.0)
    p = 24
    fv_conj = np.conj(scipy.fft.rfft2(imgs, s=(p, p), axes=(1, 2)))
    pi, pj = np.array([0, 0, 1, 2, 3, 3]), np.array([1, 2, 3, 0, 2, 1])
    a = np.array([7, 43, 36, 0, 70, 34])  # 43 = 7 + 36 (the twin, same source), 36 and 0 half a turn
    score, shift = similarity._translation_search(fv_conj, imgs, pi, pj, a, angles, p, np, lambda f: None)
    for e in range(a.size):  # each entry on its own: its own warp, no twin shared
        rot = warp(imgs[pi[e]][None], np.array([[angles[a[e]], 0.0, 0.0]]))
        prod = fv_conj[pj[e]][None] * scipy.fft.rfft2(rot, s=(p, p), axes=(1, 2))
        if colour:
            prod = prod.sum(axis=-1)
        top, at = similarity._peak(scipy.fft.irfft2(prod, s=(p, p), axes=(1, 2)), np)
        assert_allclose(score[e], top[0], rtol=1e-5)
        assert_allclose(shift[e], at[0], atol=1e-4)


def test_weak_third_rotation_candidates_are_not_searched(shape_images, monkeypatch):
    """Candidates after the best peak and its twin are searched only where their polar score is close."""
    from iastudio.core import similarity

    searched = []
    real = similarity._translation_search

    def counting(fv_conj, images, pairs_i, *args):
        searched.append(int(pairs_i.shape[0]))
        return real(fv_conj, images, pairs_i, *args)

    monkeypatch.setattr(similarity, "_translation_search", counting)
    tau = se2.random_transforms(6, rotation_range=180, shift_range=5, seed=4)
    imgs = warp(np.repeat(shape_images, 2, axis=0), tau).astype(np.float32)
    n_pairs = 6 * 5 // 2
    some = invariant_distances(imgs)
    assert n_pairs * 2 <= searched[-1] < n_pairs * 3  # the best and its twin always, the third on some pairs
    monkeypatch.setattr(similarity, "CANDIDATE_SHARE", -np.inf)  # every candidate
    every = invariant_distances(imgs)
    assert searched[-1] == n_pairs * 3
    assert_allclose(some.distances, every.distances, atol=1e-6)  # the candidates left out never won here


@pytest.mark.parametrize(("shape", "p"), [((3, 12, 12), 24), ((2, 9, 7), 19), ((2, 10, 10, 3), 20)])
def test_polar_magnitudes_read_the_centred_spectrum_bilinearly(shape, p):
    """The half-plane read with mirrored taps equals reading |fftshift(fft2)| with map_coordinates."""
    from scipy import ndimage

    from iastudio.core.similarity import polar_magnitudes

    x = np.random.default_rng(3).random(shape).astype(np.float32)
    # every integer point of the plane, points between them, and points past its edges (which read 0)
    grid = np.linspace(-1.5, p + 0.5, 3 * p)
    rows, cols = np.meshgrid(np.concatenate([np.arange(p), grid]), np.concatenate([np.arange(p), grid]))
    spec = np.abs(np.fft.fftshift(np.fft.fft2(x, s=(p, p), axes=(1, 2)), axes=(1, 2)))
    if spec.ndim == 4:
        spec = spec.sum(axis=-1)
    want = np.stack([ndimage.map_coordinates(s, [rows.ravel(), cols.ravel()], order=1) for s in spec])
    got = polar_magnitudes(x, p, rows, cols)
    assert got.shape == want.shape
    assert got.dtype == np.float32
    assert_allclose(got, want, rtol=1e-5, atol=1e-5 * want.max())
