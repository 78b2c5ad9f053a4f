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

Seed 002's networks (``encoding="rowcol"``, Appx. F and the authors' code) encode the spatial offset by
two small MLPs, one of the (rotated) row and one of the (rotated) column coordinate, written into the
first channels of every head's query space, and -- in group layers -- the relative group element
``q^-1 t`` into the remaining channels (``group_encoding="mlp"``: an MLP of ``(cos, sin)`` of its angle
and its mirror bit, so the parameter count does not depend on the group; Eq. 16 with
``rho((i, q), (j, t)) = rho_P(x_j - x_i, q^-1 t)``, which is invariant to the group by construction).

With the trivial group (``Group(1)``) the layers are ordinary local self-attention with a relative
encoding: the non-equivariant Z2-SA baseline (translation equivariant only).

Feature maps are ``(B, C, |H|, X, Y)``; ``last_attention`` keeps the attention weights of the last
call, ``(B, heads, |H|, X*Y, neighbours)`` (lifting) or summed over the query's group element and
the keys' group axis (group layer), for display.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .groups import Group

__all__ = ["CHECKPOINT_ELEMENTS", "GroupSelfAttention", "LiftingSelfAttention", "neighbour_offsets"]

#: a group self-attention layer whose attention scores hold more entries than this recomputes them in the
#: backward pass (activation checkpointing per output group element) instead of keeping them: the same
#: gradients, a quarter (R8) to an eighth (R16) of what the layer keeps for the backward pass (tested),
#: one more forward pass of the attention.  GSA-R8 and larger at
#: seed 002's batch of 8 (R8: 90 M entries per layer; R16: 361 M).
CHECKPOINT_ELEMENTS = 50_000_000


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


class _CoordinateMLP(nn.Sequential):
    """Seed 002's embedding of one coordinate: linear 1 -> 16, layer norm, Swish, linear 16 -> ``dim``."""

    def __init__(self, in_features: int, dim: int, hidden: int = 16):
        super().__init__(nn.Linear(in_features, hidden), nn.LayerNorm(hidden), nn.SiLU(), nn.Linear(hidden, dim))


