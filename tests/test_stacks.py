"""Stacks read as image sets: MRC, multi-page TIFF, NumPy and RELION STAR files (core/stacks.py)."""
import csv
import os
import time

import mrcfile
import numpy as np
import pytest
import tifffile

from iastudio.core.imageset import ImageLoadError, NoUsableImagesError, load_image, load_images
from iastudio.core.stacks import StackMember, open_stack, split_member, star_members

starfile = pytest.importorskip("starfile")
pd = pytest.importorskip("pandas")


def _stack(n=5, h=8, w=9, seed=0):
    return np.random.default_rng(seed).random((n, h, w)).astype(np.float32) + 0.1


def _mrcs(path, data, **kw):
    with mrcfile.new(path, overwrite=True) as m:
        m.set_data(data)
        if data.ndim == 3:
            m.set_image_stack()
        if kw.get("voxel"):
            m.voxel_size = kw["voxel"]
    return path


def _star(path, names):
    starfile.write(pd.DataFrame({"rlnImageName": names}), path, overwrite=True)
    return path


def test_mrc_stack_reads_every_image_in_order_named_from_1(tmp_path):
    data = _stack()
    f = _mrcs(tmp_path / "s.mrcs", data, voxel=1.5)
    res = load_images([f])
    assert res.paths == [f"{f}#{k}" for k in range(1, 6)]
    assert res.skipped == []
    np.testing.assert_allclose(np.stack(res.images), data)
    with open_stack(f) as st:
        assert len(st) == 5
        assert st.voxel_size == pytest.approx(1.5)
    np.testing.assert_allclose(load_image(f"{f}#3"), data[2])  # one image by its name
    again = load_images(res.paths[::-1])  # the names the CSV and a project hold read back the same images
    np.testing.assert_allclose(np.stack(again.images), data[::-1])
    with pytest.raises(ImageLoadError, match="a stack of 5 images"):
        load_image(f)


def test_an_mrc_of_one_image_and_integer_modes(tmp_path):
    one = _mrcs(tmp_path / "one.mrc", (_stack(1)[0] * 100).astype(np.int16))
    res = load_images([one])
    assert res.paths == [str(one)]
    np.testing.assert_allclose(res.images[0], (_stack(1)[0] * 100).astype(np.int16) / 32767, rtol=1e-6)


def test_a_3d_volume_in_an_mrc_is_refused_as_a_volume(tmp_path):
    f = tmp_path / "vol.mrc"
    with mrcfile.new(f) as m:
        m.set_data(_stack())
        m.set_volume()
    res = load_images([f, _mrcs(tmp_path / "ok.mrcs", _stack())])
    assert res.skipped == [{"path": str(f), "reason": "a 3-D volume of 5 sections (space group 1), "
                                                      "not a stack of images"}]
    assert len(res) == 5


def test_member_names_only_where_the_file_exists():
    assert split_member("/no/such/stack.mrcs#3") is None


def _tiff_pages(path, pages, **kw):
    with tifffile.TiffWriter(path) as tw:
        for p in pages:
            tw.write(p, **kw)  # page by page: each page its own series
    return path


@pytest.mark.slow
def test_a_2000_page_tiff_written_page_by_page_is_2000_images(tmp_path):
    """Issue 32, item 9: it loaded page 1 only, silently."""
    rng = np.random.default_rng(0)
    pages = (rng.random((2000, 6, 7)) * 255).astype(np.uint8)
    f = _tiff_pages(tmp_path / "p.tif", pages)
    res = load_images([f])
    assert len(res) == 2000
    assert res.skipped == []
    assert res.paths[0] == f"{f}#1"
    assert res.paths[-1] == f"{f}#2000"
    np.testing.assert_allclose(res.images[1234], pages[1234] / 255.0, rtol=1e-6)


