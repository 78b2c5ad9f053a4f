"""``ia-cluster --export relion``: particles.star and class_averages.mrcs in RELION's conventions.

The particles are made here with RELION's own convention, written independently of the package
(``relion_stack_create --apply_transformation``: shift by the origin, then rotate by psi, about the
pixel ``(N // 2, N // 2)``), so a sign or centre error in the export shows as misaligned images.
"""
import numpy as np
import pytest
from scipy import ndimage

from iastudio.core.cli import main
from iastudio.core.demos import base_shapes
from iastudio.core.relion import relion_pose

mrcfile = pytest.importorskip("mrcfile")
starfile = pytest.importorskip("starfile")
pd = pytest.importorskip("pandas")

PIXEL = 1.5  # Angstrom


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _rot(psi_deg):
    """RELION's R(psi) = [[cos, -sin], [sin, cos]] on (x, y), written on (row, col) = (y, x)."""
    a = np.deg2rad(psi_deg)
    return np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])


def relion_particle(base, psi, ox, oy):
    """The particle RELION aligns onto ``base`` with ``(psi, origin)``: ``X(q) = base(R(psi)(q + o))``."""
    ctr = np.full(2, base.shape[0] // 2, float)
    m = _rot(psi)
    return ndimage.affine_transform(base, m, offset=ctr - m @ ctr + m @ np.array([oy, ox]), order=3)


def relion_align(x, psi, ox, oy):
    """What RELION makes of a particle and its pose: ``aligned(p) = X(R(-psi) p - o)``."""
    ctr = np.full(2, x.shape[0] // 2, float)
    m = _rot(-psi)
    return ndimage.affine_transform(x, m, offset=ctr - m @ ctr - np.array([oy, ox]), order=3)


def _particles(tmp_path, per=4, seed=1):
    bases, _ = base_shapes()
    rng = np.random.default_rng(seed)
    parts, truth = [], []
    for k in range(3):
        for _ in range(per):
            psi, ox, oy = rng.uniform(-180, 180), rng.uniform(-4, 4), rng.uniform(-4, 4)
            parts.append(relion_particle(bases[k], psi, ox, oy))
            truth.append((k, psi, ox, oy))
    parts = np.asarray(parts, np.float32)
    with mrcfile.new(tmp_path / "p.mrcs") as m:
        m.set_data(parts)
        m.set_image_stack()
    starfile.write(pd.DataFrame({"rlnImageName": [f"{i + 1:06d}@p.mrcs" for i in range(len(parts))]}),
                   tmp_path / "p.star")
    return parts, np.asarray(truth)


def _corr(a, b):
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def test_relion_pose_known_answers():
    # tau samples 2 columns right: the particle sat 2 px right of the centre, RELION's origin is (-2, 0)
    np.testing.assert_allclose(relion_pose([0.0, 2.0, 0.0], center=(32, 32), box=(64, 64)), (0, -2, 0), atol=1e-12)
    # a rotation by theta is psi = -theta
    np.testing.assert_allclose(relion_pose([np.pi / 6, 0, 0], center=(32, 32), box=(64, 64)), (-30, 0, 0),
                               atol=1e-12)
    # the same rotation about another centre: RELION's centre (32, 32) needs the shift (I - A)(C - c)
    a = np.deg2rad(90.0)
    psi, ox, oy = relion_pose([a, 0, 0], center=(32, 34), box=(64, 64))  # C - c = (0 rows, 2 cols)
    # A(90 deg) (row, col) = [[0, 1], [-1, 0]]: (I - A)(0, 2) = (-2, 2) -> b = (ty, tx) = (-2, 2)
    np.testing.assert_allclose((psi, ox, oy), (-90, -2, 2), atol=1e-12)


def test_the_box_size_is_read_from_a_stack_whose_folder_name_holds_an_at_sign(tmp_path):
    from iastudio.core.relion import mrc_box, relion_image_name

    folder = tmp_path / "user@host"
    folder.mkdir()
    with mrcfile.new(folder / "s.mrcs") as m:
        m.set_data(np.zeros((3, 40, 40), np.float32))
        m.set_image_stack()
    name = relion_image_name(f"{folder / 's.mrcs'}#2")
    assert name == f"000002@{folder / 's.mrcs'}"  # "#2": the second image
    assert mrc_box([name]) == [(40, 40)]


def test_particles_star_writes_each_particles_ctf_and_one_optics_group_per_microscope(tmp_path):
    from iastudio.core.particle_ctf import ParticleCtf
    from iastudio.core.relion import write_particles_star

    a = ParticleCtf(10000.0, 300.0, 2.7, 0.1, 1.0, defocus_v=12000.0, astigmatism_angle=30.0)
    b = ParticleCtf(20000.0, 200.0, 0.01, 0.07, 2.0)
    write_particles_star(tmp_path / "p.star", names=["1@s.mrcs", "2@s.mrcs", "3@s.mrcs"], clusters=[0, 1, 0],
                         poses=[[10.0, 1.0, -2.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]], scores=[1, 1, 1], box=32,
                         ctf=[a, b, a])
    star = starfile.read(tmp_path / "p.star", always_dict=True)
    parts, optics = star["particles"], star["optics"]
    assert parts["rlnOpticsGroup"].tolist() == [1, 2, 1]
    np.testing.assert_allclose(parts["rlnDefocusU"], [10000, 20000, 10000])
    np.testing.assert_allclose(parts["rlnDefocusV"], [12000, 20000, 12000])
    np.testing.assert_allclose(parts["rlnDefocusAngle"], [30, 0, 30])
    np.testing.assert_allclose(parts["rlnOriginXAngst"], [1.0, 2.0, 0.0])  # pixels times the particle's own size
    np.testing.assert_allclose(parts["rlnOriginYAngst"], [-2.0, 0.0, 3.0])
    np.testing.assert_allclose(optics["rlnVoltage"], [300, 200])
    np.testing.assert_allclose(optics["rlnSphericalAberration"], [2.7, 0.01])
    np.testing.assert_allclose(optics["rlnAmplitudeContrast"], [0.1, 0.07])
    np.testing.assert_allclose(optics["rlnImagePixelSize"], [1.0, 2.0])
    with pytest.raises(ValueError, match="pixel size"):
        write_particles_star(tmp_path / "q.star", names=["1@s.mrcs"], clusters=[0], poses=[[0, 0, 0]], scores=[1],
                             box=32)


@pytest.mark.slow
@pytest.mark.parametrize(("scale", "least", "spread"), [("frame", 0.99, 1.0), ("content", 0.95, 2.0)])
def test_export_relion_round_trip_aligns_every_particle_as_relion_would(tmp_path, scale, least, spread):
    """With --scale content (the default) each object's centroid sits at the canvas centre; origins that left
    that out aligned a class's particles to correlations of 0.15-0.34."""
    parts, truth = _particles(tmp_path)
    out = tmp_path / "out"
    rc = main([str(tmp_path / "p.star"), "--out", str(out), "--export", "relion", "--pixel-size", str(PIXEL),
               "--scale", scale, "--size", "32", "--clusters", "3", "--quiet"])
    assert rc == 0
    star = starfile.read(out / "particles.star", always_dict=True)
    df, optics = star["particles"], star["optics"]
    assert list(df["rlnImageName"]) == [f"{i + 1:06d}@{tmp_path / 'p.mrcs'}" for i in range(len(parts))]
    assert float(optics["rlnImagePixelSize"][0]) == PIXEL
    assert int(optics["rlnImageSize"][0]) == 64
    classes = df["rlnClassNumber"].to_numpy()
    assert sorted(set(classes)) == [1, 2, 3]
    for k in range(3):  # the true classes, whole
        assert len(set(classes[truth[:, 0] == k])) == 1
    psi = df["rlnAnglePsi"].to_numpy()
    ox, oy = df["rlnOriginXAngst"].to_numpy() / PIXEL, df["rlnOriginYAngst"].to_numpy() / PIXEL
    aligned = np.array([relion_align(parts[i], psi[i], ox[i], oy[i]) for i in range(len(parts))])
    for k in range(3):
        members = np.flatnonzero(truth[:, 0] == k)
        # one common frame per class: psi differs from the truth by one angle, the aligned particles agree
        diff = (psi[members] - truth[members, 1] + 180) % 360 - 180
        assert np.ptp(diff) < spread
        assert min(_corr(aligned[members[0]], aligned[j]) for j in members[1:]) > least
        # the wrong conventions do not: psi with the other sign, or the origin with the other sign
        wrong_psi = [relion_align(parts[j], -psi[j], ox[j], oy[j]) for j in members]
        wrong_o = [relion_align(parts[j], psi[j], -ox[j], -oy[j]) for j in members]
        assert min(_corr(wrong_psi[0], w) for w in wrong_psi[1:]) < 0.9
        assert min(_corr(wrong_o[0], w) for w in wrong_o[1:]) < 0.99
    with mrcfile.open(out / "class_averages.mrcs") as m:
        avg = np.array(m.data)
        assert m.header.ispg == 0
        if scale == "frame":  # 64 px particles on a 32 px canvas
            assert m.voxel_size.x == pytest.approx(PIXEL * 64 / 32)
    np.testing.assert_allclose(avg, np.load(out / "means.npy"), rtol=1e-6)
    # class N of the STAR is image N of the stack: each class's aligned particle matches its own average best
    # (with the frame's one scale; "content" scales each class's canvas by its objects' size)
    small = np.array([ndimage.zoom(a, 32 / 64, order=1) for a in aligned])
    for i in range(len(parts) if scale == "frame" else 0):
        scores = [_corr(small[i][4:-4, 4:-4], avg[c][4:-4, 4:-4]) for c in range(3)]
        assert int(np.argmax(scores)) + 1 == classes[i]
    summary = (out / "summary.json").read_text()
    assert '"export": "relion"' in summary
    assert '"pixel_size": 1.5' in summary


def test_export_relion_needs_mrc_inputs_and_a_pixel_size(tmp_path, capsys):
    from PIL import Image

    bases, _ = base_shapes()
    for k in range(2):
        Image.fromarray((bases[k] * 255).astype(np.uint8)).save(tmp_path / f"{k}.png")
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--out", str(tmp_path / "o"), "--export", "relion", "--quiet"])
    assert exc.value.code == 2
    assert "--export relion needs --pixel-size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--out", str(tmp_path / "o"), "--export", "relion", "--pixel-size", "1", "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "needs images from MRC files" in err
    assert "0.png" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--export", "relion", "--pixel-size", "1", "--group", "e2"])
    assert exc.value.code == 2
    assert "no mirror" in capsys.readouterr().err
