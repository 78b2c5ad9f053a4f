import csv
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.denoise import (
    AUTO_MAX_SNR,
    MIN_IMAGES,
    _shrink,
    augmented_pca,
    denoise,
    estimate_noise,
    fourier_bessel_basis,
    photon_unit,
    steerable_pca,
)
from iastudio.core.preprocess import preprocess


def _particles(n, *, side=32, snr=None, seed=0, views=2):
    """``(noisy, clean, labels)``: 2-D Gaussian-blob particles, turned and shifted, plus white noise at ``snr``."""
    rng = np.random.default_rng(seed)
    grid = np.arange(side) - (side - 1) / 2.0
    shapes = [rng.uniform(-6, 6, size=(4, 2)) for _ in range(views)]
    clean, labels = [], []
    for i in range(n):
        v = i % views
        a = rng.uniform(0, 2 * np.pi)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        pts = shapes[v] @ rot.T + rng.uniform(-1.5, 1.5, size=2)
        img = sum(np.outer(np.exp(-0.5 * ((grid - y) / 2.0) ** 2), np.exp(-0.5 * ((grid - x) / 2.0) ** 2))
                  for x, y in pts)
        clean.append(img)
        labels.append(v)
    clean = np.stack(clean)
    noisy = clean.copy()
    if snr is not None:
        noisy = clean + rng.normal(0, np.sqrt(clean.var(axis=(1, 2)).mean() / snr), clean.shape)
    return noisy, clean, np.array(labels)


def test_noise_level_from_the_corners():
    _, clean, _ = _particles(20)
    rng = np.random.default_rng(1)
    assert estimate_noise(clean) == pytest.approx(0.0, abs=1e-6)  # the corners are empty
    for sigma in (0.05, 0.5):
        noisy = clean + rng.normal(0, sigma, clean.shape)
        assert estimate_noise(noisy) == pytest.approx(sigma, rel=0.08)
    # a constant or tilted background is not noise
    ramp = clean + 3.0 + 0.1 * np.arange(32)[None, None, :]
    assert estimate_noise(ramp) == pytest.approx(0.0, abs=1e-6)


def test_fourier_bessel_basis_is_orthonormal_and_steerable():
    fb = fourier_bessel_basis((24, 24))
    assert fb.size > 0.6 * fb.mask.sum()  # close to one function per pixel of the disk (Nyquist)
    for k in (0, 1, 5):
        b = fb.block(k)
        assert_allclose(b.conj().T @ b, np.eye(b.shape[1]), atol=1e-10)
    # a quarter turn (exact on the grid) multiplies frequency k's coefficients by exp(-i k pi / 2)
    img = np.random.default_rng(2).normal(size=(24, 24))
    turned = np.rot90(img)  # counter-clockwise in (row, col) = clockwise in (x, y) with y down
    phases = []
    for k in (1, 2, 3):
        b = fb.block(k)
        ratio = (turned[fb.mask] @ b.conj()) / (img[fb.mask] @ b.conj())
        assert_allclose(ratio, ratio[0], atol=1e-8)  # one phase for the whole frequency
        phases.append(ratio[0])
    assert min(abs(phases[0] - 1j), abs(phases[0] + 1j)) < 1e-8  # a quarter turn
    assert_allclose(phases, [phases[0] ** k for k in (1, 2, 3)], atol=1e-8)  # exp(-+ i k pi / 2)


def test_no_component_survives_pure_noise():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 30))
    vecs, gains = _shrink(x.T @ x / 400, 1.0, 400)
    assert vecs.shape[1] == 0
    assert gains.size == 0
    # a strong spike survives, with a gain below 1
    x[:, 0] += 3.0 * rng.normal(size=400)
    vecs, gains = _shrink(x.T @ x / 400, 1.0, 400)
    assert vecs.shape[1] == 1
    assert 0.8 < gains[0] < 1.0
    assert abs(vecs[0, 0]) > 0.99


