"""Each particle's CTF read from a RELION STAR file, and ``ia-cluster --phase-flip`` (core/particle_ctf.py)."""
import json
import re

import mrcfile
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.cli import main
from iastudio.core.ctf import apply_ctf, ctf_phase_flip
from iastudio.core.imageset import ImageLoadError, load_images
from iastudio.core.particle_ctf import ParticleCtf, phase_flip_particles, phase_flip_record, star_ctf

starfile = pytest.importorskip("starfile")
pd = pytest.importorskip("pandas")

SCOPE = {"voltage": 300.0, "spherical_aberration": 2.7, "amplitude_contrast": 0.1, "pixel_size": 3.0}


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _relion30(path, **override):
    """RELION 3.0: one block, the microscope on every row; pixel size from detector pixel and magnification."""
    cols = {"rlnImageName": ["1@a.mrcs", "2@a.mrcs", "1@b.mrcs"],
            "rlnDefocusU": [10000.0, 20000.0, 15000.0], "rlnDefocusV": [12000.0, 18000.0, 15000.0],
            "rlnVoltage": [300.0] * 3, "rlnSphericalAberration": [2.7] * 3, "rlnAmplitudeContrast": [0.1] * 3,
            "rlnDetectorPixelSize": [5.0] * 3, "rlnMagnification": [25000.0] * 3}
    for key, value in override.items():
        if value is None:
            cols.pop(key)
        else:
            cols[key] = value
    starfile.write(pd.DataFrame(cols), path, overwrite=True)
    return path


def _relion31(path, groups=(1, 2, 1), optics_groups=(1, 2)):
    """RELION 3.1: the microscope per optics group, joined on rlnOpticsGroup."""
    optics = pd.DataFrame({"rlnOpticsGroup": list(optics_groups),
                           "rlnOpticsGroupName": ["g1", "g2"][:len(optics_groups)],
                           "rlnVoltage": [300.0, 200.0][:len(optics_groups)],
                           "rlnSphericalAberration": [2.7, 0.01][:len(optics_groups)],
                           "rlnAmplitudeContrast": [0.1, 0.07][:len(optics_groups)],
                           "rlnImagePixelSize": [1.06, 2.0][:len(optics_groups)]})
    particles = pd.DataFrame({"rlnImageName": [f"{k + 1}@a.mrcs" for k in range(len(groups))],
                              "rlnDefocusU": [11000.0, 21000.0, 31000.0][:len(groups)],
                              "rlnDefocusV": [13000.0, 23000.0, 33000.0][:len(groups)],
                              "rlnOpticsGroup": list(groups)})
    starfile.write({"optics": optics, "particles": particles}, path, overwrite=True)
    return path


def test_relion30_rows_give_the_mean_defocus_and_the_detector_pixel_size(tmp_path):
    got = star_ctf(_relion30(tmp_path / "p.star"))
    assert got == [ParticleCtf(11000.0, 300.0, 2.7, 0.1, 2.0), ParticleCtf(19000.0, 300.0, 2.7, 0.1, 2.0),
                   ParticleCtf(15000.0, 300.0, 2.7, 0.1, 2.0)]  # 5 µm * 1e4 / 25000 = 2 Å


def test_relion30_pixel_size_column_wins_and_defocus_u_alone_serves(tmp_path):
    got = star_ctf(_relion30(tmp_path / "p.star", rlnDefocusV=None, rlnImagePixelSize=[1.5, 1.5, 1.5]))
    assert [c.defocus for c in got] == [10000.0, 20000.0, 15000.0]
    assert {c.pixel_size for c in got} == {1.5}


def test_relion31_takes_each_particle_s_microscope_from_its_optics_group(tmp_path):
    got = star_ctf(_relion31(tmp_path / "p.star"))
    assert got == [ParticleCtf(12000.0, 300.0, 2.7, 0.1, 1.06), ParticleCtf(22000.0, 200.0, 0.01, 0.07, 2.0),
                   ParticleCtf(32000.0, 300.0, 2.7, 0.1, 1.06)]


