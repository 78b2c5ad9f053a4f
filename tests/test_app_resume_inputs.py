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
    m.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.run_panel.beta_auto.setChecked(False)  # an explicit β runs every iteration (auto stops once settled)
    w.run_panel.iterations.setValue(30)  # long enough to be stopped mid-run
    assert w.start_run()
    _wait(qapp, lambda: m.latest is not None or m.state != "running")
    m.stop()
    _wait(qapp, lambda: m.state in ("stopped", "finished", "failed"))
    assert m.state == "stopped"
    assert m.can_resume()
    assert w.resume_action.isEnabled()
    assert w.run_panel.resume_btn.isEnabled()
    yield w
    if m.busy:
        m.stop()
        _wait(qapp, lambda: not m.busy)
    w.close()


def _resume_impossible(w):
    m = w.model
    assert not m.can_resume()
    assert not w.resume_action.isEnabled()
    assert not w.run_panel.resume_btn.isEnabled()
    assert m.resume() is False
    assert m.state != "running"


def test_new_transforms_discard_the_stopped_run(stopped, qapp):
    w, m = stopped, stopped.model
    before = m.working.copy()
    w.transform_panel.seed.setValue(5)
    w.transform_panel.apply_btn.click()
    qapp.processEvents()
    assert not np.allclose(m.working, before)  # the images did change
    _resume_impossible(w)
    assert m.run is None
    assert m.latest is None
    w.resume_action.trigger()  # a disabled action's shortcut does nothing either
    assert m.state != "running"

    w.run_panel.iterations.setValue(1)
    assert w.start_run()
    _wait(qapp, lambda: m.state in ("finished", "failed"))
    assert m.state == "finished"
    assert m.final.result.labels.shape == (m.n,)
    assert_allclose(m.run.inputs, m.working)  # the run was made on the transformed images


def test_loading_another_demo_while_stopped(stopped, qapp):
    w, m = stopped, stopped.model
    n_shapes = m.n
    assert w.load_demo("digits")
    qapp.processEvents()
    assert m.n > 0
    assert m.n != n_shapes
    _resume_impossible(w)
    assert m.run is None
    assert m.final is None
    assert m.book is None
