"""The ``paper`` preset: Algorithm 1 of seed 000 as written, its beta scale, its read-out, one definition."""
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.ndimage import gaussian_filter

from iastudio.core.attention import AttentionRun, Settings
from iastudio.core.collapse import collapsed_clusters
from iastudio.core.descent_mean import descent_step, smoothed_gradient, start_descent_means
from iastudio.core.presets import PAPER, paper_intensity, preset_options, unit_beta
from iastudio.core.similarity import invariant_distances
from iastudio.core.smoothing import gaussian_smooth
from iastudio.core.warp import warp


def _tiny(seed=0, n=3, size=8):
    """``n`` smooth 8x8 images (float64, so finite differences are accurate) and a column-normalised W."""
    rng = np.random.default_rng(seed)
    v = np.stack([gaussian_filter(rng.random((size, size)), 1.0) for _ in range(n)])
    v[:, [0, -1], :] = 0
    v[:, :, [0, -1]] = 0
    w = rng.random((n, n)) + np.eye(n)
    return v, w / w.sum(axis=0, keepdims=True)


def _objective(v, i, tau, mu, weight, sigma):
    """``W_ij ||g_sigma * (v_i o tau - mu_j)||^2``, computed directly."""
    r = warp(v, np.asarray(tau, dtype=float)[None], index=np.array([i]))[0] - mu
    if sigma > 0:
        r = gaussian_smooth(r[None], sigma)[0]
    return weight * float((r**2).sum())


def _fd_gradient(v, i, tau, mu, weight, sigma, h=1e-6):
    g = np.zeros(3)
    for a in range(3):
        up, down = np.array(tau, dtype=float), np.array(tau, dtype=float)
        up[a] += h
        down[a] -= h
        g[a] = (_objective(v, i, up, mu, weight, sigma) - _objective(v, i, down, mu, weight, sigma)) / (2 * h)
    return g


def test_algorithm_1_starts_from_identity_and_the_sample_mean():
    v, w = _tiny()
    st = start_descent_means(v, w)
    assert_allclose(st.params, 0.0)
    for j in range(3):
        assert_allclose(st.means[j], v.mean(axis=0), rtol=1e-12)  # line 2: the sample mean of the inputs
    assert st.entry_src.size == 9  # exact sums: every positive weight is an entry


@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_one_fixed_step_is_tau_minus_t_times_the_gradient_of_f(sigma):
    v, w = _tiny(seed=1)
    st = start_descent_means(v, w)
    st.params[:] = np.random.default_rng(2).normal(scale=[0.2, 0.5, 0.5], size=st.params.shape)  # off the identity
    t = 0.05
    nxt = descent_step(v, st, learning_rate=t, sigmas=(sigma,))
    for e, (i, j) in enumerate(zip(st.entry_src, st.entry_col)):
        grad = _fd_gradient(v, i, st.params[e], st.means[j], st.entry_weight[e], sigma)
        assert_allclose(nxt.params[e], st.params[e] - t * grad, rtol=1e-5, atol=1e-8)  # line 5
    for j in range(3):  # line 6: the weighted mean of the moved images
        sel = np.flatnonzero(st.entry_col == j)
        moved = warp(v, nxt.params[sel], index=st.entry_src[sel])
        assert_allclose(nxt.means[j], np.tensordot(st.entry_weight[sel], moved, axes=1), rtol=1e-10, atol=1e-12)


def test_the_gradient_formula_matches_finite_differences():
    v, _w = _tiny(seed=3)
    tau = np.array([[0.3, 0.4, -0.2]])
    out, jac = warp(v, tau, index=np.array([2]), gradient=True)
    mu = v[0]
    got = smoothed_gradient(out, jac, mu[None], np.array([0.4]), 1.0)[0]
    assert_allclose(got, _fd_gradient(v, 2, tau[0], mu, 0.4, 1.0), rtol=1e-5)


def _after(v, st, sigma, t):
    """Each column's objective after one step at the single level ``sigma`` (computed on its own)."""
    nxt = descent_step(v, st, learning_rate=t, sigmas=(sigma,))
    return nxt.objective[-1]