class _RowColEncoding(nn.Module):
    """``rho_P`` as in seed 002's networks: ``[row_mlp(r'), col_mlp(c'), 0...]`` with ``(r', c') = h^-1 offset``.

    The offsets are scaled to ``[-1, 1]`` and rotated exactly (no grid); the vector is the same for every head
    and fills the first ``2 * dim`` of the ``head_dim`` query channels: ``(|H|, K, heads, head_dim)``.
    """

    def __init__(self, group: Group, size: int, heads: int, head_dim: int, dim: int):
        super().__init__()
        self.heads, self.head_dim, self.dim = heads, head_dim, dim
        off = neighbour_offsets(size) / max(1, size // 2)
        mats = torch.stack([torch.as_tensor(group.matrix(group.inv(h))) for h in range(group.order)])
        self.register_buffer("coords", torch.einsum("hab,kb->hka", mats, off).float(), persistent=False)
        self.row, self.col = _CoordinateMLP(1, dim), _CoordinateMLP(1, dim)

    def forward(self):
        c = self.coords
        vec = torch.cat([self.row(c[..., :1]), self.col(c[..., 1:])], dim=-1)  # (H, K, 2 dim)
        vec = F.pad(vec, (0, self.head_dim - 2 * self.dim))
        return vec.unsqueeze(2).expand(-1, -1, self.heads, -1)


def _element_features(group: Group) -> torch.Tensor:
    """``(|H|, 3)``: ``(cos, sin)`` of each element's angle and its mirror bit."""
    feats = [[math.cos(group.angle(g)), math.sin(group.angle(g)), float(group.element(g)[0])]
             for g in range(group.order)]
    return torch.tensor(feats, dtype=torch.float32)


class _GroupElementEncoding(nn.Module):
    """The relative group element ``q^-1 t`` as a vector in the last ``dim`` query channels: ``(q, t, heads, d)``.

    An MLP (linear 3 -> ``hidden``, layer norm, Swish, linear ``hidden`` -> ``dim``) of the element's
    ``(cos, sin, mirror)``: 64 parameters for ``hidden=6, dim=4`` whatever the group.
    """

    def __init__(self, group: Group, heads: int, head_dim: int, dim: int, hidden: int = 6):
        super().__init__()
        self.heads, self.head_dim, self.dim = heads, head_dim, dim
        self.register_buffer("features", _element_features(group), persistent=False)
        rel = torch.as_tensor(np.array([[group.mul(group.inv(q), t) for t in range(group.order)]
                                        for q in range(group.order)]))
        self.register_buffer("rel", rel, persistent=False)
        self.net = _CoordinateMLP(3, dim, hidden)

    def forward(self):
        vec = F.pad(self.net(self.features), (self.head_dim - self.dim, 0))[self.rel]  # (q, t, head_dim)
        return vec.unsqueeze(2).expand(-1, -1, self.heads, -1)


class _LocalAttentionBase(nn.Module):
    def __init__(self, in_channels, out_channels, *, group: Group, heads, head_dim, size, dropout, encoding="mlp",
                 qkv_bias=False, scale=None, position_dim=None):
        super().__init__()
        if size % 2 == 0:
            raise ValueError("the neighbourhood side must be odd")
        self.group, self.heads, self.head_dim, self.size = group, heads, head_dim, size
        inner = heads * head_dim
        self.query = nn.Linear(in_channels, inner, bias=qkv_bias)
        self.key = nn.Linear(in_channels, inner, bias=qkv_bias)
        self.value = nn.Linear(in_channels, inner, bias=qkv_bias)
        self.out = nn.Linear(inner, out_channels)
        if encoding == "mlp":
            self.encoding = _RelativeEncoding(group, size, heads, head_dim)
        elif encoding == "rowcol":
            self.encoding = _RowColEncoding(group, size, heads, head_dim, position_dim or head_dim // 2)
        else:
            raise ValueError(f"unknown encoding {encoding!r}: use mlp or rowcol")
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
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
    encoding : {"mlp", "rowcol"}
        ``rho_P`` as one MLP of the offset giving every head its own vector (the ``-small`` models), or seed
        002's row and column MLPs written into the first ``position_dim`` channels each.
    qkv_bias : bool
        Biases in the query, key and value maps (seed 002's networks have them).
    scale : float, optional
        Factor of the scores (default ``1 / sqrt(head_dim)``; seed 002's networks: ``1 / sqrt(in_channels)``).
    position_dim : int, optional
        Channels per coordinate with ``encoding="rowcol"`` (default ``head_dim // 2``).
    """

    def __init__(self, in_channels, out_channels, *, group: Group, heads=4, head_dim=8, size=5, dropout=0.0,
                 encoding="mlp", qkv_bias=False, scale=None, position_dim=None):
        super().__init__(in_channels, out_channels, group=group, heads=heads, head_dim=head_dim, size=size,
                         dropout=dropout, encoding=encoding, qkv_bias=qkv_bias, scale=scale,
                         position_dim=position_dim)

    def forward(self, x):
        b, _c, X, Y = x.shape
        q = self._project(self.query, x).reshape(b, self.heads, self.head_dim, X * Y)
        k = self._unfold(self._project(self.key, x).reshape(b, -1, X, Y))
        k = k.reshape(b, self.heads, self.head_dim, -1, X * Y)
        v = self._unfold(self._project(self.value, x).reshape(b, -1, X, Y))
        v = v.reshape(b, self.heads, self.head_dim, -1, X * Y)
        scale = self.scale
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

    Parameters as :class:`LiftingSelfAttention`, and ``group_encoding``: ``"table"`` (a learned vector per
    pair ``(h^-1 q, h^-1 t)``: ``|H|^2 * heads * head_dim`` parameters, the ``-small`` models) or ``"mlp"``
    (seed 002: an MLP of the relative element ``q^-1 t`` into the last ``group_dim`` query channels, the
    same count for every group).  The neighbourhood is ``size x size`` in space and all of ``H``; the
    softmax runs over both.
    """

    def __init__(self, in_channels, out_channels, *, group: Group, heads=4, head_dim=8, size=5, dropout=0.0,
                 encoding="mlp", qkv_bias=False, scale=None, position_dim=None, group_encoding="table",
                 group_dim=None):
        super().__init__(in_channels, out_channels, group=group, heads=heads, head_dim=head_dim, size=size,
                         dropout=dropout, encoding=encoding, qkv_bias=qkv_bias, scale=scale,
                         position_dim=position_dim)
        n = group.order
        if group_encoding == "table":
            self.group_encoding = nn.Parameter(0.1 * torch.randn(n, n, heads, head_dim))
        elif group_encoding == "mlp":
            group_dim = group_dim or head_dim - 2 * (position_dim or head_dim // 2)
            if group_dim <= 0:
                raise ValueError("no query channels left for the group encoding: lower position_dim")
            self.group_encoding = _GroupElementEncoding(group, heads, head_dim, group_dim)
        else:
            raise ValueError(f"unknown group encoding {group_encoding!r}: use table or mlp")
        self.register_buffer("rel", torch.as_tensor(group.relative), persistent=False)

    def _attend(self, content, spatial_h, grp, v, scale):
        """One output group element: the softmax over (t, K) and the values, ``(b, XY, heads, d)``, and its map."""
        b, heads, n, P, _, K = content.shape
        scores = (content + spatial_h.unsqueeze(-2) + grp.unsqueeze(-1)) * scale
        probs = torch.softmax(scores.reshape(b, heads, n, P, n * K), dim=-1)
        # v does not depend on the query's group element: sum the weights over it first (Eq. 15)
        summed = self.dropout(probs).sum(dim=2)  # (b, heads, XY, t*K)
        attention_map = summed.detach().reshape(b, heads, P, n, K).sum(dim=3)  # (b, heads, XY, K)
        return torch.matmul(summed.unsqueeze(-2), v).squeeze(-2).transpose(1, 2), attention_map

    def forward(self, x):
        b, _c, n, X, Y = x.shape
        P, K = X * Y, self.size * self.size
        q = self._project(self.query, x).reshape(b, self.heads, self.head_dim, n, P)

        def neighbours(layer):
            t = self._project(layer, x).reshape(b, self.heads * self.head_dim * n, X, Y)
            return self._unfold(t).reshape(b, self.heads, self.head_dim, n, K, P)

        k, v = neighbours(self.key), neighbours(self.value)
        scale = self.scale
        content = torch.einsum("bedqp,bedtkp->beqptk", q, k)  # (b, heads, q, XY, t, K)
        valid = self._valid(X, Y, x.device).T  # (XY, K)
        mask = torch.zeros(valid.shape, dtype=content.dtype, device=x.device).masked_fill(~valid, float("-inf"))
        content = content + mask[:, None, :]
        spatial = torch.einsum("bedqp,hked->hbeqpk", q, self.encoding())  # per h: (b, heads, q, XY, K)
        v = v.permute(0, 1, 5, 3, 4, 2).reshape(b, self.heads, P, n * K, self.head_dim)  # once, not per h
        outs, maps = [], []
        shared = None
        if not isinstance(self.group_encoding, nn.Parameter):  # E(q^-1 t): the same for every h
            shared = torch.einsum("bedqp,qted->beqpt", q, self.group_encoding())
        # keep only each output element's inputs for the backward pass, not its scores and weights, where
        # those are large (GSA-R16 at batch 8: 1.4 GB per element and layer; 80 GB was not enough)
        recompute = torch.is_grad_enabled() and content.numel() > CHECKPOINT_ELEMENTS
        for h in range(n):
            if shared is None:
                # E[h^-1 q, h^-1 t]: (q, t, heads, d)
                table = self.group_encoding[self.rel[h][:, None], self.rel[h][None, :]]
                grp = torch.einsum("bedqp,qted->beqpt", q, table)
            else:
                grp = shared
            if recompute:
                out_h, map_h = checkpoint(self._attend, content, spatial[h], grp, v, scale, use_reentrant=False)
            else:
                out_h, map_h = self._attend(content, spatial[h], grp, v, scale)
            outs.append(out_h)
            maps.append(map_h)
        self.last_attention = torch.stack(maps, dim=2)
        out = self.out(torch.stack(outs, dim=1).transpose(-1, -2).reshape(b, n, P, -1))  # (b, H, XY, Cout)
        return out.permute(0, 3, 1, 2).reshape(b, -1, n, X, Y)
