"""Each particle's CTF parameters, read from a RELION STAR file, and phase flipping with them.

A RELION particle STAR file records, per particle, the defocus the CTF was estimated with
(``rlnDefocusU``, ``rlnDefocusV``, in Å) and the microscope: voltage (``rlnVoltage``, kV),
spherical aberration (``rlnSphericalAberration``, mm), amplitude contrast
(``rlnAmplitudeContrast``) and pixel size (``rlnImagePixelSize``, or ``rlnPixelSize``, or in
RELION 3.0 ``rlnDetectorPixelSize`` (µm) × 10000 / ``rlnMagnification``).  RELION 3.0 writes them all
in the one block of particles; RELION 3.1 and later move the microscope's values into a
``data_optics`` block, one row per optics group, joined on ``rlnOpticsGroup``.  A value in a
particle's row wins over its optics group's.

**Astigmatism.**  With ``rlnDefocusV`` and ``rlnDefocusAngle`` both in the file, a particle is
astigmatic: its CTF has ``rlnDefocusU`` along the U axis, at ``rlnDefocusAngle`` degrees from the
image's x axis, and ``rlnDefocusV`` at right angles to it (RELION's convention, see
:mod:`~iastudio.core.ctf`), and it is flipped with that CTF.  Without ``rlnDefocusV`` its defocus is
``rlnDefocusU`` along every direction; with ``rlnDefocusV`` but no ``rlnDefocusAngle`` (which a file
RELION wrote does not lack) the orientation is unknown, so it is the mean of the two along every
direction, as before astigmatism was read.

**Sign.**  RELION's CTF is the negative of :mod:`~iastudio.core.ctf`'s (CTFFIND4's): ``+A`` at
frequency 0, matching the white-on-dark particles RELION extracts (``--invert_contrast``).  Particles
listed in a STAR file are therefore flipped with RELION's sign by default (``convention="relion"``):
each Fourier coefficient times the sign of RELION's CTF, ``-ctf_phase_flip(image)``, which gives the
white particle's own projection filtered by ``|CTF|`` (``ctf_phase_flip`` itself would turn them dark
on light).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ctf import ctf_phase_flip
from .filenames import printable
from .imagefile import ImageLoadError
from .stacks import read_star

__all__ = ["CONVENTIONS", "NO_CTF", "ParticleCtf", "ctf_from_array", "ctf_to_array", "flip_problem",
           "phase_flip_particles", "phase_flip_record", "star_ctf"]

_MICROSCOPE = (("voltage", "rlnVoltage"), ("spherical_aberration", "rlnSphericalAberration"),
               ("amplitude_contrast", "rlnAmplitudeContrast"))


@dataclass(frozen=True)
class ParticleCtf:
    """One particle's CTF parameters, in the units of :mod:`~iastudio.core.ctf`.

    Attributes
    ----------
    defocus : float
        Å, positive for underfocus: ``rlnDefocusU`` (the defocus along the U axis) where
        ``defocus_v`` is set, else the defocus along every direction.
    voltage : float
        kV.
    spherical_aberration : float
        mm.
    amplitude_contrast : float
        In [0, 1).
    pixel_size : float
        Å per pixel of the particle's image.
    defocus_v : float or None
        Å: ``rlnDefocusV``, the defocus along the V axis; None (default): no astigmatism.
    astigmatism_angle : float or None
        Degrees: ``rlnDefocusAngle``, the U axis's angle from the image's x axis; set with
        ``defocus_v`` and only then.
    """

    defocus: float
    voltage: float
    spherical_aberration: float
    amplitude_contrast: float
    pixel_size: float
    defocus_v: float | None = None
    astigmatism_angle: float | None = None

    def __post_init__(self):
        if (self.defocus_v is None) != (self.astigmatism_angle is None):
            raise ValueError("defocus_v and astigmatism_angle are set together or not at all")

    @property
    def mean_defocus(self) -> float:
        """Å: the mean of the U and V defocus (``defocus`` without astigmatism)."""
        return self.defocus if self.defocus_v is None else 0.5 * (self.defocus + self.defocus_v)

    @property
    def astigmatism(self) -> float:
        """Å: ``|dU - dV|`` (0 without astigmatism)."""
        return 0.0 if self.defocus_v is None else abs(self.defocus - self.defocus_v)

    def microscope(self) -> tuple[float, float, float, float]:
        """``(voltage, spherical_aberration, amplitude_contrast, pixel_size)``: shared by images flipped together."""
        return self.voltage, self.spherical_aberration, self.amplitude_contrast, self.pixel_size


def _numbers(table, column: str, name: str, rows) -> np.ndarray:
    """``table[column]`` as finite floats, or an error naming the first row that is not one."""
    import pandas as pd

    raw = table[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        k = int(bad[0])
        raise ImageLoadError(f"{name}: {rows(k)}: {column} is not a finite number ({str(raw.iloc[k])[:40]!r})")
    return values


def _optics_rows(blocks, particles, name: str, row_of):
    """The optics block and each particle's row in it (RELION 3.1+); ``None, None`` without one."""
    optics = next((b for key, b in blocks.items() if str(key).lower() == "optics" and hasattr(b, "columns")), None)
    if optics is None or "rlnOpticsGroup" not in particles.columns:
        return None, None
    if "rlnOpticsGroup" not in optics.columns:
        raise ImageLoadError(f"{name}: the optics block has no rlnOpticsGroup column")
    groups = _numbers(optics, "rlnOpticsGroup", name, lambda k: f"optics row {k + 1}")
    index = {g: k for k, g in enumerate(groups.tolist())}
    mine = _numbers(particles, "rlnOpticsGroup", name, row_of)
    where = np.array([index.get(g, -1) for g in mine.tolist()], dtype=int)
    missing = np.flatnonzero(where < 0)
    if missing.size:
        k = int(missing[0])
        raise ImageLoadError(f"{name}: {row_of(k)}: optics group {mine[k]:g} is not in the optics block")
    return optics, where