def test_steerable_pca_removes_noise_and_commutes_with_turns():
    noisy, clean, _ = _particles(120, snr=0.3, seed=4)
    sigma = estimate_noise(noisy)
    out, kept = steerable_pca(noisy, noise_var=sigma ** 2)
    err = np.linalg.norm(out - clean) / np.linalg.norm(clean)
    assert np.linalg.norm(noisy - clean) / np.linalg.norm(clean) > 1.5
    assert err < 0.35
    assert 3 <= sum(kept) < 60
    # the fitted filter treats an image and its quarter turn alike
    turned, _ = steerable_pca(np.rot90(noisy, axes=(1, 2)), noise_var=sigma ** 2)
    assert_allclose(turned, np.rot90(out, axes=(1, 2)), atol=1e-8 * np.abs(out).max())
    # the cheap alternative helps too, less
    aug, _ = augmented_pca(noisy, noise_var=sigma ** 2, turns=4)
    assert err < np.linalg.norm(aug - clean) / np.linalg.norm(clean) < 1.0


def test_denoise_modes_and_stepping_aside():
    noisy, clean, _ = _particles(40, snr=0.5, seed=5)
    out, rep = denoise(list(noisy), mode="auto")
    assert rep.applied
    assert rep.method == "steerable-pca"
    assert rep.noise_std == pytest.approx(estimate_noise(noisy))
    assert rep.snr < AUTO_MAX_SNR
    assert "denoised by steerable pca" in rep.note
    assert "SNR" in rep.note
    assert np.linalg.norm(np.stack(out) - clean) < 0.5 * np.linalg.norm(noisy - clean)
    # clean images are left as they are
    given = list(clean)
    same, rep = denoise(given, mode="auto")
    assert not rep.applied
    assert all(a is b for a, b in zip(same, given))
    assert "clean" in rep.note
    # mild noise: auto steps aside, on does not
    mild = clean + np.random.default_rng(6).normal(0, 0.1 * clean.std(), clean.shape)
    assert not denoise(list(mild), mode="auto")[1].applied
    assert denoise(list(mild), mode="on")[1].applied
    # too few images, mixed sizes, colour, tiny frames: notes, no crash
    _few, rep = denoise(list(noisy[:MIN_IMAGES - 1]), mode="on")
    assert not rep.applied
    assert "too few" in rep.note
    stray = np.zeros((20, 24))
    out, rep = denoise([*list(noisy[:20]), stray], mode="on")  # a stack and a stray file: the stack is denoised
    alone, alone_rep = denoise(list(noisy[:20]), mode="on")
    assert rep.applied
    assert rep.left_out == [20]
    assert out[20] is stray
    assert_allclose(np.stack(out[:20]), np.stack(alone), atol=1e-6)
    assert rep.components == alone_rep.components
    assert "only the 20 images of 32 x 32 pixels considered" in rep.note
    assert "1 image of another size or colour (20 x 24) left as it was" in rep.note
    assert "one size" in denoise([*list(noisy[:10]), *[stray] * 10], mode="on")[1].note  # no stack of most of them
    assert "one size" in denoise([np.zeros((32, 32, 3))] * 20, mode="on")[1].note
    assert "too small" in denoise(list(np.random.default_rng(0).normal(size=(20, 4, 4))), mode="on")[1].note
    out, rep = denoise(list(noisy), mode="off")
    assert not rep.applied
    assert rep.note == "denoising off"
    with pytest.raises(ValueError, match="denoise must be one of"):
        denoise(list(noisy), mode="yes")


def test_large_frames_are_fitted_on_block_means():
    noisy, clean, _ = _particles(30, side=80, snr=0.5, seed=7)
    out, rep = denoise(list(noisy), mode="on")
    assert rep.applied
    assert "2x block means" in rep.note
    assert out[0].shape == (80, 80)
    assert np.linalg.norm(np.stack(out) - clean) < 0.6 * np.linalg.norm(noisy - clean)


