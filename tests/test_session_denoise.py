"""The session denoises where a run starts, as ``ia-cluster --denoise`` does (issue 30, the app's part)."""
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics import adjusted_rand_score

from iastudio.core.attention import AttentionRun, RunState
from iastudio.core.denoise import DenoiseReport
from iastudio.core.frames import FrameBuilder
from iastudio.core.imageset import ImageSet, load_images
from iastudio.core.preprocess import preprocess
from iastudio.core.project import load_project
from iastudio.core.session import Session, stream_run
from iastudio.core.session_run import denoise_line

RUN = dict(clusters=3, iterations=2)


def _noisy_set(n=24, *, side=32, snr=0.3, views=3, seed=0):
    """``(ImageSet, labels)``: turned and shifted copies of ``views`` blob shapes plus white noise at ``snr``."""
    rng = np.random.default_rng(seed)
    grid = np.arange(side) - (side - 1) / 2.0
    shapes = [rng.uniform(-6, 6, size=(4, 2)) for _ in range(views)]
    clean, labels = [], []
    for i in range(n):
        a = rng.uniform(0, 2 * np.pi)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        pts = shapes[i % views] @ rot.T + rng.uniform(-1.5, 1.5, size=2)
        clean.append(sum(np.outer(np.exp(-0.5 * ((grid - y) / 2.0) ** 2), np.exp(-0.5 * ((grid - x) / 2.0) ** 2))
                         for x, y in pts))
        labels.append(i % views)
    clean = np.stack(clean)
    noisy = clean + rng.normal(0, np.sqrt(clean.var(axis=(1, 2)).mean() / snr), clean.shape)
    return ImageSet([im.astype(np.float32) for im in noisy], [f"p{i:02d}.png" for i in range(n)],
                    [str(v) for v in labels], []), np.array(labels)


def _as_files(data, folder):
    """``data``'s images written to ``folder`` as 8-bit PNGs under their names; returns ``folder``."""
    from PIL import Image

    folder.mkdir()
    for img, name in zip(data.images, data.paths):
        lo, hi = float(img.min()), float(img.max())
        Image.fromarray(((img - lo) / (hi - lo) * 255).astype(np.uint8)).save(folder / name)
    return folder


def _session(data, size=32):
    s = Session(size=size)
    s.set_images(data)
    return s


def test_auto_denoises_a_noisy_set_and_its_clusters_are_right():
    """SNR 0.3, 3 shapes, 24 images: denoised the run finds the shapes; on the raw canvases it does not."""
    data, truth = _noisy_set()
    scores = {}
    for mode in ("auto", "off"):
        s = _session(data)
        preview = s.base.copy()
        res = s.run_here(backend="numpy", denoise=mode, **RUN)
        scores[mode] = adjusted_rand_score(truth, res.labels)
        if mode == "auto":
            rep = s.denoise_report
            assert rep.applied
            assert rep.method == "steerable-pca"
            assert 0.1 < rep.snr < 1.0
            assert rep.components > 0
            assert res.notes[0] == denoise_line(rep)
            assert res.notes[0].startswith("Denoised: noise σ≈")
            assert not np.allclose(s.base, preview)  # the run's (denoised) canvas is the session's now
            assert_array_equal(s.run.inputs, s.working)  # and the run clusters it
        else:
            assert s.denoise_report is None
            assert s.run_inputs is None
            assert_array_equal(s.base, preview)
            assert not any(n.startswith(("Denoised", "Not denoised")) for n in res.notes)
    assert scores["auto"] >= 0.95, scores  # measured: 1.00 and 0.46
    assert scores["off"] < 0.8, scores


