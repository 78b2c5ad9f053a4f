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

Fluorescence-like cells (``noise_suite(cells=True)``, ``bench_quality.py --noise cells``): each set
has 3 random cell types (the classes) — a soft elliptical body, a bright nucleus off its centre and
1-3 granules — and every image is one cell of a type, its axes varied by up to +-8 %, turned over
the full circle, shifted by up to +-3 px, on a dim background (5 % of the nucleus), as photon
counts: Poisson noise, whose variance follows the brightness (not the white noise of the particle
sets).  The photon scale is set so that the signal variance over the mean noise variance is the
set's SNR.

With a CTF (``noise_suite(ctf=True)``, ``bench_quality.py --noise --ctf``): every projection is
rendered on a frame twice as large, convolved with the weak-phase contrast transfer function of
:mod:`iastudio.core.ctf` (Frank, *Three-Dimensional Electron Microscopy of Macromolecular
Assemblies*, 2006; ``CTF(k) = -sin(pi lambda df k^2 - pi/2 Cs lambda^3 k^4 + arcsin A)
exp(-B k^2 / 4)``) at its own defocus, cropped back to 48 px, and only then noised (the SNR is
that of the CTF-affected images).  The microscope: :data:`CTF_MICROSCOPE` (300 kV, Cs 2.7 mm,
amplitude contrast 0.1, B 100 Å², 3 Å per pixel: a 48-px frame is 144 Å, the particle about
70 Å across), defocus drawn per image uniformly in :data:`CTF_DEFOCUS` (1-2.5 µm): the first zero
lies at a period of 4.75-7.5 px, well inside the frame (Nyquist: 2 px).  A CTF set holds the same
density, views, turns, shifts and noise draws as the set of the same name without ``-ctf``;
:func:`ctf_defocus` gives its defocus values (what a STAR file would record).  With
``noise_suite(ctf=True, astigmatism=True)`` the CTF is astigmatic (``cryo-ctf-astig-...``): the same
mean defocus, ``dU - dV`` in :data:`CTF_ASTIGMATISM` (500-1500 Å) and the U axis at a random angle;
:func:`ctf_astigmatism` gives them.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

SIDE = 48  # frame side in pixels
VIEWS = 4  # classes per set
SHIFT = 3.0  # pixels, each axis: [-SHIFT, SHIFT]
BALL = 9.0  # blob centres lie in a ball of this radius (px)
#: The CTF sets' microscope (keywords of ``iastudio.core.ctf.apply_ctf``).
CTF_MICROSCOPE = {"pixel_size": 3.0, "voltage": 300.0, "spherical_aberration": 2.7, "amplitude_contrast": 0.1,
                  "b_factor": 100.0}
CTF_DEFOCUS = (10_000.0, 25_000.0)  # Å: 1-2.5 µm underfocus, uniform per image
CTF_ASTIGMATISM = (500.0, 1500.0)  # Å: dU - dV, uniform per image, in the astigmatic CTF sets


@dataclass
class NoiseSpec:
    """How to build one noisy set."""

    name: str
    snr: float  # signal variance / noise variance; inf: no noise
    per_view: int  # images per view (class)
    views: int = VIEWS
    kind: str = "cryo"  # "cryo": projections + white noise; "cells": fluorescence-like cells + Poisson noise
    ctf: bool = False  # "cryo" only: each projection convolved with a CTF before the noise
    astigmatism: bool = False  # with ctf: an astigmatic CTF (ctf_astigmatism)

    @property
    def seed_name(self) -> str:
        """The name the set's random draws come from: a CTF set shares them with its CTF-free twin."""
        return self.name.replace("-ctf", "").replace("-astig", "")


SNRS = (3.0, 1.0, 0.3, 0.1, 0.05)
PER_VIEW = (30, 100, 300)


