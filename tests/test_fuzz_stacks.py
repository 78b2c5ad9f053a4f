"""Fuzzing the stack readers with malformed MRC, NumPy, TIFF and STAR files made on the fly.

Every bad file must be refused with one plain line naming it — never another exception, a traceback,
a hang or a memory blow-up — and the good files beside it still load.
"""
import os
import struct
import subprocess
import sys
import time

import mrcfile
import numpy as np
import pytest
import tifffile

import iastudio.core.stacks as cs
from iastudio.core.imageset import load_images

starfile = pytest.importorskip("starfile")
pd = pytest.importorskip("pandas")

GOOD = np.random.default_rng(0).random((5, 8, 9)).astype(np.float32) + 0.1


def _good_mrcs(path):
    with mrcfile.new(path, overwrite=True) as m:
        m.set_data(GOOD)
        m.set_image_stack()
    return path


def _patched(path, offset, fmt, value):
    """A valid stack with one header field overwritten (MRC2014: a little-endian 1024-byte header)."""
    _good_mrcs(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(struct.pack("<" + fmt, value))
    return path


# (name, how to make it, the start of the reason)
MRC_CASES = [
    ("nx_beyond_file", lambda p: _patched(p, 0, "i", 10**6), "truncated file: the MRC header describes"),
    ("nz_beyond_file", lambda p: _patched(p, 8, "i", 6), "truncated file: the MRC header describes"),
    ("ny_huge", lambda p: _patched(p, 4, "i", 2**31 - 1), "over 50 megapixels"),
    ("nz_huge", lambda p: _patched(p, 8, "i", 10**9), "too many images"),
    ("nx_negative", lambda p: _patched(p, 0, "i", -5), "corrupt MRC header: dimensions"),
    ("nz_zero", lambda p: _patched(p, 8, "i", 0), "corrupt MRC header: dimensions"),
    ("mode_complex", lambda p: _patched(p, 12, "i", 4), "unsupported MRC mode 4"),
    ("mode_complex_int", lambda p: _patched(p, 12, "i", 3), "unsupported MRC mode 3"),
    ("mode_4bit", lambda p: _patched(p, 12, "i", 101), "unsupported MRC mode 101"),
    ("mode_unknown", lambda p: _patched(p, 12, "i", 77), "unsupported MRC mode 77"),
    ("mode_negative", lambda p: _patched(p, 12, "i", -1), "unsupported MRC mode -1"),
    ("ext_header_negative", lambda p: _patched(p, 92, "i", -100), "corrupt MRC header: extended header"),
    ("ext_header_beyond_file", lambda p: _patched(p, 92, "i", 10**9),
     "truncated file: the MRC header describes an extended header of 1000000000 bytes"),
    ("map_id_garbage", lambda p: _patched(p, 208, "4s", b"XXXX"), "not an MRC file"),
    ("header_only_half", lambda p: p.write_bytes(_good_mrcs(p).read_bytes()[:500]) and p, "truncated file: 500 bytes"),
    ("data_truncated", lambda p: p.write_bytes(_good_mrcs(p).read_bytes()[:-20]) and p,
     "truncated file: the MRC header describes"),
    ("random_bytes", lambda p: p.write_bytes(np.random.default_rng(1).bytes(3000)) and p, "not an MRC file"),
    ("empty", lambda p: p.write_bytes(b"") or p, "empty file (0 bytes)"),
]


def _npy_raw(path, header: dict, body: bytes = b""):
    text = repr(header).encode("latin1")
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + body)
    return path


NPY_CASES = [
    ("truncated", lambda p: p.write_bytes(_saved(p)[:-40]) and p, "truncated file: the header describes"),
    ("bad_magic", lambda p: p.write_bytes(b"\x93NUMPX" + _saved(p)[6:]) and p, "not a NumPy array file"),
    ("objects", lambda p: np.save(p, np.array([1, "a"], dtype=object), allow_pickle=True) or p,
     "holds Python objects"),
    ("complex", lambda p: np.save(p, np.ones((2, 4, 4), np.complex64)) or p, "unsupported pixel type complex64"),
    ("five_d", lambda p: np.save(p, np.ones((2, 2, 4, 4, 3), np.float32)) or p, "unsupported array shape"),
    ("negative_shape", lambda p: _npy_raw(p, {"descr": "<f4", "fortran_order": False, "shape": (-3, 4, 4)}),
     "empty or invalid array shape (-3, 4, 4)"),
    ("huge_shape", lambda p: _npy_raw(p, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 8, 8)}),
     "too many images"),
    ("header_garbage", lambda p: _npy_raw(p, {"descr": "<f4", "shape": "os.system('x')"}), "not a NumPy array file"),
]


def _saved(p):
    np.save(p, GOOD)
    return p.read_bytes()


def _tiff_truncated(p, cut):
    tifffile.imwrite(p, (GOOD * 255).astype(np.uint8))
    data = p.read_bytes()
    p.write_bytes(data[: cut if cut > 0 else len(data) + cut])
    return p


def _pages_truncated(p):
    with tifffile.TiffWriter(p) as tw:
        for page in (GOOD * 255).astype(np.uint8):
            tw.write(page)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


TIFF_CASES = [
    ("data_cut", lambda p: _tiff_truncated(p, 300), "truncated file: page 1's data ends at byte"),
    ("ifd_cut", lambda p: _tiff_truncated(p, -30), "not an image (corrupted IFD structure)"),
    ("page_by_page_cut", lambda p: _pages_truncated(p), ("truncated", "not an image (corrupted IFD")),
]


