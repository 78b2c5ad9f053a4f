"""Lifting and group convolutions on G = Z2 x| H, exact by construction (seed 001, Sec. 2.2).

The filters are transformed by the group's regular representation: the lifting layer correlates
the image with ``L_h[psi]`` for every ``h`` in ``H``; the group layer with ``L_h[psi]``, which
rotates (mirrors) the filter *and* permutes its group axis (Eq. 13).  Padding is symmetric and
there is no stride, so a 90 degree rotation of the input permutes the output exactly
(seed 001, Appendix C: pool with even-sized maps instead of striding).

Feature maps are ``(B, C, |H|, X, Y)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .groups import Group, act, act_image

__all__ = ["GroupBatchNorm", "GroupConv", "LiftingConv", "group_max_pool", "spatial_max_pool"]


def _check_exact(group: Group) -> None:
    if not group.exact:
        raise ValueError(f"group convolutions on the pixel grid need 90 degree steps; {group.name} is not one")


class LiftingConv(nn.Module):
    """``[f * L_h psi](x)`` for every ``h``: ``(B, Cin, X, Y)`` -> ``(B, Cout, |H|, X', Y')``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size : int
        Odd filter side.
    group : Group
        p4 (``Group(4)``), p4m (``Group(4, True)``) or the trivial group (plain convolution).
    padding : int
        Symmetric zero padding (0 = "valid").
    bias : bool
        One bias per output channel, shared over ``H`` (equivariant).
    """

    def __init__(self, in_channels, out_channels, kernel_size, *, group: Group, padding=0, bias=True):
        super().__init__()
        _check_exact(group)
        self.group, self.padding = group, padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None

    def filter_bank(self) -> torch.Tensor:
        """``(Cout, |H|, Cin, k, k)``: ``L_h[psi]`` for every ``h``."""
        return torch.stack([act_image(self.weight, self.group, h) for h in range(self.group.order)], dim=1)

    def forward(self, x):
        bank = self.filter_bank()
        o, n, i, k, _ = bank.shape
        y = F.conv2d(x, bank.reshape(o * n, i, k, k), padding=self.padding)
        y = y.reshape(y.shape[0], o, n, y.shape[-2], y.shape[-1])
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1, 1)
        return y


class GroupConv(nn.Module):
    """Group convolution ``[f *_G psi](x, h)``: ``(B, Cin, |H|, X, Y)`` -> ``(B, Cout, |H|, X', Y')``.

    Parameters as :class:`LiftingConv`; the filter lives on ``G``: ``(Cout, Cin, |H|, k, k)``.
    """

    def __init__(self, in_channels, out_channels, kernel_size, *, group: Group, padding=0, bias=True):
        super().__init__()
        _check_exact(group)
        self.group, self.padding = group, padding
        n = group.order
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, n, kernel_size, kernel_size))
        nn.init.kaiming_uniform_(self.weight.view(out_channels, in_channels * n, kernel_size, kernel_size),
                                 a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None

    def filter_bank(self) -> torch.Tensor:
        """``(Cout, |H|, Cin, |H|, k, k)``: ``L_h[psi]`` (rotated and group-axis permuted) per output ``h``."""
        return torch.stack([act(self.weight, self.group, h, dim=2) for h in range(self.group.order)], dim=1)

    def forward(self, x):
        bank = self.filter_bank()
        o, n, i, n2, k, _ = bank.shape
        b = x.shape[0]
        y = F.conv2d(x.reshape(b, i * n2, x.shape[-2], x.shape[-1]), bank.reshape(o * n, i * n2, k, k),
                     padding=self.padding)
        y = y.reshape(b, o, n, y.shape[-2], y.shape[-1])
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1, 1)
        return y


class GroupBatchNorm(nn.BatchNorm3d):
    """Batch norm with statistics per channel over batch, ``H`` and space (equivariant).

    ``eps=2e-5`` as in seed 001, Appendix B.1.
    """

    def __init__(self, channels):
        super().__init__(channels, eps=2e-5)


def spatial_max_pool(x: torch.Tensor, size: int = 2) -> torch.Tensor:
    """Max pool over space only; exact under 90 degree rotations when the map side is a multiple of ``size``."""
    b, c, n, h, w = x.shape
    if h % size or w % size:
        raise ValueError(f"pooling a {h}x{w} map by {size} would break exact equivariance")
    y = F.max_pool2d(x.reshape(b, c * n, h, w), size)
    return y.reshape(b, c, n, h // size, w // size)


def group_max_pool(x: torch.Tensor) -> torch.Tensor:
    """Max over the group axis: ``(B, C, |H|, X, Y)`` -> ``(B, C, X, Y)``, invariant to ``H``."""
    return x.amax(dim=2)