@pytest.mark.parametrize(("override", "says"), [
    ({"rlnDefocusU": None}, "p.star: no rlnDefocusU column"),
    ({"rlnDefocusU": [1e4, "abc", 1e4]}, "p.star: row 2: rlnDefocusU is not a finite number ('abc')"),
    ({"rlnDefocusV": [1e4, 1e4, "inf"]}, "p.star: row 3: rlnDefocusV is not a finite number"),
    ({"rlnVoltage": None}, "p.star: no rlnVoltage column"),
    ({"rlnVoltage": [300.0, -300.0, 300.0]}, "p.star: row 2: rlnVoltage must be positive"),
    ({"rlnMagnification": [25000.0, 0.0, 25000.0]}, "p.star: row 2: the pixel size must be positive"),
    ({"rlnMagnification": None}, "p.star: no pixel size"),
    ({"rlnAmplitudeContrast": [0.1, 0.1, 1.0]}, "p.star: row 3: rlnAmplitudeContrast must lie in [0, 1)"),
    ({"rlnAmplitudeContrast": [-0.1, 0.1, 0.1]}, "p.star: row 1: rlnAmplitudeContrast must lie in [0, 1)"),
])
def test_bad_relion30_rows_are_refused_naming_file_row_and_reason(tmp_path, override, says):
    with pytest.raises(ImageLoadError, match=re.escape(says)):
        star_ctf(_relion30(tmp_path / "p.star", **override))


def test_a_particle_in_an_optics_group_missing_from_the_optics_block_is_refused(tmp_path):
    with pytest.raises(ImageLoadError, match=re.escape("p.star: row 2: optics group 3 is not in the optics block")):
        star_ctf(_relion31(tmp_path / "p.star", groups=(1, 3, 1)))


def test_a_star_file_without_image_names_is_refused(tmp_path):
    starfile.write(pd.DataFrame({"rlnDefocusU": [1.0]}), tmp_path / "p.star", overwrite=True)
    with pytest.raises(ImageLoadError, match=re.escape("p.star: no rlnImageName column")):
        star_ctf(tmp_path / "p.star")


def _write_mrcs(path, data):
    with mrcfile.new(path, overwrite=True) as m:
        m.set_data(np.asarray(data, dtype=np.float32))
        m.set_image_stack()


def test_the_parameters_follow_the_images_that_load_across_stacks(tmp_path):
    rng = np.random.default_rng(0)
    _write_mrcs(tmp_path / "a.mrcs", rng.random((2, 8, 8)))
    _write_mrcs(tmp_path / "b.mrcs", rng.random((1, 8, 8)))
    names = ["1@a.mrcs", "9@a.mrcs", "1@b.mrcs", "2@a.mrcs"]  # row 2 is beyond its stack: skipped
    _relion30(tmp_path / "p.star", rlnImageName=names, rlnDefocusU=[1e4, 2e4, 3e4, 4e4],
              rlnDefocusV=[1e4, 2e4, 3e4, 4e4], **{k: [v[0]] * 4 for k, v in (
                  ("rlnVoltage", [300.0]), ("rlnSphericalAberration", [2.7]), ("rlnAmplitudeContrast", [0.1]),
                  ("rlnDetectorPixelSize", [5.0]), ("rlnMagnification", [25000.0]))})
    res = load_images([tmp_path / "p.star"])
    assert [p.rsplit("/", 1)[-1] for p in res.paths] == ["a.mrcs#1", "b.mrcs#1", "a.mrcs#2"]
    assert [c.defocus for c in res.ctf] == [1e4, 3e4, 4e4]
    assert len(res.skipped) == 1


def test_a_star_file_without_ctf_columns_still_loads_and_says_why(tmp_path):
    _write_mrcs(tmp_path / "a.mrcs", np.ones((2, 8, 8)))
    starfile.write(pd.DataFrame({"rlnImageName": ["1@a.mrcs", "2@a.mrcs"]}), tmp_path / "p.star", overwrite=True)
    res = load_images([tmp_path / "p.star"])
    assert len(res) == 2
    assert all("no rlnDefocusU column" in c for c in res.ctf)
    assert load_images([tmp_path / "a.mrcs"]).ctf is None


