"""Built-in demo sets, made from data that ships inside packages.

Nothing is downloaded.  Every set is reproducible by seed and carries its
true labels and the transforms that made it:

``shapes``
    The paper's Experiment 1: three distinct base images (a horse silhouette
    from ``skimage.data``, a drawn "7" and a key) x 6 copies, rotations
    uniform in +-65 degrees, translations uniform in +-10 px, 64-px canvas.
``digits``
    Real handwriting from scikit-learn's ``load_digits``: 4 classes (0, 1, 3,
    4) x 10, rotated +-45 degrees with shifts of +-4 px.
``threes``
    The paper's Experiment 2: ten different handwritten 3s rotated uniformly
    in [0, 90] degrees and shifted by 10-20 % of the digit's frame (4-8 px,
    random sign), with the untransformed originals kept in ``originals``.
``sketches``
    The three shapes of ``shapes``, each drawn 6 times with its own smooth
    random distortion (:func:`distort`: up to 3 px, as a hand redraws a
    shape -- the paper's intra-class variation), then turned and shifted as
    in ``shapes``.  ``originals`` are the distorted drawings, upright.  The
    set of the app's paper mode: its copies of one shape differ, so W's
    blocks have something to fill in (see the user guide, docs/user-guide.md,
    "Teaching with it").
"""
from __future__ import annotations

import numpy as np

from . import se2
from .imageset import ImageSet
from .warp import warp

__all__ = ["DEMO_NAMES", "PAPER_DEMO", "PAPER_MODE", "base_shapes", "distort", "load_demo"]

DEMO_NAMES = ("shapes", "digits", "threes", "sketches")
CANVAS = 64

PAPER_MODE = {"preset": "paper"}
"""Run options of the app's paper mode: the ``paper`` preset, Algorithm 1 of the paper as written.

The one definition is :data:`iastudio.core.presets.PAPER` (``ia-cluster --paper``,
``AttentionRun(..., preset="paper")``): identity start, fixed-step gradient
descent, the best smoothing level, exact sums, one global ``beta`` (2) on the
paper's intensity scale, no guard, iterations until W stops moving.
"""
PAPER_DEMO = {"demo": "sketches", "seed": 1, "size": 32, "clusters": 3, "beta": 0.3, "iterations": 8}
"""The set paper mode is shown on (Demo -> Show me): ``load_demo(demo, seed=seed)``
at a ``size``-pixel working size, read out as ``clusters`` clusters (the three
shapes; in the middle iterations, with some copies merged and others not yet,
an automatic count would change from frame to frame), with ``beta`` on the
paper's intensity scale and at most ``iterations`` iterations.  The preset's
``beta = 2`` is the paper's for its Experiment 1 (exact copies); on these
redrawn shapes at 32 px it leaves W close to the identity, and ``beta = 0.3``
lets W's blocks fill in over a few iterations (about 0.73 of the ideal block
matrix at the first, above 0.97 by the fifth)."""


def _smooth(img: np.ndarray, sigma: float = 0.8) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(img.astype(np.float64), sigma)


def _centre(img: np.ndarray, side: int = CANVAS) -> np.ndarray:
    out = np.zeros((side, side))
    h, w = img.shape
    r, c = (side - h) // 2, (side - w) // 2
    out[r:r + h, c:c + w] = img
    return out