def test_preprocess_denoises_before_finding_the_objects():
    noisy, clean, _ = _particles(40, snr=0.3, seed=8)
    c = preprocess(list(noisy), size=32, denoise="auto")
    assert c.denoise.applied
    assert c.images.shape == (40, 32, 32)
    ref = preprocess(list(clean), size=32)
    raw = preprocess(list(noisy), size=32)
    # the denoised canvas is far closer to the clean canvas than the noisy one is
    d_dn = np.linalg.norm(c.images - ref.images, axis=(1, 2)).mean()
    d_raw = np.linalg.norm(raw.images - ref.images, axis=(1, 2)).mean()
    assert d_dn < 0.5 * d_raw
    assert preprocess(list(noisy), size=32).denoise is None  # off by default in the library


def _particle_pngs(folder):
    """16 noisy 2-view particles (SNR 0.5) as 8-bit PNGs in ``folder/view<k>/``: ``(noisy, clean, scale)``."""
    from PIL import Image

    noisy, clean, labels = _particles(16, side=32, snr=0.5, seed=9)
    scale = 40.0 / noisy.std()
    for i, (img, lab) in enumerate(zip(noisy, labels)):
        d = folder / f"view{lab}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(120 + scale * img, 0, 255).astype(np.uint8)).save(d / f"{i}.png")
    return noisy, clean, scale


def _cli_run(tmp_path):
    """``ia-cluster tmp_path/in`` (24 px, 1 iteration, k = 2): the results folder and its summary."""
    from iastudio.core.cli import main

    out = tmp_path / "out"
    assert main([str(tmp_path / "in"), "--out", str(out), "--size", "24", "--iterations", "1", "--quiet",
                 "--clusters", "2"]) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_cli_denoise_is_reported(tmp_path):
    from PIL import Image

    from iastudio.core.cli import build_parser

    noisy, clean, scale = _particle_pngs(tmp_path / "in")
    out, summary = _cli_run(tmp_path)
    rep = summary["denoise"]
    assert rep["applied"]
    assert rep["mode"] == "auto"
    assert summary["parameters"]["denoise"] == "auto"
    sigma = scale * (noisy - clean).std() / 255.0  # the noise in the files' units (8 bits read as 0..1)
    assert rep["noise_std"] == pytest.approx(sigma, rel=0.1)
    assert summary["notes"][0] == rep["note"]
    assert build_parser().parse_args(["x", "--denoise", "off"]).denoise == "off"
    # the images before denoising, averaged at the run's poses: one per cluster, beside the means
    assert rep["undenoised_means"] is True
    raw = np.load(out / "means_undenoised.npy", allow_pickle=False)
    means = np.load(out / "means.npy", allow_pickle=False)
    assert raw.shape == means.shape
    for c in range(2):  # the same object in the same pose: the two averages of a cluster agree closely
        a, b = raw[c].ravel(), means[c].ravel()
        assert np.corrcoef(a, b)[0, 1] > 0.8
    assert Image.open(out / "means_undenoised.png").size[0] > 50


def test_cli_denoises_a_stack_with_a_stray_file_and_names_the_file(tmp_path, capsys):
    # a folder of particle images and one image of another size: the stack is still denoised
    from PIL import Image

    _particle_pngs(tmp_path / "in")
    Image.fromarray(np.full((40, 40), 120, np.uint8)).save(tmp_path / "in" / "stray.png")
    out, summary = _cli_run(tmp_path)
    rep = summary["denoise"]
    assert rep["applied"]
    names = [row["path"] for row in csv.DictReader((out / "assignments.csv").open())]
    assert [names[i] for i in rep["left_out"]] == [next(n for n in names if n.endswith("stray.png"))]
    err = capsys.readouterr().err
    assert "ia-cluster: denoised by steerable pca" in err
    assert "1 image of another size or colour (40 x 40) left as it was" in err
    assert "ia-cluster: not denoised (another size or colour than the rest): stray.png" in err


