"""The Run panel's Phase flip (CTF) choice: offered for a RELION STAR set only, saved with the project, and a
run with it on clusters the images flipped with each particle's own CTF (pytest-qt)."""
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402
from PIL import Image  # noqa: E402

import iastudio.app.main_window  # noqa: E402, F401 - imported first, so conftest answers the app's questions
from iastudio.core.particle_ctf import NO_CTF, ParticleCtf, phase_flip_particles, star_ctf  # noqa: E402
from iastudio.core.preprocess import preprocess  # noqa: E402

pytest.importorskip("starfile")
from test_particle_ctf import _ctf_particles  # noqa: E402

WAIT_MS = 30000


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _load(window, qtbot, *paths):
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        assert window.load_paths([str(p) for p in paths])


def _pngs(folder, n=3):
    folder.mkdir(exist_ok=True)
    for k in range(n):
        img = np.zeros((16, 16), np.uint8)
        img[4:10, 3 + k:9 + k] = 255
        Image.fromarray(img).save(folder / f"x{k}.png")
    return folder


def _star_set(tmp_path, n=12):
    """``n`` particles in two .mrcs with a RELION 3.1 STAR file that also names a row beyond its stack."""
    folder = tmp_path / "star"
    folder.mkdir()
    return _ctf_particles(folder, n=n, side=32)


def test_disabled_with_its_reason_for_pngs_and_enabled_for_a_star_set(window, qtbot, tmp_path):
    box = window.run_panel.phase_flip
    assert window.run_panel.settings_state()["phase_flip"] is False  # default off
    _load(window, qtbot, _pngs(tmp_path / "png"))
    assert not box.isEnabled()
    assert NO_CTF in box.toolTip()
    assert "open a RELION particle STAR file" in box.toolTip()
    box.setChecked(True)
    assert window.run_panel.phase_flip_choice() is False  # not offered: a run would not flip

    star, raw, defocus = _star_set(tmp_path)
    window.model.session.clear()
    _load(window, qtbot, star)
    s = window.model.session
    assert box.isEnabled()
    assert "each image with its own CTF" in box.text()
    assert "ia-cluster --phase-flip" in box.toolTip()
    assert window.run_panel.phase_flip_choice() is True
    # the row naming image 99 of a.mrcs was skipped: the parameters stay with the images that loaded
    assert len(s.data.skipped) == 1
    assert "99" in s.data.skipped[0]["path"]
    assert [c.defocus for c in s.data.ctf] == pytest.approx(list(defocus))
    rows = star_ctf(star)
    assert s.data.ctf == rows[:2] + rows[3:]

    _load(window, qtbot, _pngs(tmp_path / "more", n=2))  # images added later carry none
    assert s.n == len(raw) + 2
    assert s.data.ctf[-2:] == [None, None]
    assert all(isinstance(c, ParticleCtf) for c in s.data.ctf[:-2])
    assert not box.isEnabled()
    assert "2 of the 14 images have no CTF parameters" in box.toolTip()


def test_a_run_with_it_on_clusters_the_flipped_images_and_says_so(window, qtbot, tmp_path):
    star, raw, defocus = _star_set(tmp_path)
    _load(window, qtbot, star)
    panel, s = window.run_panel, window.model.session
    panel.denoise.setCurrentIndex(panel.denoise.findData("off"))  # only the flip between raw and canvas
    panel.phase_flip.setChecked(True)
    panel.size.setValue(24)
    panel.iterations.setValue(1)
    panel.angle_step.setValue(15.0)  # a fast run: what it clusters is checked, not how well
    panel.clusters_auto.setChecked(False)
    panel.clusters.setValue(2)
    assert window.start_run()
    qtbot.waitUntil(lambda: s.state in ("finished", "failed"), timeout=60000)
    assert s.state == "finished"
    flipped = phase_flip_particles(list(raw), s.data.ctf)
    want = preprocess(flipped, size=24).images
    assert_allclose(s.base, want, rtol=1e-4, atol=1e-5)  # what the run clustered: the flipped raw images
    assert_allclose(s.working, want, rtol=1e-4, atol=1e-5)  # no transforms: the same images
    assert np.abs(want - preprocess(list(raw), size=24).images).max() > 0.05  # the flip changed them
    line = window.clusters_panel.evidence.text().splitlines()[1]  # after "Run: 2 clusters …"
    assert line.startswith(f"Phase-flipped: each of the {len(raw)} images with its own CTF (defocus")
    params = s.to_project().parameters
    assert params["phase_flip"] is True
    assert params["phase_flip_report"]["applied"] is True
    assert_allclose(params["phase_flip_report"]["defocus_A"], [defocus.min(), defocus.max()], rtol=1e-6)


def test_the_choice_and_the_ctf_are_saved_and_restored_and_old_projects_open_with_it_off(window, qtbot, tmp_path):
    star, _raw, _ = _star_set(tmp_path)
    _load(window, qtbot, star)
    panel, s = window.run_panel, window.model.session
    ctf = list(s.data.ctf)
    panel.phase_flip.setChecked(True)
    assert window.projects.save_to(tmp_path / "p.iaproj")
    panel.phase_flip.setChecked(False)
    s.clear()
    assert not panel.phase_flip.isEnabled()
    assert window.projects.open_project(tmp_path / "p.iaproj", ask=False)
    assert s.data.ctf == ctf  # kept in the project: the embedded images can be flipped again
    assert panel.phase_flip.isEnabled()
    assert panel.phase_flip.isChecked()

    panel.set_options({"method": "ia", "clusters": "auto"})  # a project saved before the choice existed
    assert not panel.phase_flip.isChecked()
    state = panel.settings_state()
    panel.restore_settings({k: v for k, v in state.items() if k != "phase_flip"}, partial=True)
    assert not panel.phase_flip.isChecked()


