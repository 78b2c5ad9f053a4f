"""The image sets of the quality benchmark (``bench_quality.py``), made offline.

Every set is built from data that ships inside packages -- real handwriting
from scikit-learn's ``load_digits``, photographs from ``skimage.data``, letter
silhouettes drawn with Matplotlib, the demos' drawn key -- and is reproducible
by seed.  Each set exists in two *splits* made from disjoint material, so that
anything tuned on one can be checked on the other:

``tune``
    even digits (0, 2, 4, 6, 8), even-numbered samples of every digit class,
    letters F G J K L P R, crops from ``camera``, ``coffee``, ``astronaut``,
    ``coins``.
``holdout``
    odd digits (1, 3, 5, 7, 9), odd-numbered samples, letters A B E Q T Y V,
    crops from ``chelsea``, ``rocket``, ``immunohistochemistry``, ``clock``,
    ``moon``.

A set is a list of 2-D float images (frames may differ in size) and their true
labels.  :func:`suite` lists the sets; :func:`make_set` builds one.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

CANVAS = 64
RADIUS = 22.0  # content radius of a base object on the 64-px canvas


@dataclass
class SetSpec:
    """How to build one set of the suite."""

    name: str
    kind: str  # digits | letters | photos | mixed | keys
    sizes: tuple  # images per class
    rotation: float | tuple = 45.0  # degrees: R means [-R, R]
    shift: float = 4.0  # pixels on the 64-px canvas
    noise: float = 0.0  # Gaussian noise, as a fraction of the image's std
    frames: bool = False  # each image saved in a frame of its own pixel size (x0.5 .. x2)
    note: str = ""
    tags: tuple = field(default_factory=tuple)


def suite(*, fast: bool = False) -> list[SetSpec]:
    """The sets of the benchmark (``fast``: the small subset the tests run)."""
    full = 180.0
    sets = [
        SetSpec("digits-2", "digits", (12, 12), note="2 classes, +-45 deg"),
        SetSpec("digits-3-full", "digits", (10, 10, 10), rotation=full, note="3 classes, full circle"),
        SetSpec("digits-5-noise0.1", "digits", (12,) * 5, noise=0.1, note="5 classes, noise 0.1 std"),
        SetSpec("digits-5-unequal", "digits", (20, 10, 6, 3, 3), note="unequal, two classes of 3"),
        SetSpec("digits-8", "digits", (8,) * 8, note="8 classes"),
        SetSpec("digits-10", "digits", (8,) * 10, note="10 classes"),
        SetSpec("letters-4-full", "letters", (8,) * 4, rotation=full, shift=6, note="silhouettes, full circle"),
        SetSpec("photos-5-noise0.3", "photos", (10,) * 5, rotation=full, noise=0.3, note="textured, noise 0.3 std"),
        SetSpec("mixed-8x3", "mixed", (3,) * 8, rotation=full, note="8 classes of 3"),
        SetSpec("mixed-3x2", "mixed", (2, 2, 2), rotation=full, note="six images, three pairs"),
        SetSpec("mixed-6-frames", "mixed", (6,) * 6, rotation=full, frames=True,
                note="frames x0.5..x2, object scale varies"),
        SetSpec("keys-detail", "keys", (8, 8), rotation=full, note="key with 2 vs 3 teeth"),
        SetSpec("letters-1", "letters", (10,), rotation=full, note="one class"),
    ]
    if fast:
        keep = {"digits-2", "letters-4-full", "mixed-3x2", "keys-detail", "mixed-6-frames"}
        sets = [s for s in sets if s.name in keep]
    return sets


# ----------------------------------------------------------------- base objects
def _place(img: np.ndarray, radius: float = RADIUS) -> np.ndarray:
    """Crop to content and scale so the content's half-diagonal is ``radius``, centred on the canvas."""
    from skimage.transform import resize

    rows, cols = np.nonzero(img > 0.05 * img.max())
    img = img[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    h, w = img.shape
    s = 2.0 * radius / np.hypot(h, w)
    img = resize(img, (max(1, round(h * s)), max(1, round(w * s))), order=1, anti_aliasing=True)
    out = np.zeros((CANVAS, CANVAS))
    r, c = (CANVAS - img.shape[0]) // 2, (CANVAS - img.shape[1]) // 2
    out[r:r + img.shape[0], c:c + img.shape[1]] = img
    return out / out.max()


def _letter(ch: str) -> np.ndarray:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.28, 1.28), dpi=100)
    FigureCanvasAgg(fig)
    fig.text(0.5, 0.5, ch, fontsize=80, ha="center", va="center", family="DejaVu Sans", weight="bold")
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba(), dtype=float)
    return _place(1.0 - rgba[..., 0] / 255.0)


def _photo(name: str, centre: tuple, half: int) -> np.ndarray:
    """A disk-shaped crop of a ``skimage.data`` photograph (gray)."""
    from skimage import data
    from skimage.color import rgb2gray
    from skimage.transform import resize

    img = getattr(data, name)()
    img = rgb2gray(img) if img.ndim == 3 else img / 255.0
    r, c = centre
    crop = img[r - half:r + half, c - half:c + half].astype(float)
    crop = resize(crop, (2 * int(RADIUS), 2 * int(RADIUS)), order=1, anti_aliasing=True)
    yy, xx = np.mgrid[:crop.shape[0], :crop.shape[1]] - (crop.shape[0] - 1) / 2.0
    crop = crop * (np.hypot(yy, xx) <= RADIUS - 0.5)
    out = np.zeros((CANVAS, CANVAS))
    o = (CANVAS - crop.shape[0]) // 2
    out[o:o + crop.shape[0], o:o + crop.shape[1]] = crop
    return out / out.max()


