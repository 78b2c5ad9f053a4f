"""Discrete rotation (and mirror) groups H acting on images and on feature maps on G = Z2 x| H.

An element ``g = (m, k)`` of ``H`` (``m`` in {0, 1} only for mirror groups, ``k`` in
``0 .. N-1``) acts on the plane as ``R^k M^m``: first the mirror ``M`` (``x -> -x``, the
column axis), then a rotation by ``2 pi k / N``.  Its index is ``m * N + k``.

Images are ``(..., X, Y)`` tensors; a rotation by 90 degrees is ``torch.rot90(x, 1, (-2, -1))``,
which moves the offset ``(row, col)`` to ``(-col, row)``: the matrix ``[[0, -1], [1, 0]]`` on
``(row, col)`` coordinates.  Feature maps on the group are ``(B, C, |H|, X, Y)``; the left-regular
action is ``L_g[f](x, h) = f(g^-1 x, g^-1 h)`` (:func:`act`).  When every element of ``H`` moves
pixels onto pixels (``N`` divides 4) the action is exact; otherwise images are resampled
bilinearly (:func:`rotate_images`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["Group", "act", "act_image", "get_group", "rotate_images"]


@dataclass(frozen=True)
class Group:
    """The rotation group C_N, or the dihedral group D_N when ``mirror``.

    Parameters
    ----------
    n_rot : int
        Number of rotations ``N`` (1 gives the trivial group of a plain CNN).
    mirror : bool
        Add the mirror ``M``.
    """

    n_rot: int
    mirror: bool = False

    @property
    def order(self) -> int:
        """``|H|``."""
        return self.n_rot * (2 if self.mirror else 1)

    @property
    def name(self) -> str:
        return ("D" if self.mirror else "C") + str(self.n_rot)

    @property
    def exact(self) -> bool:
        """True when every element maps the pixel grid onto itself."""
        return 4 % self.n_rot == 0

    def element(self, index: int) -> tuple[int, int]:
        """``(m, k)`` of the element with this index."""
        return divmod(int(index), self.n_rot)

    def index(self, m: int, k: int) -> int:
        return int(m) * self.n_rot + int(k) % self.n_rot

    def mul(self, a: int, b: int) -> int:
        """Index of ``a b``: ``R^k1 M^m1 R^k2 M^m2 = R^(k1 + (-1)^m1 k2) M^(m1 xor m2)``."""
        m1, k1 = self.element(a)
        m2, k2 = self.element(b)
        return self.index(m1 ^ m2, k1 + (-k2 if m1 else k2))

    def inv(self, a: int) -> int:
        m, k = self.element(a)
        return a if m else self.index(0, -k)

    @cached_property
    def cayley(self) -> np.ndarray:
        """``cayley[a, b]`` = index of ``a b``."""
        n = self.order
        return np.array([[self.mul(a, b) for b in range(n)] for a in range(n)], dtype=np.int64)

    @cached_property
    def relative(self) -> np.ndarray:
        """``relative[h, t]`` = index of ``h^-1 t``."""
        n = self.order
        return np.array([[self.mul(self.inv(h), t) for t in range(n)] for h in range(n)], dtype=np.int64)

    def left_perm(self, g: int) -> np.ndarray:
        """``p`` with ``p[h]`` = index of ``g^-1 h``: ``L_g[f][h] = f[p[h]]`` along the group axis."""
        gi = self.inv(g)
        return np.array([self.mul(gi, h) for h in range(self.order)], dtype=np.int64)

    def angle(self, g: int) -> float:
        """Rotation angle of ``g`` in radians."""
        return 2 * np.pi * self.element(g)[1] / self.n_rot

    def matrix(self, g: int) -> np.ndarray:
        """2x2 matrix of ``g`` on ``(row, col)`` offsets (exact zeros and ones for 90 degrees)."""
        m, _k = self.element(g)
        a = self.angle(g)
        c, s = np.cos(a), np.sin(a)
        rot = np.array([[c, -s], [s, c]])
        rot[np.abs(rot) < 1e-12] = 0.0
        rot = np.where(np.abs(np.abs(rot) - 1) < 1e-12, np.round(rot), rot)
        mir = np.diag([1.0, -1.0]) if m else np.eye(2)
        return rot @ mir


_NAMED = {"z2": (1, False), "p4": (4, False), "p4m": (4, True)}


def get_group(name: str) -> Group:
    """``"z2"``, ``"p4"``, ``"p4m"``, ``"rN"`` (e.g. ``"r8"``) or ``"rNm"`` (mirrors)."""
    key = name.lower()
    if key in _NAMED:
        return Group(*_NAMED[key])
    if key.startswith("r"):
        mirror = key.endswith("m")
        digits = key[1:-1] if mirror else key[1:]
        if digits.isdigit() and int(digits) >= 1:
            return Group(int(digits), mirror)
    raise ValueError(f"unknown group {name!r}: use z2, p4, p4m, rN or rNm")


def rotate_images(x: torch.Tensor, angle: float, *, mirror: bool = False) -> torch.Tensor:
    """Rotate ``(..., X, Y)`` images by ``angle`` radians about their centre (after mirroring).

    Multiples of 90 degrees are exact (``torch.rot90``); other angles are bilinear with zeros outside.
    The sense matches :meth:`Group.matrix`: 90 degrees equals ``torch.rot90(x, 1, (-2, -1))``.
    """
    if mirror:
        x = torch.flip(x, dims=(-1,))
    quarter = angle / (np.pi / 2)
    if abs(quarter - round(quarter)) < 1e-9:
        return torch.rot90(x, int(round(quarter)) % 4, dims=(-2, -1))
    shape = x.shape
    flat = x.reshape(-1, 1, shape[-2], shape[-1])
    c, s = float(np.cos(angle)), float(np.sin(angle))
    # output offset (row, col) samples the input at R^-1 (row, col); grid_sample uses (x=col, y=row)
    theta = torch.tensor([[c, -s, 0.0], [s, c, 0.0]], dtype=x.dtype, device=x.device)
    theta = theta.unsqueeze(0).expand(flat.shape[0], 2, 3)
    grid = F.affine_grid(theta, list(flat.shape), align_corners=False)
    out = F.grid_sample(flat, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.reshape(shape)


def act_image(x: torch.Tensor, group: Group, g: int) -> torch.Tensor:
    """The image part of the action: ``x -> x(g^-1 .)`` on the last two axes."""
    m, _ = group.element(g)
    return rotate_images(x, group.angle(g), mirror=bool(m))


def act(x: torch.Tensor, group: Group, g: int, *, dim: int = 2) -> torch.Tensor:
    """Left-regular action ``L_g`` on a feature map (or filter) with a group axis ``dim``.

    ``L_g[f](x, h) = f(g^-1 x, g^-1 h)``: the image part on the last two axes and the
    permutation :meth:`Group.left_perm` along ``dim``.
    """
    perm = torch.as_tensor(group.left_perm(g), device=x.device)
    return act_image(x.index_select(dim, perm), group, g)