def test_phase_flip_particles_flips_each_image_with_its_own_microscope():
    rng = np.random.default_rng(1)
    imgs = list(rng.normal(size=(3, 16, 16)))
    ctf = [ParticleCtf(1e4, 300.0, 2.7, 0.1, 2.0), ParticleCtf(2e4, 200.0, 2.0, 0.07, 1.5),
           ParticleCtf(3e4, 300.0, 2.7, 0.1, 2.0)]
    got = phase_flip_particles(imgs, ctf, convention="ctffind4")
    for img, c, out in zip(imgs, ctf, got):
        want = ctf_phase_flip(img[None], c.defocus, pixel_size=c.pixel_size, voltage=c.voltage,
                              spherical_aberration=c.spherical_aberration, amplitude_contrast=c.amplitude_contrast)[0]
        assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got[1] - got[0]).max() > 0.1  # the flip differs from image to image
    relion = phase_flip_particles(imgs, ctf)  # RELION's CTF is the negative of CTFFIND4's
    assert_allclose(np.stack(relion), -np.stack(got), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="convention"):
        phase_flip_particles(imgs, ctf, convention="bsoft")


def test_relion_white_particles_come_back_white():
    """Known answer: a white particle (RELION's contrast: the projection times RELION's CTF, the negative
    of CTFFIND4's) flipped with RELION's sign is the projection filtered by |CTF| (positive correlation)."""
    yy, xx = np.mgrid[:48, :48] - 24
    proj = np.exp(-(yy ** 2 + (xx / 2) ** 2) / 40)[None]
    c = ParticleCtf(15000.0, **SCOPE)
    white = -apply_ctf(proj, c.defocus, **SCOPE)
    flipped = phase_flip_particles(list(white), [c])[0]
    assert np.corrcoef(white[0].ravel(), proj[0].ravel())[0, 1] > 0
    assert np.corrcoef(flipped.ravel(), proj[0].ravel())[0, 1] > 0.9


# ---------------------------------------------------------------- ia-cluster --phase-flip