def _fit(img: np.ndarray, radius: float = 16.0) -> np.ndarray:
    """Crop to the content and scale it so its half-diagonal is ``radius``."""
    from skimage.transform import resize

    rows, cols = np.nonzero(img > 0.05 * img.max())
    img = img[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    h, w = img.shape
    s = 2.0 * radius / np.hypot(h, w)
    return _centre(resize(img, (round(h * s), round(w * s)), order=1, anti_aliasing=True))


def _horse() -> np.ndarray:
    from skimage import data

    return (~data.horse()).astype(float)  # True on the horse


def _seven() -> np.ndarray:
    from skimage.draw import disk, line_aa

    img = np.zeros((CANVAS, CANVAS))
    strokes = [((18, 19), (17, 44)), ((17, 44), (46, 28)), ((31, 26), (30, 40))]
    for (r0, c0), (r1, c1) in strokes:
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc, val = line_aa(r0 + dr, c0 + dc, r1 + dr, c1 + dc)
                img[rr, cc] = np.maximum(img[rr, cc], val)
    rr, cc = disk((18, 19), 3, shape=img.shape)
    img[rr, cc] = 1.0
    return img


def _key(teeth: int = 2) -> np.ndarray:
    from skimage.draw import disk, rectangle

    img = np.zeros((CANVAS, CANVAS))
    rr, cc = disk((32, 20), 8, shape=img.shape)
    img[rr, cc] = 1.0
    rr, cc = disk((32, 19), 3.5, shape=img.shape)
    img[rr, cc] = 0.0
    rr, cc = rectangle((30, 27), end=(34, 50), shape=img.shape)
    img[rr, cc] = 1.0
    for c in (47, 41, 35)[:teeth]:  # the demo's key has 2; the quality benchmark's other key 3
        rr, cc = rectangle((35, c), end=(40, c + 2), shape=img.shape)
        img[rr, cc] = 1.0
    return img


def base_shapes() -> tuple[np.ndarray, list[str]]:
    """The three base images of the ``shapes`` demo, ``(3, 64, 64)``, and their names."""
    bases = [_smooth(_fit(f())) for f in (_horse, _seven, _key)]
    bases = [b / b.max() for b in bases]
    return np.stack(bases), ["horse", "seven", "key"]


def distort(image: np.ndarray, *, amplitude: float, smoothness: float, seed=None) -> np.ndarray:
    """A smooth random (elastic) distortion of ``image``, as a hand redrawing it would make.

    Parameters
    ----------
    image : ndarray, shape (H, W)
    amplitude : float
        Largest displacement in pixels.
    smoothness : float
        Gaussian scale (pixels) of the random displacement field: larger
        bends the drawing more gently.
    seed : int, numpy.random.Generator or None

    Returns
    -------
    ndarray, shape (H, W)
        ``image`` sampled at ``p + u(p)`` (linear interpolation, zero outside),
        where each component of ``u`` is smoothed white noise scaled so its
        largest absolute value is ``amplitude``.
    """
    from scipy.ndimage import gaussian_filter, map_coordinates

    rng = np.random.default_rng(seed)
    img = np.asarray(image, dtype=np.float64)
    field = [gaussian_filter(rng.standard_normal(img.shape), smoothness) for _ in range(2)]
    field = [amplitude * f / max(float(np.abs(f).max()), 1e-12) for f in field]
    rows, cols = np.mgrid[0:img.shape[0], 0:img.shape[1]].astype(np.float64)
    return map_coordinates(img, [rows + field[0], cols + field[1]], order=1, mode="constant")


def _digit_images(classes, per_class, rng):
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    data = load_digits()
    imgs, labels = [], []
    for c in classes:
        idx = np.flatnonzero(data.target == c)
        pick = np.sort(rng.choice(idx, size=per_class, replace=False))
        for i in pick:
            d = resize(data.images[i] / 16.0, (24, 24), order=1, anti_aliasing=False)
            imgs.append(_centre(_smooth(d, 1.0)))
            labels.append(str(c))
    return np.stack(imgs), labels


def _transform(originals, transforms, name, labels) -> ImageSet:
    imgs = np.clip(warp(originals, transforms), 0.0, None).astype(np.float32)
    paths = [f"demo:{name}/{i:03d}" for i in range(len(imgs))]
    return ImageSet(list(imgs), paths, list(labels), [], transforms, originals.astype(np.float32))


def load_demo(name: str, *, seed: int = 0) -> ImageSet:
    """Make a built-in demo set.

    Parameters
    ----------
    name : {"shapes", "digits", "threes", "sketches"}
    seed : int
        The same seed gives the same images and transforms.

    Returns
    -------
    ImageSet
        64 x 64 images with labels, ``true_transforms`` and ``originals``.
    """
    if name.startswith("demo:"):
        name = name[5:]
    if name not in DEMO_NAMES:
        raise ValueError(f"unknown demo {name!r}; choose one of {', '.join(DEMO_NAMES)}")
    rng = np.random.default_rng(seed)
    if name in ("shapes", "sketches"):
        bases, names = base_shapes()
        originals = np.repeat(bases, 6, axis=0)
        labels = [n for n in names for _ in range(6)]
        if name == "sketches":
            originals = np.stack([distort(b, amplitude=3.0, smoothness=6.0, seed=rng) for b in originals])
        tau = se2.random_transforms(len(originals), rotation_range=65, shift_range=10, seed=rng)
    elif name == "digits":
        originals, labels = _digit_images((0, 1, 3, 4), 10, rng)
        tau = se2.random_transforms(len(originals), rotation_range=45, shift_range=4, seed=rng)
    else:
        originals, labels = _digit_images((3,), 10, rng)
        tau = se2.random_transforms(len(originals), rotation_range=(0, 90), shift_range=(4, 8), seed=rng)
    return _transform(originals, tau, name, labels)
