"""What every image file gets before it is decoded: its error, its limit, the checks of the file itself.

Both readers use this module: :mod:`~iastudio.core.imageset` (single images, folders, and the sets it
loads) and :mod:`~iastudio.core.stacks` (files of many images), which sits below it.  A file that
cannot be used raises :class:`ImageLoadError`, its message the reason shown to the user.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import numpy as np

__all__ = ["MAX_PIXELS", "ImageLoadError", "cmyk_to_rgb", "os_reason", "regular_file_size", "short_reason"]

MAX_PIXELS = 50_000_000
"""Largest image read, in pixels (per frame; checked from the file's headers before decoding)."""


class ImageLoadError(ValueError):
    """A file could not be used; the message is the reason shown to the user."""


def regular_file_size(path: Path) -> int:
    """The size of ``path`` in bytes after checking it is a regular, non-empty file.

    Parameters
    ----------
    path : Path

    Returns
    -------
    int

    Raises
    ------
    ImageLoadError
        Why not: the operating system's reason, "not a regular file: a FIFO", "empty file (0 bytes)".
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ImageLoadError(os_reason(exc, path)) from exc
    if not stat.S_ISREG(st.st_mode):
        raise ImageLoadError(f"not a regular file: {_kind(st.st_mode)}")
    if st.st_size == 0:
        raise ImageLoadError("empty file (0 bytes)")
    return int(st.st_size)


def os_reason(exc: OSError, path=None) -> str:
    """A plain reason for an ``OSError`` met opening ``path``.

    Parameters
    ----------
    exc : OSError
    path : str or Path, optional
        The file; with it a missing target of a symbolic link is told apart from a missing file.

    Returns
    -------
    str
    """
    if exc.errno == errno.ENOENT:
        if path is not None and os.path.lexists(path):
            return "a broken symbolic link (its target does not exist)"
        return "does not exist"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read: permission denied"
    if exc.errno == errno.ELOOP:
        return "cannot be read: a symbolic link loop"
    if exc.errno == errno.ENAMETOOLONG:
        return "cannot be read: the name is too long"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


def _kind(mode: int) -> str:
    return ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a folder" if stat.S_ISDIR(mode)
            else "not a regular file")


def short_reason(exc: BaseException) -> str:
    """The first line of what a decoder said (at most 160 characters), or the exception's name.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    str
    """
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def cmyk_to_rgb(cmyk: np.ndarray) -> np.ndarray:
    """CMYK (any integer or float range) to RGB in [0, 1]: ``(1 - c)(1 - k)``.

    Parameters
    ----------
    cmyk : ndarray, shape (..., 4)
        Integers over their type's full range, or floats in [0, 1].

    Returns
    -------
    ndarray, shape (..., 3)
        float32.
    """
    x = cmyk.astype(np.float32)
    if np.issubdtype(cmyk.dtype, np.integer):
        x /= float(np.iinfo(cmyk.dtype).max)
    c, m, y, k = (x[..., i] for i in range(4))
    return np.stack([(1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k)], axis=-1)
