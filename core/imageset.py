"""Image sets: loading image files and folders into float arrays.

A file that cannot be used is never fatal: it is skipped and reported as
``{"path": ..., "reason": ...}``, and the rest of the set loads.

A file holding several images (an MRC stack, a multi-page TIFF, an ``.npy``
stack) is a set of images, each named ``file#N``, and a RELION STAR file
stands for the images it lists (:mod:`~iastudio.core.stacks`).

Files may come from anyone, so nothing is decoded before its size is known:
the pixel count of every frame (PIL's header, every TIFF page's header, an
MRC or NumPy header checked against the file's size) is checked against
:data:`MAX_PIXELS` first, and a stack against the limits of
:mod:`~iastudio.core.stacks`; a file that is not a regular file (a FIFO would
block) is refused before it is opened; running out of memory while decoding
skips that file only.  CMYK images are converted to RGB.
"""
from __future__ import annotations

import logging
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .imagefile import MAX_PIXELS, ImageLoadError, os_reason, regular_file_size, short_reason
from .stacks import StackMember, open_stack, read_star, source_file, split_member, star_members

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_PIXELS",
    "Entry",
    "ImageLoadError",
    "ImageSet",
    "NoUsableImagesError",
    "image_files",
    "load_image",
    "load_images",
    "no_usable_images",
    "not_loaded",
    "read_entries",
    "set_source",
    "skip_entry",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".mrc", ".mrcs", ".npy", ".star")
"""Every extension read: single images, stacks (:mod:`~iastudio.core.stacks`) and STAR lists."""
STACK_FILE_EXTENSIONS = (".tif", ".tiff", ".mrc", ".mrcs", ".npy")
"""Files that may hold several images, each read as one image of the set."""
MAX_FLOAT = 1e15
"""Largest magnitude accepted in a float image: beyond it sums of squares overflow (treated like inf)."""
log = logging.getLogger(__name__)


def set_source(paths) -> tuple[Path | None, str | None]:
    """Where a set's images come from: the folder that holds their files, and a demo's name.

    Parameters
    ----------
    paths : sequence of str
        The images' names (``ImageSet.paths``): files, stack members ``"stack.mrcs#17"`` (their
        stack's folder counts) or a demo's ``"demo:shapes/003"``.

    Returns
    -------
    folder : Path or None
        The deepest folder holding every file (absolute); None without files, or on different drives.
    demo : str or None
        The demo's name when every image is one demo's; else None.
    """
    paths = list(paths)
    files = [source_file(p) for p in paths if not str(p).startswith("demo:")]
    demos = {str(p)[len("demo:"):].split("/")[0] for p in paths if str(p).startswith("demo:")}
    folder = None
    if files:
        try:
            folder = Path(os.path.commonpath([str(f.absolute().parent) for f in files]))
        except ValueError:  # on different drives
            folder = None
    return folder, demos.pop() if len(demos) == 1 and not files else None


class Cancelled(ImageLoadError):
    """The loading was stopped before this file (or this part of a stack) was read."""


class NoUsableImagesError(ValueError):
    """None of the inputs gave a usable image; ``skipped`` lists why."""

    def __init__(self, message: str, skipped=()):
        super().__init__(message)
        self.skipped = list(skipped)