def noise_suite(*, full: bool = False, fast: bool = False, cells: bool = False, ctf: bool = False,
                astigmatism: bool = False) -> list[NoiseSpec]:
    """The noisy sets.

    ``full``: every SNR x every size (15 sets, up to 1,200 images; long);
    default: the sets the issue's targets name plus the easier levels at
    30 per view and a clean set; ``fast``: two small sets (for tests);
    ``cells``: the fluorescence-like cell sets instead (3 types, 30 cells each, SNR 3, 1, 0.3);
    ``ctf``: the particle sets (as chosen by ``full`` / ``fast``) with a CTF, named ``cryo-ctf-...``;
    by default the clean set and SNR 1, 0.3, 0.1 at 30 per view and SNR 0.1 at 100 per view;
    with ``astigmatism`` too, the same sets with an astigmatic CTF, named ``cryo-ctf-astig-...``
    (:func:`ctf_astigmatism`).
    """
    if ctf:
        if full or fast:
            base = noise_suite(full=full, fast=fast)
        else:
            keep = ("cryo-clean-15", "cryo-snr1-30", "cryo-snr0.3-30", "cryo-snr0.1-30", "cryo-snr0.1-100")
            base = [s for s in noise_suite() if s.name in keep]
        tag = "cryo-ctf-astig-" if astigmatism else "cryo-ctf-"
        return [NoiseSpec(s.name.replace("cryo-", tag), s.snr, s.per_view, s.views, ctf=True, astigmatism=astigmatism)
                for s in base]
    if cells:
        return [NoiseSpec(f"cells-snr{s:g}-30", s, 30, views=3, kind="cells") for s in (3.0, 1.0, 0.3)]
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


def random_cell_type(rng) -> dict:
    """A fluorescence-like cell type: body half-axes, nucleus and granules (pixels, in the cell's frame)."""
    a, b = rng.uniform(10.0, 15.0), rng.uniform(5.0, 8.5)
    nucleus = (rng.uniform(-0.45, 0.45) * a, rng.uniform(-0.3, 0.3) * b, rng.uniform(2.5, 3.8))
    granules = [(rng.uniform(-0.7, 0.7) * a, rng.uniform(-0.55, 0.55) * b, rng.uniform(1.0, 1.8))
                for _ in range(int(rng.integers(1, 4)))]
    return {"a": a, "b": b, "nucleus": nucleus, "granules": granules}


def render_cell(cell: dict, *, angle: float = 0.0, shift=(0.0, 0.0), stretch=(1.0, 1.0), side: int = SIDE):
    """One cell's brightness (noise-free): body 0.35, nucleus 1.0, granules 0.7, soft edges.

    ``stretch`` scales the body's two axes (a cell's own size); ``angle`` turns it (radians,
    counter-clockwise) and ``shift`` moves it (``(row, col)`` pixels).
    """
    grid = np.arange(side) - (side - 1) / 2.0
    y, x = np.meshgrid(grid - shift[0], grid - shift[1], indexing="ij")
    c, s = np.cos(angle), np.sin(angle)
    u, v = c * x + s * y, -s * x + c * y  # the cell's own axes
    a, b = cell["a"] * stretch[0], cell["b"] * stretch[1]
    img = 0.35 / (1.0 + np.exp(6.0 * (np.sqrt((u / a) ** 2 + (v / b) ** 2) - 1.0)))
    for (cu, cv, r), level in [(cell["nucleus"], 1.0)] + [(g, 0.7) for g in cell["granules"]]:
        cu, cv = cu * stretch[0], cv * stretch[1]
        img = img + level * np.exp(-0.5 * ((u - cu) ** 2 + (v - cv) ** 2) / r ** 2)
    return img


def _cells(spec: NoiseSpec, rng):
    """Clean cell images, their labels and each type's untransformed image (see the module's docstring)."""
    types = [random_cell_type(rng) for _ in range(spec.views)]
    clean_views = np.stack([render_cell(t) for t in types])
    images, labels = [], []
    for v, t in enumerate(types):
        for _ in range(spec.per_view):
            images.append(render_cell(t, angle=rng.uniform(0, 2 * np.pi), shift=rng.uniform(-SHIFT, SHIFT, size=2),
                                      stretch=1.0 + rng.uniform(-0.08, 0.08, size=2)))
            labels.append(f"view{v}")
    return images, labels, clean_views


def _photon_counts(truth: np.ndarray, snr: float, rng, background: float = 0.05) -> tuple[np.ndarray, float]:
    """Poisson counts of ``scale * (truth + background)``, the scale giving signal / noise variance ``snr``."""
    scale = snr * float(np.mean(truth + background)) / max(float(np.mean(truth.var(axis=(1, 2)))), 1e-12)
    return rng.poisson(scale * (truth + background)).astype(float), scale