def test_the_session_and_the_command_line_give_the_same_canvas_and_labels():
    """The same images and options through the session and through ia-cluster's code path."""
    from iastudio.core.cli import _working_images, build_parser

    data, _ = _noisy_set(n=18, seed=3)
    s = _session(data)
    res = s.run_here(backend="numpy", denoise="auto", **RUN)
    args = build_parser().parse_args(["in", "--size", "32", "--denoise", "auto"])
    canvas, images, _ = _working_images(args, data)
    assert canvas.denoise.applied
    assert s.denoise_report.applied
    assert_array_equal(s.canvas.images, canvas.images)
    assert_allclose(s.canvas.scale, canvas.scale)
    assert_allclose(s.canvas.offset, canvas.offset)
    assert s.denoise_report.as_dict() == canvas.denoise.as_dict()
    run = AttentionRun(images, backend="numpy", **RUN)
    for _ in run.steps():
        pass
    assert_array_equal(run.result().labels, res.labels)


def test_clean_images_are_not_denoised_and_their_canvas_is_unchanged():
    s = Session(size=32)
    s.load_demo("shapes")
    preview = s.base.copy()
    res = s.run_here(backend="numpy", denoise="auto", **RUN)
    assert res is not None
    assert not s.denoise_report.applied
    assert_array_equal(s.base, preview)
    assert_array_equal(s.run.inputs, preview)
    assert res.notes[0] == "Not denoised: estimated noise 0, the images look clean"


def test_a_transformed_set_is_denoised_then_moved_as_on_the_command_line():
    """The user's transforms move the denoised canvas (ia-cluster --transform moves its canvas the same way)."""
    from iastudio.core.preprocess import apply_transforms, preprocess

    data, _ = _noisy_set(n=15, seed=4)
    s = _session(data)
    assert s.apply_random_transforms(rotation_deg=180, shift_percent=5, seed=2)
    run = s.start(backend="numpy", denoise="on", **RUN)
    canvas, working = s.run_inputs()
    expected = preprocess(data.images, size=32, denoise="on")
    assert_array_equal(canvas.images, expected.images)
    assert_allclose(working, apply_transforms(expected.images, s.transforms))
    assert run.inputs.shape == working.shape


def test_a_run_stopped_while_denoising_resumes_on_denoised_images():
    data, _ = _noisy_set(n=15, seed=5)
    s = _session(data)
    raw = s.working.copy()
    run = s.start(backend="numpy", denoise="auto", **RUN)
    prepare = s.run_inputs
    s.stop()  # before the driver made the inputs
    items = list(stream_run(run, FrameBuilder(), prepare=prepare))
    assert [it[0] for it in items] == ["stopped"]
    for it in items:
        s.take(it)
    assert s.state == RunState.STOPPED
    assert s.can_resume()
    assert s.denoise_report is None  # nothing denoised yet
    assert s.resume() is run
    for it in stream_run(run, FrameBuilder(), prepare=s.run_inputs):
        s.take(it)
    assert s.state == RunState.FINISHED
    assert s.denoise_report.applied
    assert s.run is not run
    assert not np.allclose(s.run.inputs, raw)


def test_discarding_a_denoised_run_brings_the_previews_back():
    data, _ = _noisy_set(n=15, seed=6)
    s = _session(data)
    preview = s.base.copy()
    s.run_here(backend="numpy", denoise="auto", **RUN)
    assert not np.allclose(s.base, preview)
    assert s.apply_random_transforms(rotation_deg=30, shift_percent=0, seed=1)  # a changed input: the run goes
    assert s.final is None
    assert_array_equal(s.base, preview)
    assert s.run_here(backend="numpy", denoise="off", **RUN) is not None  # off after auto: the raw canvases
    assert_array_equal(s.base, preview)


def test_the_choice_and_what_was_done_are_saved_with_the_project(tmp_path):
    data, _ = _noisy_set(n=15, seed=7)
    s = _session(data)
    s.run_here(backend="numpy", denoise="on", **RUN)
    path = tmp_path / "noisy.iaproj"
    s.save_project(path)
    params = load_project(path).parameters
    assert params["denoise"] == "on"
    assert params["denoise_report"]["applied"] is True
    assert params["denoise_report"]["components"] == s.denoise_report.components
    assert params["run_notes"][0].startswith("Denoised: ")
    s2 = Session()
    s2.open_project(path)
    assert s2.denoise == "on"
    assert s2.result.notes[0] == s.result.notes[0]
    assert_allclose(s2.base, s.base, atol=1e-6)  # the denoised canvas the run clustered is what was embedded