def test_cli_transform_moves_the_undenoised_images_as_the_working_ones(tmp_path, monkeypatch):
    """``--transform`` turns the working images; the images before denoising are turned the same way
    (warped, not clipped or renormed), so the run's poses fit them: their averages match the means."""
    import iastudio.core.cli as cli

    _particle_pngs(tmp_path / "in")
    seen = {}
    real = cli._undenoised_means

    def spy(args, canvas, res):
        seen["undenoised"] = canvas.undenoised
        return real(args, canvas, res)

    monkeypatch.setattr(cli, "_undenoised_means", spy)
    out = tmp_path / "out"
    assert cli.main([str(tmp_path / "in"), "--out", str(out), "--size", "24", "--iterations", "1", "--quiet",
                     "--clusters", "2", "--transform", "180,0.1"]) == 0
    assert (seen["undenoised"] < 0).mean() > 0.1  # not clipped at zero
    raw = np.load(out / "means_undenoised.npy", allow_pickle=False)
    means = np.load(out / "means.npy", allow_pickle=False)
    for c in range(2):
        assert np.corrcoef(raw[c].ravel(), means[c].ravel())[0, 1] > 0.8


def test_preprocess_keeps_the_images_before_denoising_on_the_same_canvas():
    noisy, clean, _ = _particles(40, snr=0.3, seed=8)
    c = preprocess(list(noisy), size=32, denoise="auto", keep_undenoised=True)
    assert c.denoise.applied
    assert c.undenoised.shape == c.images.shape
    assert c.undenoised.dtype == np.float32
    # in the same place and scale: each undenoised image matches its own denoised canvas image best
    # unmoved (the noise is white, so the correlation at zero shift is the signal's)
    flat = lambda x: (x - x.mean()).ravel()  # noqa: E731
    for i in range(0, 40, 5):
        here = np.dot(flat(c.undenoised[i]), flat(c.images[i]))
        for shift in ((2, 0), (0, 2), (-2, 0), (0, -2)):
            assert here > np.dot(flat(c.undenoised[i]), flat(np.roll(c.images[i], shift, axis=(0, 1))))
    # not clipped at zero (the noise keeps both signs: an average of clipped noise would be biased)
    assert (c.undenoised < 0).mean() > 0.1
    # asked for, and only where the denoiser changed the images
    assert preprocess(list(noisy), size=32, denoise="auto").undenoised is None  # not asked
    assert preprocess(list(noisy), size=32, keep_undenoised=True).undenoised is None  # not denoised
    assert preprocess(list(clean), size=32, denoise="auto", keep_undenoised=True).undenoised is None  # stepped aside


@pytest.mark.slow
def test_the_undenoised_images_at_the_runs_poses_resolve_finer_than_the_runs_means():
    """SNR 0.1, 4 views, 30 per view (the noise suite's holdout set, k given): FRC resolution against the truth.

    Measured (``bench_class_averages.py``): the run's means 6.0 / 5.3 px at FRC 0.5 (tune / holdout), the
    undenoised images at the run's poses 5.4 / 4.8 px.
    """
    import os
    import sys

    from iastudio.core.attention import AttentionRun
    from iastudio.core.cluster_means import pose_averages

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from bench_class_averages import _majority_labels, measure, to_input_frame
    from noise_suite import NoiseSpec, make_noise_set

    images, labels, clean = make_noise_set(NoiseSpec("cryo-snr0.1-30", 0.1, 30), split="holdout")
    truth = np.array([int(s.removeprefix("view")) for s in labels])
    canvas = preprocess(images, size=48, denoise="auto", keep_undenoised=True)
    res = AttentionRun(canvas.images, backend="numpy", clusters=4).run()
    raw = pose_averages(canvas.undenoised, res.labels, res.image_transforms)
    picked = _majority_labels(res.labels, truth, range(4))
    frc = {}
    for name, avgs in (("means", res.cluster_means), ("undenoised", raw)):
        rows = [measure(to_input_frame(avgs[c], float(np.median(canvas.scale[res.labels == c])), clean[v].shape),
                        clean[v]) for v, c in enumerate(picked)]
        frc[name] = np.mean([r["frc0.5"] for r in rows])
    assert frc["undenoised"] < frc["means"] - 0.2, frc


