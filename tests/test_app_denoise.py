"""The Run panel's denoise choice reaches the session, and what the denoiser did is drawn (pytest-qt)."""
import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from test_session_denoise import _noisy_set  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.options import option  # noqa: E402
from iastudio.core.session_inputs import RunInputs  # noqa: E402


@pytest.fixture
def window(qapp, qtbot, home, monkeypatch, tmp_path):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    yield w
    w.model.shutdown(5000)


def _run(window, qtbot):
    window.run_panel.size.setValue(32)
    window.run_panel.iterations.setValue(1)
    window.run_panel.clusters_auto.setChecked(False)
    window.run_panel.clusters.setValue(3)
    window.run_panel.start_btn.click()
    qtbot.waitUntil(lambda: window.model.session.state in ("finished", "failed"), timeout=60000)
    assert window.model.session.state == "finished"


def test_the_choice_reaches_the_session_and_the_result_line_is_drawn(window, qtbot, monkeypatch):
    panel = window.run_panel
    assert panel.denoise.currentData() == option("denoise").default == "auto"
    assert [panel.denoise.itemData(i) for i in range(panel.denoise.count())] == ["auto", "on", "off"]
    assert option("denoise").help[1:] in panel.denoise.toolTip()
    made_on = []
    call = RunInputs.__call__

    def spy(self):
        made_on.append(threading.current_thread() is threading.main_thread())
        return call(self)

    monkeypatch.setattr(RunInputs, "__call__", spy)
    data, _ = _noisy_set(n=15, seed=1)
    window.model.session.set_images(data)
    panel.denoise.setCurrentIndex(panel.denoise.findData("on"))
    _run(window, qtbot)
    s = window.model.session
    assert made_on == [False]  # denoised in the run's worker, never on the GUI thread
    assert s.denoise == "on"
    assert s.denoise_report.applied
    evidence = window.clusters_panel.evidence
    line = evidence.text().splitlines()[1]  # after "Run: 3 clusters …"
    assert line.startswith("Denoised: noise σ≈")
    assert f"{s.denoise_report.components} components kept" in line
    assert evidence.fontMetrics().horizontalAdvance(line.split(",")[0]) <= evidence.width()  # wraps, not clipped

    panel.denoise.setCurrentIndex(panel.denoise.findData("off"))  # off reaches the session too
    assert window.start_run()
    assert s.denoise == "off"
    assert s.run_inputs is None  # nothing to make: the run goes on the per-image canvases
    window.model.stop()
    qtbot.waitUntil(lambda: not s.busy, timeout=60000)
    assert made_on == [False]


def test_the_images_left_as_they_were_are_named_in_the_clusters_tab(window, qtbot):
    """The trial: "1 image of another size or colour left as it was" without its name (ia-cluster names it)."""
    import numpy as np

    from iastudio.core.imageset import ImageSet

    data, _ = _noisy_set(n=15, seed=1)
    rng = np.random.default_rng(3)
    odd = [rng.normal(0, 1, shape).astype(np.float32) for shape in ((37, 64), (20, 20))]
    strays = ImageSet([*data.images, *odd], [*data.paths, "/trial/odd_64x37.png", "/trial/small.png"],
                      [*data.labels, "x", "x"], [])
    window.model.session.set_images(strays)
    window.run_panel.denoise.setCurrentIndex(window.run_panel.denoise.findData("on"))
    _run(window, qtbot)
    s = window.model.session
    assert s.denoise_report.applied
    assert list(s.denoise_report.left_out) == [15, 16]
    line = window.clusters_panel.evidence.text().splitlines()[1]
    assert line.startswith("Denoised: noise σ≈")
    assert line.endswith("; 2 images of another size or colour left as they were: odd_64x37.png, small.png")
    assert s.result.notes[0] == line  # saved with the run (summary.json's notes, the project)


def test_the_choice_is_saved_and_an_older_project_opens_with_auto(window, qtbot):
    panel = window.run_panel
    panel.denoise.setCurrentIndex(panel.denoise.findData("off"))
    state = panel.settings_state()
    assert state["denoise"] == "off"  # by its value, not its place in the list
    panel.set_options({"method": "ia", "denoise": "on"})
    assert panel.denoise.currentData() == "on"
    panel.restore_settings(state)
    assert panel.denoise.currentData() == "off"
    panel.restore_settings({k: v for k, v in state.items() if k != "denoise"})  # saved before the field
    assert panel.denoise.currentData() == "off"
    panel.set_options({"method": "ia", "clusters": "auto"})  # a project saved before the app denoised
    assert panel.denoise.currentData() == "auto"
    assert panel.denoise_choice() == "auto"
    assert "denoise" not in panel.options()  # the engine's options only; start_run passes the choice
