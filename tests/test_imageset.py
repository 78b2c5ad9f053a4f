import numpy as np
import pytest
from PIL import Image

from iastudio.core.imageset import ImageLoadError, NoUsableImagesError, load_image, load_images


def _png(path, arr, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, mode=mode).save(path)
    return path


def test_8bit_16bit_float_and_rgba(tmp_path):
    g8 = _png(tmp_path / "g8.png", np.full((5, 6), 255, np.uint8))
    assert load_image(g8).max() == pytest.approx(1.0)
    g16 = tmp_path / "g16.png"
    Image.fromarray(np.full((5, 6), 65535, np.uint16)).save(g16)
    img16 = load_image(g16)
    assert img16.shape == (5, 6)
    assert img16.max() == pytest.approx(1.0)
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 0
    rgba[0, 0, 3] = 255
    out = load_image(_png(tmp_path / "a.png", rgba, "RGBA"))
    assert out.shape == (4, 4, 3)
    assert out[0, 0, 0] == pytest.approx(200 / 255)
    assert out[1, 1, 0] == 0
    import tifffile  # shipped with scikit-image

    tifffile.imwrite(tmp_path / "f.tif", np.full((4, 5), 2.5, np.float32))
    assert load_image(tmp_path / "f.tif").max() == pytest.approx(2.5)


def test_bad_files_are_skipped_with_reasons(tmp_path):
    good = np.zeros((8, 8), np.uint8)
    good[2:5, 2:6] = 255
    _png(tmp_path / "a" / "good.png", good)
    (tmp_path / "a" / "empty.png").write_bytes(b"")
    (tmp_path / "a" / "text.png").write_text("hello, not an image")
    full = tmp_path / "full.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(full)
    (tmp_path / "a" / "trunc.png").write_bytes(full.read_bytes()[:200])
    full.unlink()
    (tmp_path / "a" / "notes.txt").write_text("x")
    big = tmp_path / "a" / "big.bmp"
    # a valid BMP header claiming 8000 x 8000 pixels (64 MP)
    hdr = bytearray(b"BM" + (54).to_bytes(4, "little") + b"\0\0\0\0" + (54).to_bytes(4, "little"))
    hdr += (40).to_bytes(4, "little") + (8000).to_bytes(4, "little") + (8000).to_bytes(4, "little")
    hdr += (1).to_bytes(2, "little") + (24).to_bytes(2, "little") + bytes(24)
    big.write_bytes(bytes(hdr))
    res = load_images(tmp_path)
    assert res.paths == [str(tmp_path / "a" / "good.png")]
    reasons = {s["path"].split("/")[-1]: s["reason"] for s in res.skipped}
    assert "empty" in reasons["empty.png"]
    assert "not an image" in reasons["text.png"]
    assert "truncated" in reasons["trunc.png"]
    assert "unsupported" in reasons["notes.txt"]
    assert "50 megapixels" in reasons["big.bmp"]


def test_labels_order_and_unicode(tmp_path):
    img = np.zeros((6, 6), np.uint8)
    img[1:4, 1:4] = 255
    for name in ["b/2.png", "a/ü-é 1.png", "a/0.png", "top.png"]:
        _png(tmp_path / name, img)
    res = load_images([tmp_path])
    names = [p.split(str(tmp_path))[1] for p in res.paths]
    assert names == ["/a/0.png", "/a/ü-é 1.png", "/b/2.png", "/top.png"]
    assert res.labels == ["a", "a", "b", None]
    assert not res.has_labels
    assert res.summary() == "4 images · 2 labels"


def test_nothing_usable_is_a_clear_error(tmp_path):
    (tmp_path / "x.png").write_bytes(b"")
    with pytest.raises(NoUsableImagesError, match=r"x\.png: empty") as info:
        load_images(tmp_path)
    assert info.value.skipped
    assert info.value.skipped[0]["reason"].startswith("empty")
    with pytest.raises(ImageLoadError, match="empty"):
        load_image(tmp_path / "x.png")
    with pytest.raises(NoUsableImagesError) as res_missing:
        load_images([tmp_path / "missing"])
    assert "does not exist" in str(res_missing.value)


def test_loading_can_be_cancelled_and_says_what_was_left(tmp_path):
    img = np.zeros((6, 6), np.uint8)
    img[1:4, 1:4] = 255
    for k in range(5):
        _png(tmp_path / f"{k}.png", img)
    seen = []

    def progress(done, total):
        seen.append((done, total))
        return done < 2  # stop after the second file

    res = load_images(tmp_path, on_progress=progress)
    assert len(res) == 2
    assert seen[-1] == (2, 5)
    assert [s["reason"] for s in res.skipped] == ["not loaded: cancelled"] * 3


def test_set_source_names_the_folder_or_the_demo(tmp_path):
    from pathlib import Path

    from iastudio.core.imageset import set_source

    a, b = tmp_path / "my particles" / "a", tmp_path / "my particles" / "b"
    assert set_source([str(a / "1.png"), str(b / "stack.mrcs#3")]) == (tmp_path / "my particles", None)
    assert set_source(["demo:shapes/000", "demo:shapes/001"]) == (None, "shapes")
    assert set_source(["demo:shapes/000", "demo:digits/001"]) == (None, None)  # two demos: no one name
    assert set_source([]) == (None, None)
    assert set_source(["rel/x.png"]) == (Path("rel").absolute(), None)