def _ctf_particles(folder, *, n=8, side=32, seed=0):
    """``n`` CTF-affected blobs in two stacks with a STAR file (RELION 3.1), a row beyond its stack among them."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:side, :side] - side / 2
    truth = np.stack([np.exp(-((yy - rng.uniform(-3, 3)) ** 2 + (xx / (1 + k % 2)) ** 2) / 18) for k in range(n)])
    defocus = rng.uniform(1e4, 2.5e4, n)
    raw = -apply_ctf(truth, defocus, **SCOPE) + 0.05 * rng.normal(size=truth.shape)  # white, as RELION extracts
    half = n // 2
    _write_mrcs(folder / "a.mrcs", raw[:half])
    _write_mrcs(folder / "b.mrcs", raw[half:])
    names = [f"{k + 1}@a.mrcs" for k in range(half)] + [f"{k + 1}@b.mrcs" for k in range(n - half)]
    optics = pd.DataFrame({"rlnOpticsGroup": [1], "rlnVoltage": [300.0], "rlnSphericalAberration": [2.7],
                           "rlnAmplitudeContrast": [0.1], "rlnImagePixelSize": [3.0]})
    particles = pd.DataFrame({"rlnImageName": [*names[:2], "99@a.mrcs", *names[2:]],
                              "rlnDefocusU": [*defocus[:2], 5e4, *defocus[2:]] - np.r_[100.0, 0, 0, np.zeros(n - 2)],
                              "rlnDefocusV": [*defocus[:2], 5e4, *defocus[2:]] + np.r_[100.0, 0, 0, np.zeros(n - 2)],
                              "rlnOpticsGroup": [1] * (n + 1)})
    starfile.write({"optics": optics, "particles": particles}, folder / "particles.star", overwrite=True)
    return folder / "particles.star", raw.astype(np.float32), defocus


@pytest.mark.slow
def test_cli_phase_flip_flips_every_loaded_particle_with_its_own_row(tmp_path, capsys):
    from iastudio.core.preprocess import preprocess
    from iastudio.core.project import load_project

    star, raw, defocus = _ctf_particles(tmp_path)
    out = tmp_path / "out"
    args = [str(star), "--phase-flip", "--denoise", "off", "--size", "24", "--iterations", "1", "--clusters", "2",
            "--quiet", "--export", "relion", "--pixel-size", "3"]
    assert main([*args, "--out", str(out), "--save-project", str(tmp_path / "p.iaproj")]) == 0
    assert "99" in capsys.readouterr().err  # the row beyond its stack was skipped, with a message
    flipped = -ctf_phase_flip(raw, defocus, **SCOPE)  # RELION's CTF sign
    want = preprocess(list(flipped.astype(np.float32)), size=24).images
    assert_allclose(load_project(tmp_path / "p.iaproj").base, want, rtol=1e-4, atol=1e-5)
    unflipped = preprocess(list(raw), size=24).images
    assert np.abs(want - unflipped).max() > 0.05  # the flip changed what is clustered
    s = json.loads((out / "summary.json").read_text())
    assert s["phase_flip"]["applied"] is True
    assert s["parameters"]["phase_flip"] is True
    assert_allclose(s["phase_flip"]["defocus_A"], [defocus.min(), defocus.max()], rtol=1e-6)
    assert s["phase_flip"]["voltage_kV"] == [300.0, 300.0]
    assert s["phase_flip"]["pixel_size_A"] == [3.0, 3.0]
    exported = starfile.read(out / "particles.star", always_dict=True)["particles"]["rlnImageName"].tolist()
    a, b = ((tmp_path / f).resolve() for f in ("a.mrcs", "b.mrcs"))
    assert exported == [f"{k:06d}@{a}" for k in range(1, 5)] + [f"{k:06d}@{b}" for k in range(1, 5)]


def test_export_relion_keeps_each_particles_ctf_and_takes_the_star_files_pixel_size(tmp_path, capsys):
    """The exported particles.star had no defocus or microscope (RELION could not refine from it) and needed
    --pixel-size although the STAR file gives it."""
    star, _, defocus = _ctf_particles(tmp_path)
    args = [str(star), "--denoise", "off", "--size", "24", "--iterations", "1", "--clusters", "2", "--quiet",
            "--export", "relion"]
    out = tmp_path / "out"
    assert main([*args, "--out", str(out)]) == 0  # no --pixel-size
    exported = starfile.read(out / "particles.star", always_dict=True)
    particles, optics = exported["particles"], exported["optics"]
    assert_allclose(particles["rlnDefocusU"], defocus, rtol=1e-7)  # U -/+ 100 without an angle: their mean
    assert_allclose(particles["rlnDefocusV"], defocus, rtol=1e-7)
    assert_allclose(particles["rlnDefocusAngle"], 0.0)
    assert particles["rlnOpticsGroup"].tolist() == [1] * len(defocus)
    assert optics["rlnVoltage"].tolist() == [300.0]
    assert optics["rlnSphericalAberration"].tolist() == [2.7]
    assert optics["rlnAmplitudeContrast"].tolist() == [0.1]
    assert optics["rlnImagePixelSize"].tolist() == [3.0]
    assert json.loads((out / "summary.json").read_text())["parameters"]["pixel_size"] == 3.0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # a pixel size the file contradicts: refused before the run
        main([*args, "--out", str(tmp_path / "o2"), "--pixel-size", "2"])
    assert exc.value.code == 2
    assert "--pixel-size 2 differs from the STAR file's pixel size (3 Angstrom)" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()
    assert main([*args, "--out", str(tmp_path / "o3"), "--pixel-size", "3"]) == 0  # the same: taken


@pytest.mark.parametrize("make", ["png", "mrcs", "no-defocus", "demo", "colour"])
def test_cli_phase_flip_without_ctf_parameters_stops_with_one_line(tmp_path, capsys, make):
    from PIL import Image

    if make == "png":
        (tmp_path / "in").mkdir()
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "in" / "x.png")
        inputs, says = [str(tmp_path / "in")], "is not a STAR file"
    elif make == "mrcs":
        _write_mrcs(tmp_path / "a.mrcs", np.ones((2, 8, 8)))
        inputs, says = [str(tmp_path / "a.mrcs")], "a.mrcs is not a STAR file"
    elif make == "demo":
        inputs, says = ["demo:shapes"], "demo:shapes is not a STAR file"
    elif make == "colour":  # a STAR file may name image files; colour ones cannot be flipped
        for name in ("c1.png", "c2.png"):
            Image.fromarray(np.full((8, 8, 3), (200, 10, 10), np.uint8)).save(tmp_path / name)
        _relion30(tmp_path / "p.star", rlnImageName=["c1.png", "c2.png"], **{
            k: v[:2] for k, v in (("rlnDefocusU", [1e4, 1e4]), ("rlnDefocusV", [1e4, 1e4]),
                                  ("rlnVoltage", [300.0] * 2), ("rlnSphericalAberration", [2.7] * 2),
                                  ("rlnAmplitudeContrast", [0.1] * 2), ("rlnDetectorPixelSize", [5.0] * 2),
                                  ("rlnMagnification", [25000.0] * 2))})
        inputs, says = [str(tmp_path / "p.star")], "needs gray particle images; 2 are in colour, e.g. .*c1.png"
    else:
        _write_mrcs(tmp_path / "a.mrcs", np.ones((2, 8, 8)))
        starfile.write(pd.DataFrame({"rlnImageName": ["1@a.mrcs", "2@a.mrcs"]}), tmp_path / "p.star")
        inputs, says = [str(tmp_path / "p.star")], "cannot read the CTF of .*p.star: p.star: no rlnDefocusU column"
    with pytest.raises(SystemExit) as info:
        main([*inputs, "--phase-flip", "--out", str(tmp_path / "o"), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(says, err), err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # 15-30 s: four runs of 40 particles
@pytest.mark.parametrize("seed", [0, 1])
def test_cli_phase_flip_clusters_ctf_particles_at_least_as_well(tmp_path, seed):
    """Noise-suite CTF particles (4 views x 10, SNR 1) as STAR + .mrcs: --phase-flip's ARI >= without it."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from bench_phase_flip import cluster_ari, write_star_set

    star, labels, *_ = write_star_set(tmp_path, snr=1.0, per_view=10, seed=seed)
    plain, _ = cluster_ari(star, labels, tmp_path / "plain")
    flipped, _ = cluster_ari(star, labels, tmp_path / "flip", ["--phase-flip"])
    assert flipped >= plain
    assert flipped >= 0.9


