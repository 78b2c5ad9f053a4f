"""The noisy sets of the quality benchmark (``bench_quality.py --noise``), made offline.

Cryo-EM-like particle images: each set is one random 3-D density (a few
Gaussian blobs in a ball), seen along 4 random view directions (the 4 true
classes).  Every image is the projection along its class's direction, turned
in-plane by an angle drawn over the full circle and shifted by up to +-3 px,
rendered on a 48-px frame, plus white Gaussian noise at a given SNR
(signal variance / noise variance; the signal variance is the mean over the
set of each clean image's variance over its frame).

A Gaussian blob projects to a 2-D Gaussian of the same width, so the
projections are rendered exactly (no interpolation of a volume).  The two
*splits* use different volumes (the seed includes the split and the set's
name), so anything tuned on ``tune`` is checked on ``holdout`` on densities
it has not seen.

:func:`noise_suite` lists the sets; :func:`make_noise_set` builds one and
returns the clean images too (for class-average fidelity).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

SIDE = 48  # frame side in pixels
VIEWS = 4  # classes per set
SHIFT = 3.0  # pixels, each axis: [-SHIFT, SHIFT]
BALL = 9.0  # blob centres lie in a ball of this radius (px)


@dataclass
class NoiseSpec:
    """How to build one noisy set."""

    name: str
    snr: float  # signal variance / noise variance; inf: no noise
    per_view: int  # images per view (class)
    views: int = VIEWS


SNRS = (3.0, 1.0, 0.3, 0.1, 0.05)
PER_VIEW = (30, 100, 300)


def noise_suite(*, full: bool = False, fast: bool = False) -> list[NoiseSpec]:
    """The noisy sets.

    ``full``: every SNR x every size (15 sets, up to 1,200 images; long);
    default: the sets the issue's targets name plus the easier levels at
    30 per view and a clean set; ``fast``: two small sets (for tests).
    """
    if fast:
        return [NoiseSpec("cryo-clean-8", float("inf"), 8), NoiseSpec("cryo-snr0.3-12", 0.3, 12)]
    if full:
        sets = [NoiseSpec("cryo-clean-15", float("inf"), 15)]
        sets += [NoiseSpec(f"cryo-snr{s:g}-{m}", s, m) for s in SNRS for m in PER_VIEW]
        return sets
    return [
        NoiseSpec("cryo-clean-15", float("inf"), 15),
        NoiseSpec("cryo-snr3-30", 3.0, 30),
        NoiseSpec("cryo-snr1-30", 1.0, 30),
        NoiseSpec("cryo-snr0.3-30", 0.3, 30),
        NoiseSpec("cryo-snr0.1-30", 0.1, 30),
        NoiseSpec("cryo-snr0.1-100", 0.1, 100),
        NoiseSpec("cryo-snr0.05-300", 0.05, 300),
    ]


def random_density(rng, *, blobs: tuple = (5, 9)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random 3-D density: ``(centres (m, 3), widths (m,), weights (m,))`` of Gaussian blobs."""
    m = int(rng.integers(blobs[0], blobs[1] + 1))
    d = rng.normal(size=(m, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    centres = d * BALL * rng.uniform(0.2, 1.0, size=(m, 1)) ** (1 / 3)
    widths = rng.uniform(1.5, 3.5, size=m)
    weights = rng.uniform(0.5, 1.5, size=m)
    return centres, widths, weights


def project(density, rotation: np.ndarray, *, angle: float = 0.0, shift=(0.0, 0.0), side: int = SIDE) -> np.ndarray:
    """The density seen along ``rotation``'s third axis, turned in-plane by ``angle`` and shifted.

    Parameters
    ----------
    density : tuple
        As :func:`random_density` returns.
    rotation : ndarray, shape (3, 3)
        The view: rows are the image's x, y axes and the viewing direction.
    angle : float
        In-plane turn (radians, counter-clockwise).
    shift : (float, float)
        ``(row, col)`` pixels.

    Returns
    -------
    ndarray, shape (side, side)
    """
    centres, widths, weights = density
    xy = centres @ rotation.T[:, :2]  # (m, 2): x, y in the image plane
    c, s = np.cos(angle), np.sin(angle)
    x = c * xy[:, 0] - s * xy[:, 1] + shift[1]
    y = s * xy[:, 0] + c * xy[:, 1] + shift[0]
    grid = np.arange(side) - (side - 1) / 2.0
    img = np.zeros((side, side))
    for xm, ym, w, a in zip(x, y, widths, weights):
        img += a * np.outer(np.exp(-0.5 * ((grid - ym) / w) ** 2), np.exp(-0.5 * ((grid - xm) / w) ** 2))
    return img


def make_noise_set(spec: NoiseSpec, *, split: str = "tune", seed: int = 0, clean_images: bool = False):
    """Build a noisy set.

    Returns
    -------
    images : list of ndarray
        ``(48, 48)`` float images (noisy).
    labels : list of str
        ``"view0"`` ... ``"view3"``.
    clean : ndarray, shape (views, 48, 48)
        Each view's projection, untransformed and noise-free (the truth a
        class average is compared with).
    truth : ndarray, shape (n, 48, 48)
        Only with ``clean_images``: every image without its noise (in the
        order of ``images``).
    """
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode()), 0 if split == "tune" else 1, 7])
    density = random_density(rng)
    views = Rotation.random(spec.views, random_state=rng).as_matrix()
    clean_views = np.stack([project(density, r) for r in views])
    images, labels = [], []
    for v, rot in enumerate(views):
        for _ in range(spec.per_view):
            images.append(project(density, rot, angle=rng.uniform(0, 2 * np.pi),
                                  shift=rng.uniform(-SHIFT, SHIFT, size=2)))
            labels.append(f"view{v}")
    order = rng.permutation(len(images))
    truth = np.stack(images)[order]
    labels = [labels[i] for i in order]
    noisy = truth
    if np.isfinite(spec.snr):
        signal_var = float(np.mean(truth.var(axis=(1, 2))))
        noisy = truth + rng.normal(0.0, np.sqrt(signal_var / spec.snr), truth.shape)
    out = (list(noisy), labels, clean_views)
    return (*out, truth) if clean_images else out
