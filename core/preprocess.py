"""Preprocessing raw images onto one working canvas.

Steps, per image: grayscale (or keep colour) -> optional invert -> subtract the
background level estimated from the border -> scale and place it on a square
canvas on which any rotation about the centre keeps the content -> scale to
unit L2 norm (the RBF bandwidth ``beta`` is defined on these).  By default the
scale follows the *content* (the object's mass above the background), so the
same object in files of different pixel sizes matches; ``scale="frame"``
scales the file's longest side to ``size`` instead.  :class:`Canvas` keeps what is needed to report a transform
found on the canvas in the original image's pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import se2

__all__ = [
    "Canvas",
    "apply_transforms",
    "canvas_to_original",
    "content_frame",
    "content_radius",
    "preprocess",
    "unit_norm",
]

_CONTENT_LEVEL = 0.02  # fraction of an image's maximum that counts as content
_MARGIN = 2  # pixels kept free around the content disk (Keys kernel support)
_DETECT_MAX_SIDE = 1024  # larger images are searched for their object on a block-mean copy
_GYRATION_REACH = 2.0  # content scaling fits this many radii of gyration into the canvas disk


@dataclass
class Canvas:
    """Preprocessed images and how they map back to the originals.

    Attributes
    ----------
    images : ndarray, shape (n, S, S) or (n, S, S, C), float32
        Unit-norm images on a common square canvas of side ``S``.
    scale : ndarray, shape (n,)
        Canvas pixels per original pixel.
    offset : ndarray, shape (n, 2)
        ``(row, col)`` of the original pixel (0, 0) on the canvas.
    original_shape : list of tuple
        ``(H, W)`` of each original image.
    denoise : DenoiseReport or None
        What the denoiser did (:func:`iastudio.core.denoise.denoise`), when it was asked for.
    undenoised : ndarray or None
        With ``preprocess(..., keep_undenoised=True)`` where the denoiser changed the images: the
        same images *before* denoising, on the same canvas in the same place and scale (each
        multiplied by its denoised image's unit-norm factor, background subtracted but not
        clipped), for class averages at the poses found on the denoised images
        (:func:`iastudio.core.cluster_means.pose_averages`); else None.
    """

    images: np.ndarray
    scale: np.ndarray
    offset: np.ndarray
    original_shape: list
    denoise: object = None
    undenoised: np.ndarray | None = None

    @property
    def size(self) -> int:
        """The canvas side ``S`` in pixels."""
        return int(self.images.shape[1])

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def take(self, indices) -> Canvas:
        """The canvases at ``indices`` (without the denoising, which was the whole set's).

        ``original_shape`` is kept only where it has one entry per image (a project's embedded
        canvases have none).
        """
        idx = np.asarray(indices, dtype=int)
        shapes = [self.original_shape[i] for i in idx] if len(self.original_shape) == len(self) else []
        return Canvas(self.images[idx], np.asarray(self.scale)[idx], np.asarray(self.offset)[idx], shapes)


def content_radius(image: np.ndarray, *, level: float = _CONTENT_LEVEL) -> float:
    """Distance from the image centre to the farthest content pixel.

    Parameters
    ----------
    image : ndarray, shape (H, W) or (H, W, C)
    level : float
        Pixels above ``level * max`` count as content.

    Returns
    -------
    float
        0 for an empty image.
    """
    mag = np.abs(image) if image.ndim == 2 else np.abs(image).max(axis=-1)
    top = float(mag.max()) if mag.size else 0.0
    if top <= 0:
        return 0.0
    rows, cols = np.nonzero(mag > level * top)
    h, w = mag.shape
    d2 = (rows - (h - 1) / 2.0) ** 2 + (cols - (w - 1) / 2.0) ** 2
    return float(np.sqrt(d2.max())) + 0.5 * np.sqrt(2.0)


def _border_level(img: np.ndarray) -> np.ndarray | float:
    h, w = img.shape[:2]
    k = max(1, int(round(0.03 * min(h, w))))
    border = np.concatenate(
        [img[:k].reshape(-1, *img.shape[2:]), img[-k:].reshape(-1, *img.shape[2:]),
         img[:, :k].reshape(-1, *img.shape[2:]), img[:, -k:].reshape(-1, *img.shape[2:])]
    )
    return np.median(border, axis=0)


def content_frame(image: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Where an object is and how big, from its mass above the background.

    The image (background already subtracted) is smoothed by a Gaussian of
    1 px; the noise level is estimated from the border (1.4826 x the median
    absolute deviation) and everything below 3 noise levels is dropped.  The
    remaining intensity is the object's *mass*.

    Parameters
    ----------
    image : ndarray, shape (H, W) or (H, W, C)

    Returns
    -------
    (centroid, radius) or None
        ``centroid`` is ``(row, col)`` in pixels; ``radius`` is twice the
        radius of gyration of the mass about it (a disk's edge lies at 1.41,
        a bar's ends at 1.73 radii of gyration).  Both follow the
        object under rotation and translation, and scale with it.  Images
        larger than 1024 px are searched on a block-mean copy (fast, bounded
        memory) and the result is scaled back.  ``None``
        for an image with no content (blank or pure noise).
    """
    from scipy.ndimage import gaussian_filter

    img = np.asarray(image, dtype=np.float32)
    if img.ndim == 3:
        img = img.mean(axis=-1)
    f = int(np.ceil(max(img.shape) / _DETECT_MAX_SIDE))
    if f > 1:  # a large file: find the object on a block-mean copy (the crop and resize use the original)
        h, w = (img.shape[0] // f) * f, (img.shape[1] // f) * f
        small = img[:h, :w].reshape(h // f, f, w // f, f).mean(axis=(1, 3))
        found = content_frame(small)
        if found is None:
            return None
        return (found[0] + 0.5) * f - 0.5, found[1] * f
    g = gaussian_filter(img.astype(np.float64), 1.0)
    h, w = g.shape
    k = max(1, int(round(0.03 * min(h, w))))
    border = np.concatenate([g[:k].ravel(), g[-k:].ravel(), g[:, :k].ravel(), g[:, -k:].ravel()])
    level = np.median(border)
    noise = 1.4826 * np.median(np.abs(border - level))
    m = np.clip(g - level - 3.0 * noise, 0.0, None)
    m[m < 1e-3 * (m.max() if m.size else 0.0)] = 0.0
    total = m.sum()
    if not total > 0:
        return None
    rows, cols = np.nonzero(m)
    wts = m[rows, cols]
    centroid = np.array([(rows * wts).sum(), (cols * wts).sum()]) / total
    r2 = (rows - centroid[0]) ** 2 + (cols - centroid[1]) ** 2
    radius = _GYRATION_REACH * float(np.sqrt((r2 * wts).sum() / total))
    return centroid, max(radius, 1.0)


def preprocess(
    images,
    *,
    size: int = 64,
    scale: str = "content",
    grayscale: bool = True,
    invert: bool = False,
    subtract_background: bool = True,
    canvas_size: int | None = None,
    denoise: str = "off",
    keep_undenoised: bool = False,
) -> Canvas:
    """Bring raw images onto one unit-norm working canvas.

    Parameters
    ----------
    images : sequence of ndarray
        ``(H, W)`` or ``(H, W, 3)`` float images (e.g. ``ImageSet.images``).
    size : int
        The working size in pixels (>= 8).
    scale : {"content", "frame"}
        ``"content"`` (default): find each image's object (:func:`content_frame`),
        scale it so that twice its radius of gyration spans the canvas's
        inscribed disk (radius ``size / 2 - 2``), put its centroid at the
        centre and clear whatever lies outside that disk.  The same object saved in files of different pixel
        sizes, or with different margins, then looks the same.  The canvas side
        is ``size``.  A blank image falls back to ``"frame"``.
        ``"frame"``: scale each image so that its longest side is ``size`` and
        pad it onto the smallest square canvas on which every image's content
        survives any rotation (version 0.1's behaviour).
    grayscale : bool
        Convert colour to gray (default).  ``False`` keeps 3 channels (gray
        images are repeated), as the paper allows ``n3`` channels.
    invert : bool
        Use ``max - x``: for dark objects on light paper.
    subtract_background : bool
        Subtract the median of the border pixels and clip at zero, so the
        background matches the zero the canvas is padded with.
    canvas_size : int, optional
        Force the canvas side; by default the smallest side (>= ``size``) on
        which every image's content stays inside under any rotation
        (``"frame"``), or ``size`` (``"content"``).
    denoise : {"off", "auto", "on"}
        Denoise the set first (:func:`iastudio.core.denoise.denoise`: steerable
        PCA, rotation-invariant), on the images as given, before the objects
        are found; ``"auto"`` steps aside on clean images.  A set-wide step:
        ``"off"`` (default here) keeps each image's canvas independent of the
        others; ``ia-cluster`` asks for ``"auto"``.  The report is kept as
        :attr:`Canvas.denoise`.
    keep_undenoised : bool
        Where the denoiser changed the images, also place the images as they were before it on the
        same canvas (:attr:`Canvas.undenoised`).

    Returns
    -------
    Canvas
    """
    if size < 8:
        raise ValueError("size must be at least 8 pixels")
    if scale not in ("content", "frame"):
        raise ValueError("scale must be 'content' or 'frame'")
    prepared, frames, report, before = _prepared_set(images, scale=scale, grayscale=grayscale, invert=invert,
                                                     subtract_background=subtract_background, denoise=denoise,
                                                     keep_undenoised=keep_undenoised)
    side = int(canvas_size) if canvas_size is not None else None
    if scale == "content":
        side = side or size + size % 2
    placed = [_place_frame(img, size) if fr is None else _place_content(img, fr, side)
              for img, fr in zip(prepared, frames)]
    if side is None:
        radius = max((content_radius(p[0]) for p in placed), default=0.0)
        side = max(size, int(np.ceil(2 * (radius + _MARGIN))))
        side += side % 2  # even sides keep the centre between pixels for even images
    in_disk = [fr is not None for fr in frames]
    out, scales, offsets = _compose(placed, in_disk, side, grayscale=grayscale)
    undenoised = None if before is None else _undenoised(before, frames, in_disk, out, size=size, side=side,
                                                         grayscale=grayscale)
    return Canvas(unit_norm(out), scales, offsets, [img.shape[:2] for img in prepared], report, undenoised)


def _undenoised(before, frames, in_disk, denoised, *, size, side, grayscale) -> np.ndarray:
    """:attr:`Canvas.undenoised`: the images ``before`` denoising placed by the denoised images' ``frames``
    (the same place and scale), each scaled by the factor that makes its denoised canvas image unit-norm."""
    again = [_place_frame(img, size) if fr is None else _place_content(img, fr, side)
             for img, fr in zip(before, frames)]
    out, _, _ = _compose(again, in_disk, side, grayscale=grayscale)
    norm = np.sqrt((denoised.astype(np.float64) ** 2).reshape(len(denoised), -1).sum(axis=1))
    factor = (1.0 / np.where(norm > 0, norm, 1.0)).astype(np.float32)
    return out * factor.reshape((-1,) + (1,) * (out.ndim - 1))


def _prepared_set(images, *, scale, grayscale, invert, subtract_background, denoise, keep_undenoised=False):
    """:func:`preprocess`'s first half: ``(prepared images, content frames or None, denoise report, undenoised)``.

    ``undenoised``: with ``keep_undenoised`` where the denoiser applied, the images before it,
    background subtracted without clipping (clipping noise at zero would bias their average); else None.
    """
    prepared, frames = [], []
    report, before = None, None
    raw = [_prepare(img, i, grayscale=grayscale, invert=invert) for i, img in enumerate(images)]
    if denoise != "off":
        from .denoise import denoise as denoise_set

        kept = raw
        raw, report = denoise_set(raw, mode=denoise)
        if keep_undenoised and report.applied:
            before = [img - _border_level(img) if subtract_background else img for img in kept]
    for img in raw:
        frames.append(content_frame(img) if scale == "content" else None)
        if subtract_background:
            img = np.clip(img - _border_level(img), 0.0, None)
        prepared.append(img)
    if report is not None and report.applied:
        frames = _one_scale(frames, skip=report.left_out)
    return prepared, frames, report, before


def _one_scale(frames, *, skip=()):
    """A denoised stack (one pixel size): every object at the median radius, each at its own centroid.

    A denoised image's faint ripples move its radius of gyration from image to
    image; the images of one stack share their pixel size, so one scale serves
    them all.  ``skip``: images not of the stack (another size, left as they
    were by the denoiser), which keep their own frames.
    """
    skip = set(skip)
    radii = [fr[1] for i, fr in enumerate(frames) if fr is not None and i not in skip]
    if not radii:
        return frames
    r = float(np.median(radii))
    return [fr if fr is None or i in skip else (fr[0], r) for i, fr in enumerate(frames)]


def _prepare(img, i, *, grayscale, invert):
    """One raw image as float32, checked finite, gray or colour as asked, inverted if asked."""
    from skimage.color import gray2rgb, rgb2gray

    img = np.asarray(img, dtype=np.float32)
    if not np.all(np.isfinite(img)):
        raise ValueError(f"image {i} holds NaN or inf values")
    if grayscale and img.ndim == 3:
        img = rgb2gray(img).astype(np.float32)
    elif not grayscale and img.ndim == 2:
        img = gray2rgb(img).astype(np.float32)
    if invert:
        img = img.max() - img
    return img


def _compose(placed, in_disk, side, *, grayscale):
    """Put each placed image on the canvas: ``(images, scales, offsets)``, not yet unit-norm.

    ``placed`` holds ``(image, scale, centre or None, crop origin)`` per image;
    where ``in_disk`` is true the canvas outside the content disk is cleared.
    """
    channels = () if grayscale else (3,)
    out = np.zeros((len(placed), side, side, *channels), dtype=np.float32)
    offsets = np.zeros((len(placed), 2))
    scales = np.zeros(len(placed))
    disk = _disk(side)
    for i, (img, s, centre, crop0) in enumerate(placed):
        h, w = img.shape[:2]
        if centre is None:  # centre the frame (crop if forced smaller), the same rounding both ways
            r0, c0 = (side - h) // 2, (side - w) // 2
        else:  # put the object's centroid on the canvas centre
            r0, c0 = (int(np.round((side - 1) / 2.0 - centre[k])) for k in range(2))
        src_r, src_c = max(0, -r0), max(0, -c0)
        dst_r, dst_c = max(0, r0), max(0, c0)
        hh, ww = min(h - src_r, side - dst_r), min(w - src_c, side - dst_c)
        if hh > 0 and ww > 0:
            out[i, dst_r:dst_r + hh, dst_c:dst_c + ww] = img[src_r:src_r + hh, src_c:src_c + ww]
        if in_disk[i]:
            out[i] *= disk if out.ndim == 3 else disk[..., None]
        # canvas coordinate of original pixel (0, 0): resize maps pixel centres
        # x_canvas + 0.5 = s (x_orig - crop0 + 0.5) + r0
        offsets[i] = (r0 + s * (0.5 - crop0[0]) - 0.5, c0 + s * (0.5 - crop0[1]) - 0.5)
        scales[i] = s
    return out, scales, offsets


def unit_norm(images) -> np.ndarray:
    """Scale each image to unit L2 norm (the norm summed in float64); blank images stay zero.

    Parameters
    ----------
    images : array_like, shape (n, H, W[, C])

    Returns
    -------
    ndarray, float32, same shape
        A new array.

    Examples
    --------
    >>> unit_norm(np.array([[[3.0, 4.0]], [[0.0, 0.0]]])).tolist()
    [[[0.6000000238418579, 0.800000011920929]], [[0.0, 0.0]]]
    """
    images = np.asarray(images, dtype=np.float32)
    norm = np.sqrt((images.astype(np.float64) ** 2).reshape(len(images), -1).sum(axis=1))
    norm = np.where(norm > 0, norm, 1.0).astype(np.float32)
    return images / norm.reshape((-1,) + (1,) * (images.ndim - 1))


def apply_transforms(images, transforms, *, index=None) -> np.ndarray:
    """Warp each image by its rigid transform, clip negative values and make it unit-norm again.

    What a user's transforms do to the preprocessed images: the warp's
    interpolation can overshoot below zero (clipped, as the background is
    zero) and changes the norm slightly (restored).

    Parameters
    ----------
    images : ndarray, shape (n, S, S[, C])
        Unit-norm images on one canvas (:func:`preprocess`).
    transforms : ndarray, shape (m, 3)
        ``(theta, tx, ty)`` per output image (canvas px; see :func:`iastudio.core.warp.warp`).
    index : ndarray of int, shape (m,), optional
        Output ``k`` warps ``images[index[k]]``; default: image ``k`` (``m == n``).

    Returns
    -------
    ndarray, shape (m, S, S[, C]), float32
    """
    from .warp import warp

    images = np.asarray(images, dtype=np.float32)
    index = None if index is None else np.asarray(index, dtype=int)
    return unit_norm(np.clip(warp(images, np.asarray(transforms, dtype=float), index=index), 0, None))


def _resize(img, s):
    from skimage.transform import resize

    h, w = img.shape[:2]
    out_shape = (max(1, int(round(h * s))), max(1, int(round(w * s))), *img.shape[2:])
    if out_shape == img.shape:
        return img
    return resize(img, out_shape, order=1, anti_aliasing=s < 1, preserve_range=True).astype(np.float32)


def _place_frame(img, size):
    """Frame scaling: (resized image, scale, None, crop origin)."""
    s = size / float(max(img.shape[:2]))
    return _resize(img, s), s, None, (0, 0)


def _place_content(img, frame, side):
    """Content scaling: crop around the object, resize; (image, scale, centroid in it, crop origin)."""
    centroid, radius = frame
    s = (side / 2.0 - _MARGIN) / radius
    half = (side / 2.0 + 2.0) / s  # original pixels around the centroid that can reach the canvas
    h, w = img.shape[:2]
    r0 = max(0, int(np.floor(centroid[0] - half)))
    c0 = max(0, int(np.floor(centroid[1] - half)))
    r1 = min(h, int(np.ceil(centroid[0] + half)) + 1)
    c1 = min(w, int(np.ceil(centroid[1] + half)) + 1)
    crop = _resize(img[r0:r1, c0:c1], s)
    centre = ((centroid[0] - r0 + 0.5) * s - 0.5, (centroid[1] - c0 + 0.5) * s - 0.5)
    return crop, s, centre, (r0, c0)


def _disk(side):
    c = (side - 1) / 2.0
    yy, xx = np.mgrid[:side, :side]
    return (np.hypot(yy - c, xx - c) <= side / 2.0 - _MARGIN).astype(np.float32)


def canvas_to_original(params, canvas: Canvas, index: int) -> dict:
    """Express a canvas transform in the original image's pixels.

    The canvas transform rotates about the canvas centre; in original pixels
    it is the same rotation about the point that maps to the canvas centre
    (the image centre, to within half a pixel) with the translation divided by
    the scale.

    Returns
    -------
    dict
        ``theta_deg``, ``tx_px``, ``ty_px`` and ``center_row``/``center_col``
        (the rotation centre in original pixels).
    """
    params = np.asarray(params, dtype=float)
    s = float(canvas.scale[index])
    c = (canvas.size - 1) / 2.0
    center = (np.array([c, c]) - canvas.offset[index]) / s
    return {
        "theta_deg": float(np.rad2deg(se2.wrap_angle(params[0]))),
        "tx_px": float(params[1] / s),
        "ty_px": float(params[2] / s),
        "center_row": float(center[0]),
        "center_col": float(center[1]),
    }