# ---------------------------------------------------------------- shared by ia-cluster and the app


def test_flip_problem_says_why_a_set_cannot_be_flipped():
    from iastudio.core.particle_ctf import NO_CTF, flip_problem

    c = ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0)
    gray, colour = np.zeros((4, 4)), np.zeros((4, 4, 3))
    assert flip_problem(None, [gray, gray]) == NO_CTF
    assert flip_problem([None, None], [gray, gray]) == NO_CTF
    assert flip_problem([c, "p.star: no rlnDefocusU column", None], [gray] * 3, paths=["a", "b", "c"]) == (
        "2 of the 3 images have no CTF parameters, e.g. b (p.star: no rlnDefocusU column)")
    assert flip_problem([c, c], [gray, colour], paths=["a", "b"]) == (
        "phase flipping needs gray particle images; 1 are in colour, e.g. b")
    assert flip_problem([c, c], [gray, gray]) is None
    with pytest.raises(ValueError, match="one CTF entry per image"):
        flip_problem([c], [gray, gray])


def test_ctf_arrays_round_trip_and_bad_rows_are_refused():
    from iastudio.core.particle_ctf import ctf_from_array, ctf_to_array

    c = ParticleCtf(1.5e4, 200.0, 0.01, 0.07, 1.06)
    arr = ctf_to_array([None, c], 2)
    assert arr.shape == (2, 7)
    assert np.isnan(arr[0]).all()
    assert_allclose(arr[1], [1.5e4, 200.0, 0.01, 0.07, 1.06, np.nan, np.nan])  # no astigmatism: NaN, NaN
    assert ctf_from_array(arr) == [None, c]
    assert ctf_to_array([None, "why"], 2) is None
    assert ctf_to_array(None, 2) is None
    for bad in ([1e4, np.nan, 2.7, 0.1, 3.0], [1e4, 300.0, 2.7, 1.0, 3.0], [1e4, 300.0, 2.7, 0.1, 0.0],
                [1e4, -300.0, 2.7, 0.1, 3.0], [np.inf, 300.0, 2.7, 0.1, 3.0]):
        with pytest.raises(ValueError, match="image 1"):
            ctf_from_array(np.array([bad]))


