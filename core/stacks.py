"""Image stacks: one file holding many images, and STAR files listing them.

A stack is read as a set of images, one image at a time:

* ``.mrcs`` / ``.mrc`` (MRC2014, read with ``mrcfile``): every section of the
  data block is an image (a ``.mrc`` whose header says it is a 3-D volume,
  space group 1 or more, is refused);
* ``.tif`` / ``.tiff``: every page is an image (reduced-resolution pages,
  thumbnails, are left out); a TIFF of one page is one image, as before;
* ``.npy``: a 2-D array, or ``(H, W, 3|4)``, is one image; ``(n, H, W)`` and
  ``(n, H, W, 3|4)`` are ``n`` images (never unpickled: ``allow_pickle=False``);
* ``.star`` (RELION, read with ``starfile``): its ``rlnImageName`` entries,
  ``N@stack.mrcs`` (image ``N``, counted from 1) or a file name, relative to the
  STAR file's folder and inside it.

The image ``N`` (counted from 1, as RELION counts) of a stack is named
``stack.mrcs#N``: that name is what the CSV, the app and a project show, and
:func:`~iastudio.core.imageset.load_images` reads it back.

Nothing is read before the header is checked: the image size and the count
against the file's size (MRC, NumPy: a header describing more bytes than the
file holds is refused as truncated), every image against
:data:`~iastudio.core.imageset.MAX_PIXELS`, a stack against
:data:`MAX_STACK_IMAGES` images and :data:`MAX_STACK_PIXELS` pixels; a
compressed TIFF stack may decode to at most ``MAX_PIXELS`` pixels, or to
:data:`MAX_PIXELS_PER_BYTE` pixels per byte of its file (a decompression bomb
is refused from its headers).  Files are memory-mapped (MRC, NumPy) or read a
page at a time (TIFF): a stack is never held twice.
"""
from __future__ import annotations

import contextlib
import logging
import math
import mmap
import os
import re
import struct
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from .extras import missing_extra
from .imagefile import MAX_PIXELS, ImageLoadError, cmyk_to_rgb, os_reason, regular_file_size, short_reason

__all__ = [
    "MAX_PIXELS_PER_BYTE",
    "MAX_STACK_IMAGES",
    "MAX_STACK_PIXELS",
    "MAX_STAR_BYTES",
    "STACK_EXTENSIONS",
    "Stack",
    "StackMember",
    "member_name",
    "open_stack",
    "read_star",
    "source_file",
    "split_member",
    "star_members",
]

STACK_EXTENSIONS = (".mrc", ".mrcs", ".npy", ".star")
"""Extensions read by this module besides TIFF (whose pages it reads too)."""
MAX_STACK_IMAGES = 100_000
"""Most images in one stack (as many as a project may hold)."""
MAX_STACK_PIXELS = 1_000_000_000
"""Most pixels in one stack: 4 GB once read as float32."""
MAX_PIXELS_PER_BYTE = 8
"""A compressed TIFF stack over ``MAX_PIXELS`` pixels must store at least one byte per this many pixels."""
MAX_STAR_BYTES = 256 * 2**20
"""Largest STAR file read (about two million particle rows)."""

MRC_MODES = {0: "int8", 1: "int16", 2: "float32", 6: "uint16", 12: "float16"}
"""The MRC modes read (real-valued images); complex modes 3, 4 and the 4-bit mode 101 are refused."""
_MRC_HEADER = 1024
_MEMBER = re.compile(r"^(.*)#([1-9][0-9]{0,8})$", re.S)


@dataclass(frozen=True)
class StackMember:
    """Image ``index`` (counted from 0) of the stack ``path``; ``str()`` gives its name, ``path#(index + 1)``."""

    path: Path
    index: int

    def __str__(self) -> str:
        return member_name(self.path, self.index)


def member_name(path, index: int) -> str:
    """The name of image ``index`` (counted from 0) of the stack ``path``: ``"path#N"``, ``N = index + 1``."""
    return f"{path}#{int(index) + 1}"


def split_member(name) -> StackMember | None:
    """The stack member a name such as ``"stack.mrcs#17"`` means, or None.

    A name means a member when it is not itself an existing file, ends in
    ``#N`` (``N`` >= 1) and what comes before is an existing file.

    Examples
    --------
    >>> split_member("no/such/file.png") is None
    True
    """
    text = os.fspath(name) if not isinstance(name, StackMember) else None
    if text is None:
        return name
    m = _MEMBER.match(str(text))
    if m is None or os.path.lexists(text) or not os.path.isfile(m.group(1)):
        return None
    return StackMember(Path(m.group(1)), int(m.group(2)) - 1)