def test_an_older_project_without_the_choice_opens_with_auto(tmp_path):
    data, _ = _noisy_set(n=6, seed=8)
    s = _session(data)
    s.run_here(backend="numpy", denoise="off", **RUN)
    s.denoise = "off"
    proj = s.to_project()
    for key in ("denoise", "denoise_report"):
        proj.parameters.pop(key)
    from iastudio.core.project import save_project

    save_project(tmp_path / "old.iaproj", proj)
    s2 = Session()
    s2.denoise = "on"
    s2.open_project(tmp_path / "old.iaproj")
    assert s2.denoise == "auto"


def test_a_bad_choice_is_refused_with_a_message():
    s = Session(size=24)
    s.load_demo("shapes")
    said = []
    s.events.message.connect(said.append)
    assert s.start(backend="numpy", denoise="sometimes") is None
    assert said[-1] == "Cannot start: denoise must be one of 'auto', 'on', 'off', got 'sometimes'"
    assert s.state == RunState.IDLE


@pytest.mark.parametrize(("report", "line"), [
    (DenoiseReport(True, "on", "steerable-pca", 0.5, 0.3, 7),
     "Denoised: noise σ≈0.5 per pixel, SNR≈0.3, 7 components kept"),
    (DenoiseReport(False, "auto", note="denoising skipped: 5 images are too few to fit a basis (at least 12)"),
     "Not denoised: 5 images are too few to fit a basis (at least 12)"),
    (DenoiseReport(False, "off", note="denoising off"), ""),
    (None, ""),
])
def test_denoise_line(report, line):
    assert denoise_line(report) == line


def test_a_reopened_project_denoises_its_original_files(tmp_path):
    """An opened project's embedded images are canvases (cleared corners, no noise to measure): a run reads
    the original files again, and without them says that it used the embedded images."""
    import shutil

    data, _ = _noisy_set(n=15, seed=9)
    folder = _as_files(data, tmp_path / "noisy")
    fresh = Session(size=32)
    fresh.add_paths([str(folder)])
    fresh.save_project(tmp_path / "before-the-run.iaproj")  # embedded working images, no run
    fresh_res = fresh.run_here(backend="numpy", denoise="auto", **RUN)

    opened = Session()
    opened.open_project(tmp_path / "before-the-run.iaproj")
    assert opened.embedded
    res = opened.run_here(backend="numpy", denoise="auto", **RUN)
    assert opened.denoise_report.applied
    assert_array_equal(opened.canvas.images, fresh.canvas.images)
    assert_array_equal(res.labels, fresh_res.labels)

    shutil.rmtree(folder)  # the originals are gone: the embedded images serve, and the note says so
    gone = Session()
    gone.open_project(tmp_path / "before-the-run.iaproj")
    gone.run_here(backend="numpy", denoise="auto", **RUN)
    assert not gone.denoise_report.applied
    assert "original files could not all be read" in gone.result.notes[0]


