"""Group equivariant stand-alone self-attention (seed 002, Sec. 5): lifting and group self-attention.

Local multi-head self-attention over a ``k x k`` neighbourhood with a relative positional encoding
(Eq. 11).  Equivariance comes from the encoding alone: for every output element ``h`` of ``H`` the
encoding is *transformed by h* (``L_h[rho]``) while the content scores are computed once (Sec. 6,
"efficient implementation"):

* lifting (Eq. 14): ``rho_h(i, j) = rho_P(h^-1 (x_j - x_i))``;
* group (Eqs. 15, 16): keys ``(j, t)`` range over the spatial neighbourhood and all of ``H``; queries
  come from every ``(i, q)`` and are summed over ``q``; ``rho_h = rho_P(h^-1 (x_j - x_i)) +
  E[h^-1 q, h^-1 t]``, which is invariant to the group, so the layer is equivariant.

``rho_P`` is a small MLP of the *continuous* offset, so rotating it by ``2 pi / N`` needs no
interpolation of the encoding (the paper's steerability, Sec. 5.1).  It gives each head's key-space
vector directly (one linear map more general than adding a ``C_in`` vector before ``W_key``).  Only
rotations by multiples of 90 degrees map the square neighbourhood and the pixel grid onto
themselves, so R4 (and its mirrors) is exact and R8-R16 are equivariant up to resampling.

With the trivial group (``Group(1)``) the layers are ordinary local self-attention with a relative
encoding: the non-equivariant Z2-SA baseline (translation equivariant only).

Feature maps are ``(B, C, |H|, X, Y)``; ``last_attention`` keeps the attention weights of the last
call, ``(B, heads, |H|, X*Y, neighbours)`` (lifting) or summed over the query's group element and
the keys' group axis (group layer), for display.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .groups import Group

__all__ = ["LiftingSelfAttention", "GroupSelfAttention", "neighbour_offsets"]


def neighbour_offsets(size: int) -> torch.Tensor:
    """``(size*size, 2)`` ``(row, col)`` offsets in :func:`torch.nn.functional.unfold` order."""
    r = torch.arange(size, dtype=torch.float64) - size // 2
    rr, cc = torch.meshgrid(r, r, indexing="ij")
    return torch.stack([rr.reshape(-1), cc.reshape(-1)], dim=1)


class _RelativeEncoding(nn.Module):
    """``rho_P``: MLP of the offset, evaluated at ``h^-1 offset`` for every ``h``: ``(|H|, K, heads, d)``."""

    def __init__(self, group: Group, size: int, heads: int, dim: int, hidden: int = 16):
        super().__init__()
        self.heads, self.dim = heads, dim
        off = neighbour_offsets(size) / max(1, size // 2)
        mats = torch.stack([torch.as_tensor(group.matrix(group.inv(h))) for h in range(group.order)])
        self.register_buffer("coords", torch.einsum("hab,kb->hka", mats, off).float(), persistent=False)
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.SiLU(), nn.Linear(hidden, heads * dim))

    def forward(self):
        n, k, _ = self.coords.shape
        return self.net(self.coords).reshape(n, k, self.heads, self.dim)


class _LocalAttentionBase(nn.Module):
    def __init__(self, in_channels, out_channels, *, group: Group, heads, head_dim, size, dropout):
        super().__init__()
        if size % 2 == 0:
            raise ValueError("the neighbourhood side must be odd")
        self.group, self.heads, self.head_dim, self.size = group, heads, head_dim, size
        inner = heads * head_dim
        self.query = nn.Linear(in_channels, inner, bias=False)
        self.key = nn.Linear(in_channels, inner, bias=False)
        self.value = nn.Linear(in_channels, inner, bias=False)
        self.out = nn.Linear(inner, out_channels)
        self.encoding = _RelativeEncoding(group, size, heads, head_dim)
        self.dropout = nn.Dropout(dropout)
        self.last_attention = None

    def _project(self, layer, x):
        """``(B, C, ..., X, Y)`` -> ``(B, heads, d, ..., X, Y)`` by a pointwise linear map."""
        y = layer(x.movedim(1, -1)).movedim(-1, 1)
        return y.reshape(y.shape[0], self.heads, self.head_dim, *y.shape[2:])

    def _unfold(self, t):
        """``(B, C, X, Y)`` -> ``(B, C, K, X*Y)`` neighbours, zero outside."""
        b, c, h, w = t.shape
        u = F.unfold(t, self.size, padding=self.size // 2)
        return u.reshape(b, c, self.size * self.size, h * w)

    def _valid(self, h, w, device):
        ones = torch.ones(1, 1, h, w, device=device)
        return self._unfold(ones)[0, 0] > 0.5  # (K, X*Y)


class LiftingSelfAttention(_LocalAttentionBase):
    """Lifting self-attention (Eq. 14): ``(B, Cin, X, Y)`` -> ``(B, Cout, |H|, X, Y)``.

    Parameters
    ----------
    in_channels, out_channels : int
    group : Group
    heads, head_dim : int
        Number of heads and their width.
    size : int
        Odd side of the local neighbourhood (seed 002 chooses 5).
    dropout : float
        Dropout on the attention weights.
    """

    def __init__(self, in_channels, out_channels, *, group: Group, heads=4, head_dim=8, size=5, dropout=0.0):
        super().__init__(in_channels, out_channels, group=group, heads=heads, head_dim=head_dim, size=size,
                         dropout=dropout)

    def forward(self, x):
        b, c, X, Y = x.shape
        q = self._project(self.query, x).reshape(b, self.heads, self.head_dim, X * Y)
        k = self._unfold(self._project(self.key, x).reshape(b, -1, X, Y))
        k = k.reshape(b, self.heads, self.head_dim, -1, X * Y)
        v = self._unfold(self._project(self.value, x).reshape(b, -1, X, Y))
        v = v.reshape(b, self.heads, self.head_dim, -1, X * Y)
        scale = 1.0 / math.sqrt(self.head_dim)
        content = torch.einsum("bedp,bedkp->bepk", q, k)  # (b, heads, XY, K)
        pos = torch.einsum("bedp,hked->behpk", q, self.encoding())  # (b, heads, H, XY, K)
        scores = (content.unsqueeze(2) + pos) * scale
        scores = scores.masked_fill(~self._valid(X, Y, x.device).T, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        self.last_attention = probs.detach()
        out = torch.einsum("behpk,bedkp->bhpde", self.dropout(probs), v)  # (b, H, XY, d, heads)
        out = self.out(out.transpose(-1, -2).reshape(b, self.group.order, X * Y, -1))
        return out.permute(0, 3, 1, 2).reshape(b, -1, self.group.order, X, Y)


class GroupSelfAttention(_LocalAttentionBase):
    """Group self-attention (Eq. 16): ``(B, Cin, |H|, X, Y)`` -> ``(B, Cout, |H|, X, Y)``.

    Parameters as :class:`LiftingSelfAttention`.  The neighbourhood is ``size x size`` in space and all
    of ``H``; the softmax runs over both.
    """

    def __init__(self, in_channels, out_channels, *, group: Group, heads=4, head_dim=8, size=5, dropout=0.0):
        super().__init__(in_channels, out_channels, group=group, heads=heads, head_dim=head_dim, size=size,
                         dropout=dropout)
        n = group.order
        self.group_encoding = nn.Parameter(0.1 * torch.randn(n, n, heads, head_dim))
        self.register_buffer("rel", torch.as_tensor(group.relative), persistent=False)

    def forward(self, x):
        b, c, n, X, Y = x.shape
        P, K = X * Y, self.size * self.size
        q = self._project(self.query, x).reshape(b, self.heads, self.head_dim, n, P)

        def neighbours(layer):
            t = self._project(layer, x).reshape(b, self.heads * self.head_dim * n, X, Y)
            return self._unfold(t).reshape(b, self.heads, self.head_dim, n, K, P)

        k, v = neighbours(self.key), neighbours(self.value)
        scale = 1.0 / math.sqrt(self.head_dim)
        content = torch.einsum("bedqp,bedtkp->beqptk", q, k)  # (b, heads, q, XY, t, K)
        valid = self._valid(X, Y, x.device).T  # (XY, K)
        mask = torch.zeros(valid.shape, dtype=content.dtype, device=x.device).masked_fill(~valid, float("-inf"))
        content = content + mask[:, None, :]
        spatial = torch.einsum("bedqp,hked->hbeqpk", q, self.encoding())  # per h: (b, heads, q, XY, K)
        v = v.permute(0, 1, 5, 3, 4, 2).reshape(b, self.heads, P, n * K, self.head_dim)  # once, not per h
        outs, maps = [], []
        for h in range(n):
            # E[h^-1 q, h^-1 t]: (q, t, heads, d)
            table = self.group_encoding[self.rel[h][:, None], self.rel[h][None, :]]
            grp = torch.einsum("bedqp,qted->beqpt", q, table)
            scores = (content + spatial[h].unsqueeze(-2) + grp.unsqueeze(-1)) * scale
            probs = torch.softmax(scores.reshape(*scores.shape[:4], n * K), dim=-1)
            # v does not depend on the query's group element: sum the weights over it first (Eq. 15)
            summed = self.dropout(probs).sum(dim=2)  # (b, heads, XY, t*K)
            maps.append(summed.detach().reshape(b, self.heads, P, n, K).sum(dim=3))  # (b, heads, XY, K)
            outs.append(torch.matmul(summed.unsqueeze(-2), v).squeeze(-2).transpose(1, 2))  # (b, XY, heads, d)
        self.last_attention = torch.stack(maps, dim=2)
        out = self.out(torch.stack(outs, dim=1).transpose(-1, -2).reshape(b, n, P, -1))  # (b, H, XY, Cout)
        return out.permute(0, 3, 1, 2).reshape(b, -1, n, X, Y)