def source_file(name) -> Path:
    """The file an image name reads from: the stack of ``"stack.mrcs#17"``, else the name itself."""
    member = split_member(name)
    return member.path if member is not None else Path(name)


def _check_count(n: int, h: int, w: int, what: str = "images") -> None:
    if n > MAX_STACK_IMAGES:
        raise ImageLoadError(f"too many images: a stack of {n} {what} (at most {MAX_STACK_IMAGES})")
    if h * w > MAX_PIXELS:
        raise ImageLoadError(f"over 50 megapixels ({w}x{h} per image)")
    if n * h * w > MAX_STACK_PIXELS:
        raise ImageLoadError(f"too large: {n} images of {w}x{h} pixels are over "
                             f"{MAX_STACK_PIXELS // 1_000_000} megapixels in all")


class Stack:
    """An open stack: ``len()`` images, read one at a time by :meth:`read`.

    Use :func:`open_stack`; close it (or use ``with``) when done.  ``voxel_size``
    is the pixel size in Å the file records (MRC), else None.
    """

    path: Path
    voxel_size: float | None = None

    def __len__(self) -> int:
        return self.length

    def read(self, index: int) -> np.ndarray:
        """Image ``index`` (counted from 0) as the file stores it (a new array, not a view of the file)."""
        if not 0 <= index < self.length:
            raise ImageLoadError(f"no image {index + 1} in the stack (it holds {self.length})")
        return self._read(index)

    def release(self) -> None:
        """Let the system drop the file's pages read so far (memory-mapped stacks; no-op elsewhere)."""

    def close(self) -> None:
        """Close the file."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MrcStack(Stack):
    """An MRC file (``.mrc``/``.mrcs``), memory-mapped by ``mrcfile`` after its header is checked."""

    def __init__(self, path: Path):
        import mrcfile

        self.path = path
        size = regular_file_size(path)
        if size < _MRC_HEADER:
            raise ImageLoadError(f"truncated file: {size} bytes, shorter than an MRC header ({_MRC_HEADER})")
        _check_mrc_extended_header(path, size)  # before mrcfile, which reads (allocates) it whole
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with mrcfile.open(path, header_only=True, permissive=False) as mrc:
                    h = mrc.header
                    nx, ny, nz = int(h.nx), int(h.ny), int(h.nz)
                    mode, ispg, ext = int(h.mode), int(h.ispg), int(h.nsymbt)
                    voxel = float(mrc.voxel_size.x)
        except (ValueError, OSError, EOFError) as exc:
            raise ImageLoadError(f"not an MRC file ({short_reason(exc)})") from None
        if min(nx, ny, nz) <= 0:
            raise ImageLoadError(f"corrupt MRC header: dimensions {nx} x {ny} x {nz} (each must be positive)")
        if mode not in MRC_MODES:
            raise ImageLoadError(f"unsupported MRC mode {mode} (readable: real-valued modes "
                                 f"{', '.join(str(m) for m in MRC_MODES)})")
        if ext < 0:
            raise ImageLoadError(f"corrupt MRC header: extended header of {ext} bytes")
        if path.suffix.lower() == ".mrc" and nz > 1 and ispg != 0:
            raise ImageLoadError(f"a 3-D volume of {nz} sections (space group {ispg}), not a stack of images")
        _check_count(nz, ny, nx)
        need = _MRC_HEADER + ext + nx * ny * nz * np.dtype(MRC_MODES[mode]).itemsize
        if need > size:
            raise ImageLoadError(f"truncated file: the MRC header describes {need} bytes, the file holds {size}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._mrc = mrcfile.mmap(path, mode="r", permissive=False)
        except (ValueError, OSError) as exc:
            raise ImageLoadError(f"not an MRC file ({short_reason(exc)})") from None
        data = self._mrc.data
        self._data = data.reshape(nz, ny, nx)
        self.length = nz
        self.voxel_size = voxel if math.isfinite(voxel) and voxel > 0 else None

    def _read(self, index):
        return np.array(self._data[index])

    def release(self):
        raw = getattr(self._mrc.data, "_mmap", None)
        if raw is not None and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                raw.madvise(mmap.MADV_DONTNEED)

    def close(self):
        self._data = None
        self._mrc.close()


def _check_mrc_extended_header(path: Path, size: int) -> None:
    """Refuse an extended header (``nsymbt``, bytes 92-95) that is negative or runs past the end of the file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_MRC_HEADER)
    except OSError as exc:
        raise ImageLoadError(os_reason(exc, path)) from exc
    if head[208:212] != b"MAP ":
        raise ImageLoadError("not an MRC file (no 'MAP ' identifier in its header)")
    order = ">" if head[212:213] == b"\x11" else "<"  # the machine stamp: 0x11 big-endian, else little
    (ext,) = struct.unpack(order + "i", head[92:96])
    if ext < 0:
        raise ImageLoadError(f"corrupt MRC header: extended header of {ext} bytes")
    if _MRC_HEADER + ext > size:
        raise ImageLoadError(f"truncated file: the MRC header describes an extended header of {ext} bytes, "
                             f"the file holds {size}")


