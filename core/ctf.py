"""The contrast transfer function (CTF) of a transmission electron microscope, and phase flipping.

A cryo-EM image is not the projection of the specimen's density but that projection
convolved with the microscope's point-spread function; in Fourier space each coefficient at
spatial frequency ``k`` (its magnitude, in 1/Å) is multiplied by the weak-phase-object CTF
(Frank, *Three-Dimensional Electron Microscopy of Macromolecular Assemblies*, 2nd ed., Oxford
University Press 2006, ch. 2; the sign convention and the amplitude-contrast phase as in
Rohou & Grigorieff, *CTFFIND4*, J. Struct. Biol. 192, 216-221, 2015)::

    chi(k) = pi * lambda * df * k**2 - pi / 2 * Cs * lambda**3 * k**4
    CTF(k) = -sin(chi(k) + phi_A) * exp(-B * k**2 / 4),    phi_A = arcsin(A) = arctan(A / sqrt(1 - A**2))
           = (-sqrt(1 - A**2) * sin(chi) - A * cos(chi)) * exp(-B * k**2 / 4)

with ``lambda`` the electron wavelength (relativistic, from the voltage), ``df`` the defocus
(positive: underfocus), ``Cs`` the spherical aberration, ``A`` the amplitude contrast (~0.1 for
ice-embedded proteins) and ``B`` a B-factor envelope.

**Astigmatism.**  By default ``df`` is the same along every direction.  With an astigmatic defocus
(``defocus_v`` and ``astigmatism_angle`` given) it depends on the azimuth ``a`` of the frequency
``(kx, ky)`` (``a = atan2(ky, kx)``, from the image's x axis, its column index, towards its y axis,
its row index)::

    df(a) = (dU + dV) / 2 + (dU - dV) / 2 * cos(2 * (a - angle))

so ``df = dU`` along the U axis (at ``angle`` degrees from x) and ``dV`` along the V axis at right
angles to it.  This is RELION's convention for ``rlnDefocusU``, ``rlnDefocusV`` and
``rlnDefocusAngle`` (its ``CTF::getDeltaF``: the mean defocus plus the half difference times the cosine
of twice the azimuth ``atan2(Y, X)`` minus the angle, X and Y its Fourier indices along x and y),
which is CTFFIND4's too (defocus 1, defocus 2, azimuth of astigmatism); the angle is read from the
same STAR files that give the defocus, so it must be taken as they mean it.  ``chi`` then uses
``df(a) k**2 = (dU + dV) / 2 k**2 + (dU - dV) / 2 ((kx**2 - ky**2) cos 2 angle + 2 kx ky sin 2 angle)``.

Phase and amplitude contrast act with the same sign: in underfocus both make a
particle dark at low frequencies (``CTF(0) = -A``), and the CTF's first zero is where
``chi = pi - phi_A``.  Other packages use the opposite overall sign (Bsoft, RELION: ``+A`` at
frequency 0); apply and flip with one convention.

The CTF changes sign from ring to ring, so features at those frequencies come out with inverted
contrast.  **Phase flipping** (:func:`ctf_phase_flip`) multiplies each Fourier coefficient by the
sign of the image's CTF: the result is the density convolved with ``|CTF|``, every coefficient
with the sign it had in the projection (the amplitudes are left as they are).  It needs each
image's defocus, which real data records per particle (e.g. ``_rlnDefocusU`` in a RELION STAR
file).

Units are the ones STAR files use: defocus in Å, pixel size in Å, voltage in kV, ``Cs`` in mm,
``B`` in Å².
"""
from __future__ import annotations

import numpy as np

from .backend import array_module

__all__ = ["apply_ctf", "ctf_2d", "ctf_phase_flip", "electron_wavelength"]


def electron_wavelength(voltage: float) -> float:
    """The relativistic wavelength of an electron accelerated through ``voltage`` kV, in Å.

    ``lambda = h / sqrt(2 m0 e V (1 + e V / (2 m0 c**2)))`` = ``12.2643 / sqrt(V (1 + 0.978466e-6 V))``
    Å with ``V`` in volts (300 kV: 0.01969 Å).
    """
    v = float(voltage) * 1e3
    if v <= 0:
        raise ValueError(f"voltage must be positive, got {voltage} kV")
    return 12.2642598 / np.sqrt(v * (1.0 + 0.978466e-6 * v))


