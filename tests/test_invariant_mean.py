"""The invariant-mean stage: the relative weight cut-off, converged columns, the cheap candidate rule."""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.demos import load_demo
from iastudio.core.invariant_mean import invariant_mean_step, invariant_means, start_invariant_means, weight_entries
from iastudio.core.preprocess import preprocess
from iastudio.core.similarity import invariant_distances
from iastudio.core.weights import attention_weights


def test_weight_entries_keeps_a_fraction_of_each_columns_mass():
    w = np.array([[0.5, 0.0001], [0.3, 0.0499], [0.15, 0.15], [0.0499, 0.3], [0.0001, 0.5]])
    src, col, wt = weight_entries(w, mass=0.999)
    # column 0: 0.5 + 0.3 + 0.15 + 0.0499 = 0.9999 >= 0.999 -> the 0.0001 is dropped
    assert_array_equal(col, [0, 0, 0, 0, 1, 1, 1, 1])
    assert_array_equal(src, [0, 1, 2, 3, 1, 2, 3, 4])
    assert_allclose(wt[:4], np.array([0.5, 0.3, 0.15, 0.0499]) / 0.9999)
    assert_allclose(np.bincount(col, weights=wt), [1.0, 1.0])
    src95, _, wt95 = weight_entries(w[:, :1], mass=0.95)
    assert_array_equal(src95, [0, 1, 2])  # 0.5 + 0.3 + 0.15 already hold 95 %
    assert_allclose(wt95, np.array([0.5, 0.3, 0.15]) / 0.95)
    assert weight_entries(w[:, :1], mass=1.0)[0].size == 5
    # relative, not absolute: scaling a column does not change what is kept
    assert_array_equal(weight_entries(w * 1e-4, mass=0.999)[0], src)
    # a sparse W gives the same entries
    s_src, s_col, s_wt = weight_entries(sp.csr_matrix(w), mass=0.999)
    assert_array_equal(s_src, src)
    assert_array_equal(s_col, col)
    assert_allclose(s_wt, wt)
    with pytest.raises(ValueError, match=r"mass must be in \(0, 1\]"):
        weight_entries(w, mass=0.0)


@pytest.fixture(scope="module")
def digits():
    s = load_demo("digits", seed=0)
    x = preprocess(s.images, size=32).images[::2]  # 20 images, 4 classes
    sim = invariant_distances(x)
    w, _ = attention_weights(sim.distances)
    return x, w.astype(np.float32), sim.transforms


def test_first_improvement_reaches_the_same_objective_as_best_of_all(digits):
    x, w, t = digits
    best = invariant_means(x, w, t, steps=6, first_improvement=False)
    first = invariant_means(x, w, t, steps=6)
    a, b = best.objective[-1], first.objective[-1]
    assert_allclose(b.sum(), a.sum(), rtol=1e-3)  # the stage's result: its objective
    obj = np.array([o.sum() for o in first.objective])
    assert (np.diff(obj) <= 1e-9).all()  # still never increases


def test_converged_columns_stop_and_keep_their_mean(digits):
    x, w, t = digits
    st = start_invariant_means(x, w, t, mass=0.999)
    st = invariant_mean_step(x, st, rtol=1e9)  # first step: no previous objective, all move
    assert st.active.all()
    st2 = invariant_mean_step(x, st, rtol=1e9)  # nothing falls by 1e9 x its value: all stop
    assert st2.converged
    st3 = invariant_mean_step(x, st2, rtol=1e9)  # a converged state does not move
    assert_array_equal(st3.means, st2.means)
    assert_array_equal(st3.params, st2.params)
    assert_allclose(st3.objective[-1], st2.objective[-1])
    # a loose rtol stops early but the objective stays within 1e-3 of the full run
    full = invariant_means(x, w, t, steps=10, mass=0.999)
    early = invariant_means(x, w, t, steps=10, mass=0.999, rtol=3e-4)
    assert early.step <= full.step
    assert_allclose(early.objective[-1].sum(), full.objective[-1].sum(), rtol=1e-3)


def test_big_endian_images_give_the_same_means():
    # the means' first warps go straight into the step cache only when its dtype is the warp's own
    rng = np.random.default_rng(0)
    imgs = rng.random((4, 12, 12)).astype(np.float32)
    w = np.full((4, 4), 0.25)
    native = start_invariant_means(imgs, w)
    swapped = start_invariant_means(imgs.astype(">f4"), w)
    assert_allclose(np.asarray(swapped.means, dtype=np.float64), native.means, rtol=1e-6, atol=1e-7)
