"""A reopened project shows what was saved: convergence curves, KA's clusters (core, no Qt)."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.attention import Stage
from iastudio.core.frames import FrameBuilder
from iastudio.core.project import load_project, save_project
from iastudio.core.session import Session, stream_run


@pytest.fixture(scope="module")
def finished():
    s = Session(size=24)
    s.load_demo("shapes")
    run = s.start(backend="numpy", iterations=2, clusters=3)
    for item in stream_run(run, FrameBuilder()):
        s.take(item)
    assert s.final is not None and s.final.ka_labels is not None
    return s


def _reopen(tmp_path, session_or_project):
    path = tmp_path / "p.iaproj"
    if isinstance(session_or_project, Session):
        session_or_project.save_project(path)
    else:
        save_project(path, session_or_project)
    t = Session()
    t.open_project(path)
    return t


def _same_curves(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert len(a[key]) == len(b[key]), key
        assert_allclose(np.asarray(b[key], float), np.asarray(a[key], float), rtol=1e-6, equal_nan=True)


def test_the_final_snapshot_is_recorded_once(finished):
    stages = [f.snapshot.stage for f in finished.frames]
    assert stages.count(Stage.DONE) == 1 and stages[-1] == Stage.DONE
    assert finished.frames[-1] is finished.final


def test_reopened_curves_equal_the_live_run(finished, tmp_path):
    t = _reopen(tmp_path, finished)
    _same_curves(finished.final.curves, t.final.curves)
    # one point per distance computation: the inputs and after each iteration
    assert len(t.final.curves["median"]) == finished.run.settings.iterations + 1
    assert_allclose(t.final.order, finished.final.order)


def test_older_projects_with_the_last_step_twice_open_with_the_same_curves(finished, tmp_path):
    proj = finished.to_project()
    proj.history = proj.history + [dict(proj.history[-1])]  # as projects saved before the fix hold it
    t = _reopen(tmp_path, proj)
    _same_curves(finished.final.curves, t.final.curves)


def test_ka_labels_are_saved_and_restored(finished, tmp_path):
    path = tmp_path / "ka.iaproj"
    finished.save_project(path)
    assert_allclose(load_project(path).ka_labels, finished.final.ka_labels)
    t = Session()
    t.open_project(path)
    assert_allclose(t.final.ka_labels, finished.final.ka_labels)


def test_projects_without_ka_labels_still_open(finished, tmp_path):
    proj = finished.to_project()
    proj.ka_labels = None
    t = _reopen(tmp_path, proj)
    assert t.final is not None and t.final.ka_labels is None


def test_ka_labels_of_the_wrong_shape_are_refused(finished, tmp_path):
    from iastudio.core.project import ProjectError

    proj = finished.to_project()
    proj.ka_labels = np.zeros(proj.n + 1, dtype=int)
    path = tmp_path / "bad.iaproj"
    save_project(path, proj)
    with pytest.raises(ProjectError):
        load_project(path)
    proj.ka_labels = np.full(proj.n, proj.n + 5)  # a cluster number out of range
    save_project(path, proj)
    with pytest.raises(ProjectError):
        load_project(path)