def ctf_defocus(spec: NoiseSpec, *, split: str = "tune", seed: int = 0) -> np.ndarray:
    """Each image's defocus (Å) in a CTF set, in the order of its images (a stream of its own)."""
    rng = np.random.default_rng([seed, zlib.crc32(spec.seed_name.encode()), 0 if split == "tune" else 1, 11])
    return rng.uniform(*CTF_DEFOCUS, size=spec.views * spec.per_view)


def ctf_astigmatism(spec: NoiseSpec, *, split: str = "tune", seed: int = 0):
    """An astigmatic CTF set's ``(defocus_u, defocus_v, angle)`` per image (Å, Å, degrees).

    The mean of U and V is :func:`ctf_defocus` (the same as the set without astigmatism), ``dU - dV``
    is uniform in :data:`CTF_ASTIGMATISM` and the U axis's angle from x (RELION's ``rlnDefocusAngle``)
    uniform in [0, 180), from a stream of their own.
    """
    mean = ctf_defocus(spec, split=split, seed=seed)
    rng = np.random.default_rng([seed, zlib.crc32(spec.seed_name.encode()), 0 if split == "tune" else 1, 13])
    diff = rng.uniform(*CTF_ASTIGMATISM, size=mean.size)
    angle = rng.uniform(0.0, 180.0, size=mean.size)
    return mean + 0.5 * diff, mean - 0.5 * diff, angle


def _with_ctf(density, views, poses, defocus, astigmatism=None) -> np.ndarray:
    """Each pose's projection on a frame twice as large, with the CTF of its defocus, cropped to 48 px.

    ``astigmatism``: ``(defocus_u, defocus_v, angle)`` per pose (then ``defocus`` is not used).
    """
    from iastudio.core.ctf import apply_ctf

    big = np.stack([project(density, views[v], angle=a, shift=sh, side=2 * SIDE) for v, a, sh in poses])
    if astigmatism is None:
        out = apply_ctf(big, defocus, **CTF_MICROSCOPE)
    else:
        u, v, angle = astigmatism
        out = apply_ctf(big, u, defocus_v=v, astigmatism_angle=angle, **CTF_MICROSCOPE)
    lo = SIDE // 2
    return out[:, lo:lo + SIDE, lo:lo + SIDE]


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
        order of ``images``; with the CTF in a CTF set, whose ``clean`` has none).
    """
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng([seed, zlib.crc32(spec.seed_name.encode()), 0 if split == "tune" else 1, 7])
    if spec.kind == "cells":
        images, labels, clean_views = _cells(spec, rng)
    else:
        density = random_density(rng)
        views = Rotation.random(spec.views, random_state=rng).as_matrix()
        clean_views = np.stack([project(density, r) for r in views])
        images, labels = [], []
        poses = []
        for v, rot in enumerate(views):
            for _ in range(spec.per_view):
                poses.append((v, rng.uniform(0, 2 * np.pi), rng.uniform(-SHIFT, SHIFT, size=2)))
                images.append(project(density, rot, angle=poses[-1][1], shift=poses[-1][2]))
                labels.append(f"view{v}")
    order = rng.permutation(len(images))
    truth = np.stack(images)[order]
    if spec.ctf:
        truth = _with_ctf(density, views, [poses[i] for i in order], ctf_defocus(spec, split=split, seed=seed),
                          ctf_astigmatism(spec, split=split, seed=seed) if spec.astigmatism else None)
    labels = [labels[i] for i in order]
    noisy = truth
    if np.isfinite(spec.snr) and spec.kind == "cells":
        noisy, scale = _photon_counts(truth, spec.snr, rng)
        truth, clean_views = scale * (truth + 0.05), scale * (clean_views + 0.05)  # in counts, as the images
    elif np.isfinite(spec.snr):
        signal_var = float(np.mean(truth.var(axis=(1, 2))))
        noisy = truth + rng.normal(0.0, np.sqrt(signal_var / spec.snr), truth.shape)
    out = (list(noisy), labels, clean_views)
    return (*out, truth) if clean_images else out
