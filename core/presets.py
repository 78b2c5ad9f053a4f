"""Named run presets; ``paper``: Invariant Attention as the paper (seed 000) writes it.

One definition, read by the API (``AttentionRun(..., preset="paper")``), the
command line (``ia-cluster --paper``) and the app's paper mode.  A preset fills
every option the caller left at its default; options given explicitly win
(``ia-cluster --paper --beta 5``).

The paper preset, option by option (:class:`iastudio.core.attention.Settings`):

* ``init="identity"``, ``mean_solver="gradient"``: Algorithm 1 -- identity
  start, the sample mean as ``mu^(0)``, fixed-step gradient descent
  ``tau <- tau - t grad f`` with the learning rate ``learning_rate`` (no
  Gauss-Newton, no step refused), and at each step the smoothing level of
  ``sigmas`` that lowers the objective most (:mod:`iastudio.core.descent_mean`);
* ``weight_mass=1``, ``weight_tol=0``, ``mean_rtol=0``: exact sums, every
  mean does its ``mean_steps`` steps;
* ``beta=2`` on the paper's intensity scale (``intensity="paper"``, see
  :func:`paper_intensity`): one global ``exp(-beta d^2)``, as in Experiment 1;
* ``guard=False``, ``iterations`` an upper bound, ``converge_tol``: iterate
  until no entry of W moves by more than ``converge_tol``; nothing is undone;
* ``neighbors="all"``: every pair is aligned;
* ``readout="collapse"``: the clusters are the images whose final features
  collapsed together (:mod:`iastudio.core.collapse`); ``readout="spectral"``
  is the engine's read-out, and the one used when ``clusters`` is given.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PAPER", "PRESETS", "paper_intensity", "preset_options", "unit_beta"]

PAPER = {
    "init": "identity",
    "mean_solver": "gradient",
    "learning_rate": 0.005,
    "mean_steps": 20,
    "sigmas": (0.0, 1.0, 2.0),
    "weight_mass": 1.0,
    "weight_tol": 0.0,
    "mean_rtol": 0.0,
    "beta": 2.0,
    "intensity": "paper",
    "guard": False,
    "iterations": 20,
    "converge_tol": 1e-3,
    "neighbors": "all",
    "readout": "collapse",
}
"""The options of the ``paper`` preset (see the module docstring).

``learning_rate`` is Algorithm 1's ``t`` with angles in radians, shifts in
canvas pixels and the objective summed over the pixels of images on the
paper's intensity scale; the paper's ``t = 1`` (Experiment 1) is in units it
does not state, and diverges in these (docs/how-it-works.md, "The paper
preset").  ``mean_steps`` is Algorithm 1's ``N``; ``iterations`` bounds the IA
iterations (the run stops earlier once W stops moving).
"""

PRESETS = {"paper": PAPER}
"""Every named preset, by name."""


def preset_options(name: str | None, given: dict, defaults: dict) -> dict:
    """The options of a run: the preset's, then every option given with a value other than its default.

    Parameters
    ----------
    name : str or None
        A key of :data:`PRESETS`; ``None`` returns ``given`` unchanged.
    given : dict
        The options as the caller has them (defaults included).
    defaults : dict
        Each option's default; an option of ``given`` equal to its default
        takes the preset's value.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        For an unknown preset.

    Examples
    --------
    >>> preset_options("paper", {"beta": "auto", "iterations": 9}, {"beta": "auto", "iterations": 3})["beta"]
    2.0
    """
    if name is None:
        return dict(given)
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    out = dict(given)
    for key, value in PRESETS[name].items():
        if key not in out or _same(out[key], defaults.get(key)):
            out[key] = value
    if not _same(given.get("clusters", "auto"), "auto") and _same(given.get("readout", "auto"), "auto"):
        out["readout"] = "spectral"  # a given number of clusters is read out by spectral clustering
    return out


def _same(a, b) -> bool:
    """Whether an option's value is its default (``1 == 1.0``, a list equals its tuple, ``None`` only ``None``)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return tuple(a) == tuple(b)
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    try:
        return isinstance(a, bool) == isinstance(b, bool) and float(a) == float(b)
    except (TypeError, ValueError):
        return False


def paper_intensity(images):
    """Images on the paper's intensity scale: each one divided by its largest value.

    This project's images are unit-norm (:func:`iastudio.core.preprocess.preprocess`);
    the paper's are not: they are images with intensities in ``[0, 1]``, an
    object's brightest pixel at 1 (an 8-bit image divided by 255).  Dividing
    each unit-norm image by its peak gives that scale back (after the
    preprocessing's background subtraction), on the working canvas.  An image
    with no positive value is left as it is.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])

    Returns
    -------
    ndarray
        Same shape and dtype.

    Examples
    --------
    >>> paper_intensity(np.array([[[0.0, 0.6], [0.8, 0.0]]]))
    array([[[0.  , 0.75],
            [1.  , 0.  ]]])
    """
    from .backend import array_module

    xp = array_module(images)
    peak = xp.max(images.reshape(images.shape[0], -1), axis=1)
    peak = xp.where(peak > 0, peak, 1).astype(images.dtype)
    return images / peak.reshape((-1,) + (1,) * (images.ndim - 1))


def unit_beta(beta: float, images) -> float:
    """The ``beta`` on unit-norm images that matches a paper ``beta`` on these images.

    ``d`` scales with the images: an image of norm ``s`` on the paper's
    scale is ``s`` times its unit-norm self, so ``exp(-beta_paper d_paper^2)``
    equals ``exp(-beta_unit d_unit^2)`` with ``beta_unit = beta_paper s^2``.
    The norms differ from image to image; this uses their mean square (the
    preset itself works on the paper's scale and needs no conversion).

    Parameters
    ----------
    beta : float
        A ``beta`` of the paper.
    images : ndarray, shape (n, H, W[, C])
        The unit-norm working images.

    Returns
    -------
    float

    Examples
    --------
    >>> round(unit_beta(2.0, np.array([[[0.0, 0.6], [0.8, 0.0]]])), 6)  # norm 1, peak 0.8: s^2 = 1 / 0.8^2
    3.125
    """
    from .backend import to_host

    flat = np.asarray(to_host(images), dtype=float).reshape(len(images), -1)
    norms2 = (flat**2).sum(axis=1) / np.maximum(flat.max(axis=1), 1e-300) ** 2
    return float(beta) * float(np.mean(norms2))