def test_a_reopened_project_phase_flips_its_original_files(tmp_path):
    """The session alone: a run after reopening flips the originals (read again) with the saved CTF."""
    from iastudio.core.session import Session

    star, raw, _ = _star_set(tmp_path, n=8)
    s = Session(size=24)
    s.add_paths([star])
    s.save_project(tmp_path / "p.iaproj")
    t = Session()
    t.open_project(tmp_path / "p.iaproj")
    assert t.embedded
    assert t.data.ctf == s.data.ctf
    assert t.run_here(denoise="off", phase_flip=True, iterations=1, clusters=2) is not None
    want = preprocess(phase_flip_particles(list(raw), s.data.ctf), size=24).images
    assert_allclose(t.base, want, rtol=1e-4, atol=1e-5)
    assert t.final.result.notes[0].startswith("Phase-flipped: each of the 8 images")
    u = Session()
    u.add_paths([_pngs(tmp_path / "png")])
    assert u.start(phase_flip=True) is None  # refused, saying why
    assert u.run is None
    assert Path(u.data.paths[0]).suffix == ".png"


def test_export_for_relion_writes_the_clusters_poses_and_each_particles_ctf(window, qtbot, tmp_path):
    """The app had no RELION export (only ia-cluster --export relion): File → Export → For RELION writes the
    current clusters, edits included, in the Clusters list's order, with the STAR file's CTF and pixel size."""
    import mrcfile
    import starfile

    star, _, defocus = _star_set(tmp_path)
    _load(window, qtbot, star)
    panel, s = window.run_panel, window.model.session
    panel.denoise.setCurrentIndex(panel.denoise.findData("off"))
    panel.size.setValue(24)
    panel.iterations.setValue(1)
    panel.angle_step.setValue(15.0)
    panel.clusters_auto.setChecked(False)
    panel.clusters.setValue(2)
    assert window.start_run()
    qtbot.waitUntil(lambda: s.state in ("finished", "failed"), timeout=60000)
    assert s.state == "finished"
    out = Path(window.exports.relion(str(tmp_path / "to relion")))
    assert out.parent == tmp_path / "to relion"  # a new folder inside the one chosen
    assert window.statusBar().currentMessage() == f"Exported particles.star and class_averages.mrcs into {out}"
    exported = starfile.read(out / "particles.star", always_dict=True)
    parts, optics = exported["particles"], exported["optics"]
    order = {c: k + 1 for k, c in enumerate(s.book.cluster_ids())}
    assert parts["rlnClassNumber"].tolist() == [order[c] for c in s.book.labels]
    assert parts["rlnImageName"].tolist()[0] == f"000001@{(star.parent / 'a.mrcs').resolve()}"
    assert_allclose(parts["rlnDefocusU"], defocus, rtol=1e-7)
    assert optics["rlnImagePixelSize"].tolist() == [3.0]
    assert optics["rlnVoltage"].tolist() == [300.0]
    assert np.isfinite(parts["rlnAnglePsi"]).all()
    with mrcfile.open(out / "class_averages.mrcs") as mrc:
        assert mrc.data.shape == (2, 24, 24)
        assert mrc.voxel_size.x == pytest.approx(3.0 / float(np.mean(s.canvas.scale)), rel=1e-5)
    assert s.merge_clusters(s.book.cluster_ids())  # an edit: one class now, every particle in it
    from iastudio.app.export import export_relion
    from iastudio.core.cluster_means import edited_cluster_means

    assert export_relion(s, tmp_path / "cancelled", progress=lambda done, total: False) is None  # Cancel
    assert not (tmp_path / "cancelled").exists()
    again = Path(window.exports.relion(str(tmp_path / "to relion")))  # at once: the means' worker may still run
    assert again != out
    parts = starfile.read(again / "particles.star", always_dict=True)["particles"]
    assert parts["rlnClassNumber"].tolist() == [1] * s.n
    assert np.isfinite(parts["rlnAnglePsi"]).all()  # posed onto the merged cluster's own mean
    res = s.final.result
    (mean,), _ = edited_cluster_means(s.working, [np.arange(s.n)], distances=res.input_distances,
                                      **s.alignment_options())
    with mrcfile.open(again / "class_averages.mrcs") as mrc:  # a stack of one image (mrcfile reads it 2-D)
        assert (int(mrc.header.nz), int(mrc.header.ispg)) == (1, 0)
        assert_allclose(mrc.data.reshape(24, 24), mean, rtol=1e-5, atol=1e-6)  # that mean, not a placeholder


def test_export_for_relion_says_why_not_for_images_that_are_not_from_mrc_files(window, qtbot, tmp_path):
    _load(window, qtbot, _pngs(tmp_path / "pngs", n=4))
    s = window.model.session
    window.run_panel.size.setValue(16)
    window.run_panel.iterations.setValue(1)
    assert window.start_run()
    qtbot.waitUntil(lambda: s.state in ("finished", "failed"), timeout=60000)
    assert window.exports.relion(str(tmp_path / "out")) is None
    assert window.last_dialog.text() == ("RELION export needs particles from MRC files (.mrcs, .mrc or a STAR file "
                                         "listing them); 4 of 4 images are not.")
    assert not (tmp_path / "out").exists()