@pytest.mark.slow
def test_noisy_particles_cluster_right_only_when_denoised():
    """SNR 0.3, 4 views of a 3-D density: the noise suite's tune set (30 per view, 48 px).

    Without the denoiser the invariant distances align noise (issue 30: ARI 0.21 on such a set; here the
    spectral read-out of the distances, k given, falls to 0.81).
    """
    import os
    import sys

    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.clustering import read_clusters
    from iastudio.core.similarity import invariant_distances

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from noise_suite import NoiseSpec, make_noise_set

    images, truth, _ = make_noise_set(NoiseSpec("cryo-snr0.3-30", 0.3, 30), split="tune")
    scores = {}
    for mode in ("auto", "off"):
        canvas = preprocess(images, size=48, denoise=mode)
        labels, _ = read_clusters(invariant_distances(canvas.images).distances, k=4)
        scores[mode] = adjusted_rand_score(truth, labels)
    assert scores["auto"] >= 0.95, scores  # measured: 1.00 and 0.81
    assert scores["off"] < 0.9, scores


def test_cell_sets_are_photon_counts_at_their_snr():
    """The fluorescence-like sets: Poisson counts (variance follows brightness) at the SNR they are named for."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from noise_suite import make_noise_set, noise_suite

    specs = noise_suite(cells=True)
    assert [s.kind for s in specs] == ["cells"] * 3
    spec = specs[1]  # SNR 1
    images, labels, clean, truth = make_noise_set(spec, clean_images=True)
    x = np.stack(images)
    assert x.shape == (90, 48, 48)
    assert sorted(set(labels)) == ["view0", "view1", "view2"]
    assert_allclose(x, np.round(x))  # counts
    assert x.min() >= 0
    assert_allclose(truth.var(axis=(1, 2)).mean() / ((x - truth) ** 2).mean(), spec.snr, rtol=0.1)
    bright, dim = truth > np.quantile(truth, 0.95), truth < np.quantile(truth, 0.3)
    assert ((x - truth)[bright] ** 2).mean() > 3 * ((x - truth)[dim] ** 2).mean()  # Poisson, not white
    assert clean.shape == (3, 48, 48)
    again = np.stack(make_noise_set(spec, split="holdout")[0])
    assert not np.allclose(again, x)  # the holdout split has other cell types


def _cells(snr, split="tune"):
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from noise_suite import NoiseSpec, make_noise_set

    images, _, _, truth = make_noise_set(NoiseSpec(f"cells-snr{snr:g}-30", snr, 30, views=3, kind="cells"),
                                              split=split, clean_images=True)
    return np.stack(images), truth


def test_photon_counts_are_recognised_and_nothing_else():
    rng = np.random.default_rng(1)
    counts, _ = _cells(1.0)
    assert photon_unit(counts) == 1.0
    assert photon_unit(counts / 65535.0) == pytest.approx(1 / 65535.0)  # 16-bit counts a reader scaled
    clean8 = np.round(np.clip(_cells(1.0)[1] * 20, 0, 255))  # clean, on the 8-bit lattice, black corners
    assert photon_unit(clean8) is None
    assert photon_unit(clean8 + 30.0) is None  # a constant gray background: variance 0, not Poisson
    assert photon_unit(rng.normal(10.0, 1.0, (30, 32, 32))) is None  # white noise: not on a lattice
    assert photon_unit(np.round(rng.normal(10.0, 1.0, (30, 32, 32)))) is None  # on it, but variance 1 != mean 10
    assert photon_unit(-counts) is None


def test_photon_counts_are_denoised_through_anscombes_transform():
    """Poisson counts read as clean by the white-noise estimate (sparse background): now denoised."""
    counts, truth = _cells(1.0, split="holdout")
    assert estimate_noise(counts) == 0.0  # what stepped aside before
    out, rep = denoise(list(counts))
    assert rep.applied
    assert rep.method == "steerable-pca (Anscombe)"
    assert "photon counts" in rep.note
    x = np.stack(out)
    assert x.min() >= 0.0
    before = np.linalg.norm(counts - truth) / np.linalg.norm(truth)
    after = np.linalg.norm(x - truth) / np.linalg.norm(truth)
    assert after < 0.5 * before  # measured on the holdout cells: 0.86 -> 0.26