@dataclass
class ImageSet:
    """Images with their names, optional true labels and the files skipped.

    Attributes
    ----------
    images : list of ndarray
        Float images in ``[0, 1]`` (8/16-bit are rescaled; float files are kept
        as they are), ``(H, W)`` gray or ``(H, W, 3)`` colour.  Sizes may differ.
    paths : list of str
        One name per image: the file path, or ``demo:NAME/INDEX``.
    labels : list of str or None
        Ground truth (the immediate subfolder name, or the demo's class).
        Used only for scoring, never by the algorithm.
    skipped : list of dict
        ``{"path": str, "reason": str}`` for every input that was not usable.
    true_transforms : ndarray, shape (n, 3), optional
        For demo sets: the transform ``(theta [rad], tx, ty)`` (canvas pixels)
        that made each image from its base, ``image = base o tau``.
    originals : ndarray, optional
        For demo sets: the untransformed images, ``(n, H, W)``.
    ctf : list, optional
        Per image, its particle's CTF parameters from the STAR file that listed it
        (:class:`~iastudio.core.particle_ctf.ParticleCtf`); a string saying why there are none
        when that STAR file's could not be read; None for an image no STAR file listed.  None
        (the attribute): no image came from a STAR file.
    """

    images: list
    paths: list
    labels: list
    skipped: list = field(default_factory=list)
    true_transforms: np.ndarray | None = None
    originals: np.ndarray | None = None
    ctf: list | None = None

    def __len__(self) -> int:
        return len(self.images)

    @property
    def has_labels(self) -> bool:
        """True when every image has a known label."""
        return len(self.labels) > 0 and all(lab is not None for lab in self.labels)

    def summary(self) -> str:
        """One line such as ``"40 images · 4 labels · 2 skipped"``."""
        parts = [f"{len(self)} image{'s' if len(self) != 1 else ''}"]
        labs = {lab for lab in self.labels if lab is not None}
        if labs:
            parts.append(f"{len(labs)} label{'s' if len(labs) != 1 else ''}")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        return " · ".join(parts)

    def subset(self, indices) -> ImageSet:
        """A new set with the images at ``indices`` (skipped list kept)."""
        idx = list(indices)
        tt = None if self.true_transforms is None else self.true_transforms[idx]
        orig = None if self.originals is None else self.originals[idx]
        return ImageSet(
            [self.images[i] for i in idx],
            [self.paths[i] for i in idx],
            [self.labels[i] for i in idx],
            list(self.skipped),
            tt,
            orig,
            None if self.ctf is None else [self.ctf[i] for i in idx],
        )

    def extend(self, other: ImageSet) -> ImageSet:
        """A new set with ``other`` appended (demo metadata is dropped; CTF parameters are kept)."""
        ctf = None
        if self.ctf is not None or other.ctf is not None:
            ctf = (self.ctf or [None] * len(self)) + (other.ctf or [None] * len(other))
        return ImageSet(
            self.images + other.images,
            self.paths + other.paths,
            self.labels + other.labels,
            self.skipped + other.skipped,
            ctf=ctf,
        )


def _to_float(img: np.ndarray, path) -> np.ndarray:
    """Rescale integer data to [0, 1]; composite alpha on black; check shape."""
    if img.dtype == bool:
        img = img.astype(np.float32)
    elif np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        img = img.astype(np.float32) / float(info.max)
    elif np.issubdtype(img.dtype, np.floating):
        with np.errstate(over="ignore", invalid="ignore"):
            img = img.astype(np.float32)
            finite = np.isfinite(img)
            if not finite.all():
                raise ImageLoadError("contains NaN or infinite values")
            if img.size and float(np.abs(img).max()) > MAX_FLOAT:
                raise ImageLoadError(f"contains NaN or infinite values (values beyond {MAX_FLOAT:g} "
                                     "overflow the computation)")
    else:
        raise ImageLoadError(f"unsupported pixel type {img.dtype}")
    if img.ndim == 3 and img.shape[-1] in (2, 4):  # gray+alpha or RGBA
        alpha = img[..., -1:]
        img = img[..., :-1] * alpha
        if img.shape[-1] == 1:
            img = img[..., 0]
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2 or (img.ndim == 3 and img.shape[-1] == 3):
        if min(img.shape[:2]) < 2:
            raise ImageLoadError(f"too small ({img.shape[1]}x{img.shape[0]} pixels)")
        return img
    if img.ndim == 3:
        raise ImageLoadError(f"unsupported: a stack of {img.shape[0]} pages or {img.shape[-1]} channels")
    raise ImageLoadError(f"unsupported: {img.ndim}-dimensional data")


def _too_big(w: int, h: int, frames: int = 1) -> ImageLoadError:
    extra = f" in {frames} frames" if frames > 1 else ""
    return ImageLoadError(f"over 50 megapixels ({w}x{h}{extra})")