class NpyStack(Stack):
    """A ``.npy`` array, memory-mapped after its header is checked (``allow_pickle=False``)."""

    def __init__(self, path: Path):
        self.path = path
        size = regular_file_size(path)
        fmt = np.lib.format
        try:
            with open(path, "rb") as fh:
                version = fmt.read_magic(fh)
                if version == (1, 0):
                    shape, _fortran, dtype = fmt.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, _fortran, dtype = fmt.read_array_header_2_0(fh)
                else:
                    raise ImageLoadError(f"unsupported .npy version {version[0]}.{version[1]}")
                offset = fh.tell()
        except ImageLoadError:
            raise
        except OSError as exc:
            raise ImageLoadError(os_reason(exc, path)) from exc
        except (ValueError, SyntaxError, TypeError, EOFError) as exc:
            raise ImageLoadError(f"not a NumPy array file ({short_reason(exc)})") from None
        if dtype.hasobject:
            raise ImageLoadError("holds Python objects (refused: files are never unpickled)")
        if dtype.kind not in "biuf" or dtype.fields is not None:
            raise ImageLoadError(f"unsupported pixel type {dtype}")
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            raise ImageLoadError(f"empty or invalid array shape {shape}")
        colour = shape[-1] in (3, 4) and len(shape) in (3, 4)
        if len(shape) == 2 or (len(shape) == 3 and colour):
            n, h, w = 1, shape[0], shape[1]
        elif len(shape) in (3, 4):
            if len(shape) == 4 and not colour:
                raise ImageLoadError(f"unsupported array shape {shape} (images are (n, H, W) or (n, H, W, 3))")
            n, h, w = shape[:3]
        else:
            raise ImageLoadError(f"unsupported array shape {shape} (images are (H, W), (n, H, W) or (n, H, W, 3))")
        _check_count(n, h, w)
        need = offset + math.prod(shape) * dtype.itemsize
        if need > size:
            raise ImageLoadError(f"truncated file: the header describes {need} bytes, the file holds {size}")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ImageLoadError(f"not a NumPy array file ({short_reason(exc)})") from None
        self._arr = arr[None] if len(shape) == 2 or (len(shape) == 3 and colour) else arr
        self.length = n

    def _read(self, index):
        return np.array(self._arr[index])

    def release(self):
        raw = getattr(self._arr, "_mmap", None) or getattr(getattr(self._arr, "base", None), "_mmap", None)
        if raw is not None and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                raw.madvise(mmap.MADV_DONTNEED)

    def close(self):
        raw = getattr(self._arr, "_mmap", None)
        self._arr = None
        if raw is not None:
            raw.close()


