"""The optional extras (``[gpu]``, ``[relion]``, ``[dask]``, ``[nets]``): what to tell a user who lacks one.

A Python install can add an extra with ``pip``; the packaged app (the PyInstaller installer) cannot install
anything, so its messages never say ``pip install``: they say that this edition leaves the part out and
which edition has it.
"""
from __future__ import annotations

import sys

__all__ = ["PACKAGE", "is_packaged", "missing_extra"]

#: The distribution name that ``pip install`` takes.
PACKAGE = "invariant-attention-studio"


def is_packaged() -> bool:
    """True in the installer's app (a PyInstaller bundle), False in a Python install."""
    return bool(getattr(sys, "frozen", False))


def missing_extra(what: str, *, extra: str) -> str:
    """One sentence saying that ``what`` is missing and how to get it, for this edition.

    Parameters
    ----------
    what : str
        The missing package, as the user should read it (``"CuPy"``).
    extra : str
        The optional extra of :data:`PACKAGE` that installs it (``"gpu"``).

    Returns
    -------
    str
        In a Python install: ``"CuPy is not installed (pip install 'invariant-attention-studio[gpu]')"``.
        In the packaged app: that this installed edition leaves ``what`` out, and that the studio
        installed with Python has it with the extra (the documentation's *Install* page); no
        ``pip install`` command.

    Examples
    --------
    >>> missing_extra("Dask", extra="dask")  # in a Python install
    "Dask is not installed (pip install 'invariant-attention-studio[dask]')"
    """
    if not extra.isidentifier():
        raise ValueError(f"extra must be a plain name, got {extra!r}")
    if is_packaged():
        return (f"{what} is not part of this installed edition; the studio installed with Python has it "
                f"with its '{extra}' extra (see the documentation, page “Install”)")
    return f"{what} is not installed (pip install '{PACKAGE}[{extra}]')"