def load_image(path) -> np.ndarray:
    """Read one image file, or one image of a stack, as float32, ``(H, W)`` or ``(H, W, 3)``.

    Parameters
    ----------
    path : str, Path or StackMember
        An image file, a stack file holding one image, or one image of a
        stack named ``"stack.mrcs#N"`` (``N`` counted from 1; see
        :mod:`~iastudio.core.stacks`).

    Returns
    -------
    ndarray

    Raises
    ------
    ImageLoadError
        With the reason the file cannot be used: does not exist, permission
        denied, a symbolic link loop, not a regular file, empty, truncated,
        not an image, unsupported, over :data:`MAX_PIXELS` pixels (checked on
        every frame before decoding), NaN/infinite/overflowing values, a stack
        of several images (read those with :func:`load_images`), or too large
        for the memory available.
    """
    member = split_member(path)
    if member is not None:
        try:
            with open_stack(member.path) as stack:
                return _to_float(stack.read(member.index), member.path)
        except MemoryError:
            raise ImageLoadError("too large to decode in the memory available") from None
    path = Path(path)
    regular_file_size(path)
    ext = path.suffix.lower()
    if ext not in IMAGE_EXTENSIONS:
        raise ImageLoadError(f"unsupported file type '{ext or path.name}'")
    if ext == ".star":
        raise ImageLoadError("a STAR file lists images: read it with load_images")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ImageLoadError(os_reason(exc, path)) from exc
    try:
        if ext in STACK_FILE_EXTENSIONS:
            with open_stack(path) as stack:
                if len(stack) > 1:
                    raise ImageLoadError(f"a stack of {len(stack)} images (read it with load_images, or name "
                                         f"one image as {path.name}#1)")
                img = stack.read(0)
        else:
            img = _decode(path, ext)
        img = np.asarray(img)
        if img.ndim >= 2 and img.shape[0] * img.shape[1] > MAX_PIXELS:
            raise _too_big(img.shape[1], img.shape[0])
        return _to_float(img, path)
    except MemoryError:
        raise ImageLoadError("too large to decode in the memory available") from None


def _decode(path: Path, ext: str) -> np.ndarray:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                w, h = im.size
                frames = int(getattr(im, "n_frames", 1) or 1)
                if ext in (".jpg", ".jpeg"):
                    frames = 1  # a multi-picture (MPO) camera JPEG: only its first picture is read
                mode = im.mode
                if w * h * frames > MAX_PIXELS:
                    raise _too_big(w, h, frames)
                if frames > 1:
                    raise ImageLoadError(f"unsupported: an animation of {frames} frames")
                if mode == "CMYK":  # PIL undoes Adobe's inverted CMYK when it reads the file
                    return np.asarray(im.convert("RGB"))
    except ImageLoadError:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise ImageLoadError("over 50 megapixels") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageLoadError("not an image (the file's contents are not a readable image)") from exc
    import imageio.v3 as iio

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return iio.imread(path, index=0)
    except (OSError, ValueError, SyntaxError, RuntimeError, IndexError, KeyError, EOFError) as exc:
        text = str(exc).lower()
        if "truncat" in text or "premature" in text or "broken data" in text or "end of file" in text:
            raise ImageLoadError("truncated file (the image data ends early)") from exc
        raise ImageLoadError(f"not an image ({short_reason(exc)})") from exc


def _walk(folder: Path, errors: list | None = None):
    """Files below ``folder``, recursively, in a deterministic sorted order.

    Subfolders that cannot be read are added to ``errors`` as skipped entries.
    """
    out = []

    def onerror(exc):
        if errors is not None:
            errors.append({"path": str(getattr(exc, "filename", "") or folder), "reason": "folder " + os_reason(exc)})

    for root, dirs, files in os.walk(folder, onerror=onerror):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                out.append(Path(root) / name)
    return sorted(out, key=lambda p: p.relative_to(folder).parts)