def test_the_smoothing_level_kept_is_the_one_that_lowers_the_objective_most():
    # rotated copies of one shape: the first level that lowers a column's objective is not its best one
    rng = np.random.default_rng(4)
    base = np.zeros((16, 16))
    base[5:11, 4:9] = 1.0
    base[4:6, 9:12] = 1.0
    base = gaussian_filter(base, 0.7)
    v = warp(base[None], np.column_stack([rng.uniform(-0.6, 0.6, 4), rng.uniform(-1, 1, (4, 2))]),
             index=np.zeros(4, dtype=int))
    w = np.eye(4) * 0.4 + 0.15
    st = start_descent_means(v, w)
    st = descent_step(v, st, learning_rate=0.02, sigmas=(0.0,))  # away from the sample mean
    before = st.objective[-1]
    sigmas, t = (0.0, 1.0, 2.0), 0.2
    per_level = np.array([_after(v, st, s, t) for s in sigmas])  # (levels, columns)
    first = np.array([next((s for s, f in zip(sigmas, per_level[:, j]) if f < before[j]), None) for j in range(4)])
    best = np.array(sigmas)[np.argmin(per_level, axis=0)]
    assert np.any(first != best)  # the case this test is about: first-that-helps and best differ
    nxt = descent_step(v, st, learning_rate=t, sigmas=sigmas)
    assert_allclose(nxt.sigma[-1], best)
    assert_allclose(nxt.objective[-1], per_level.min(axis=0), rtol=1e-10)


def test_a_step_that_raises_the_objective_is_taken_all_the_same():
    v, w = _tiny(seed=5)
    st = descent_step(v, start_descent_means(v, w), learning_rate=0.01, sigmas=(0.0,))
    big = descent_step(v, st, learning_rate=50.0, sigmas=(0.0,))  # far too long a step
    assert np.all(big.objective[-1] > st.objective[-1])  # the objective rose ...
    assert not np.allclose(big.params, st.params)  # ... and the step was not refused


def test_collapse_readout_joins_pairs_closer_than_the_tolerance():
    d = np.array([[0.0, 0.05, 0.9, 0.9],
                  [0.05, 0.0, 0.9, 0.08],
                  [0.9, 0.9, 0.0, 0.9],
                  [0.9, 0.08, 0.9, 0.0]])
    assert collapsed_clusters(d).tolist() == [0, 0, 1, 0]  # 0-1 and 1-3 chain together
    assert collapsed_clusters(d, scale=0.6).tolist() == [0, 0, 1, 2]  # tolerance 0.06: only 0-1
    assert collapsed_clusters(d * 10, scale=10).tolist() == [0, 0, 1, 0]  # relative to the features' size


def test_preset_options_fill_defaults_and_keep_what_was_given():
    defaults = {f.name: getattr(Settings, f.name) for f in Settings.__dataclass_fields__.values()}
    out = preset_options("paper", dict(defaults), defaults)
    assert all(out[k] == v for k, v in PAPER.items())
    out = preset_options("paper", dict(defaults, beta=5.0, iterations=4), defaults)
    assert out["beta"] == 5.0
    assert out["iterations"] == 4
    assert out["init"] == "identity"
    out = preset_options("paper", dict(defaults, clusters=3), defaults)
    assert out["readout"] == "spectral"  # a given k is read out by spectral clustering
    with pytest.raises(ValueError, match="unknown preset"):
        preset_options("papers", {}, defaults)


def test_paper_intensity_and_the_unit_beta_it_implies():
    img = np.array([[[0.0, 0.6], [0.8, 0.0]]])
    assert_allclose(paper_intensity(img), [[[0.0, 0.75], [1.0, 0.0]]])
    assert_allclose(unit_beta(2.0, img), 2.0 * (0.75**2 + 1.0))


def _copies(n=4, size=24, seed=0):
    from iastudio.core.preprocess import unit_norm

    rng = np.random.default_rng(seed)
    base = np.zeros((size, size))
    base[8:16, 7:12] = 1.0
    base[7:10, 12:17] = 0.6
    base = gaussian_filter(base, 0.8)
    tau = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(-2, 2, (n, 2))])
    return unit_norm(warp(base[None], tau, index=np.zeros(n, dtype=int)).astype(np.float32))