def ctf_2d(shape, defocus, *, pixel_size: float, voltage: float = 300.0, spherical_aberration: float = 2.7,
           amplitude_contrast: float = 0.1, b_factor: float = 0.0, defocus_v=None, astigmatism_angle=0.0, xp=np):
    """The CTF on the grid of an unshifted 2-D FFT (``numpy.fft.fft2``'s layout).

    Parameters
    ----------
    shape : (int, int)
        The images' ``(H, W)``.
    defocus : float or array_like, shape (n,)
        Defocus in Å (positive: underfocus), one per image; with ``defocus_v``, the defocus ``dU``
        along the U axis.
    pixel_size : float
        Å per pixel.
    voltage : float
        Acceleration voltage in kV.
    spherical_aberration : float
        ``Cs`` in mm.
    amplitude_contrast : float
        The fraction ``A`` in [0, 1).
    b_factor : float
        ``B`` in Å² of the envelope ``exp(-B k**2 / 4)`` (0: none).
    defocus_v : float or array_like, shape (n,), optional
        The defocus ``dV`` along the V axis in Å (RELION's ``rlnDefocusV``), one per image or one for
        all; None (default): no astigmatism, ``defocus`` along every direction.
    astigmatism_angle : float or array_like, shape (n,)
        The angle of the U axis from the image's x axis towards its y axis, in degrees (RELION's
        ``rlnDefocusAngle``; see the module's docstring); used only with ``defocus_v``.
    xp : module
        :mod:`numpy` or :mod:`cupy`: the array module of the result.

    Returns
    -------
    ndarray, shape (H, W) or (n, H, W)
        The formula of the module's docstring at every FFT bin (real, and symmetric under
        ``k -> -k``, so filtering a real image keeps it real).  A scalar ``defocus`` gives one
        ``(H, W)`` array.
    """
    if pixel_size <= 0:
        raise ValueError(f"pixel_size must be positive, got {pixel_size}")
    if not 0.0 <= amplitude_contrast < 1.0:
        raise ValueError(f"amplitude_contrast must lie in [0, 1), got {amplitude_contrast}")
    h, w = shape
    lam = electron_wavelength(voltage)
    ky = xp.fft.fftfreq(h, d=pixel_size)[:, None]
    kx = xp.fft.fftfreq(w, d=pixel_size)[None, :]
    k2 = kx ** 2 + ky ** 2  # 1/Å²
    df = xp.asarray(defocus, dtype=xp.float64)
    scalar = df.ndim == 0
    df = df.reshape(-1, 1, 1)
    cs = spherical_aberration * 1e7  # mm -> Å
    focus = np.pi * lam * df * k2
    if defocus_v is not None:
        dv = xp.asarray(defocus_v, dtype=xp.float64).reshape(-1, 1, 1)
        rad = xp.deg2rad(xp.asarray(astigmatism_angle, dtype=xp.float64)).reshape(-1, 1, 1)
        scalar = scalar and dv.size == 1 and rad.size == 1
        twofold = (kx ** 2 - ky ** 2) * xp.cos(2.0 * rad) + 2.0 * kx * ky * xp.sin(2.0 * rad)
        # (dU + dV) / 2 is exactly dU where dU == dV, and the twofold term then exactly 0: today's CTF
        focus = np.pi * lam * (0.5 * (df + dv)) * k2 + np.pi * lam * (0.5 * (df - dv)) * twofold
    chi = focus - 0.5 * np.pi * cs * lam ** 3 * k2 ** 2
    ctf = -xp.sin(chi + np.arcsin(amplitude_contrast))
    if b_factor:
        ctf = ctf * xp.exp(-b_factor * k2 / 4.0)
    return ctf[0] if scalar else ctf


def _filter(images, transfer, xp):
    """``images`` (n, H, W) with every image's 2-D FFT multiplied by ``transfer`` (n, H, W); real."""
    return xp.real(xp.fft.ifft2(xp.fft.fft2(images, axes=(-2, -1)) * transfer, axes=(-2, -1)))


def _per_image(values, n: int, what: str) -> np.ndarray:
    """``values`` as ``n`` floats (one value: every image), or a ValueError saying how many were given."""
    out = np.asarray(values, dtype=np.float64).reshape(-1)
    if out.size == 1:
        out = np.full(n, out[0])
    if out.size != n:
        raise ValueError(f"one {what} per image: {out.size} values for {n} images")
    return out