def _column(column: str, particles, optics, where, name: str, row_of) -> np.ndarray | None:
    """Per particle: ``column`` from its own row, else from its optics group's; None when neither has it."""
    if column in particles.columns:
        return _numbers(particles, column, name, row_of)
    if optics is not None and column in optics.columns:
        return _numbers(optics, column, name, lambda k: f"optics row {k + 1}")[where]
    return None


def star_ctf(path, *, blocks=None) -> list[ParticleCtf]:
    """The CTF parameters of every particle of a RELION STAR file, in the order of its rows.

    Parameters
    ----------
    path : str or Path
        A particle STAR file: RELION 3.0's one block, or RELION 3.1's ``particles`` and ``optics``
        blocks (see the module's docstring for the columns read).
    blocks : dict, optional
        Its blocks, already read by :func:`~iastudio.core.stacks.read_star` (None: read here).

    Returns
    -------
    list of ParticleCtf
        One per row of the block holding ``rlnImageName`` (the rows
        :func:`~iastudio.core.stacks.star_members` turns into images, in the same order),
        astigmatic where the file has ``rlnDefocusV`` and ``rlnDefocusAngle`` (the module's
        docstring says what is read without them).

    Raises
    ------
    ImageLoadError
        Naming the file, the row (counted from 1, as ``star_members`` counts) and the reason: not a
        particle STAR file, a column missing from the particles and their optics groups, a value that
        is not a finite number (an angle included), a negative defocus, a voltage or pixel size that is
        not positive, an amplitude contrast outside [0, 1), or an optics group that is not in the optics
        block.

    """
    path = Path(path)
    name = path.name
    blocks = read_star(path) if blocks is None else blocks
    particles = next((b for b in blocks.values() if hasattr(b, "columns") and "rlnImageName" in b.columns), None)
    if particles is None:
        raise ImageLoadError(f"{name}: no rlnImageName column (not a particle STAR file)")

    def row_of(k: int) -> str:
        return f"row {k + 1}"

    optics, where = _optics_rows(blocks, particles, name, row_of)

    def column(col):
        return _column(col, particles, optics, where, name, row_of)

    def need(col, what):
        values = column(col)
        if values is None:
            raise ImageLoadError(f"{name}: no {col} column (the {what}) in the particles or their optics group")
        return values

    u = need("rlnDefocusU", "defocus, needed to phase-flip")
    v = column("rlnDefocusV")
    angle = column("rlnDefocusAngle") if v is not None else None
    found = {key: need(col, key.replace("_", " ")) for key, col in _MICROSCOPE}
    pixel = _pixel_size(column, name)
    for says, bad in (*_negative_defocus(u, v), *_unusable(found["voltage"], pixel, found["amplitude_contrast"])):
        if bad.any():
            raise ImageLoadError(f"{name}: {row_of(int(np.flatnonzero(bad)[0]))}: {says}")
    if v is not None and angle is None:
        u, v = 0.5 * (u + v), None  # no orientation: the mean along every direction
    scopes = zip(found["voltage"], found["spherical_aberration"], found["amplitude_contrast"], pixel)
    if v is None:
        return [ParticleCtf(float(d), float(kv), float(cs), float(a), float(px)) for d, (kv, cs, a, px) in
                zip(u, scopes)]
    return [ParticleCtf(float(du), float(kv), float(cs), float(a), float(px), float(dv), float(ang))
            for du, dv, ang, (kv, cs, a, px) in zip(u, v, angle, scopes)]


