"""Batched Gaussian smoothing ``g_sigma * v`` (the paper's eq. 2.6)."""
from __future__ import annotations

from .backend import array_module, ndimage_module

__all__ = ["gaussian_smooth"]


def gaussian_smooth(images, sigma: float, *, truncate: float = 3.0):
    """Smooth every image of a batch with an isotropic Gaussian.

    Parameters
    ----------
    images : ndarray, shape (B, H, W) or (B, H, W, C)
        NumPy or CuPy; the batch and channel axes are not smoothed.
    sigma : float
        Standard deviation in pixels; ``0`` returns ``images`` unchanged.
    truncate : float
        Kernel radius in units of ``sigma``.

    Returns
    -------
    ndarray
        Same shape; zero is assumed outside the image (the canvas background).
    """
    if sigma < 0:
        raise ValueError("sigma must be >= 0")
    if sigma == 0:
        return images
    xp = array_module(images)
    ndi = ndimage_module(xp)
    sig = [0.0, sigma, sigma] + [0.0] * (images.ndim - 3)
    return ndi.gaussian_filter(images, sigma=sig, mode="constant", cval=0.0, truncate=truncate)