def _stack(images, defocus, xp, defocus_v=None, astigmatism_angle=0.0):
    """The stack as float64 and per image: defocus, and ``defocus_v`` and the angle (None without ``defocus_v``)."""
    x = xp.asarray(images, dtype=xp.float64)
    if x.ndim != 3:
        raise ValueError(f"images must be a stack (n, H, W), got shape {tuple(x.shape)}")
    df = _per_image(defocus, len(x), "defocus")
    if defocus_v is None:
        return x, df, None, None
    return (x, df, _per_image(defocus_v, len(x), "defocus_v"),
            _per_image(astigmatism_angle, len(x), "astigmatism_angle"))


def apply_ctf(images, defocus, *, pixel_size: float, voltage: float = 300.0, spherical_aberration: float = 2.7,
              amplitude_contrast: float = 0.1, b_factor: float = 0.0, defocus_v=None, astigmatism_angle=0.0):
    """Convolve each image with the CTF of its defocus (what the microscope does to a projection).

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        Projections (NumPy or CuPy); the filter is periodic over the frame, so pad first where
        the delocalised signal must not wrap around.
    defocus : float or array_like, shape (n,)
        Defocus in Å per image (one value: every image); with ``defocus_v``, along the U axis.
    pixel_size, voltage, spherical_aberration, amplitude_contrast, b_factor
        As :func:`ctf_2d`.
    defocus_v, astigmatism_angle : float or array_like, shape (n,), optional
        An astigmatic defocus, as :func:`ctf_2d` (one value: every image); None: no astigmatism.

    Returns
    -------
    ndarray, shape (n, H, W)
        Float64, in the array module of ``images``.
    """
    xp = array_module(images)
    x, df, dv, angle = _stack(images, defocus, xp, defocus_v, astigmatism_angle)
    h = ctf_2d(x.shape[1:], df, pixel_size=pixel_size, voltage=voltage, spherical_aberration=spherical_aberration,
               amplitude_contrast=amplitude_contrast, b_factor=b_factor, defocus_v=dv, astigmatism_angle=angle, xp=xp)
    return _filter(x, h, xp)


def ctf_phase_flip(images, defocus, *, pixel_size: float, voltage: float = 300.0, amplitude_contrast: float = 0.1,
                   spherical_aberration: float = 2.7, defocus_v=None, astigmatism_angle=0.0):
    """Phase-flip CTF-affected images: each Fourier coefficient times the sign of its CTF.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        Images (NumPy or CuPy) taken at the given defocus values.
    defocus : float or array_like, shape (n,)
        Each image's defocus in Å (positive: underfocus; in real data from the particles' STAR
        file); one value: every image.  With ``defocus_v``: the defocus along the U axis
        (``rlnDefocusU``).
    pixel_size : float
        Å per pixel.
    voltage : float
        kV.
    amplitude_contrast : float
        ``A`` in [0, 1).
    spherical_aberration : float
        ``Cs`` in mm.
    defocus_v : float or array_like, shape (n,), optional
        Each image's defocus along the V axis in Å (``rlnDefocusV``); None (default): no astigmatism.
        Flipping an astigmatic image with the mean defocus instead flips the wrong sign between the
        zeros of its U and V directions.
    astigmatism_angle : float or array_like, shape (n,)
        The U axis's angle from x in degrees (``rlnDefocusAngle``), as :func:`ctf_2d`.

    Returns
    -------
    ndarray, shape (n, H, W)
        Float64 images whose Fourier coefficients carry the sign they had before the CTF
        (where the CTF is exactly 0 the coefficient is kept as it is).  The envelope does not
        change a sign, so it is not needed.

    Notes
    -----
    The CTF at frequency 0 is ``-A`` and its whole first lobe (out to ``chi = pi - arcsin A``) is
    negative in underfocus, so flipping turns the particles' inverted contrast back; an image
    taken in focus with no spherical aberration comes back negated (its CTF is ``-A`` everywhere).
    """
    xp = array_module(images)
    x, df, dv, angle = _stack(images, defocus, xp, defocus_v, astigmatism_angle)
    h = ctf_2d(x.shape[1:], df, pixel_size=pixel_size, voltage=voltage, spherical_aberration=spherical_aberration,
               amplitude_contrast=amplitude_contrast, defocus_v=dv, astigmatism_angle=angle, xp=xp)
    return _filter(x, xp.where(h < 0, -1.0, 1.0), xp)
