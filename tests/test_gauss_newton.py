"""The one damped Gauss-Newton step shared by the similarity refinement and the invariant mean."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.gauss_newton import gauss_newton_metric, gauss_newton_step
from iastudio.core.similarity import refine_alignment
from iastudio.core.warp import warp
from tests.conftest import smooth_blob


def test_linear_model_is_solved_in_one_undamped_step():
    rng = np.random.default_rng(0)
    jac = rng.normal(size=(4, 3, 5, 6)).astype(np.float32)
    true = rng.normal(size=(4, 3))
    # r = J^T d*  ->  the minimiser of ||r + J^T delta||^2 is delta = -d*
    resid = np.einsum("eipq,ei->epq", jac.astype(np.float64), true).astype(np.float32)
    delta, predicted = gauss_newton_step(jac, resid, 0.0)
    assert_allclose(delta, -true, rtol=1e-4, atol=1e-5)
    # the whole residual is explained: the predicted decrease is ||r||^2
    assert_allclose(predicted, (resid.astype(np.float64) ** 2).sum(axis=(1, 2)), rtol=1e-4)
    m = gauss_newton_metric(jac)
    assert m.shape == (4, 3, 3)
    assert m.dtype == np.float64
    assert_allclose(m, np.einsum("eipq,ejpq->eij", jac.astype(np.float64), jac.astype(np.float64)), rtol=1e-5)


def test_damping_shortens_the_step_and_a_given_metric_is_used():
    rng = np.random.default_rng(1)
    jac = rng.normal(size=(3, 3, 8, 8)).astype(np.float32)
    resid = rng.normal(size=(3, 8, 8)).astype(np.float32)
    free, _ = gauss_newton_step(jac, resid, 0.0)
    damped, _ = gauss_newton_step(jac, resid, np.array([0.0, 1.0, 100.0]))
    assert_allclose(damped[0], free[0], rtol=1e-6)
    norms = np.linalg.norm(damped, axis=1)
    assert norms[2] < norms[1] < np.linalg.norm(free[1])
    same, _ = gauss_newton_step(jac, resid, 1.0, metric=gauss_newton_metric(jac))
    assert_allclose(same, gauss_newton_step(jac, resid, 1.0)[0])


def test_recovers_a_known_rotation_and_shift():
    img = smooth_blob(48)[None].astype(np.float32)
    true = np.array([[0.12, 1.4, -0.9]])  # 6.9 degrees, (1.4, -0.9) px
    target = warp(img, true)
    tau = np.zeros((1, 3))
    for _ in range(8):
        out, jac = warp(img, tau, gradient=True)
        delta, _ = gauss_newton_step(jac, out - target, 1e-3)
        tau = tau + delta
    assert_allclose(tau, true, atol=2e-4)
    # and through the similarity's refinement loop, from a start near the truth
    p, resid = refine_alignment(img, target, np.array([[0.08, 1.0, -0.5]]), steps=10)
    assert_allclose(p, true, atol=2e-4)
    assert resid[0] < 1e-8


@pytest.mark.parametrize(("caller", "step"), [("similarity", "damped_step"), ("invariant_mean", "gauss_newton_step")])
def test_both_stages_call_the_shared_step(monkeypatch, caller, step):
    """The similarity steps from its summed normal equations, the mean from its smoothed residuals: one solve."""
    import importlib

    mod = importlib.import_module(f"iastudio.core.{caller}")
    calls = []
    real = getattr(mod, step)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, step, spy)
    img = smooth_blob(24)[None].astype(np.float32)
    moved = warp(img, np.array([[0.05, 0.5, 0.2]])).astype(np.float32)
    x = np.concatenate([img, moved / np.linalg.norm(moved)])
    if caller == "similarity":
        from iastudio.core.similarity import invariant_distances

        invariant_distances(x)
    else:
        from iastudio.core.invariant_mean import invariant_means

        invariant_means(x, np.full((2, 1), 0.5, dtype=np.float32), steps=2)
    assert calls


def test_no_function_of_the_numerical_core_is_over_80_lines():
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[1] / "core"
    long = []
    for name in ("similarity", "invariant_mean", "gauss_newton", "backend", "warp", "warp_kernel", "neighbors",
                 "distributed"):
        tree = ast.parse((core / f"{name}.py").read_text())
        long += [f"{name}.{f.name}: {f.end_lineno - f.lineno + 1}" for f in ast.walk(tree)
                 if isinstance(f, ast.FunctionDef) and f.end_lineno - f.lineno + 1 > 80]
    assert not long