class TiffStack(Stack):
    """A TIFF file, a page at a time, after every page's header is checked (``tifffile``)."""

    def __init__(self, path: Path):
        import tifffile

        self.path = path
        size = regular_file_size(path)
        errors = (tifffile.TiffFileError, ValueError, OSError, KeyError, IndexError, RuntimeError, TypeError,
                  NotImplementedError, EOFError)
        with _TiffComplaints() as complaints:
            try:
                self._tf = tifffile.TiffFile(path)
            except errors as exc:
                raise ImageLoadError(_tiff_reason(exc)) from None
            try:
                self._pages = self._check_pages(tifffile, size)
                if complaints.errors:  # tifffile stops at a page offset beyond the end, and says so only in its log
                    said = re.sub(r"<[^>]*>\s*", "", complaints.errors[0])[:120]
                    raise ImageLoadError(f"truncated or corrupt file (tifffile: {said})")
            except ImageLoadError:
                self._tf.close()
                raise
            except errors as exc:
                self._tf.close()
                raise ImageLoadError(_tiff_reason(exc)) from None
        self.length = len(self._pages)

    def _check_pages(self, tifffile, size):
        tf = self._tf
        n_ifd = len(tf.pages)
        if n_ifd > MAX_STACK_IMAGES:
            raise ImageLoadError(f"too many images: a stack of {n_ifd} pages (at most {MAX_STACK_IMAGES})")
        pages, total, first = [], 0, None
        for k in range(n_ifd):
            page = tf.pages[k]
            if k and int(getattr(page, "subfiletype", 0) or 0) & 1:  # a reduced-resolution copy (thumbnail)
                continue
            w, h = int(getattr(page, "imagewidth", 0)), int(getattr(page, "imagelength", 0))
            depth = int(getattr(page, "imagedepth", 1) or 1)
            samples = int(getattr(page, "samplesperpixel", 1) or 1)
            if w * h > MAX_PIXELS:
                raise _too_big(w, h)
            if samples > 4:
                raise ImageLoadError(f"unsupported: {samples} samples per pixel")
            if depth > 1:
                raise ImageLoadError(f"unsupported: a page holding a volume of {depth} sections")
            ends = [int(o) + int(c) for o, c in zip(getattr(page, "dataoffsets", ()) or (),
                                                    getattr(page, "databytecounts", ()) or ())]
            if ends and max(ends) > size:
                raise ImageLoadError(f"truncated file: page {len(pages) + 1}'s data ends at byte {max(ends)}, "
                                     f"the file holds {size}")
            total += w * h
            first = first or (w, h)
            pages.append(k)
        if not pages or total == 0:
            raise ImageLoadError("not an image (no image data in the TIFF)")
        if total > MAX_PIXELS and total > MAX_PIXELS_PER_BYTE * size:
            raise ImageLoadError(f"over 50 megapixels ({first[0]}x{first[1]} in {len(pages)} frames) stored in "
                                 f"{size} bytes: more than {MAX_PIXELS_PER_BYTE} pixels per byte")
        if total > MAX_STACK_PIXELS:
            raise ImageLoadError(f"too large: {len(pages)} pages hold over {MAX_STACK_PIXELS // 1_000_000} "
                                 "megapixels in all")
        return pages

    def _read(self, index):
        import tifffile

        page = self._tf.pages[self._pages[index]]
        try:
            img = page.asarray()
        except (tifffile.TiffFileError, ValueError, OSError, KeyError, IndexError, RuntimeError, TypeError,
                NotImplementedError, EOFError) as exc:
            raise ImageLoadError(_tiff_reason(exc)) from None
        axes = getattr(page, "axes", "")
        if axes.startswith("S") and img.ndim == 3:  # planar configuration: samples first
            img = np.moveaxis(img, 0, -1)
        if getattr(page, "photometric", None) == tifffile.PHOTOMETRIC.SEPARATED and img.ndim == 3 \
                and img.shape[-1] == 4:
            img = cmyk_to_rgb(img)
        return img

    def close(self):
        self._tf.close()


