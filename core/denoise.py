"""Denoising a set of images without breaking rotation invariance.

Pairwise alignment of two noisy images aligns their noise; a basis fitted to
the whole set does not.  :func:`steerable_pca` is steerable PCA in a
Fourier--Bessel basis (after Zhao & Singer's fast steerable PCA, without the
fast transform): inside the disk inscribed in the frame every image is
written in the functions ``J_k(j_kq r / R) exp(i k theta)`` (``j_kq`` the
``q``-th zero of the Bessel function ``J_k``, band limited at ``j_kq <= pi R``,
Nyquist), orthonormalised on the pixel grid frequency by frequency.  Turning
an image multiplies its angular-frequency-``k`` coefficients by ``exp(-i k
phi)``, so the covariance of a set seen at every in-plane angle is block
diagonal, one block per ``k``: each block is diagonalised on its own, its
eigenvalues compared with the Marchenko--Pastur edge of white noise
(``sigma^2 (1 + sqrt(gamma))^2``, ``gamma`` = block size / number of images),
the ones above it shrunk to the signal eigenvalue they imply (the spiked
covariance model) and each image's coefficients Wiener-filtered with them
(``l / (l + 1)`` per component, ``l`` the signal eigenvalue in units of the
noise).  Everything below the edge is dropped.  The result is the same
whichever way each image was turned: a rotation-invariant denoiser.

:func:`augmented_pca` is the cheap alternative the choice was measured
against: pixel PCA of the images and copies turned by a few angles, with the
same shrinkage.

:func:`estimate_noise` reads the noise level off the frame's corners (outside
the inscribed disk, where particle images hold only background): the median
absolute value of the finest diagonal differences, which white noise of
standard deviation ``sigma`` gives as ``0.6745 sigma`` and a smooth or empty
background as nearly 0.

:func:`photon_unit` recognises photon counts (fluorescence microscopy at low light): values on a
lattice whose background has Poisson statistics (variance = mean, in counts).  Their noise follows
the brightness, and in a sparse background most differences are 0, so the white-noise estimate
above reads about 0 there.  :func:`denoise` then works on Anscombe's transform ``2 sqrt(counts + 3/8)``,
where Poisson noise has variance 1 (known, not estimated; below ~3 counts it is less, so 1 is an
upper bound there: using each pixel's exact variance instead kept 5-20x more components and left
the fluorescence-like tune sets twice as far from their clean images), and transforms back.

:func:`denoise` is what the pipeline calls (``preprocess(..., denoise=)``,
``ia-cluster --denoise``): ``"auto"`` steps aside on images with no
measurable noise, on sets too small to fit a basis and on images of different
shapes, and reports what it did in one sentence (``DenoiseReport.note``).
Runs on the host (NumPy).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "AUTO_MAX_SNR",
    "MIN_IMAGES",
    "MODES",
    "DenoiseReport",
    "augmented_pca",
    "denoise",
    "estimate_noise",
    "fourier_bessel_basis",
    "photon_unit",
    "steerable_pca",
]

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
#: fewer images than this: no basis is fitted (``auto`` and ``on`` step aside)
MIN_IMAGES = 12
#: ``auto`` denoises only sets whose estimated SNR (signal / noise variance in the disk) is below this
AUTO_MAX_SNR = 10.0
#: ``auto`` treats a noise level below this fraction of the images' spread (std in the disk) as none
NOISE_FLOOR = 0.02
#: frames larger than this are block-averaged down to it for the basis, and the result resized back
MAX_SIDE = 64


@dataclass
class DenoiseReport:
    """What :func:`denoise` did.

    Attributes
    ----------
    applied : bool
        Whether the images were changed.
    mode : str
        The mode asked for (``auto``, ``on``, ``off``).
    method : str or None
        ``"steerable-pca"`` (or ``"augmented-pca"``) when applied.
    noise_std : float or None
        The estimated noise standard deviation per pixel, in the input's units.
    snr : float or None
        The estimated signal-to-noise ratio (signal variance / noise variance in the disk).
    components : int
        Principal components kept (complex ones count once per angular frequency).
    note : str
        One plain sentence for the run's notes.
    frequencies : list of int
        Components kept per angular frequency.
    left_out : list of int
        Images of a set with mixed sizes (or colour) that were not of the denoised images' size and
        left as they were (indices into the input).
    clean : bool
        It stepped aside because the images look clean (no measurable noise, or SNR above
        :data:`AUTO_MAX_SNR` with ``auto``), not for a reason a user should hear about.
    """

    applied: bool
    mode: str
    method: str | None = None
    noise_std: float | None = None
    snr: float | None = None
    components: int = 0
    note: str = ""
    frequencies: list = field(default_factory=list)
    left_out: list = field(default_factory=list)
    clean: bool = False

    def as_dict(self) -> dict:
        """For summary.json."""
        return {"applied": self.applied, "mode": self.mode, "method": self.method,
                "noise_std": None if self.noise_std is None else float(self.noise_std),
                "snr": None if self.snr is None or not np.isfinite(self.snr) else round(float(self.snr), 4),
                "components": int(self.components), "note": self.note, "left_out": [int(i) for i in self.left_out]}


# ------------------------------------------------------------------ noise level
def _disk_mask(h: int, w: int, radius: float | None = None) -> np.ndarray:
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    r = min(h, w) / 2.0 if radius is None else radius
    yy, xx = np.mgrid[:h, :w]
    return np.hypot(yy - cy, xx - cx) < r


def estimate_noise(images, *, radius: float | None = None) -> float:
    """The standard deviation of white noise in a stack of images, from their corners.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
    radius : float, optional
        Pixels farther than this from the centre count as corners (default:
        half the shorter side: outside the inscribed disk).  When the corners
        hold fewer than 16 difference samples in all, the whole frame is used.

    Returns
    -------
    float
        ``1.4826 / sqrt(... )``-scaled median absolute diagonal difference:
        ``sigma`` for white Gaussian noise of standard deviation ``sigma``,
        about 0 for a constant or smooth background.
    """
    x = np.asarray(images, dtype=np.float64)
    if x.ndim == 2:
        x = x[None]
    n, h, w = x.shape
    if h < 2 or w < 2:
        return 0.0
    # (a - b - c + d) / 2 of each 2x2 block has the noise's variance and cancels a linear background
    d = 0.5 * (x[:, :-1, :-1] - x[:, 1:, :-1] - x[:, :-1, 1:] + x[:, 1:, 1:])
    outside = ~_disk_mask(h, w, radius)
    corner = outside[:-1, :-1] & outside[1:, :-1] & outside[:-1, 1:] & outside[1:, 1:]
    samples = d[:, corner] if corner.sum() * n >= 16 else d.reshape(n, -1)
    return float(1.4826 * np.median(np.abs(samples)))


def photon_unit(images, *, radius: float | None = None, max_values: int = 1_000_000) -> float | None:
    """The size of one photon count when a stack of images holds photon counts, else None.

    Counts are recognised by two things together: every value is a non-negative
    whole multiple of one unit ``q`` (the smallest gap between values: 1 for raw
    counts, ``1/65535`` for 16-bit counts a reader scaled to ``[0, 1]``), and the
    background (the corners, outside the inscribed disk) has Poisson statistics:
    its variance over its mean, in counts, between 0.5 and 2.  A clean 8-bit
    image is on a lattice too, but its background is constant (variance 0) or
    noisy in another way; a background of exactly 0 cannot tell and is not
    taken for counts.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
    radius : float, optional
        As :func:`estimate_noise`.
    max_values : int
        At most this many values are checked for the lattice (evenly spaced).

    Returns
    -------
    float or None
        ``q``, or None.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> photon_unit(rng.poisson(2.0, (20, 16, 16)) / 255.0) == 1 / 255.0
    True
    >>> photon_unit(rng.normal(5.0, 1.0, (20, 16, 16))) is None
    True
    """
    x = np.asarray(images, dtype=np.float64)
    if x.ndim == 2:
        x = x[None]
    _, h, w = x.shape
    if x.size == 0 or x.min() < 0:
        return None
    flat = x.ravel()[:: max(1, x.size // max_values)]
    vals = np.unique(flat)
    if vals.size < 3:
        return None
    q = float(np.min(np.diff(vals)))
    if not q > 0 or vals[-1] / q > 1e7 or not np.allclose(vals / q, np.round(vals / q), rtol=0, atol=1e-3):
        return None
    corner = x[:, ~_disk_mask(h, w, radius)] / q
    mean = float(corner.mean()) if corner.size else 0.0
    if corner.size < 16 or mean < 0.01 or np.count_nonzero(corner) < 20:
        return None
    dispersion = float(corner.var()) / mean
    return q if 0.5 <= dispersion <= 2.0 else None


# ------------------------------------------------------------------ the basis
@dataclass
class FourierBessel:
    """A Fourier--Bessel basis on a pixel grid, orthonormal per angular frequency.

    Attributes
    ----------
    shape : (int, int)
    mask : ndarray of bool, shape (H, W)
        The pixels inside the disk (the basis lives there).
    counts : list of int
        ``counts[k]``: the number of functions of angular frequency ``k``.
    real : ndarray, shape (n_pixels, n_0 + 2 sum_{k>0} n_k)
        The functions as real columns: for ``k = 0`` the (real) functions,
        for each ``k > 0`` the real parts then the imaginary parts of the
        complex ones.  Each complex function has unit norm on the grid and the
        functions of one ``k`` are orthonormal.
    """

    shape: tuple
    mask: np.ndarray
    counts: list
    real: np.ndarray

    @property
    def size(self) -> int:
        """Real degrees of freedom: ``n_0 + 2 sum_{k>0} n_k``."""
        return int(self.real.shape[1])

    def block(self, k: int) -> np.ndarray:
        """The complex ``(n_pixels, n_k)`` functions of angular frequency ``k``."""
        start = self.counts[0] + 2 * sum(self.counts[1:k]) if k else 0
        m = self.counts[k]
        if k == 0:
            return self.real[:, :m].astype(complex)
        return self.real[:, start:start + m] + 1j * self.real[:, start + m:start + 2 * m]


@functools.lru_cache(maxsize=4)
def fourier_bessel_basis(shape, *, radius: float | None = None, bandlimit: float = 0.5) -> FourierBessel:
    """The Fourier--Bessel functions of a disk, sampled on a pixel grid.

    Parameters
    ----------
    shape : (int, int)
        The frame ``(H, W)``.
    radius : float, optional
        Disk radius in pixels (default: half the shorter side).
    bandlimit : float
        Highest spatial frequency in cycles per pixel (0.5: Nyquist): the
        functions with ``j_kq <= 2 pi bandlimit R`` are kept.

    Returns
    -------
    FourierBessel
        Cached for the last few frames (treat it as read-only).
    """
    from scipy.linalg import solve_triangular
    from scipy.special import jn_zeros, jv

    h, w = int(shape[0]), int(shape[1])
    mask = _disk_mask(h, w, radius)
    r_disk = min(h, w) / 2.0 if radius is None else float(radius)
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.nonzero(mask)
    radii, where = np.unique(np.round(np.hypot(yy - cy, xx - cx) / r_disk, 12), return_inverse=True)
    mult = np.bincount(where.ravel(), minlength=len(radii)).astype(float)
    angle = np.arctan2(yy - cy, xx - cx)
    top = 2.0 * np.pi * bandlimit * r_disk
    cols, counts = [], []
    k = 0
    while True:
        zeros = jn_zeros(k, max(1, int(np.ceil(top / np.pi)) + 2))
        zeros = zeros[zeros <= top]
        if zeros.size == 0 or zeros.size > len(radii):
            break
        # |exp(i k theta)| = 1: orthonormalising the radial parts orthonormalises the functions; the
        # grid's Gram matrix is that of the distinct radii weighted by how many pixels lie at each
        radial = jv(k, radii[:, None] * zeros[None, :])
        _, tri = np.linalg.qr(radial * np.sqrt(mult)[:, None])
        q = solve_triangular(tri, radial.T, trans="T", lower=False).T[where]
        if k == 0:
            cols.append(q)
        else:
            f = q * np.exp(1j * k * angle)[:, None]
            cols += [f.real, f.imag]
        counts.append(zeros.size)
        k += 1
    real = np.ascontiguousarray(np.concatenate(cols, axis=1))
    real.flags.writeable = False
    return FourierBessel((h, w), mask, counts, real)


# ------------------------------------------------------------------ shrinkage
def _shrink(cov: np.ndarray, noise_var: float, n_samples: int):
    """``(vectors, gains)``: the eigenvectors above the Marchenko--Pastur edge and their Wiener gains."""
    p = cov.shape[0]
    gamma = p / float(n_samples)
    vals, vecs = np.linalg.eigh(cov)
    mu = vals / noise_var
    keep = mu > (1.0 + np.sqrt(gamma)) ** 2
    if not np.any(keep):
        return vecs[:, :0], np.zeros(0)
    mu = mu[keep]
    b = mu - 1.0 - gamma
    ell = 0.5 * (b + np.sqrt(np.maximum(b * b - 4.0 * gamma, 0.0)))  # the signal eigenvalue / noise variance
    return vecs[:, keep], ell / (ell + 1.0)


# ------------------------------------------------------------------ the denoisers
def steerable_pca(images, *, noise_var: float, basis: FourierBessel | None = None):
    """Denoise a stack by steerable PCA with Marchenko--Pastur shrinkage.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
    noise_var : float
        The white noise's variance per pixel (e.g. ``estimate_noise(images) ** 2``).
    basis : FourierBessel, optional
        Default: :func:`fourier_bessel_basis` of the frame.

    Returns
    -------
    denoised : ndarray, shape (n, H, W), float64
        Inside the disk the filtered expansion; outside it each image's
        median corner value (its background level).
    kept : list of int
        Components kept per angular frequency ``k = 0, 1, ...``.
    """
    x = np.asarray(images, dtype=np.float64)
    n = x.shape[0]
    fb = basis if basis is not None else fourier_bessel_basis(tuple(x.shape[1:]))
    proj = x[:, fb.mask] @ fb.real  # (n, size): every block's real and imaginary parts in one product
    # the filtered expansion sum_k 2 Re(z_k f_k) is low-rank: the kept components' scores (n, r) times
    # their loadings on the pixels (pixels, r), one product, not every coefficient back through the basis
    scores, loadings = [], []
    kept = []
    start = 0
    for k, m in enumerate(fb.counts):
        if k == 0:
            coef = proj[:, :m]
            mean = coef.mean(axis=0)
            c = coef - mean
            vecs, gains = _shrink(c.T @ c / n, noise_var, n)
            scores.append((c @ vecs) * gains)
            loadings.append(fb.real[:, :m] @ vecs)
            start = m
        else:
            # the coefficients <x, f> = x . conj(f): real part minus i times the imaginary part
            coef = proj[:, start:start + m] - 1j * proj[:, start + m:start + 2 * m]
            vecs, gains = _shrink(coef.T @ coef.conj() / n, noise_var, n)
            # z = a vecs^T with a = (coef conj(vecs)) gains; its pixels 2 Re(z f) = 2 Re(a (f vecs)^T)
            a = (coef @ vecs.conj()) * gains
            load = fb.block(k) @ vecs
            scores += [2.0 * a.real, -2.0 * a.imag]
            loadings += [load.real, load.imag]
            start += 2 * m
        kept.append(len(gains))
    out = np.concatenate(scores, axis=1) @ np.concatenate(loadings, axis=1).T + fb.real[:, :fb.counts[0]] @ mean
    res = np.empty_like(x)
    outside = ~fb.mask
    res[:] = np.median(x[:, outside], axis=1)[:, None, None] if outside.any() else 0.0
    res[:, fb.mask] = out
    return res, kept


def augmented_pca(images, *, noise_var: float, turns: int = 8):
    """Denoise a stack by pixel PCA of the images and ``turns`` turned copies of each, with shrinkage.

    The cheap alternative to :func:`steerable_pca`: the covariance is
    estimated from the images turned by ``360 / turns`` degree steps (cubic
    spline, inside the inscribed disk), its eigenvalues shrunk as there (the
    Marchenko--Pastur ratio counts the ``n`` images, not their copies), and
    each image projected on the kept components.

    Returns
    -------
    denoised : ndarray, shape (n, H, W)
    kept : list of int
        ``[components]``.
    """
    from scipy.ndimage import rotate

    x = np.asarray(images, dtype=np.float64)
    n, h, w = x.shape
    mask = _disk_mask(h, w)
    copies = [x] + [rotate(x, 360.0 * t / turns, axes=(2, 1), reshape=False, order=3) for t in range(1, turns)]
    aug = np.concatenate([c[:, mask] for c in copies])
    mean = aug.mean(axis=0)
    a = aug - mean
    vecs, gains = _shrink(a.T @ a / len(a), noise_var, n)
    pix = x[:, mask] - mean
    res = np.empty_like(x)
    outside = ~mask
    res[:] = np.median(x[:, outside], axis=1)[:, None, None] if outside.any() else 0.0
    res[:, mask] = mean + ((pix @ vecs) * gains) @ vecs.T
    return res, [len(gains)]


def _fit(x, sigma: float, method: str):
    """The denoised stack ``x`` (n, H, W) at noise level ``sigma``: ``(images, kept per frequency, method, f)``.

    Frames larger than :data:`MAX_SIDE` are fitted on ``f x f`` block means and the result resized back.
    """
    n, h, w = x.shape
    small, f = x, 1
    if max(h, w) > MAX_SIDE:  # the basis grows with the pixel count: fit it on a block-mean copy
        f = int(np.ceil(max(h, w) / MAX_SIDE))
        hh, ww = h // f, w // f
        small = x[:, :hh * f, :ww * f].reshape(n, hh, f, ww, f).mean(axis=(2, 4))
    noise_var = sigma ** 2 / (f * f)
    if method == "steerable":
        out, kept = steerable_pca(small, noise_var=noise_var)
        name = "steerable-pca"
    else:
        out, kept = augmented_pca(small, noise_var=noise_var)
        name = "augmented-pca"
    if f > 1:
        from skimage.transform import resize

        out = resize(out, (n, h, w), order=1, preserve_range=True, anti_aliasing=False)
    return out, kept, name, f


def _denoise_main_shape(images, shapes, mode, method):
    """:func:`denoise` of a set of mixed sizes (or colour): the most common gray size alone, if most images have it.

    A folder of particle images with a stray file of another size is still a stack; the stray images
    are left as they are and named in ``left_out`` (and counted in the note).
    """
    from collections import Counter

    gray = Counter(sh for sh in shapes if len(sh) == 2)
    main, count = gray.most_common(1)[0] if gray else ((), 0)
    if count * 2 <= len(images):
        return images, DenoiseReport(False, mode, note="denoising skipped: the images are not mostly gray and of one "
                                                          "size (a stack of particle images is)")
    group = [i for i, sh in enumerate(shapes) if sh == main]
    others = [i for i, sh in enumerate(shapes) if sh != main]
    done, report = denoise([images[i] for i in group], mode=mode, method=method)
    out = list(images)
    for i, img in zip(group, done, strict=True):
        out[i] = img
    sizes = sorted({"colour" if len(shapes[i]) != 2 else f"{shapes[i][0]} x {shapes[i][1]}" for i in others})
    aside = (f"{len(others)} image{'s' if len(others) != 1 else ''} of another size or colour "
             f"({', '.join(sizes[:3])}{', ...' if len(sizes) > 3 else ''}) left as "
             f"{'they were' if len(others) != 1 else 'it was'}")
    what = f"only the {len(group)} images of {main[0]} x {main[1]} pixels considered"
    return out, dataclasses.replace(report, left_out=others, note=f"{report.note}; {what}; {aside}")


def denoise(images, *, mode: str = "auto", method: str = "steerable"):
    """Denoise a set of images before clustering, or step aside; say which.

    Parameters
    ----------
    images : sequence of ndarray
        2-D images (a stack of one shape; colour or mixed shapes step aside).
    mode : {"auto", "on", "off"}
        ``"off"``: never.  ``"on"``: whenever there is measurable noise and
        enough images.  ``"auto"`` (default): only where the estimated SNR is
        below :data:`AUTO_MAX_SNR`, so clean images stay as they are.
    method : {"steerable", "augmented"}

    Returns
    -------
    images : list of ndarray
        The denoised images (float32), or the inputs themselves when it stepped aside.
    report : DenoiseReport
    """
    if mode not in MODES:
        raise ValueError(f"denoise must be one of {', '.join(MODES)}")
    if method not in ("steerable", "augmented"):
        raise ValueError("method must be 'steerable' or 'augmented'")
    images = list(images)
    if mode == "off":
        return images, DenoiseReport(False, mode, note="denoising off")
    n = len(images)
    shapes = [np.shape(im) for im in images]
    if len(set(shapes)) != 1 or len(shapes[0]) != 2:
        return _denoise_main_shape(images, shapes, mode, method)
    x = np.stack([np.asarray(im, dtype=np.float64) for im in images])
    h, w = x.shape[1:]
    if min(h, w) < 8:
        return images, DenoiseReport(False, mode, note=f"denoising skipped: images of {h} x {w} pixels are too "
                                                          f"small for a basis")
    q = photon_unit(x)
    if q is not None:  # photon counts: Anscombe's transform gives Poisson noise unit variance
        x = 2.0 * np.sqrt(x / q + 0.375)
        sigma = 1.0  # exact for bright pixels, an upper bound below ~3 counts (see the module's docstring)
    else:
        sigma = estimate_noise(x)
    mask = _disk_mask(h, w)
    inside = x[:, mask]
    total_var = float(np.mean(inside.var(axis=0)) + np.var(inside.mean(axis=0)))  # spread in the disk
    spread = np.sqrt(max(total_var, 0.0))
    snr = (total_var - sigma ** 2) / sigma ** 2 if sigma > 0 else float("inf")
    snr = max(snr, 0.0)
    level = f"estimated noise {sigma:.3g} per pixel (SNR {snr:.2g})" if sigma > 0 else "estimated noise 0"
    if q is not None:
        level = f"photon counts (Poisson noise; SNR {snr:.2g} after Anscombe's transform, unit noise variance)"
    if not sigma > NOISE_FLOOR * spread:
        level = ("estimated noise 0" if not sigma > 1e-6 * spread else
                 f"estimated noise {sigma:.2g} per pixel, below {NOISE_FLOOR:.0%} of the images' spread")
        return images, DenoiseReport(False, mode, noise_std=sigma, snr=snr, clean=True,
                                     note=f"denoising skipped: {level}, the images look clean")
    if n < MIN_IMAGES:
        return images, DenoiseReport(False, mode, noise_std=sigma, snr=snr,
                                     note=f"denoising skipped: {n} images are too few to fit a basis "
                                          f"(at least {MIN_IMAGES}); {level}")
    if mode == "auto" and snr >= AUTO_MAX_SNR:
        return images, DenoiseReport(False, mode, noise_std=sigma, snr=snr, clean=True,
                                     note=f"denoising skipped: {level}, above {AUTO_MAX_SNR:g}")
    out, kept, name, f = _fit(x, sigma, method)
    if q is not None:  # back to the input's units (the algebraic inverse)
        out = q * np.maximum(0.25 * out * out - 0.375, 0.0)
        name += " (Anscombe)"
    comps = int(sum(kept))
    note = (f"denoised by {name.replace('-', ' ')}: {level}; {comps} components kept"
            + (f" (fitted on {f}x block means)" if f > 1 else ""))
    log.info(note)
    return ([im.astype(np.float32) for im in out],
            DenoiseReport(True, mode, name, sigma, snr, comps, note, list(kept)))
