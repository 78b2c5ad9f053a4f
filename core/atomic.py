"""Atomic writes: a file or a whole result folder appears complete, or not at all.

Every file is written to a hidden temporary name in the destination folder,
flushed to disk and renamed over the destination (``os.replace``).  Temporary
names carry the writer's process id, ``.<name>.<pid>.<random>.tmp``, so a
later start can tell the leftovers of a killed writer (dead pid) from a save
in progress and remove them (:func:`remove_stale_temporaries`).  Files and
folders get the permissions the user's umask gives (``0666 & ~umask``), not
the ``0600`` of :func:`tempfile.mkstemp`.

:class:`ResultFolder` does the same for a set of files: they are written into
a hidden folder beside the destination and moved into place at the end, with
SIGINT and SIGTERM held back during the move, so an interrupted run leaves
either the complete set or nothing of it.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import threading
import time
from pathlib import Path

__all__ = [
    "ResultFolder",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "remove_stale_temporaries",
    "signals_held",
    "umask",
]

_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.(?:tmp|partial)$")
# project saves of earlier versions (tempfile.mkstemp: no pid), e.g. ".work.iaproj.k3j4h5g6.tmp"
_LEGACY_RE = re.compile(r"^\.(?P<name>.+\.iaproj)\.[A-Za-z0-9_]{8}\.tmp$")
_LEGACY_AGE_S = 3600.0


def umask() -> int:
    """The process's umask (read without changing it where the OS allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _temp_name(path: Path, suffix: str = "tmp") -> Path:
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.{suffix}"


@contextlib.contextmanager
def atomic_write(path, *, mode: str = "wb", encoding: str | None = None, errors: str | None = None,
                 newline: str | None = None):
    """Open a temporary file beside ``path``; on success it replaces ``path``.

    Parameters
    ----------
    path : str or Path
        Destination.  Its folder must exist.
    mode : {"wb", "w"}
    encoding, errors, newline : str, optional
        For text mode, as in :func:`open`.

    Yields
    ------
    file object
        Write to it; when the ``with`` block ends without an exception the
        data is flushed, synced, given the umask's permissions and renamed
        into place.  On any exception (``KeyboardInterrupt`` included) the
        temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, mode, encoding=encoding, errors=errors, newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with signals_held(), contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path) as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(path, text: str, *, errors: str = "strict") -> Path:
    """Write ``text`` to ``path`` atomically as UTF-8, newlines as given (see :func:`atomic_write`).

    Parameters
    ----------
    path : str or Path
    text : str
    errors : str
        As in :func:`open`; ``"surrogateescape"`` writes undecodable
        file-name bytes back as they were.
    """
    with atomic_write(path, mode="w", encoding="utf-8", errors=errors, newline="") as fh:
        fh.write(text)
    return Path(path)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_stale_temporaries(folder, *, name: str | None = None) -> list[Path]:
    """Remove what killed writers left in ``folder``; return what was removed.

    A temporary file or folder of this module whose writer process is gone is
    removed; temporary project saves of the older naming
    (``.<name>.iaproj.<8 characters>.tmp``, no pid) are removed when older
    than an hour.  Everything else is left alone.

    Parameters
    ----------
    folder : str or Path
    name : str, optional
        Only the leftovers of writes to this file name.
    """
    folder = Path(folder)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        m = _TMP_RE.match(entry.name)
        stale = False
        if m:
            if name is not None and m.group("name") != name:
                continue
            stale = not _pid_alive(int(m.group("pid")))
        elif (lm := _LEGACY_RE.match(entry.name)) and (name is None or lm.group("name") == name):
            try:
                st = entry.stat(follow_symlinks=False)
                stale = entry.is_file(follow_symlinks=False) and now - st.st_mtime > _LEGACY_AGE_S
            except OSError:
                stale = False
        if not stale:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM back while the block runs; deliver them after it.

    Python-level: in the main thread the handlers are swapped for one that
    only records the signal, and the first one recorded is raised again when
    the block ends (so the usual handler, or the default action, applies
    then).  Elsewhere (another thread) the block just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):
            old[sig] = signal.signal(sig, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])


@contextlib.contextmanager
def _folder_lock(folder):
    """Hold an exclusive lock on ``folder`` (``flock`` on its descriptor: released when the process dies).

    Two writers moving their sets of files into one folder take turns, so the folder ends with one
    whole set, never a mix.  No lock where the system has no ``flock`` (Windows).
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with it


class ResultFolder:
    """Write a set of result files all-or-nothing.

    ``path`` is where the results are written meanwhile (a hidden folder
    beside ``final``); :meth:`commit` moves every file into ``final``
    (created if needed) with SIGINT/SIGTERM held; :meth:`discard` removes the
    hidden folder.  Files already in ``final`` with other names are kept.

    Parameters
    ----------
    final : str or Path
        The results folder the user asked for.
    """

    def __init__(self, final):
        self.final = Path(final)
        self.path: Path | None = None
        self.committed = False

    def open(self) -> Path:
        """Create the hidden working folder and return it."""
        parent = self.final.parent
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(parent, name=self.final.name)
        tmp = _temp_name(self.final, "partial")
        os.mkdir(tmp, 0o777)
        self.path = tmp
        return tmp

    def commit(self) -> Path:
        """Move the results into place; returns the final folder."""
        if self.path is None:
            raise RuntimeError("the result folder was not opened")
        with signals_held(), _folder_lock(self.final.parent):  # two runs into one folder: one set after the other
            if not self.final.exists():
                os.replace(self.path, self.final)
            else:
                for f in sorted(self.path.iterdir()):
                    os.replace(f, self.final / f.name)
                shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
            self.committed = True
        return self.final

    def discard(self) -> None:
        """Remove the working folder and everything in it."""
        if self.path is not None:
            with signals_held():
                shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def __enter__(self) -> Path:
        return self.open()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False