def test_a_project_keeps_the_ctf_and_refuses_a_bad_one(tmp_path):
    import zipfile

    from iastudio.core.particle_ctf import ctf_to_array
    from iastudio.core.project import Project, ProjectError, load_project, save_project

    c = ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0)
    proj = Project(paths=["a.mrcs#1", "b.png"], labels=[None, None], base=np.zeros((2, 8, 8), np.float32),
                   ctf=ctf_to_array([c, None], 2))
    save_project(tmp_path / "p.iaproj", proj)
    back = load_project(tmp_path / "p.iaproj")
    assert_allclose(back.ctf, proj.ctf)  # the NaN row included
    assert load_project(_saved(tmp_path / "old.iaproj", Project(paths=["x"], labels=[None]))).ctf is None
    bad = proj.ctf.copy()
    bad[0, 3] = 1.5  # amplitude contrast out of range
    save_project(tmp_path / "bad.iaproj", Project(paths=proj.paths, labels=proj.labels, base=proj.base, ctf=bad))
    with pytest.raises(ProjectError, match=r"bad\.iaproj: inconsistent contents .*ctf.*image 1"):
        load_project(tmp_path / "bad.iaproj")
    assert "arrays/ctf.npy" in zipfile.ZipFile(tmp_path / "p.iaproj").namelist()


def _saved(path, project):
    from iastudio.core.project import save_project

    save_project(path, project)
    return path


# -- astigmatism: rlnDefocusV and rlnDefocusAngle ---------------------------------------------------------------


def _astigmatic(path, **override):
    return _relion30(path, **{"rlnDefocusAngle": [30.0, -60.0, 0.0], **override})


def test_astigmatic_rows_keep_u_v_and_the_angle(tmp_path):
    got = star_ctf(_astigmatic(tmp_path / "p.star"))
    assert got == [ParticleCtf(10000.0, 300.0, 2.7, 0.1, 2.0, 12000.0, 30.0),
                   ParticleCtf(20000.0, 300.0, 2.7, 0.1, 2.0, 18000.0, -60.0),
                   ParticleCtf(15000.0, 300.0, 2.7, 0.1, 2.0, 15000.0, 0.0)]
    assert [c.mean_defocus for c in got] == [11000.0, 19000.0, 15000.0]
    assert [c.astigmatism for c in got] == [2000.0, 2000.0, 0.0]
    # without rlnDefocusAngle the orientation is unknown: the mean along every direction, as before
    assert star_ctf(_relion30(tmp_path / "q.star"))[0] == ParticleCtf(11000.0, 300.0, 2.7, 0.1, 2.0)


def test_astigmatism_in_a_relion31_file_comes_from_the_particle_rows(tmp_path):
    optics = pd.DataFrame({"rlnOpticsGroup": [1], "rlnVoltage": [300.0], "rlnSphericalAberration": [2.7],
                           "rlnAmplitudeContrast": [0.1], "rlnImagePixelSize": [1.06]})
    particles = pd.DataFrame({"rlnImageName": ["1@a.mrcs", "2@a.mrcs"], "rlnDefocusU": [11000.0, 21000.0],
                              "rlnDefocusV": [10000.0, 20500.0], "rlnDefocusAngle": [12.5, 95.0],
                              "rlnOpticsGroup": [1, 1]})
    starfile.write({"optics": optics, "particles": particles}, tmp_path / "p.star", overwrite=True)
    got = star_ctf(tmp_path / "p.star")
    assert [(c.defocus, c.defocus_v, c.astigmatism_angle) for c in got] == [(11000.0, 10000.0, 12.5),
                                                                           (21000.0, 20500.0, 95.0)]


@pytest.mark.parametrize(("override", "says"), [
    ({"rlnDefocusAngle": [0.0, "nan", 0.0]}, "p.star: row 2: rlnDefocusAngle is not a finite number"),
    ({"rlnDefocusAngle": [0.0, 0.0, "x"]}, "p.star: row 3: rlnDefocusAngle is not a finite number ('x')"),
    ({"rlnDefocusU": [1e4, 2e4, -5.0]}, "p.star: row 3: rlnDefocusU must not be negative"),
    ({"rlnDefocusV": [-1.0, 2e4, 1e4]}, "p.star: row 1: rlnDefocusV must not be negative"),
])
def test_bad_astigmatic_rows_are_refused_naming_file_row_and_reason(tmp_path, override, says):
    with pytest.raises(ImageLoadError, match=re.escape(says)):
        star_ctf(_astigmatic(tmp_path / "p.star", **override))