def image_files(inputs) -> tuple[list[tuple[Path, str | None]], list[dict]]:
    """The files that ``inputs`` name, with their labels, and the inputs skipped already.

    Parameters
    ----------
    inputs : str, Path or sequence of them
        Image files, stack files, STAR files, images of stacks named
        ``stack.mrcs#N`` and folders (searched recursively in sorted order;
        see :func:`load_images` for the labels).

    Returns
    -------
    files : list of (Path or StackMember, str or None)
        Each file (or stack image) to read and its label; a stack or STAR file
        is one entry here, its images are listed by :func:`read_entries`.
    skipped : list of dict
        ``{"path", "reason"}`` for inputs that do not exist, empty folders,
        folders that cannot be read and STAR files found in folders.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    jobs: list[tuple[Path, str | None]] = []
    skipped: list[dict] = []
    for item in inputs:
        member = split_member(item)
        if member is not None:  # "stack.mrcs#17": one image of a stack
            jobs.append((member, None))
            continue
        p = Path(item)
        try:
            is_dir = stat.S_ISDIR(os.stat(p).st_mode)
        except OSError as exc:
            skipped.append({"path": str(p), "reason": os_reason(exc, p)})
            continue
        if is_dir:
            errors: list = []
            files = _walk(p, errors)
            skipped += errors
            if not files and not errors:
                skipped.append({"path": str(p), "reason": "folder contains no files"})
            for f in files:
                if f.suffix.lower() == ".star":  # its stacks are in the folder: they are read themselves
                    skipped.append({"path": str(f), "reason": "a STAR file inside a folder is not read (the "
                                    "stacks beside it are; give the STAR file by name to read its list)"})
                    continue
                rel = f.relative_to(p).parts
                jobs.append((f, rel[0] if len(rel) > 1 else None))
        else:
            jobs.append((p, None))
    return jobs, skipped


def skip_entry(path, exc: BaseException) -> dict:
    """The ``{"path", "reason"}`` entry for a file whose reading (or preparing) raised ``exc``.

    An :class:`ImageLoadError` gives its reason; running out of memory and any
    other failure (a decoder's bug, logged) are reasons too, so that one file
    never ends the set.
    """
    if isinstance(exc, ImageLoadError):
        reason = str(exc)
    elif isinstance(exc, MemoryError):
        reason = "too large to decode in the memory available"
    else:
        log.warning("unexpected failure reading %r", str(path), exc_info=exc)
        reason = f"could not be decoded ({type(exc).__name__}: {short_reason(exc)})"
    return {"path": str(path), "reason": reason}


def not_loaded(files) -> list[dict]:
    """Skipped entries for the ``(path, label)`` files a cancel left unread."""
    return [{"path": str(f), "reason": "not loaded: cancelled"} for f, _ in files]


def skipped_lines(skipped, name=str) -> list[str]:
    """The skipped entries as lines ``"path: reason"``, each run of images of one file skipped for one reason
    in one line; ``name(path)`` writes the path (e.g. :func:`~iastudio.core.filenames.display_name`).

    A STAR file whose stack is missing skips every image it names, one entry each (``summary.json`` keeps
    them all); said once, the other messages are not buried under thousands of lines.

    >>> skipped_lines([{"path": f"gone.mrcs#{i}", "reason": "does not exist"} for i in (1, 2, 3)]
    ...               + [{"path": "a.mrcs#9", "reason": "no image 9"}, {"path": "b.png", "reason": "empty"}])
    ['gone.mrcs#1 to #3 (3 images): does not exist', 'a.mrcs#9: no image 9', 'b.png: empty']
    >>> skipped_lines([{"path": f"g.mrcs#{i}", "reason": "gone"} for i in (9, 1, 2, 7)])  # runs only
    ['g.mrcs#9: gone', 'g.mrcs#1 to #2 (2 images): gone', 'g.mrcs#7: gone']
    """
    groups: list[list] = []  # [file, reason, first path, last number, count]
    for entry in skipped:
        path, reason = str(entry["path"]), str(entry["reason"])
        stack, _, number = path.rpartition("#")
        if not (stack and number.isdigit()):
            stack, number = path, ""
        if (number and groups and groups[-1][:2] == [stack, reason] and groups[-1][3]
                and int(number) == int(groups[-1][3]) + 1):  # the next image of a run: "#1 to #600"
            groups[-1][3:] = [number, groups[-1][4] + 1]
        else:
            groups.append([stack, reason, path, number, 1])
    return [f"{name(first)}: {reason}" if count == 1 else f"{name(first)} to #{last} ({count:,} images): {reason}"
            for _, reason, first, last, count in groups]


def no_usable_images(skipped) -> NoUsableImagesError:
    """The error for a set in which no input gave an image, listing the first reasons."""
    lines = skipped_lines(skipped)
    detail = "; ".join(lines[:5])
    more = f" (and {len(lines) - 5} more)" if len(lines) > 5 else ""
    return NoUsableImagesError(f"no usable image found in the input{': ' + detail if detail else ''}{more}",
                               skipped)


@dataclass
class Entry:
    """One image read by :func:`read_entries`, or why it could not be.

    Attributes
    ----------
    name : str
        The file path, or ``"stack.mrcs#N"`` for image ``N`` of a stack.
    label : str or None
        The true label (the subfolder's name).
    image : ndarray or None
        The image (:func:`load_image`'s float32), or None when ``error`` is set.
    error : BaseException or None
        What stopped it (:func:`skip_entry` turns it into a reason).
    ctf : ParticleCtf, str or None
        For an image listed in a STAR file: its row's CTF parameters
        (:func:`~iastudio.core.particle_ctf.star_ctf`), or why the file's could not be read.
    """

    name: str
    label: str | None
    image: np.ndarray | None = None
    error: BaseException | None = None
    ctf: object = None


RELEASE_EVERY = 256
"""Images read from a memory-mapped stack before its pages read so far are handed back to the system."""


def read_entries(jobs, *, progress=None, load=None):
    """Read files one image at a time: a stack's images one by one, a STAR file's list in order.

    Parameters
    ----------
    jobs : list of (Path or StackMember, str or None)
        What :func:`image_files` returns.
    progress : callable(done, total, name), optional
        Called before each image: ``done`` images (or skipped entries) are done,
        ``total`` are known so far (a stack's images become known when it is
        opened) and ``name`` is next.  Returning ``False`` stops: the rest is
        yielded as skipped, "not loaded: cancelled" (one entry per file; the
        unread part of a stack as one entry).
    load : callable(path) -> ndarray, optional
        Reads a file holding one image (default :func:`load_image`); stacks are read here.

    Yields
    ------
    Entry
        In order.  A stack file that cannot be opened is one entry with its
        error; a member that cannot be read is one entry; the rest loads.
        At most a few stacks are open at once (a STAR file may interleave
        them); a stack's memory-mapped pages are released as it is read, so
        a stack is never held twice.
    """
    from collections import deque


    queue = deque((item, label, None) for item, label in jobs)
    stack_of = _OpenStacks()
    reads = 0
    done = 0
    try:
        while queue:
            item, label, ctf = queue[0]
            name = str(item)
            if progress is not None and progress(done, done + len(queue), name) is False:
                yield from _cancelled(queue)
                return
            queue.popleft()
            done += 1
            try:
                if isinstance(item, StackMember):
                    st = stack_of(item.path)
                    img = _to_float(st.read(item.index), item.path)
                    reads += 1
                    if reads % RELEASE_EVERY == 0:
                        st.release()
                    yield Entry(name, label, img, ctf=ctf)
                    continue
                ext = Path(item).suffix.lower()
                rows = [ctf]  # a stack a STAR row names whole: its images share that row
                if ext == ".star":
                    blocks = read_star(item)
                    members = star_members(item, blocks=blocks)
                    rows = _star_ctf_rows(item, blocks, len(members))
                elif ext in STACK_FILE_EXTENSIONS and _is_file(item):
                    st = stack_of(item)
                    if len(st) == 1:
                        img = _to_float(st.read(0), item)
                        if img.shape[0] * img.shape[1] > MAX_PIXELS:
                            raise _too_big(img.shape[1], img.shape[0])
                        yield Entry(name, label, img, ctf=ctf)
                        continue
                    members = [StackMember(Path(item), k) for k in range(len(st))]
                else:
                    yield Entry(name, label, (load or load_image)(item), ctf=ctf)
                    continue
                done -= 1  # the file is not an image: its images are
                rows = rows * len(members) if len(rows) == 1 else rows
                queue.extendleft((m, label, c) for m, c in zip(reversed(members), reversed(rows)))
            except Exception as exc:  # noqa: BLE001 - a decoder's bug on one file never ends the set
                if isinstance(exc, MemoryError):
                    exc = ImageLoadError("too large to decode in the memory available")
                yield Entry(name, label, error=exc)
    finally:
        stack_of.close()


def _star_ctf_rows(path, blocks, n: int) -> list:
    """Each row's :class:`~iastudio.core.particle_ctf.ParticleCtf`, or ``[why not]`` (kept, not fatal: only
    phase flipping needs them)."""
    from .particle_ctf import star_ctf

    try:
        rows = star_ctf(path, blocks=blocks)
    except ImageLoadError as exc:
        return [str(exc)]
    return rows if len(rows) == n else [f"{Path(path).name}: {len(rows)} CTF rows for {n} images"]


class _OpenStacks:
    """The stacks :func:`read_entries` has open, at most ``keep`` (the least recently read is closed)."""

    def __init__(self, keep: int = 4):
        from collections import OrderedDict

        self.keep = keep
        self.stacks: OrderedDict = OrderedDict()

    def __call__(self, path):
        """The open stack of ``path`` (opened now if it is not)."""
        key = str(path)
        if key in self.stacks:
            self.stacks.move_to_end(key)
            return self.stacks[key]
        st = open_stack(path)
        self.stacks[key] = st
        if len(self.stacks) > self.keep:
            self.stacks.popitem(last=False)[1].close()
        return st

    def close(self) -> None:
        for st in self.stacks.values():
            st.close()


def _is_file(path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _cancelled(queue):
    """The cancelled entries for what is left in ``queue``: one per file, a stack's rest as one."""

    items = list(queue)
    k = 0
    while k < len(items):
        item, label = items[k][:2]
        if isinstance(item, StackMember):
            j = k
            while j + 1 < len(items) and isinstance(items[j + 1][0], StackMember) \
                    and items[j + 1][0].path == item.path:
                j += 1
            last = items[j][0]
            what = "" if j == k else f" (images {item.index + 1} to {last.index + 1})"
            yield Entry(str(item) if j == k else str(item.path), label,
                        error=Cancelled(f"not loaded: cancelled{what}"))
            k = j + 1
        else:
            yield Entry(str(item), label, error=Cancelled("not loaded: cancelled"))
            k += 1


def load_images(inputs, *, on_progress=None) -> ImageSet:
    """Load image files, stacks and folders.

    Parameters
    ----------
    inputs : str, Path or sequence of them
        Image files, stack files (``.mrcs``, ``.mrc``, multi-page TIFF,
        ``.npy``: each image of the stack becomes one image of the set, named
        ``stack.mrcs#N``), RELION STAR files (their ``rlnImageName`` list),
        single images of stacks named ``stack.mrcs#N``, and folders.  Folders
        are searched recursively in sorted order; the name of a file's
        immediate subfolder (below the folder given) becomes its true label.
        Files directly in the folder, and files given by name, have no label.
        See :mod:`~iastudio.core.stacks` for the formats and their limits.
    on_progress : callable(done, total), optional
        Called after each image; returning ``False`` stops the loading (the
        files not read yet are listed as skipped, "not loaded: cancelled").
        ``total`` grows as stacks are opened.

    Returns
    -------
    ImageSet
        The usable images; ``skipped`` lists each unusable file and why.

    Raises
    ------
    NoUsableImagesError
        When no input gave a usable image (the message lists the reasons).
    """
    jobs, skipped = image_files(inputs)
    images, paths, labels, ctf = [], [], [], []
    seen = {"total": len(jobs)}

    def before(done, total, name):
        seen["total"] = total
        return done == 0 or on_progress(done, total) is not False

    stopped = False
    for entry in read_entries(jobs, progress=None if on_progress is None else before):
        if entry.error is not None:
            skipped.append(skip_entry(entry.name, entry.error))
            stopped = stopped or isinstance(entry.error, Cancelled)
            continue
        images.append(entry.image)
        paths.append(entry.name)
        labels.append(entry.label)
        ctf.append(entry.ctf)
    if on_progress is not None and not stopped:
        on_progress(seen["total"], seen["total"])
    if not images:
        raise no_usable_images(skipped)
    return ImageSet(images, paths, labels, skipped, ctf=ctf if any(c is not None for c in ctf) else None)