def _star_bytes(p, data):
    p.write_bytes(data)
    return p


def _star_text(p, text):
    p.write_text(text)
    return p


def _star(p, names):
    starfile.write(pd.DataFrame({"rlnImageName": names}), p, overwrite=True)
    return p


STAR_CASES = [
    ("parent", lambda p: _star(p, ["1@good.mrcs", "1@../outside.mrcs"]), "row 2 names a file outside"),
    ("absolute", lambda p: _star(p, [f"1@{os.path.abspath(p.parent / 'good.mrcs')}"]), "row 1 names a file outside"),
    ("windows_drive", lambda p: _star(p, ["1@C:\\data\\good.mrcs"]), "row 1 names a file outside"),
    ("backslash_parent", lambda p: _star(p, ["1@sub\\..\\..\\x.mrcs"]), "row 1 names a file outside"),
    ("symlink_out", lambda p: _star(p, ["1@link/x.mrcs"]), "row 1 names a file outside"),
    ("index_zero", lambda p: _star(p, ["0@good.mrcs"]), "row 1: '0@good.mrcs' is not N@file"),
    ("index_text", lambda p: _star(p, ["x@good.mrcs"]), "row 1: 'x@good.mrcs' is not N@file"),
    ("index_unicode_digit", lambda p: _star(p, ["\u0663@good.mrcs"]), "row 1:"),
    ("no_image_column", lambda p: starfile.write(pd.DataFrame({"rlnClassNumber": [1]}), p) or p,
     "no rlnImageName column"),
    ("garbage", lambda p: _star_bytes(p, np.random.default_rng(2).bytes(4000)), ""),
    ("text_not_star", lambda p: _star_text(p, "hello\nworld\n"), ""),
    ("empty_loop", lambda p: _star_text(p, "data_particles\n\nloop_\n_rlnImageName #1\n"), ""),
]


@pytest.fixture
def folder(tmp_path):
    _good_mrcs(tmp_path / "good.mrcs")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    _good_mrcs(outside / "x.mrcs")
    (tmp_path / "link").symlink_to(outside)
    return tmp_path


def _check_one_line(res, bad, start):
    (entry,) = [s for s in res.skipped if s["path"] == str(bad)]
    assert entry["reason"].startswith(start), entry["reason"]
    assert "\n" not in entry["reason"]
    assert "Traceback" not in entry["reason"]
    assert len(res) == len(GOOD)  # the good stack beside it loads whole


@pytest.mark.parametrize(("name", "make", "start"), MRC_CASES, ids=[c[0] for c in MRC_CASES])
def test_malformed_mrc_is_refused_with_one_line(folder, name, make, start):
    bad = make(folder / f"{name}.mrcs")
    t = time.perf_counter()
    res = load_images([bad, folder / "good.mrcs"])
    assert time.perf_counter() - t < 2.0
    _check_one_line(res, bad, start)


@pytest.mark.parametrize(("name", "make", "start"), NPY_CASES, ids=[c[0] for c in NPY_CASES])
def test_malformed_npy_is_refused_with_one_line(folder, name, make, start):
    bad = make(folder / f"{name}.npy")
    _check_one_line(load_images([bad, folder / "good.mrcs"]), bad, start)


@pytest.mark.parametrize(("name", "make", "start"), TIFF_CASES, ids=[c[0] for c in TIFF_CASES])
def test_truncated_tiff_stack_is_refused_with_one_line(folder, name, make, start):
    bad = make(folder / f"{name}.tif")
    _check_one_line(load_images([bad, folder / "good.mrcs"]), bad, start)


@pytest.mark.parametrize(("name", "make", "start"), STAR_CASES, ids=[c[0] for c in STAR_CASES])
def test_bad_star_file_is_refused_whole_with_one_line(folder, name, make, start):
    bad = make(folder / f"{name}.star")
    _check_one_line(load_images([bad, folder / "good.mrcs"]), bad, start)


def test_a_star_file_over_the_size_limit_is_refused_before_parsing(folder, monkeypatch):
    monkeypatch.setattr(cs, "MAX_STAR_BYTES", 100)
    bad = _star(folder / "big.star", ["1@good.mrcs"] * 20)
    _check_one_line(load_images([bad, folder / "good.mrcs"]), bad, "too large for a STAR file")


def test_one_image_with_nan_skips_that_image_only(folder):
    data = GOOD.copy()
    data[2, 3, 3] = np.nan
    with mrcfile.new(folder / "nan.mrcs") as m:
        m.set_data(data)
    res = load_images([folder / "nan.mrcs"])
    assert len(res) == 4
    assert res.skipped == [{"path": f"{folder / 'nan.mrcs'}#3",
                                              "reason": "contains NaN or infinite values"}]


@pytest.mark.slow
def test_the_cli_says_one_line_per_bad_stack_and_goes_on(folder):
    bad = [make(folder / f"{name}.mrcs") for name, make, _ in MRC_CASES[:6]]
    bad += [make(folder / f"{name}.star") for name, make, _ in STAR_CASES[:3]]
    env = {**os.environ, "IA_STUDIO_LOG_DIR": str(folder / "logs")}
    proc = subprocess.run([sys.executable, "-m", "iastudio.core.cli", *map(str, bad), str(folder / "good.mrcs"),
                           "--out", str(folder / "out"), "--size", "16", "--quiet", "--clusters", "2"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ia-cluster: skipped")]
    assert len(lines) == len(bad)
    assert "Traceback" not in proc.stderr
    for f in bad:
        assert sum(ln.startswith(f"ia-cluster: skipped {f}: ") for ln in lines) == 1