def test_a_reopened_denoised_run_shows_the_originals_again_once_its_run_goes(tmp_path):
    """The trial: after an input change, a reopened project's thumbnails still showed the denoised images."""
    import shutil

    data, _ = _noisy_set(n=15, seed=10)
    folder = _as_files(data, tmp_path / "noisy")
    live = Session(size=32)
    live.add_paths([str(folder)])
    preview = live.base.copy()
    live.run_here(backend="numpy", denoise="on", **RUN)
    live.save_project(tmp_path / "denoised.iaproj")
    assert live.apply_random_transforms(rotation_deg=0, shift_percent=0, seed=1)  # the live session, as before
    assert_array_equal(live.base, preview)

    opened = Session()
    opened.open_project(tmp_path / "denoised.iaproj")
    denoised = opened.base.copy()
    assert not np.allclose(denoised, preview, atol=1e-3)
    said = []
    opened.events.message.connect(said.append)
    assert opened.remove_images([0])  # an input change: the run goes, and with it its denoised images
    assert opened.final is None
    assert_allclose(opened.base, preview[1:], atol=1e-6)
    assert not any("denoised" in text for text in said)
    assert opened.run_here(backend="numpy", denoise="on", **RUN) is not None
    assert opened.set_size(40)  # the originals again, at the new size (not the embedded denoised images)
    assert_allclose(opened.base, preprocess(load_images(opened.data.paths).images, size=40).images, atol=1e-6)
    plain = Session()
    plain.open_project(tmp_path / "denoised.iaproj")
    assert plain.run_here(backend="numpy", denoise="off", **RUN) is not None  # a run without the denoiser
    assert_allclose(plain.run._host_inputs, preview, atol=1e-6)  # ran on the originals'

    shutil.rmtree(folder)  # the originals gone: the denoised images stay shown, and that is said
    gone = Session()
    gone.open_project(tmp_path / "denoised.iaproj")
    gone.events.message.connect(said.append)
    assert gone.apply_random_transforms(rotation_deg=30, shift_percent=0, seed=1)
    assert_allclose(gone.base, denoised)
    assert said[-1].startswith("The thumbnails still show the run's denoised images")


def test_a_reopened_denoised_projects_originals_read_by_a_driver_serve_the_next_change(tmp_path, monkeypatch):
    """A front end reads the originals in a worker (read_originals) and hands them over (take_originals):
    the input change then reads no file; a change that replaces the set reads none at all."""
    import threading
    from dataclasses import replace

    import iastudio.core.imageset as imageset_module
    import iastudio.core.session_inputs as inputs_module
    from iastudio.core.session import read_originals

    data, _ = _noisy_set(n=12, seed=10)
    live = Session(size=32)
    live.add_paths([str(_as_files(data, tmp_path / "noisy"))])
    preview = live.base.copy()
    live.run_here(backend="numpy", denoise="on", **RUN)
    live.save_project(tmp_path / "denoised.iaproj")

    opened = Session()
    opened.open_project(tmp_path / "denoised.iaproj")
    assert opened.originals_to_read == list(opened.data.paths)
    out = {}
    reader = threading.Thread(target=lambda: out.update(read=read_originals(opened.originals_to_read, size=32)))
    reader.start()
    reader.join()
    read = []
    real = imageset_module.load_image

    def decode(path):
        read.append(path)
        return real(path)

    monkeypatch.setattr(imageset_module, "load_image", decode)
    monkeypatch.setattr(inputs_module, "load_image", decode)
    other = Session()
    other.open_project(tmp_path / "denoised.iaproj")
    other.take_originals(replace(out["read"], paths=out["read"].paths[1:]))  # read for another set: ignored
    assert other.originals_to_read == list(other.data.paths)
    opened.take_originals(out["read"])
    assert opened.originals_to_read is None  # held: nothing more to read
    assert opened.opened_denoised  # nothing changed yet
    assert opened.final is not None
    assert opened.set_size(40)
    assert read == []  # the change read no file
    assert_allclose(opened.base, preprocess(load_images(opened.data.paths).images, size=40).images, atol=1e-6)
    assert not opened.embedded
    assert not opened.opened_denoised
    read.clear()

    replaced = Session()
    replaced.open_project(tmp_path / "denoised.iaproj")
    assert replaced.load_demo("shapes")  # the set is replaced: its originals are not read for it
    assert read == []
    again = Session()
    again.open_project(tmp_path / "denoised.iaproj")
    assert again.apply_random_transforms(rotation_deg=0, shift_percent=0, seed=1)  # no driver: read here
    assert len(read) == 12
    assert_allclose(again.base, preview, atol=1e-6)


def test_a_refused_start_keeps_the_finished_denoised_run_as_it_was():
    data, _ = _noisy_set(n=15, seed=10)
    s = _session(data)
    s.run_here(backend="numpy", denoise="auto", **RUN)
    canvas, final = s.canvas, s.final
    assert s.start(backend="numpy", denoise="auto", clusters=99) is None  # more clusters than images
    assert s.final is final
    assert s.canvas is canvas  # the result and the canvas it was made on stay together