def _unusable(voltage, pixel_size, amplitude_contrast) -> tuple:
    """Each rule a particle's microscope must meet, as ``(what it says, where it fails)`` over arrays of values."""
    return (("rlnVoltage must be positive", ~(voltage > 0)),
            ("the pixel size must be positive", ~(pixel_size > 0)),
            ("rlnAmplitudeContrast must lie in [0, 1)", ~((amplitude_contrast >= 0) & (amplitude_contrast < 1))))


def _negative_defocus(u, v) -> tuple:
    """The STAR reader's rule on defocus: RELION's underfocus is positive (a project's old rows are not refused)."""
    rules = (("rlnDefocusU must not be negative (underfocus is positive)", u < 0),)
    return rules if v is None else (*rules, ("rlnDefocusV must not be negative (underfocus is positive)", v < 0))


def _pixel_size(column, name: str) -> np.ndarray:
    """Å per pixel: ``rlnImagePixelSize``, ``rlnPixelSize`` or ``rlnDetectorPixelSize`` · 1e4 / ``rlnMagnification``."""
    for col in ("rlnImagePixelSize", "rlnPixelSize"):
        values = column(col)
        if values is not None:
            return values
    detector, mag = column("rlnDetectorPixelSize"), column("rlnMagnification")
    if detector is None or mag is None:
        raise ImageLoadError(f"{name}: no pixel size (rlnImagePixelSize, rlnPixelSize, or rlnDetectorPixelSize "
                             "with rlnMagnification) in the particles or their optics group")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = detector * 1e4 / mag
    return np.where(np.isfinite(out), out, -1.0)


CONVENTIONS = ("relion", "ctffind4")
"""The CTF signs :func:`phase_flip_particles` flips with: RELION's (``+A`` at frequency 0) or CTFFIND4's (``-A``)."""


