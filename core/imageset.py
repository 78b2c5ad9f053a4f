"""Image sets: loading image files and folders into float arrays.

A file that cannot be used is never fatal: it is skipped and reported as
``{"path": ..., "reason": ...}``, and the rest of the set loads.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_PIXELS",
    "ImageSet",
    "NoUsableImagesError",
    "load_image",
    "load_images",
    "ImageLoadError",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")
MAX_PIXELS = 50_000_000


class ImageLoadError(ValueError):
    """A file could not be used; the message is the reason shown to the user."""


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
    """

    images: list
    paths: list
    labels: list
    skipped: list = field(default_factory=list)
    true_transforms: np.ndarray | None = None
    originals: np.ndarray | None = None

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

    def subset(self, indices) -> "ImageSet":
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
        )

    def extend(self, other: "ImageSet") -> "ImageSet":
        """A new set with ``other`` appended (demo metadata is dropped)."""
        return ImageSet(
            self.images + other.images,
            self.paths + other.paths,
            self.labels + other.labels,
            self.skipped + other.skipped,
        )


def _to_float(img: np.ndarray, path) -> np.ndarray:
    """Rescale integer data to [0, 1]; composite alpha on black; check shape."""
    if img.dtype == bool:
        img = img.astype(np.float32)
    elif np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        img = img.astype(np.float32) / float(info.max)
    elif np.issubdtype(img.dtype, np.floating):
        img = img.astype(np.float32)
        if not np.all(np.isfinite(img)):
            raise ImageLoadError("contains NaN or infinite values")
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


def load_image(path) -> np.ndarray:
    """Read one image file as float32, ``(H, W)`` or ``(H, W, 3)``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    ndarray

    Raises
    ------
    ImageLoadError
        With the reason the file cannot be used: empty, truncated, not an
        image, unsupported, or over :data:`MAX_PIXELS` pixels.
    """
    from PIL import Image
    import imageio.v3 as iio

    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImageLoadError(f"cannot be read ({exc.strerror or exc})") from exc
    if size == 0:
        raise ImageLoadError("empty file (0 bytes)")
    ext = path.suffix.lower()
    if ext not in IMAGE_EXTENSIONS:
        raise ImageLoadError(f"unsupported file type '{ext or path.name}'")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                w, h = im.size
    except Image.DecompressionBombWarning:
        raise ImageLoadError("over 50 megapixels") from None
    except Image.DecompressionBombError:
        raise ImageLoadError("over 50 megapixels") from None
    except (OSError, ValueError, SyntaxError) as exc:
        # PIL cannot parse the header; TIFF flavours PIL lacks go to imageio below.
        if ext not in (".tif", ".tiff"):
            raise ImageLoadError("not an image (the file's contents are not a readable image)") from exc
        w = h = None
    if w is not None and w * h > MAX_PIXELS:
        raise ImageLoadError(f"over 50 megapixels ({w}x{h})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = iio.imread(path)
    except (OSError, ValueError, SyntaxError, RuntimeError, IndexError, KeyError) as exc:
        text = str(exc).lower()
        if "truncat" in text or "premature" in text or "broken data" in text or "end of file" in text:
            raise ImageLoadError("truncated file (the image data ends early)") from exc
        raise ImageLoadError(f"not an image ({_short(exc)})") from exc
    img = np.asarray(img)
    if img.ndim >= 2 and img.shape[0] * img.shape[1] > MAX_PIXELS:
        raise ImageLoadError(f"over 50 megapixels ({img.shape[1]}x{img.shape[0]})")
    return _to_float(img, path)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def _walk(folder: Path):
    """Files below ``folder``, recursively, in a deterministic sorted order."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                out.append(Path(root) / name)
    return sorted(out, key=lambda p: p.relative_to(folder).parts)


def load_images(inputs, *, on_progress=None) -> ImageSet:
    """Load image files and folders.

    Parameters
    ----------
    inputs : str, Path or sequence of them
        Image files and folders.  Folders are searched recursively in sorted
        order; the name of a file's immediate subfolder (below the folder
        given) becomes its true label.  Files directly in the folder, and
        files given by name, have no label.
    on_progress : callable(done, total), optional
        Called after each file; returning ``False`` stops the loading (the
        files not read yet are listed as skipped, "not loaded: cancelled").

    Returns
    -------
    ImageSet
        The usable images; ``skipped`` lists each unusable file and why.

    Raises
    ------
    NoUsableImagesError
        When no input gave a usable image (the message lists the reasons).
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    jobs: list[tuple[Path, str | None]] = []
    skipped: list[dict] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            files = _walk(p)
            if not files:
                skipped.append({"path": str(p), "reason": "folder contains no files"})
            for f in files:
                rel = f.relative_to(p).parts
                jobs.append((f, rel[0] if len(rel) > 1 else None))
        elif p.exists():
            jobs.append((p, None))
        else:
            skipped.append({"path": str(p), "reason": "does not exist"})
    images, paths, labels = [], [], []
    for k, (f, label) in enumerate(jobs):
        try:
            images.append(load_image(f))
            paths.append(str(f))
            labels.append(label)
        except ImageLoadError as exc:
            skipped.append({"path": str(f), "reason": str(exc)})
        if on_progress is not None and on_progress(k + 1, len(jobs)) is False:
            skipped += [{"path": str(f2), "reason": "not loaded: cancelled"} for f2, _ in jobs[k + 1:]]
            break
    result = ImageSet(images, paths, labels, skipped)
    if not images:
        detail = "; ".join(f"{s['path']}: {s['reason']}" for s in skipped[:5])
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        raise NoUsableImagesError(
            f"no usable image found in the input{': ' + detail if detail else ''}{more}", skipped
        )
    return result
