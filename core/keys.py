"""The Keys cubic convolution's constants, shared by the warp and its compiled kernels.

A leaf: :mod:`~iastudio.core.warp`, :mod:`~iastudio.core.warp_kernel` (Numba) and
:mod:`~iastudio.core.warp_cuda` (CUDA) read them here, so the kernels do not import the warp that
loads them.
"""
from __future__ import annotations

__all__ = ["KEYS_A", "PAD"]

KEYS_A = -0.5
"""Keys' parameter ``a`` of the cubic convolution kernel (Keys 1981)."""

PAD = 4
"""The zero border (px) the warp pads images with; a tap index is clipped into it when it falls far outside."""