def phase_flip_particles(images, ctf, *, convention: str = "relion") -> list[np.ndarray]:
    """Phase-flip each image with its own particle's CTF parameters.

    Parameters
    ----------
    images : sequence of ndarray, shape (H, W)
        The raw particle images (sizes may differ).
    ctf : sequence of ParticleCtf
        One per image (:func:`star_ctf`).
    convention : {"relion", "ctffind4"}
        Whose CTF sign to flip with: ``"relion"`` (particles as RELION extracts them, white on dark:
        the result is ``-ctf_phase_flip``) or ``"ctffind4"`` (the microscope's own contrast, dark
        particles: :func:`~iastudio.core.ctf.ctf_phase_flip` as it is).

    Returns
    -------
    list of ndarray
        Float32 images, each :func:`~iastudio.core.ctf.ctf_phase_flip` of its image (negated for
        ``"relion"``) at its own defocus (astigmatic where its :class:`ParticleCtf` is), voltage,
        spherical aberration, amplitude contrast and pixel size (images sharing a size and a microscope
        are flipped as one stack).
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    sign = -1.0 if convention == "relion" else 1.0
    images = list(images)
    ctf = list(ctf)
    if len(ctf) != len(images):
        raise ValueError(f"one ParticleCtf per image: {len(ctf)} for {len(images)} images")
    groups: dict = {}
    for i, (img, c) in enumerate(zip(images, ctf)):
        if np.ndim(img) != 2:
            raise ValueError(f"image {i} is not a grayscale image (shape {np.shape(img)}): particles are gray")
        groups.setdefault((np.shape(img), c.microscope()), []).append(i)
    out: list = [None] * len(images)
    for (_shape, (kv, cs, amp, px)), idx in groups.items():
        astig = {}
        if any(ctf[i].defocus_v is not None for i in idx):  # else exactly as without astigmatism
            astig = {"defocus_v": [ctf[i].defocus if ctf[i].defocus_v is None else ctf[i].defocus_v for i in idx],
                     "astigmatism_angle": [ctf[i].astigmatism_angle or 0.0 for i in idx]}
        flipped = ctf_phase_flip(np.stack([images[i] for i in idx]), [ctf[i].defocus for i in idx], pixel_size=px,
                                 voltage=kv, spherical_aberration=cs, amplitude_contrast=amp, **astig)
        for i, img in zip(idx, flipped):
            out[i] = (sign * img).astype(np.float32)
    return out


NO_CTF = "the images have no CTF parameters: open a RELION particle STAR file"
"""What :func:`flip_problem` says of a set in which no image came from a STAR file."""


def flip_problem(ctf, images, *, paths=None) -> str | None:
    """Why ``images`` cannot be phase-flipped with ``ctf``, in words, or None when they can.

    Parameters
    ----------
    ctf : sequence or None
        Per image, its :class:`ParticleCtf`, a string saying why its STAR file's CTF could not be read,
        or None (no STAR file listed it); None: no image has any (``ImageSet.ctf``).
    images : sequence of ndarray
        The images (gray ones only can be flipped).
    paths : sequence of str, optional
        Their names, for the message (default: "image N").

    Returns
    -------
    str or None
        :data:`NO_CTF` when no image has CTF parameters; else the first image without them (or in
        colour), how many there are and why; None when every image is gray and has a
        :class:`ParticleCtf`.

    Examples
    --------
    >>> import numpy as np
    >>> flip_problem(None, [np.zeros((4, 4))] * 2) == NO_CTF
    True
    >>> c = ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0)
    >>> flip_problem([c, None], [np.zeros((4, 4))] * 2, paths=["a.mrcs#1", "b.png"])
    '1 of the 2 images have no CTF parameters, e.g. b.png (not listed in a RELION particle STAR file)'
    >>> flip_problem([c, c], [np.zeros((4, 4))] * 2) is None
    True
    """
    images = list(images)
    n = len(images)
    ctf = [None] * n if ctf is None else list(ctf)
    if len(ctf) != n:
        raise ValueError(f"one CTF entry per image: {len(ctf)} for {n} images")

    def name(i: int) -> str:
        return printable(paths[i]) if paths is not None else f"image {i + 1}"

    missing = [i for i, c in enumerate(ctf) if not isinstance(c, ParticleCtf)]
    if not n or all(c is None for c in ctf):
        return NO_CTF
    if missing:
        i = missing[0]
        why = printable(ctf[i]) if isinstance(ctf[i], str) else "not listed in a RELION particle STAR file"
        return f"{len(missing)} of the {n} images have no CTF parameters, e.g. {name(i)} ({why})"
    colour = [i for i, img in enumerate(images) if np.ndim(img) != 2]
    if colour:
        return f"phase flipping needs gray particle images; {len(colour)} are in colour, e.g. {name(colour[0])}"
    return None


def phase_flip_record(ctf) -> dict:
    """What a run's summary says of phase flipping with ``ctf``: applied, and the ranges of the parameters.

    Parameters
    ----------
    ctf : sequence of ParticleCtf
        One per image flipped (at least one).

    Returns
    -------
    dict
        ``applied`` (True), ``n_images``, ``[min, max]`` of ``defocus_A`` (each particle's mean of U and
        V), ``astigmatism_A`` (``|dU - dV|``), ``voltage_kV``, ``spherical_aberration_mm``,
        ``amplitude_contrast`` and ``pixel_size_A``, ``n_astigmatic`` (the images flipped with an
        astigmatic CTF), and what the defocus and the sign convention are, in words (``ia-cluster``'s
        ``summary.json``: ``phase_flip``).

    Examples
    --------
    >>> r = phase_flip_record([ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0), ParticleCtf(2e4, 300.0, 2.7, 0.1, 3.0)])
    >>> r["applied"], r["n_images"], r["defocus_A"]
    (True, 2, [10000.0, 20000.0])
    """
    ctf = list(ctf)

    def span(attr):
        values = [getattr(c, attr) for c in ctf]
        return [round(min(values), 6), round(max(values), 6)]

    n_astig = sum(c.defocus_v is not None for c in ctf)
    if n_astig == len(ctf):
        says = "astigmatic: rlnDefocusU along the U axis at rlnDefocusAngle from x, rlnDefocusV across it"
    elif n_astig:
        says = (f"astigmatic for {n_astig} images (rlnDefocusU, rlnDefocusV, rlnDefocusAngle); the others one "
                "defocus along every direction")
    else:
        says = ("one defocus along every direction (rlnDefocusU, or the mean of rlnDefocusU and rlnDefocusV where "
                "rlnDefocusAngle is missing)")
    return {"applied": True, "n_images": len(ctf), "defocus_A": span("mean_defocus"),
            "astigmatism_A": span("astigmatism"), "n_astigmatic": n_astig, "voltage_kV": span("voltage"),
            "spherical_aberration_mm": span("spherical_aberration"),
            "amplitude_contrast": span("amplitude_contrast"), "pixel_size_A": span("pixel_size"),
            "defocus_is": says,
            "convention": "RELION's CTF sign (+A at frequency 0): particles stay white on dark"}


_FIELDS = ("defocus", "voltage", "spherical_aberration", "amplitude_contrast", "pixel_size", "defocus_v",
           "astigmatism_angle")
_OLD_COLUMNS = 5  # a project saved before astigmatism was read: no defocus_v, no angle


def ctf_to_array(ctf, n: int) -> np.ndarray | None:
    """Per-image CTF parameters as an ``(n, 7)`` float array (a project file's ``ctf``), or None when none has any.

    Parameters
    ----------
    ctf : sequence or None
        ``ImageSet.ctf``: a :class:`ParticleCtf`, a string or None per image.
    n : int
        The number of images.

    Returns
    -------
    ndarray, shape (n, 7), or None
        Columns: defocus, voltage, spherical aberration, amplitude contrast, pixel size, defocus V,
        astigmatism angle (the last two NaN for a particle without astigmatism); a row of NaN for an
        image without parameters.

    Examples
    --------
    >>> ctf_to_array([ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0), None], 2)[:, 0]
    array([10000.,    nan])
    """
    if ctf is None or not any(isinstance(c, ParticleCtf) for c in ctf):
        return None
    out = np.full((n, len(_FIELDS)), np.nan)
    for i, c in enumerate(ctf):
        if isinstance(c, ParticleCtf):
            out[i] = [np.nan if getattr(c, f) is None else getattr(c, f) for f in _FIELDS]
    return out


def ctf_from_array(arr) -> list | None:
    """The per-image :class:`ParticleCtf` (None for a row of NaN) of :func:`ctf_to_array`'s array.

    Parameters
    ----------
    arr : ndarray, shape (n, 7), or None
        Or ``(n, 5)``: a project saved before astigmatism was read (no defocus V, no angle).

    Returns
    -------
    list or None
        None when ``arr`` is None.

    Raises
    ------
    ValueError
        A row that is partly NaN (the pair defocus V and angle aside, NaN together: no astigmatism),
        or whose voltage or pixel size is not positive or whose amplitude contrast is outside [0, 1).

    Examples
    --------
    >>> c = ParticleCtf(1e4, 300.0, 2.7, 0.1, 3.0)
    >>> ctf_from_array(ctf_to_array([c, None], 2)) == [c, None]
    True
    """
    if arr is None:
        return None
    arr = np.asarray(arr, dtype=float)
    if arr.ndim != 2 or arr.shape[1] not in (_OLD_COLUMNS, len(_FIELDS)):
        raise ValueError(f"the CTF parameters must be an (n, {len(_FIELDS)}) array (or (n, {_OLD_COLUMNS}) from a "
                         f"project saved before astigmatism was read), got shape {arr.shape}")
    if arr.shape[1] == _OLD_COLUMNS:
        arr = np.concatenate([arr, np.full((len(arr), len(_FIELDS) - _OLD_COLUMNS), np.nan)], axis=1)
    listed = ~np.isnan(arr).all(axis=1)  # a row of NaN: an image no STAR file listed
    astig = ~np.isnan(arr[:, _OLD_COLUMNS:]).all(axis=1)
    rules = (("a value is missing or not finite", ~np.isfinite(arr[:, :_OLD_COLUMNS]).all(axis=1)),
             ("the astigmatism (defocus V and angle) is not two finite numbers",
              astig & ~np.isfinite(arr[:, _OLD_COLUMNS:]).all(axis=1)),
             *_unusable(arr[:, 1], arr[:, 4], arr[:, 3]))
    for says, bad in rules:
        if (bad & listed).any():
            raise ValueError(f"the CTF parameters of image {int(np.flatnonzero(bad & listed)[0]) + 1} are not "
                             f"usable: {says}")
    return [(ParticleCtf(*(float(v) for v in row)) if a else ParticleCtf(*(float(v) for v in row[:_OLD_COLUMNS])))
            if use else None for row, use, a in zip(arr, listed, astig)]