def test_a_tiff_stack_over_the_limits_is_refused_from_its_headers(tmp_path):
    f = _tiff_pages(tmp_path / "bomb.tif", np.zeros((150, 600, 600), np.uint8), compression="zlib")
    assert f.stat().st_size < 1_000_000  # 54 megapixels in a few hundred KB
    t = time.perf_counter()
    with pytest.raises(NoUsableImagesError) as info:
        load_images([f])
    res = info.value
    assert time.perf_counter() - t < 2.0
    (entry,) = res.skipped
    assert entry["reason"].startswith("over 50 megapixels (600x600 in 150 frames) stored in")


def test_a_tiff_of_one_page_is_one_image_and_rgb_pages_stay_rgb(tmp_path):
    rgb = (np.random.default_rng(1).random((3, 6, 7, 3)) * 255).astype(np.uint8)
    f = _tiff_pages(tmp_path / "rgb.tif", rgb, photometric="rgb")
    res = load_images([f, _tiff_pages(tmp_path / "one.tif", rgb[:1], photometric="rgb")])
    assert [os.path.basename(p) for p in res.paths] == ["rgb.tif#1", "rgb.tif#2", "rgb.tif#3", "one.tif"]
    np.testing.assert_allclose(res.images[2], rgb[2] / 255.0, rtol=1e-6)


@pytest.mark.parametrize(("shape", "names", "images"), [
    ((6, 7), [""], (1, 6, 7)), ((6, 7, 3), [""], (1, 6, 7, 3)), ((4, 6, 7), ["#1", "#2", "#3", "#4"], (4, 6, 7)),
    ((2, 6, 7, 3), ["#1", "#2"], (2, 6, 7, 3)), ((1, 6, 7), [""], (1, 6, 7))])
def test_npy_arrays_are_images_or_stacks_by_shape(tmp_path, shape, names, images):
    arr = np.random.default_rng(2).random(shape).astype(np.float32)
    f = tmp_path / "a.npy"
    np.save(f, arr)
    res = load_images([f])
    assert res.paths == [f"{f}{n}" for n in names]
    np.testing.assert_allclose(np.stack(res.images), arr.reshape(images))