def test_a_paper_beta_applies_to_the_paper_intensity_scale():
    # --paper --beta 2: W is exp(-2 d^2) of the distances of the images with their peaks at 1 (the paper's scale)
    v = _copies()
    run = AttentionRun(v, backend="numpy", preset="paper", beta=2.0, iterations=1, mean_steps=1)
    snap = next(s for s in run.steps() if s.stage == "similarity")
    d = invariant_distances(paper_intensity(v), angle_step=5.0).distances
    gamma = np.exp(-2.0 * d**2)
    assert_allclose(snap.weights, gamma / gamma.sum(axis=0), rtol=1e-4, atol=1e-6)
    # the same W on unit-norm images needs beta = unit_beta(2, images) (one shape: one norm)
    unit = AttentionRun(v, backend="numpy", beta=unit_beta(2.0, v), iterations=1, guard=False)
    snap_u = next(s for s in unit.steps() if s.stage == "similarity")
    assert_allclose(snap_u.weights, snap.weights, rtol=1e-3, atol=1e-5)
    # and beta = 2 read on unit-norm images (the old behaviour) spreads W evenly: no cluster structure
    old = AttentionRun(v, backend="numpy", beta=2.0, iterations=1, guard=False)
    assert next(s for s in old.steps() if s.stage == "similarity").weights.min() > 0.5 / len(v)


def test_a_paper_run_computes_its_means_by_algorithm_1():
    # the engine's first iteration under the preset equals Algorithm 1 run by hand on the paper-scale images
    from iastudio.core.descent_mean import descent_means
    from iastudio.core.weights import attention_weights

    v = _copies(n=4, size=16, seed=2)
    run = AttentionRun(v, backend="numpy", preset="paper", iterations=1, mean_steps=3)
    snaps = list(run.steps())
    first = next(s for s in snaps if s.stage == "similarity")
    it = next(s for s in snaps if s.stage == "iteration")
    p = paper_intensity(v)
    w, _ = attention_weights(invariant_distances(p, angle_step=5.0).distances, 2.0)
    assert_allclose(first.weights, w, rtol=1e-5, atol=1e-7)
    st = descent_means(p, w.astype(np.float32), steps=3, learning_rate=PAPER["learning_rate"], sigmas=PAPER["sigmas"])
    assert_allclose(it.means, st.means, rtol=1e-4, atol=1e-5)
    assert len(it.objective) == 3


def test_the_api_keyword_sets_the_paper_settings():
    v = _copies()
    s = AttentionRun(v, preset="paper").settings
    assert all(getattr(s, k) == val for k, val in PAPER.items())
    assert s.preset == "paper"
    assert not s.guarded
    assert s.mean_solver == "gradient"
    assert AttentionRun(v).settings.readout == "spectral"  # without the preset nothing changes
    assert AttentionRun(v, preset="paper", readout="spectral").settings.readout == "spectral"
    assert AttentionRun(v, preset="paper").on_backend("numpy").settings == s
    with pytest.raises(ValueError, match="collapse"):
        AttentionRun(v, readout="collapse", clusters=2)


def test_cli_flag_api_keyword_and_app_paper_mode_give_the_same_settings(monkeypatch):
    from iastudio.core import cli

    v = _copies()
    args = cli.build_parser().parse_args(["demo:shapes", "--paper"])
    made = {}

    class Spy(AttentionRun):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made["settings"] = self.settings
            raise SystemExit(0)

    monkeypatch.setattr("iastudio.core.attention.AttentionRun", Spy)
    monkeypatch.setattr(cli, "_working_images", lambda args, data: (None, v, None))
    monkeypatch.setattr(cli, "_usable_inputs", lambda args, progress=None: None)
    monkeypatch.setattr(cli, "_relion_inputs", lambda args, data: None)
    with pytest.raises(SystemExit):
        cli._run_body(args, None)
    api = AttentionRun(v, preset="paper").settings
    assert made["settings"] == api
    from iastudio.core.demos import PAPER_MODE

    assert AttentionRun(v, **PAPER_MODE).settings == api  # the app's paper mode (its options: tests/test_app_tour.py)


@pytest.mark.slow
def test_ia_cluster_demo_shapes_paper_runs_end_to_end_and_w_becomes_block_diagonal(tmp_path):
    from iastudio.core import cli
    from iastudio.core.project import load_project
    from iastudio.core.weights import block_diagonality

    out, proj = tmp_path / "out", tmp_path / "run.iaproj"
    assert cli.main(["demo:shapes", "--paper", "--size", "32", "--quiet", "--out", str(out),
                     "--save-project", str(proj)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parameters"]["preset"] == "paper"
    assert summary["parameters"]["readout"] == "collapse"
    assert summary["parameters"]["beta"] == 2.0
    assert summary["n_clusters"] == 3
    assert summary["metrics"]["ari"] == 1.0
    p = load_project(proj)
    assert block_diagonality(p.result["weights"], p.labels) > 0.99
