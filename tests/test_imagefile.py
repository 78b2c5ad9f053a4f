"""What every image file gets before it is decoded (core/imagefile.py): known answers."""
import errno
import os

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.imagefile import ImageLoadError, cmyk_to_rgb, os_reason, regular_file_size, short_reason


def test_cmyk_to_rgb_known_values():
    # pure cyan, black, white paper (no ink), half magenta; 8-bit ink amounts
    cmyk = np.array([[[255, 0, 0, 0], [0, 0, 0, 255], [0, 0, 0, 0], [0, 51, 0, 0]]], dtype=np.uint8)
    rgb = cmyk_to_rgb(cmyk)
    assert rgb.shape == (1, 4, 3)
    assert rgb.dtype == np.float32
    assert_allclose(rgb[0], [[0, 1, 1], [0, 0, 0], [1, 1, 1], [1, 0.8, 1]], atol=1e-6)


def test_cmyk_to_rgb_takes_floats_as_they_are():
    assert_allclose(cmyk_to_rgb(np.array([0.5, 0.0, 0.25, 0.5])), [0.25, 0.5, 0.375], atol=1e-6)


def test_regular_file_size_and_its_refusals(tmp_path):
    f = tmp_path / "a.png"
    f.write_bytes(b"12345")
    assert regular_file_size(f) == 5
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ImageLoadError, match=r"empty file \(0 bytes\)"):
        regular_file_size(tmp_path / "empty.png")
    with pytest.raises(ImageLoadError, match="not a regular file: a folder"):
        regular_file_size(tmp_path)
    os.mkfifo(tmp_path / "pipe.png")
    with pytest.raises(ImageLoadError, match=r"not a regular file: a FIFO \(named pipe\)"):
        regular_file_size(tmp_path / "pipe.png")
    with pytest.raises(ImageLoadError, match="does not exist"):
        regular_file_size(tmp_path / "missing.png")


def test_os_reason_tells_a_broken_link_from_a_missing_file(tmp_path):
    link = tmp_path / "link.png"
    link.symlink_to(tmp_path / "gone.png")
    missing = OSError(errno.ENOENT, "No such file")
    assert os_reason(missing, link) == "a broken symbolic link (its target does not exist)"
    assert os_reason(missing, tmp_path / "other.png") == "does not exist"
    assert os_reason(OSError(errno.EACCES, "Permission denied")) == "cannot be read: permission denied"
    assert os_reason(OSError(errno.ELOOP, "loop")) == "cannot be read: a symbolic link loop"
    assert os_reason(OSError(errno.EIO, "I/O error")) == "cannot be read (I/O error)"


def test_short_reason_keeps_the_first_line_up_to_160_characters():
    assert short_reason(ValueError("bad header\nmore detail")) == "bad header"
    assert short_reason(KeyError()) == "KeyError"
    assert short_reason(ValueError("x" * 500)) == "x" * 160