def _key(teeth: int) -> np.ndarray:
    from iastudio.core.demos import _key as demo_key

    return _place(demo_key(teeth))


_LETTERS = {"tune": "FGJKLPR", "holdout": "ABEQTYV"}
_PHOTOS = {
    "tune": [("camera", (120, 260), 60), ("coffee", (200, 300), 90), ("astronaut", (110, 220), 70),
             ("coins", (80, 100), 40), ("camera", (380, 130), 80), ("astronaut", (330, 330), 90)],
    "holdout": [("chelsea", (120, 170), 70), ("rocket", (200, 330), 80), ("immunohistochemistry", (250, 250), 90),
                ("clock", (150, 200), 80), ("moon", (256, 256), 100), ("chelsea", (200, 330), 60)],
}


def _bases(kind: str, n_classes: int, split: str, rng) -> list[np.ndarray]:
    from scipy.ndimage import gaussian_filter

    if kind == "letters":
        chars = _LETTERS[split]
        return [gaussian_filter(_letter(ch), 0.7) for ch in chars[:n_classes]]
    if kind == "photos":
        return [_photo(*p) for p in _PHOTOS[split][:n_classes]]
    if kind == "keys":
        return [gaussian_filter(_key(t), 0.7) for t in (2, 3)][:n_classes]
    if kind == "mixed":
        pool = [gaussian_filter(_letter(ch), 0.7) for ch in _LETTERS[split]] + [_photo(*p) for p in _PHOTOS[split]]
        order = rng.permutation(len(pool))[:n_classes]
        return [pool[i] for i in order]
    raise ValueError(kind)


def _digits(sizes, split, rng):
    from scipy.ndimage import gaussian_filter
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    data = load_digits()
    n = len(sizes)
    pool = [0, 2, 4, 6, 8, 1, 3, 5, 7, 9] if split == "tune" else [1, 3, 5, 7, 9, 0, 2, 4, 6, 8]
    classes = sorted(pool[:n]) if n <= 5 else pool[:n]
    parity = 0 if split == "tune" else 1
    out = []
    for c, m in zip(classes, sizes):
        idx = np.flatnonzero(data.target == c)
        idx = idx[idx % 2 == parity]
        pick = rng.choice(idx, size=m, replace=False)
        imgs = []
        for i in pick:
            d = resize(data.images[i] / 16.0, (24, 24), order=1, anti_aliasing=False)
            canvas = np.zeros((CANVAS, CANVAS))
            canvas[20:44, 20:44] = gaussian_filter(d, 1.0)
            imgs.append(canvas)
        out.append((str(c), imgs))
    return out


def make_set(spec: SetSpec, *, split: str = "tune", seed: int = 0):
    """Build a set.

    Returns
    -------
    images : list of ndarray
        2-D float images (all 64 x 64 unless ``spec.frames``).
    labels : list of str
    """
    from iastudio.core import se2
    from iastudio.core.warp import warp

    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode()), 0 if split == "tune" else 1])
    if spec.kind == "digits":
        groups = _digits(spec.sizes, split, rng)
    else:
        bases = _bases(spec.kind, len(spec.sizes), split, rng)
        groups = [(f"{spec.kind}{i}", [b] * m) for i, (b, m) in enumerate(zip(bases, spec.sizes))]
    images, labels = [], []
    for lab, imgs in groups:
        originals = np.stack(imgs).astype(np.float32)
        rot = spec.rotation
        tau = se2.random_transforms(len(originals), rotation_range=rot, shift_range=spec.shift, seed=rng)
        moved = np.clip(warp(originals, tau), 0.0, None)
        for img in moved:
            img = np.asarray(img, dtype=float)
            if spec.frames:
                img = _reframe(img, rng)
            if spec.noise:
                img = img + rng.normal(0.0, spec.noise * img.std(), img.shape)
            images.append(img)
            labels.append(lab)
    order = rng.permutation(len(images))
    return [images[i] for i in order], [labels[i] for i in order]


def _reframe(img: np.ndarray, rng) -> np.ndarray:
    """The same object at another pixel scale (x0.7..x1.4) in a frame x0.5..x2 of the original side."""
    from skimage.transform import rescale

    obj = rescale(img, rng.uniform(0.7, 1.4), order=1, anti_aliasing=True)
    side = int(round(CANVAS * rng.uniform(0.5, 2.0)))
    side = max(side, int(np.ceil(2 * (RADIUS + 6) * obj.shape[0] / CANVAS + 4)))  # the object must fit
    out = np.zeros((side, side))
    h = obj.shape[0]
    if h <= side:
        o = (side - h) // 2
        out[o:o + h, o:o + h] = obj
    else:
        o = (h - side) // 2
        out[:] = obj[o:o + side, o:o + side]
    return out
