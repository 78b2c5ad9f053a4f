"""M2: Resume is never offered for a run whose inputs changed (end to end, pytest-qt)."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import wait_until  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402


def _wait(app, pred, timeout=120.0):
    wait_until(app, pred, timeout)


@pytest.fixture
def stopped(qapp, home):
    """A window whose shapes run was stopped after its first frame (Resume possible)."""
    w = MainWindow()
    w.show()
    m = w.model
    m.session.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.run_panel.beta_auto.setChecked(False)  # an explicit β runs every iteration (auto stops once settled)
    w.run_panel.iterations.setValue(30)  # long enough to be stopped mid-run...
    # ...and never converged early (W stopping to move would end it before Stop lands on a loaded machine)
    assert m.start(backend="numpy", **(w.run_panel.options() | {"converge_tol": 0.0}))
    _wait(qapp, lambda: m.session.latest is not None or m.session.state != "running")
    m.stop()
    _wait(qapp, lambda: m.session.state in ("stopped", "finished", "failed"))
    assert m.session.state == "stopped"
    assert m.session.can_resume()
    assert w.resume_action.isEnabled()
    assert w.run_panel.resume_btn.isEnabled()
    yield w
    if m.session.busy:
        m.stop()
        _wait(qapp, lambda: not m.session.busy)
    w.close()


def _resume_impossible(w):
    m = w.model
    assert not m.session.can_resume()
    assert not w.resume_action.isEnabled()
    assert not w.run_panel.resume_btn.isEnabled()
    assert m.resume() is False
    assert m.session.state != "running"


def test_new_transforms_discard_the_stopped_run(stopped, qapp):
    w, m = stopped, stopped.model
    before = m.session.working.copy()
    w.transform_panel.seed.setValue(5)
    w.transform_panel.apply_btn.click()
    qapp.processEvents()
    assert not np.allclose(m.session.working, before)  # the images did change
    _resume_impossible(w)
    assert m.session.run is None
    assert m.session.latest is None
    w.resume_action.trigger()  # a disabled action's shortcut does nothing either
    assert m.session.state != "running"

    w.run_panel.iterations.setValue(1)
    assert w.start_run()
    _wait(qapp, lambda: m.session.state in ("finished", "failed"))
    assert m.session.state == "finished"
    assert m.session.final.result.labels.shape == (m.session.n,)
    assert_allclose(m.session.run.inputs, m.session.working)  # the run was made on the transformed images


def test_loading_another_demo_while_stopped(stopped, qapp):
    w, m = stopped, stopped.model
    n_shapes = m.session.n
    assert w.load_demo("digits")
    qapp.processEvents()
    assert m.session.n > 0
    assert m.session.n != n_shapes
    _resume_impossible(w)
    assert m.session.run is None
    assert m.session.final is None
    assert m.session.book is None
