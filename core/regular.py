"""Opening a file the user named for reading, only when it is a regular file.

A FIFO, a device or a socket given as a project or a model file would block a read or never end;
:func:`open_regular` refuses them without blocking, with a message naming the file and the reason.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["open_regular", "os_reason", "require_regular"]


def open_regular(path, *, what: str = "a regular file", error: type = ValueError):
    """Open ``path`` for reading only if it is a regular file (never blocks on a FIFO or a device).

    Parameters
    ----------
    path : str or Path
    what : str, optional
        What the file should be, for the message ("a project file", "a model file").
    error : type, optional
        The exception raised (a ``ValueError``), its message naming the file and the reason.

    Returns
    -------
    fh : binary file object
        Opened without blocking; the caller closes it.
    size : int
        Its size in bytes when opened.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise error(f"{path}: a broken symbolic link (its target does not exist)") from None
        raise error(f"{path}: the file does not exist") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({os_reason(exc)})") from None
    require_regular(path, st.st_mode, what, error)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"{path}: cannot be read ({os_reason(exc)})") from None
    st = os.fstat(fd)
    try:
        require_regular(path, st.st_mode, what, error)  # swapped for something else after the first look
    except error:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), st.st_size


def require_regular(path, mode: int, what: str = "a regular file", error: type = ValueError) -> None:
    """Raise ``error`` naming ``path`` and what it is instead when ``mode`` is not a regular file's."""
    if stat.S_ISREG(mode):
        return
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    raise error(f"{path}: not {what} ({kind})")


def os_reason(exc: OSError) -> str:
    """Why ``exc`` stopped a read, in a few plain words."""
    return {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.ELOOP: "a symbolic link loop", errno.EISDIR: "a folder"}.get(
        exc.errno, exc.strerror or type(exc).__name__)
