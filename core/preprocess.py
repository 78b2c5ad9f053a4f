"""Preprocessing raw images onto one working canvas.

Steps, per image: grayscale (or keep colour) -> optional invert -> subtract the
background level estimated from the border -> resize so the longest side is
``size`` -> pad onto a square canvas on which any rotation about the centre
keeps the content -> scale to unit L2 norm (the RBF bandwidth ``beta`` is
defined on these).  :class:`Canvas` keeps what is needed to report a transform
found on the canvas in the original image's pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import se2

__all__ = ["Canvas", "preprocess", "content_radius", "canvas_to_original"]

_CONTENT_LEVEL = 0.02  # fraction of an image's maximum that counts as content
_MARGIN = 2  # pixels kept free around the content disk (Keys kernel support)


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
    """

    images: np.ndarray
    scale: np.ndarray
    offset: np.ndarray
    original_shape: list

    @property
    def size(self) -> int:
        """The canvas side ``S`` in pixels."""
        return int(self.images.shape[1])

    def __len__(self) -> int:
        return int(self.images.shape[0])


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


def preprocess(
    images,
    *,
    size: int = 64,
    grayscale: bool = True,
    invert: bool = False,
    subtract_background: bool = True,
    canvas_size: int | None = None,
) -> Canvas:
    """Bring raw images onto one unit-norm working canvas.

    Parameters
    ----------
    images : sequence of ndarray
        ``(H, W)`` or ``(H, W, 3)`` float images (e.g. ``ImageSet.images``).
    size : int
        The longest side after resizing, in pixels (>= 8).
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
        which every image's content stays inside under any rotation.

    Returns
    -------
    Canvas
    """
    from skimage.color import gray2rgb, rgb2gray
    from skimage.transform import resize

    if size < 8:
        raise ValueError("size must be at least 8 pixels")
    resized, scales, shapes = [], [], []
    for img in images:
        img = np.asarray(img, dtype=np.float32)
        if grayscale and img.ndim == 3:
            img = rgb2gray(img).astype(np.float32)
        elif not grayscale and img.ndim == 2:
            img = gray2rgb(img).astype(np.float32)
        if invert:
            img = img.max() - img
        if subtract_background:
            img = np.clip(img - _border_level(img), 0.0, None)
        h, w = img.shape[:2]
        s = size / float(max(h, w))
        out_shape = (max(1, int(round(h * s))), max(1, int(round(w * s)))) + img.shape[2:]
        if out_shape != img.shape:
            img = resize(img, out_shape, order=1, anti_aliasing=s < 1, preserve_range=True).astype(np.float32)
        resized.append(img)
        scales.append(s)
        shapes.append((h, w))
    if canvas_size is None:
        radius = max((content_radius(im) for im in resized), default=0.0)
        side = max(size, int(np.ceil(2 * (radius + _MARGIN))))
        side += side % 2  # even sides keep the centre between pixels for even images
    else:
        side = int(canvas_size)
    channels = () if grayscale else (3,)
    out = np.zeros((len(resized), side, side) + channels, dtype=np.float32)
    offsets = np.zeros((len(resized), 2))
    for i, img in enumerate(resized):
        h, w = img.shape[:2]
        # crop if forced smaller, otherwise centre (the same rounding both ways)
        r0, c0 = (side - h) // 2, (side - w) // 2
        src_r, src_c = max(0, -r0), max(0, -c0)
        dst_r, dst_c = max(0, r0), max(0, c0)
        hh, ww = min(h - src_r, side - dst_r), min(w - src_c, side - dst_c)
        out[i, dst_r:dst_r + hh, dst_c:dst_c + ww] = img[src_r:src_r + hh, src_c:src_c + ww]
        # canvas coordinate of original pixel (0, 0): resize maps pixel centres
        # x_canvas + 0.5 = s (x_orig + 0.5)
        offsets[i] = (r0 + 0.5 * scales[i] - 0.5, c0 + 0.5 * scales[i] - 0.5)
        norm = float(np.sqrt((out[i].astype(np.float64) ** 2).sum()))
        if norm > 0:
            out[i] /= norm
    return Canvas(out, np.asarray(scales, dtype=float), offsets, shapes)


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