def test_npy_with_python_objects_is_refused_and_never_unpickled(tmp_path):
    f = tmp_path / "o.npy"
    np.save(f, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(NoUsableImagesError) as info:
        load_images([f])
    res = info.value
    assert res.skipped == [{"path": str(f), "reason": "holds Python objects (refused: files are never unpickled)"}]


def test_a_star_file_lists_images_relative_to_its_folder_in_its_order(tmp_path):
    data = _stack(6)
    (tmp_path / "Extract").mkdir()
    _mrcs(tmp_path / "Extract" / "a.mrcs", data[:3])
    _mrcs(tmp_path / "Extract" / "b.mrcs", data[3:])
    star = _star(tmp_path / "particles.star", ["2@Extract/a.mrcs", "000001@Extract/b.mrcs", "3@Extract/b.mrcs",
                                               "1@Extract/a.mrcs"])
    res = load_images([star])
    a, b = tmp_path / "Extract" / "a.mrcs", tmp_path / "Extract" / "b.mrcs"
    assert res.paths == [f"{a}#2", f"{b}#1", f"{b}#3", f"{a}#1"]
    np.testing.assert_allclose(np.stack(res.images), data[[1, 3, 5, 0]])
    assert star_members(star)[0] == StackMember(a, 1)


def test_a_star_row_beyond_its_stack_skips_that_row_only(tmp_path):
    _mrcs(tmp_path / "a.mrcs", _stack(3))
    res = load_images([_star(tmp_path / "p.star", ["1@a.mrcs", "9@a.mrcs", "2@a.mrcs"])])
    assert len(res) == 2
    assert res.skipped == [{"path": f"{tmp_path / 'a.mrcs'}#9", "reason": "no image 9 in the stack (it holds 3)"}]


def test_a_folder_reads_its_stacks_with_labels_and_not_its_star_files(tmp_path):
    for lab, seed in (("apo", 0), ("bound", 1)):
        (tmp_path / lab).mkdir()
        _mrcs(tmp_path / lab / "s.mrcs", _stack(3, seed=seed))
    _star(tmp_path / "apo" / "p.star", ["1@s.mrcs"])
    res = load_images([tmp_path])
    assert res.labels == ["apo"] * 3 + ["bound"] * 3
    (skip,) = res.skipped
    assert skip["path"].endswith("p.star")
    assert skip["reason"].startswith("a STAR file inside a folder is not read")


def test_reading_a_stack_reports_progress_per_image_and_can_stop_inside_it(tmp_path):
    from iastudio.core.session import read_images

    f = _mrcs(tmp_path / "s.mrcs", _stack(10, 16, 16))
    seen = []

    def progress(done, total, name):
        seen.append((done, total, os.path.basename(name)))
        return done < 4

    later = tmp_path / "later.npy"
    np.save(later, _stack(1, 16, 16)[0])
    loaded = read_images([f, later], size=16, progress=progress)
    assert seen[:3] == [(0, 2, "s.mrcs"), (0, 11, "s.mrcs#1"), (1, 11, "s.mrcs#2")]
    assert len(loaded.data) == 4
    assert loaded.canvas.images.shape == (4, 16, 16)
    assert loaded.data.skipped == [{"path": str(f), "reason": "not loaded: cancelled (images 5 to 10)"},
                                   {"path": str(later), "reason": "not loaded: cancelled"}]


def test_a_project_of_stack_images_finds_its_originals(tmp_path):
    from iastudio.core.project import Project

    f = _mrcs(tmp_path / "s.mrcs", _stack(3))
    proj = Project(paths=[f"{f}#1", f"{f}#3", f"{tmp_path}/gone.mrcs#1"], labels=[None] * 3, skipped=[], size=16)
    assert proj.missing_originals() == [f"{tmp_path}/gone.mrcs#1"]


def test_the_cli_names_stack_images_in_the_csv(tmp_path):
    from iastudio.core.cli import main

    f = _mrcs(tmp_path / "s.mrcs", np.stack([np.pad(np.ones((4, 4), np.float32), 6)] * 2
                                               + [np.pad(np.eye(8, dtype=np.float32), 4)] * 2))
    assert main([str(f), "--out", str(tmp_path / "out"), "--size", "16", "--quiet", "--clusters", "2"]) == 0
    with open(tmp_path / "out" / "assignments.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["path"] for r in rows] == [f"{f}#{k}" for k in range(1, 5)]
    assert rows[0]["cluster"] == rows[1]["cluster"] != rows[2]["cluster"] == rows[3]["cluster"]


@pytest.mark.slow
def test_a_particle_stack_and_its_star_cluster_like_the_same_images_as_pngs(tmp_path):
    """Known answer: the same pixels as .mrcs + .star and as PNG files give the same labels from the CLI."""
    from PIL import Image

    from iastudio.core import se2
    from iastudio.core.cli import main
    from iastudio.core.demos import base_shapes
    from iastudio.core.warp import warp

    bases, _ = base_shapes()
    tau = se2.random_transforms(12, rotation_range=180, shift_range=4, seed=7)
    imgs = (np.clip(warp(np.repeat(bases, 4, axis=0), tau), 0, 1) * 255).astype(np.uint8)
    order = np.random.default_rng(3).permutation(12)  # classes interleaved in the stack
    (tmp_path / "png").mkdir()
    for k, i in enumerate(order):
        Image.fromarray(imgs[i]).save(tmp_path / "png" / f"{k:02d}.png")
    _mrcs(tmp_path / "particles.mrcs", imgs[order].astype(np.float32))
    _star(tmp_path / "particles.star", [f"{k + 1:06d}@particles.mrcs" for k in range(12)])
    labels = {}
    for name, inputs in (("png", [str(tmp_path / "png")]), ("star", [str(tmp_path / "particles.star")])):
        out = tmp_path / f"out-{name}"
        assert main([*inputs, "--out", str(out), "--size", "24", "--quiet"]) == 0
        with open(out / "assignments.csv", newline="") as fh:
            labels[name] = [int(r["cluster"]) for r in csv.DictReader(fh)]
    assert labels["star"] == labels["png"]
    truth = np.repeat(np.arange(3), 4)[order]
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(truth, labels["star"]) == 1.0  # and they are right
