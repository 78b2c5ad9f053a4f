"""The typed boundary of a run: Stage/RunState, explicit options, inputs, snapshot(), on_backend(), result arrays."""
import dataclasses
import inspect

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.attention import RESULT_ARRAYS, AttentionRun, RunResult, RunState, Settings, Stage
from iastudio.core.demos import load_demo
from iastudio.core.preprocess import preprocess

FAST = dict(iterations=1, mean_steps=2)


@pytest.fixture(scope="module")
def images():
    return preprocess(load_demo("shapes").images[:9], size=20).images


@pytest.fixture(scope="module")
def finished(images):
    run = AttentionRun(images, backend="numpy", **FAST)
    snaps = list(run.steps())
    return run, snaps


def test_stage_and_run_state_are_strings():
    assert [str(s) for s in Stage] == ["similarity", "means", "iteration", "done"]
    assert Stage.DONE == "done"
    assert Stage("means") is Stage.MEANS
    assert [str(s) for s in RunState] == ["idle", "running", "stopping", "stopped", "finished", "failed", "splitting"]
    assert f"{RunState.SPLITTING}" == "splitting"


def test_snapshot_stages_are_stage_members(finished):
    _, snaps = finished
    assert all(type(s.stage) is Stage for s in snaps)
    assert snaps[0].stage is Stage.SIMILARITY
    assert snaps[-1].stage is Stage.DONE


def test_options_are_the_settings_fields_keyword_only():
    params = inspect.signature(AttentionRun.__init__).parameters
    kw = [p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    assert {p.name for p in kw} == set(fields) | {"backend", "client", "threads"}  # where it runs, not what
    for p in kw:  # the defaults are the Settings defaults (one home)
        if p.name in fields:
            assert p.default == fields[p.name], p.name
    with pytest.raises(TypeError):
        AttentionRun(np.zeros((2, 8, 8), np.float32), backend="numpy", itterations=2)


def test_options_reach_the_settings(images):
    run = AttentionRun(images, backend="numpy", method="ka", beta=2.5, iterations=4, clusters=3, angle_step=10.0,
                       group="e2", neighbors="all", guard=False, sigmas=(0.0,))
    s = run.settings
    assert (s.method, s.beta, s.iterations, s.clusters, s.angle_step, s.group, s.neighbors, s.guard, s.sigmas) == \
        ("ka", 2.5, 4, 3, 10.0, "e2", "all", False, (0.0,))


def test_inputs_are_the_given_images_read_only(images):
    given = images.copy()
    run = AttentionRun(given, backend="numpy", **FAST)
    assert_array_equal(run.inputs, images)
    assert run.inputs.dtype == np.float32
    assert not run.inputs.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        run.inputs[0, 0, 0] = 1.0
    assert given.flags.writeable  # the caller's own array is left writeable


def test_snapshot_before_start_and_after_finish(images, finished):
    with pytest.raises(RuntimeError, match="not computed"):
        AttentionRun(images, backend="numpy", **FAST).snapshot()
    run, snaps = finished
    snap = run.snapshot()
    assert snap.stage is Stage.DONE
    assert_array_equal(snap.labels, snaps[-1].labels)
    assert_allclose(snap.distances, snaps[-1].distances)
    assert snap.timings["total_s"] > 0
    with pytest.raises(ValueError, match="no invariant means"):
        run.snapshot(Stage.MEANS)


def test_on_backend_is_a_fresh_run_of_the_same_images_and_settings(images, finished):
    run, _ = finished
    other = run.on_backend("numpy")
    assert other is not run
    assert not other.finished
    assert other.backend.name == "numpy"
    assert other.settings == run.settings
    assert other.settings is not run.settings
    assert_array_equal(other.inputs, run.inputs)
    res = other.run()
    assert_array_equal(res.labels, run.result().labels)
    assert_allclose(res.weights, run.result().weights, rtol=1e-6, atol=1e-7)


def test_result_arrays_round_trip(finished):
    run, _ = finished
    res = run.result()
    arrays = res.arrays()
    assert tuple(arrays) == RESULT_ARRAYS
    assert arrays["run_labels"] is res.labels
    assert arrays["cluster_means"] is res.cluster_means
    back = RunResult.from_arrays(arrays, features=res.features, history=res.history, iterations=res.iterations,
                                 beta=res.beta)
    assert back.n_clusters == res.n_clusters == int(res.labels.max()) + 1
    for key in RESULT_ARRAYS:
        assert_array_equal(back.arrays()[key], arrays[key])
    assert back.iterations == res.iterations
    assert back.beta == res.beta
    assert len(back.history) == len(res.history)
    with pytest.raises(KeyError, match="scores"):
        RunResult.from_arrays({k: v for k, v in arrays.items() if k != "scores"}, features=res.features)


def test_project_format_uses_the_result_arrays():
    from iastudio.core import project

    assert project._RESULT_KEYS is RESULT_ARRAYS
    assert tuple(Stage) == project._STAGES
