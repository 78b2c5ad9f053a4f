"""Writing a run for RELION and cryoSPARC: ``particles.star`` and ``class_averages.mrcs``.

Both are written in place; ``ia-cluster`` writes them into its hidden result
folder, moved into place only when complete.

Conventions (RELION's, checked by ``tests/test_relion.py`` against a known transform):

* an image's pixel ``(x, y)`` is (column, row) of the MRC data, counted from
  its centre ``(W // 2, H // 2)``;
* RELION aligns a particle ``X`` onto its class with the in-plane angle
  ``psi`` (degrees) and the origin ``o = (rlnOriginX, rlnOriginY)``:
  ``aligned(p) = X(R(-psi) p - o)``, ``R(a) = [[cos a, -sin a], [sin a, cos a]]``
  — the particle is shifted by ``+o`` (its centre lies at ``-o`` from the box
  centre), then rotated by ``psi`` counter-clockwise in ``(x, y)``
  (``relion_stack_create --apply_transformation`` does exactly this);
* this package's ``tau = (theta, tx, ty)`` about the centre ``C`` aligns the
  particle as ``aligned = X o tau``; written about the box centre, ``tau``'s
  matrix in ``(x, y)`` is ``R(theta)`` and its translation ``b``, so
  ``psi = -theta`` and ``o = -b`` (``rlnOriginXAngst = -b_x * pixel size``);
* a run's transform is found on the working canvas (:func:`relion_poses`), whose centre is the
  file's point ``C`` (the object's centroid with ``scale="content"``, the default; with ``"frame"``
  the box centre to half a pixel, ``(N - 1) / 2``): the aligned image is centred on ``C`` moved by
  the transform's shift ``t`` (in the file's pixels), so about the box centre
  ``b = t + (C - centre)``.  (Until this version the export turned about ``C`` in the box's own
  frame instead, which is the same only where ``C`` is the box centre: with ``scale="content"`` a
  class's particles came out misaligned.)

Particles read from a RELION STAR file keep their CTF: each particle's defocus (``rlnDefocusU``,
``rlnDefocusV``, ``rlnDefocusAngle``) and an optics group per microscope (voltage, spherical
aberration, amplitude contrast, pixel size), so that RELION can go on from the file (2-D or 3-D
refinement with CTF correction).  Other columns of the input (micrograph names, coordinates, phase
shift, CTF B-factor and scale, beam tilt, the optics groups' names) are not carried over.

``rlnClassNumber`` counts from 1 (cluster 0 is class 1); ``class_averages.mrcs``
holds the invariant means in class order (image ``N`` is class ``N``), on the
working canvas.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import se2

__all__ = ["RELION_COLUMNS", "mrc_box", "relion_image_name", "relion_pose", "relion_poses", "write_class_averages",
           "write_particles_star"]

RELION_COLUMNS = ["rlnImageName", "rlnClassNumber", "rlnAnglePsi", "rlnOriginXAngst", "rlnOriginYAngst",
                  "rlnOpticsGroup", "iaScore"]
"""The ``particles`` block's columns; ``iaScore`` (the alignment's cosine score) is kept but not read by RELION."""


def relion_pose(params, *, center, box) -> tuple[float, float, float]:
    """RELION's ``(psi_deg, origin_x_px, origin_y_px)`` for a transform in original pixels.

    Parameters
    ----------
    params : array_like, shape (3,)
        ``(theta, tx, ty)`` (radians, original pixels) aligning the image:
        ``aligned = image o tau`` with ``tau(p) = A(theta)(p - center) + center + (ty, tx)``
        (see :mod:`~iastudio.core.se2`).
    center : (float, float)
        ``tau``'s rotation centre ``(row, col)`` in the image's pixels
        (:func:`~iastudio.core.preprocess.canvas_to_original`'s ``center_row``, ``center_col``).
    box : (int, int)
        The image's ``(H, W)``; RELION rotates about ``(H // 2, W // 2)``.

    Returns
    -------
    psi_deg, origin_x, origin_y : float
        ``rlnAnglePsi`` and the origin in pixels (multiply by the pixel size for ``rlnOriginXAngst``).

    Examples
    --------
    A pure shift of 2 columns (the aligned image samples 2 columns to the right, so
    the particle sat 2 columns right of the centre) is RELION's origin ``(-2, 0)``:

    >>> relion_pose([0.0, 2.0, 0.0], center=(32, 32), box=(64, 64))
    (0.0, -2.0, 0.0)
    """
    theta, tx, ty = (float(v) for v in np.asarray(params, dtype=float))
    a = se2.rotation_matrix(theta)
    c_rel = np.array([box[0] // 2, box[1] // 2], dtype=float)
    d = np.asarray(center, dtype=float) - c_rel
    b = np.array([ty, tx]) + d - a @ d  # the same map written about RELION's centre, (row, col)
    psi = -float(np.rad2deg(se2.wrap_angle(theta)))
    return psi + 0.0, -float(b[1]) + 0.0, -float(b[0]) + 0.0  # + 0.0: no negative zeros


def relion_poses(transforms, canvas, *, box: int) -> np.ndarray:
    """RELION's ``(psi_deg, origin_x_px, origin_y_px)`` of each image from its transform on the working canvas.

    Parameters
    ----------
    transforms : ndarray, shape (n, 3)
        ``(theta, tx, ty)`` per image (radians, canvas pixels) aligning the image as it is in its file
        onto its class; a row holding NaN (no pose) gives NaN.
    canvas : Canvas
        The preprocessing's geometry (:func:`~iastudio.core.preprocess.canvas_to_original`).
    box : int
        The particles' side in their files.

    Returns
    -------
    ndarray, shape (n, 3)
        :func:`relion_pose` of each image, in original pixels.
    """
    from .preprocess import canvas_to_original

    transforms = np.asarray(transforms, dtype=float).reshape(-1, 3)
    poses = np.full((len(transforms), 3), np.nan)
    mid = float(box // 2)
    for i, t in enumerate(transforms):
        if np.isfinite(t).all():
            o = canvas_to_original(t, canvas, i)
            # the aligned image is centred where the canvas is: on the file's point C (the object's centroid
            # with scale="content", the box's centre with "frame"), moved by t; RELION's frame is centred on
            # the box, so the pose is t + (C - box centre), turning about the box centre
            poses[i] = relion_pose([np.deg2rad(o["theta_deg"]), o["tx_px"] + o["center_col"] - mid,
                                    o["ty_px"] + o["center_row"] - mid], center=(mid, mid), box=(box, box))
    return poses


def mrc_box(names) -> list[tuple[int, int]]:
    """The distinct ``(width, height)`` of the MRC files ``names`` (:func:`relion_image_name`'s) hold, from headers."""
    import mrcfile

    def file_of(name: str) -> str:  # "000017@/data/user@host/s.mrcs": the file after the leading number only
        number, at, path = name.partition("@")
        return path if at and number.isdigit() else name

    sizes = set()
    for path in {file_of(name) for name in names}:
        with mrcfile.open(path, header_only=True, permissive=True) as mrc:
            sizes.add((int(mrc.header.nx), int(mrc.header.ny)))
    return sorted(sizes)


def relion_image_name(name: str) -> str | None:
    """``"N@/abs/stack.mrcs"`` for ``"stack.mrcs#N"``, ``"/abs/image.mrc"`` for an MRC file; None otherwise."""
    from .stacks import split_member

    member = split_member(name)
    if member is not None:
        if member.path.suffix.lower() not in (".mrcs", ".mrc"):
            return None
        return f"{member.index + 1:06d}@{os.path.abspath(member.path)}"
    if Path(name).suffix.lower() in (".mrcs", ".mrc") and os.path.isfile(name):
        return os.path.abspath(name)
    return None


def write_particles_star(path, *, names, clusters, poses, scores, pixel_size: float | None = None, box: int,
                         ctf=None) -> None:
    """Write RELION 3.1's ``particles.star`` (blocks ``optics`` and ``particles``) with ``starfile``.

    Parameters
    ----------
    path : str or Path
    names : sequence of str
        ``rlnImageName`` of each image (:func:`relion_image_name`).
    clusters : sequence of int
        Cluster of each image, from 0 (written as ``rlnClassNumber`` = cluster + 1).
    poses : ndarray, shape (n, 3)
        ``(psi_deg, origin_x_px, origin_y_px)`` per image (:func:`relion_pose`).
    scores : sequence of float
        Written as ``iaScore``.
    pixel_size : float, optional
        Å per pixel of the particles (``rlnImagePixelSize``; origins are written in Å).  Needed
        without ``ctf``; with it, each particle's own pixel size is used.
    box : int
        The particles' side (``rlnImageSize``).
    ctf : sequence of ParticleCtf, optional
        Each particle's CTF (:class:`~iastudio.core.particle_ctf.ParticleCtf`, read from its STAR
        row): written as ``rlnDefocusU``, ``rlnDefocusV`` and ``rlnDefocusAngle`` (U = V and angle 0
        without astigmatism), and one optics group per distinct microscope and pixel size.

    Examples
    --------
    >>> import starfile, tempfile, os
    >>> from iastudio.core.particle_ctf import ParticleCtf
    >>> scope = ParticleCtf(12000.0, 300.0, 2.7, 0.1, 1.5)
    >>> path = os.path.join(tempfile.mkdtemp(), "particles.star")
    >>> write_particles_star(path, names=["000001@/d/p.mrcs"], clusters=[0], poses=[[30.0, 2.0, 0.0]],
    ...                      scores=[0.9], box=64, ctf=[scope])
    >>> star = starfile.read(path, always_dict=True)
    >>> float(star["particles"]["rlnOriginXAngst"][0]), float(star["optics"]["rlnVoltage"][0])
    (3.0, 300.0)
    """
    import pandas as pd
    import starfile

    poses = np.asarray(poses, dtype=float).reshape(-1, 3)
    if ctf is None:
        if pixel_size is None:
            raise ValueError("the particles' pixel size is needed (pixel_size, or each particle's ctf)")
        scopes = [(None, None, None, float(pixel_size))]
        group = np.zeros(len(poses), dtype=int)
    else:
        scopes = list(dict.fromkeys(c.microscope() for c in ctf))  # one optics group each, in order of first use
        group = np.array([scopes.index(c.microscope()) for c in ctf], dtype=int)
    pixels = np.array([scopes[g][3] for g in group], dtype=float)
    particles = pd.DataFrame({
        "rlnImageName": list(names),
        "rlnClassNumber": np.asarray(clusters, dtype=int) + 1,
        "rlnAnglePsi": poses[:, 0],
        "rlnOriginXAngst": poses[:, 1] * pixels,
        "rlnOriginYAngst": poses[:, 2] * pixels,
        "rlnOpticsGroup": group + 1,
        "iaScore": np.asarray(scores, dtype=float),
    })
    optics = pd.DataFrame({"rlnOpticsGroup": np.arange(1, len(scopes) + 1),
                           "rlnOpticsGroupName": [f"opticsGroup{g + 1}" for g in range(len(scopes))],
                           "rlnImagePixelSize": [sc[3] for sc in scopes], "rlnImageSize": [int(box)] * len(scopes),
                           "rlnImageDimensionality": [2] * len(scopes)})
    if ctf is not None:
        particles["rlnDefocusU"] = [c.defocus for c in ctf]
        particles["rlnDefocusV"] = [c.defocus if c.defocus_v is None else c.defocus_v for c in ctf]
        particles["rlnDefocusAngle"] = [0.0 if c.astigmatism_angle is None else c.astigmatism_angle for c in ctf]
        for k, column in enumerate(("rlnVoltage", "rlnSphericalAberration", "rlnAmplitudeContrast")):
            optics[column] = [sc[k] for sc in scopes]
    starfile.write({"optics": optics, "particles": particles}, Path(path), overwrite=True, float_format="%.6f")


def write_class_averages(path, means, *, pixel_size: float | None = None) -> None:
    """Write the invariant means as an MRC image stack (mode 2, float32; image ``N`` is class ``N``).

    Parameters
    ----------
    path : str or Path
    means : ndarray, shape (k, S, S)
    pixel_size : float, optional
        Å per pixel of the means, recorded in the header.
    """
    import mrcfile

    means = np.ascontiguousarray(np.asarray(means, dtype=np.float32))
    if means.ndim == 4:  # colour means: their gray level (MRC holds one channel)
        means = np.ascontiguousarray(means.mean(axis=-1))
    with mrcfile.new(Path(path), overwrite=True) as mrc:
        mrc.set_data(means)
        mrc.set_image_stack()
        if pixel_size:
            mrc.voxel_size = float(pixel_size)