class _TiffComplaints(logging.Handler):
    """Collects what tifffile logs as errors, on this thread, while a file is opened."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.errors: list[str] = []
        self._thread = threading.get_ident()

    def emit(self, record):
        if record.thread == self._thread:
            self.errors.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("tifffile").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("tifffile").removeHandler(self)


def _too_big(w, h):
    return ImageLoadError(f"over 50 megapixels ({w}x{h})")


def _tiff_reason(exc) -> str:
    text = str(exc).lower()
    if "truncat" in text or "end of file" in text or "eof" in text:
        return "truncated file (the image data ends early)"
    return f"not an image ({short_reason(exc)})"


def open_stack(path) -> Stack:
    """Open a stack file after checking its header.

    Parameters
    ----------
    path : str or Path
        A ``.mrcs``, ``.mrc``, ``.tif``/``.tiff`` or ``.npy`` file.

    Returns
    -------
    Stack
        ``len(stack)`` images, read one at a time with ``stack.read(i)``.

    Raises
    ------
    ImageLoadError
        With the reason: does not exist, not a regular file, empty, truncated
        (the header describes more data than the file holds), corrupt header
        (negative sizes), unsupported mode or pixel type, over the limits
        (:data:`MAX_STACK_IMAGES`, :data:`MAX_STACK_PIXELS`, 50 megapixels an
        image, a compressed TIFF's :data:`MAX_PIXELS_PER_BYTE`).
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext in (".mrc", ".mrcs"):
        return MrcStack(path)
    if ext == ".npy":
        return NpyStack(path)
    if ext in (".tif", ".tiff"):
        return TiffStack(path)
    raise ImageLoadError(f"not a stack file type '{ext or path.name}'")


def _relative(text: str) -> PurePosixPath | None:
    """``text`` as a relative path below its folder, or None (absolute, a drive, ``..``, empty)."""
    if not text or "\x00" in text:
        return None
    if PureWindowsPath(text).drive or PureWindowsPath(text).root:
        return None
    rel = PurePosixPath(text.replace("\\", "/"))
    if rel.is_absolute() or any(part == ".." for part in rel.parts) or not rel.parts:
        return None
    return rel


def read_star(path) -> dict:
    """The data blocks of a STAR file, read with ``starfile`` after its size is checked.

    Parameters
    ----------
    path : str or Path
        The STAR file.

    Returns
    -------
    dict
        Block name to table (a :class:`pandas.DataFrame` for loops, a dict for single values), as
        ``starfile.read(path, always_dict=True)`` gives them.

    Raises
    ------
    ImageLoadError
        Not a regular file, larger than :data:`MAX_STAR_BYTES`, ``starfile`` not installed, or not a
        STAR file.
    """
    path = Path(path)
    size = regular_file_size(path)
    if size > MAX_STAR_BYTES:
        raise ImageLoadError(f"too large for a STAR file ({size} bytes; at most {MAX_STAR_BYTES})")
    try:
        import starfile
    except ImportError:
        raise ImageLoadError("reading STAR files needs the 'starfile' package (the .mrcs stacks it lists "
                             f"open directly): {missing_extra('starfile', extra='relion')}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            blocks = starfile.read(path, always_dict=True)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - pandas/starfile raise many types on bad text
        raise ImageLoadError(f"not a STAR file ({short_reason(exc)})") from None
    return blocks


def star_members(path, *, blocks=None) -> list[StackMember | Path]:
    """The images a RELION STAR file names in its ``rlnImageName`` column, in order.

    Parameters
    ----------
    path : str or Path
        The STAR file (any data block holding ``rlnImageName``: RELION 3.0's
        single block, or 3.1's ``particles`` block beside ``optics``).
    blocks : dict, optional
        Its blocks, already read by :func:`read_star` (None: read here).

    Returns
    -------
    list of StackMember or Path
        ``N@stack.mrcs`` gives ``StackMember(folder / "stack.mrcs", N - 1)``;
        a plain file name gives that file.

    Raises
    ------
    ImageLoadError
        Not a STAR file, larger than :data:`MAX_STAR_BYTES`, no
        ``rlnImageName`` column, more than :data:`MAX_STACK_IMAGES` rows, an
        entry that is not ``N@name`` with ``N >= 1``, or a name outside the
        STAR file's folder (absolute, with ``..``, or reaching out through a
        symbolic link): the whole file is refused, naming the first such row.
    """
    path = Path(path)
    blocks = read_star(path) if blocks is None else blocks
    table = next((b for b in blocks.values() if hasattr(b, "columns") and "rlnImageName" in b.columns), None)
    if table is None:
        raise ImageLoadError("no rlnImageName column (not a particle STAR file)")
    names = [str(v) for v in table["rlnImageName"].tolist()]
    if len(names) > MAX_STACK_IMAGES:
        raise ImageLoadError(f"too many images: {len(names)} rows (at most {MAX_STACK_IMAGES})")
    folder = path.parent
    try:
        root = folder.resolve()
    except OSError as exc:
        raise ImageLoadError(os_reason(exc, folder)) from None
    out: list[StackMember | Path] = []
    checked: dict[str, Path] = {}
    for row, entry in enumerate(names, start=1):
        number, at, name = entry.strip().rpartition("@")
        if at and not (number.isascii() and number.isdigit() and 1 <= int(number) <= MAX_STACK_IMAGES):
            raise ImageLoadError(f"row {row}: {entry[:80]!r} is not N@file with N from 1 to {MAX_STACK_IMAGES}")
        if name not in checked:
            rel = _relative(name)
            target = None if rel is None else folder.joinpath(*rel.parts)
            try:
                inside = target is not None and target.resolve().is_relative_to(root)
            except (OSError, RuntimeError):
                inside = False
            if not inside:
                raise ImageLoadError(f"row {row} names a file outside the STAR file's folder ({name[:80]!r}): "
                                     "refused")
            checked[name] = target
        target = checked[name]
        out.append(StackMember(target, int(number) - 1) if at else target)
    if not out:
        raise ImageLoadError("no images listed (rlnImageName is empty)")
    return out