def test_astigmatic_star_rows_round_trip_through_the_project_array(tmp_path):
    from iastudio.core.particle_ctf import ctf_from_array, ctf_to_array
    from iastudio.core.project import Project, load_project, save_project

    ctf = [*star_ctf(_astigmatic(tmp_path / "p.star")), None, ParticleCtf(9000.0, 200.0, 2.0, 0.07, 1.5)]
    arr = ctf_to_array(ctf, 5)
    assert arr.shape == (5, 7)
    assert_allclose(arr[0], [10000.0, 300.0, 2.7, 0.1, 2.0, 12000.0, 30.0])
    assert ctf_from_array(arr) == ctf
    proj = Project(paths=[f"{k}@a.mrcs" for k in range(5)], labels=[None] * 5,
                   base=np.zeros((5, 8, 8), np.float32), ctf=arr)
    save_project(tmp_path / "p.iaproj", proj)
    assert ctf_from_array(load_project(tmp_path / "p.iaproj").ctf) == ctf
    half = arr.copy()
    half[1, 6] = np.nan  # a defocus V without its angle
    with pytest.raises(ValueError, match="image 2 are not usable: the astigmatism"):
        ctf_from_array(half)
    with pytest.raises(ValueError, match="defocus_v and astigmatism_angle are set together"):
        ParticleCtf(1e4, 300.0, 2.7, 0.1, 2.0, defocus_v=1.1e4)


def test_a_project_saved_with_five_ctf_columns_still_opens(tmp_path):
    from iastudio.core.particle_ctf import ctf_from_array
    from iastudio.core.project import Project, load_project, save_project

    old = np.array([[1e4, 300.0, 2.7, 0.1, 3.0], [np.nan] * 5])  # what the previous version wrote
    save_project(tmp_path / "old.iaproj", Project(paths=["a.mrcs#1", "b.png"], labels=[None, None],
                                                  base=np.zeros((2, 8, 8), np.float32), ctf=old))
    back = load_project(tmp_path / "old.iaproj")
    assert ctf_from_array(back.ctf) == [ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0), None]
    with pytest.raises(ValueError, match=r"\(n, 7\) array \(or \(n, 5\)"):
        ctf_from_array(np.zeros((2, 6)))


def test_astigmatic_particles_are_flipped_with_their_own_astigmatism():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 64, 64))
    scope = dict(SCOPE, pixel_size=1.5)
    du, dv, angle = np.array([15e3, 20e3, 12e3]), np.array([13.5e3, 19e3, 12e3]), np.array([30.0, 120.0, 0.0])
    seen = apply_ctf(x, du, defocus_v=dv, astigmatism_angle=angle, **scope)
    ctf = [ParticleCtf(u, 300.0, 2.7, 0.1, 1.5, v, a) for u, v, a in zip(du, dv, angle)]
    ctf[2] = ParticleCtf(12e3, 300.0, 2.7, 0.1, 1.5)  # no astigmatism in the same stack
    got = phase_flip_particles(list(seen), ctf, convention="ctffind4")
    want = ctf_phase_flip(seen, du, defocus_v=dv, astigmatism_angle=angle, **scope)
    assert_allclose(np.stack(got), want, atol=1e-4)  # float32
    mean = ctf_phase_flip(seen, 0.5 * (du + dv), **scope)
    for k in range(2):  # the astigmatic two: nearer the unfiltered image than the mean defocus's flip
        assert np.linalg.norm(got[k] - x[k]) < np.linalg.norm(mean[k] - x[k])
    record = phase_flip_record(ctf)
    assert record["n_astigmatic"] == 2
    assert record["defocus_A"] == [12000.0, 19500.0]  # each particle's mean of U and V
    assert record["astigmatism_A"] == [0.0, 1500.0]
    assert "astigmatic for 2 images" in record["defocus_is"]
