"""Attentive group convolutions (seed 001, Sec. 3): alpha (Eqs. 16-19) and alpha_F (Eq. 20).

Both factorise attention into a channel map ``alpha^C`` (Eq. 17: two layers whose matrix-valued
kernels on ``H`` are shifted by the left-regular representation, reduction ratio ``r``, average and
max statistics) and a spatial map ``alpha^X`` (Eq. 18: a group-convolutional filter on the
``[mean, max]`` over channels), applied serially (channel, then spatial) on the residual attention
branch (Sec. 3.3): the branch gives ``alpha^- = alpha^X alpha^C`` in ``[0, 1]`` and the features are
multiplied by ``alpha^+ = 1 - alpha^-``.

:class:`AttentiveGroupConv` attends over the intermediate responses ``f~(x, h, h~)`` of every input
channel and input group element before they are summed (Eq. 19); :class:`InputAttention` attends on
the input feature map (alpha_F, Eq. 20) and is followed by an ordinary :class:`GroupConv`.

Both keep ``last_attention``: the spatial part of ``alpha^+`` averaged over channels (and input group
elements), ``(B, |H|, X, Y)``, which turns with the input like any feature map on ``G``.

As seed 001 builds its rot-MNIST networks (Sec. 3.2, Eq. 14: the maps depend on the filter, so on the
output channel), ``per_output=True`` learns one channel MLP and one spatial filter per output channel;
:class:`AttentiveLiftingConv` puts the same attention on the lifting layer, and :class:`ImageAttention`
is alpha_F on the input image (before the lifting layer).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .gconv import GroupConv, _check_exact
from .groups import Group, act, act_image

__all__ = ["AttentiveGroupConv", "AttentiveLiftingConv", "ImageAttention", "InputAttention"]


class AttentiveGroupConv(nn.Module):
    """The attentive group convolution (Eq. 19) with channel and spatial attention (Eqs. 17, 18).

    Parameters
    ----------
    in_channels, out_channels, kernel_size : int
    group : Group
        An exact group (p4, p4m).
    padding : int
    reduction : int
        Reduction ratio ``r`` of the channel-attention layers (seed 001 uses 2 on rot-MNIST).
    attention_kernel : int
        Side of the spatial-attention filter ``psi^X`` (seed 001 uses 7).
    per_output : bool
        One channel MLP ``W1, W2`` and one spatial filter ``psi^X`` per output channel (seed 001's
        rot-MNIST networks); False shares them across output channels (the ``-small`` models).
    bias : bool
        One bias per output channel (seed 001's networks have none).
    """

    def __init__(self, in_channels, out_channels, kernel_size, *, group: Group, padding=0, reduction=2,
                 attention_kernel=7, per_output=False, bias=True):
        super().__init__()
        _check_exact(group)
        self.group, self.padding, self.per_output = group, padding, per_output
        n = group.order
        hidden = max(1, in_channels // reduction)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, n, kernel_size, kernel_size))
        nn.init.kaiming_uniform_(self.weight.view(out_channels, -1, kernel_size, kernel_size), a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        lead = (out_channels,) if per_output else ()
        # Eq. 17: W1: H -> R^{hidden x Cin}, W2: H -> R^{Cin x hidden} (per output channel when per_output)
        self.w1 = nn.Parameter(torch.randn(*lead, n, hidden, in_channels) / math.sqrt(in_channels))
        self.w2 = nn.Parameter(torch.randn(*lead, n, in_channels, hidden) / math.sqrt(hidden))
        # Eq. 18: psi^X: G -> R^2
        k2 = attention_kernel
        self.psi_x = nn.Parameter(torch.randn(*lead, 2, n, k2, k2) / (k2 * math.sqrt(2 * n)))
        self.register_buffer("rel", torch.as_tensor(group.relative), persistent=False)
        self.last_attention = None

    def filter_bank(self):
        return torch.stack([act(self.weight, self.group, h, dim=2) for h in range(self.group.order)], dim=1)

    def forward(self, x):
        b, i, n, X, Y = x.shape
        bank = self.filter_bank()  # (O, H, I, T, k, k)
        o, k = bank.shape[0], bank.shape[-1]
        # Eq. 16: f~[b, i, t, o, h] = f[b, i, t] * L_h psi[o, i, t]  (grouped convolution, no sum)
        w = bank.permute(2, 3, 0, 1, 4, 5).reshape(i * n * o * n, 1, k, k)
        ft = F.conv2d(x.reshape(b, i * n, X, Y), w, padding=self.padding, groups=i * n)
        xo, yo = ft.shape[-2:]
        ft = ft.reshape(b, i, n, o, n, xo, yo)
        # Eq. 17: channel statistics per (o, h, t), kernels indexed by h^-1 t
        rel = self.rel
        if self.per_output:
            w1, w2 = self.w1[:, rel], self.w2[:, rel]  # (O, H, T, hidden, I), (O, H, T, I, hidden)
        else:
            w1 = self.w1[rel].expand(o, *rel.shape, *self.w1.shape[1:])
            w2 = self.w2[rel].expand(o, *rel.shape, *self.w2.shape[1:])

        def mlp(s):  # s: (b, i, t, o, h)
            z = torch.relu(torch.einsum("ohtri,bitoh->bohtr", w1, s))
            return torch.einsum("ohtir,bohtr->bitoh", w2, z)

        alpha_c = torch.sigmoid(mlp(ft.mean(dim=(-2, -1))) + mlp(ft.amax(dim=(-2, -1))))
        a = alpha_c[..., None, None] * ft  # (b, i, t, o, h, X, Y)
        # Eq. 18: spatial statistics over channels, group-convolutional filter L_h psi^X, no pooling over t
        mean_a = a.mean(dim=1)  # (b, t, o, h, X, Y)
        stats = torch.stack([mean_a, a.amax(dim=1)], dim=1)  # (b, 2, t, o, h, X, Y)
        stats = stats.permute(0, 3, 4, 2, 1, 5, 6)  # (b, o, h, t, stat, X, Y)
        if self.per_output:
            # psi^X_o for every output channel: one grouped convolution, a group per (o, h, t)
            kx = torch.stack([act(self.psi_x, self.group, h, dim=2) for h in range(n)], dim=1)  # (O, h, 2, t, kk)
            kx = kx.permute(0, 1, 3, 2, 4, 5).reshape(o * n * n, 2, kx.shape[-2], kx.shape[-1])
            alpha_x = torch.sigmoid(F.conv2d(stats.reshape(b, o * n * n * 2, xo, yo), kx,
                                             padding=kx.shape[-1] // 2, groups=o * n * n))
        else:
            stats = stats.reshape(b * o, n * n * 2, xo, yo)  # (h, t, stat)
            kx = torch.stack([act(self.psi_x, self.group, h, dim=1) for h in range(n)], dim=0)  # (h, 2, t, kk)
            kx = kx.permute(0, 2, 1, 3, 4).reshape(n * n, 1, 2, kx.shape[-2], kx.shape[-1])
            # one dense convolution with a block-diagonal filter: much faster on CPU than n*n groups
            eye = torch.eye(n * n, dtype=kx.dtype, device=kx.device).reshape(n * n, n * n, 1, 1, 1)
            kx = (kx * eye).reshape(n * n, n * n * 2, kx.shape[-2], kx.shape[-1])
            alpha_x = torch.sigmoid(F.conv2d(stats, kx, padding=kx.shape[-1] // 2))
        alpha_x = alpha_x.reshape(b, o, n, n, xo, yo).permute(0, 3, 1, 2, 4, 5)  # (b, t, o, h, X, Y)
        # residual attention branch: sum_{i,t} (1 - alpha^X alpha^C) f~ = sum f~ - sum_t alpha^X sum_i alpha^C f~
        out = ft.sum(dim=(1, 2)) - i * (alpha_x * mean_a).sum(dim=1)
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1, 1)
        with torch.no_grad():
            self.last_attention = (1 - alpha_x * alpha_c.mean(dim=1)[..., None, None]).mean(dim=(1, 2)).detach()
        return out


class InputAttention(nn.Module):
    """alpha_F (Eq. 20): channel then spatial attention on a feature map on ``G``, shape kept.

    ``alpha^C(h)``: two 1x1 group convolutions (matrix kernels on ``H`` shifted by ``L_h``) on the
    spatial average and maximum; ``alpha^X``: a group convolution of ``[mean, max]`` over channels
    (with a bias unless ``bias=False``, as in seed 001's networks).
    """

    def __init__(self, channels, *, group: Group, reduction=2, attention_kernel=7, bias=True):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.fc1 = GroupConv(channels, hidden, 1, group=group, bias=False)
        self.fc2 = GroupConv(hidden, channels, 1, group=group, bias=False)
        self.spatial = GroupConv(2, 1, attention_kernel, group=group, padding=attention_kernel // 2, bias=bias)
        self.last_attention = None

    def forward(self, x):
        def mlp(s):
            return self.fc2(torch.relu(self.fc1(s)))

        alpha_c = torch.sigmoid(mlp(x.mean(dim=(-2, -1), keepdim=True)) + mlp(x.amax(dim=(-2, -1), keepdim=True)))
        a = alpha_c * x
        alpha_x = torch.sigmoid(self.spatial(torch.cat([a.mean(dim=1, keepdim=True), a.amax(dim=1, keepdim=True)], 1)))
        with torch.no_grad():
            self.last_attention = (1 - alpha_x[:, 0] * alpha_c.mean(dim=1)).detach()
        return x - alpha_x * a


class AttentiveLiftingConv(nn.Module):
    """The attentive lifting convolution: Eq. 19 on an image, ``(B, Cin, X, Y)`` -> ``(B, Cout, |H|, X', Y')``.

    The intermediate responses ``f~(x, o, h)[c] = [f_c * L_h psi_{o,c}](x)`` are attended per output channel
    ``o`` (Eq. 14): channel attention ``alpha^C(o, h)`` by an MLP ``W2_o relu(W1_o s)`` of their average and
    maximum over space (the input has no group axis, so the kernels are not shifted), spatial attention
    ``alpha^X(x, o, h)`` by ``L_h psi^X_o`` on their ``[mean, max]`` over ``c``, on the residual branch.

    Parameters
    ----------
    in_channels, out_channels, kernel_size : int
    group : Group
    padding : int
    reduction : int
        Reduction ratio of the channel MLP (seed 001's networks use 1 on the one-channel image).
    attention_kernel : int
        Side of ``psi^X`` (7).
    bias : bool
    """

    def __init__(self, in_channels, out_channels, kernel_size, *, group: Group, padding=0, reduction=1,
                 attention_kernel=7, bias=False):
        super().__init__()
        _check_exact(group)
        self.group, self.padding = group, padding
        hidden = max(1, in_channels // reduction)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.w1 = nn.Parameter(torch.randn(out_channels, hidden, in_channels) / math.sqrt(in_channels))
        self.w2 = nn.Parameter(torch.randn(out_channels, in_channels, hidden) / math.sqrt(hidden))
        k2 = attention_kernel
        self.psi_x = nn.Parameter(torch.randn(out_channels, 2, k2, k2) / (k2 * math.sqrt(2)))
        self.last_attention = None

    def forward(self, x):
        b, i, _X, _Y = x.shape
        n, o = self.group.order, self.weight.shape[0]
        bank = torch.stack([act_image(self.weight, self.group, h) for h in range(n)], dim=1)  # (O, H, I, k, k)
        k = bank.shape[-1]
        w = bank.permute(2, 0, 1, 3, 4).reshape(i * o * n, 1, k, k)
        ft = F.conv2d(x, w, padding=self.padding, groups=i)  # f~[b, i, o, h]
        xo, yo = ft.shape[-2:]
        ft = ft.reshape(b, i, o, n, xo, yo)

        def mlp(s):  # s: (b, i, o, h)
            z = torch.relu(torch.einsum("ori,bioh->bohr", self.w1, s))
            return torch.einsum("oir,bohr->bioh", self.w2, z)

        alpha_c = torch.sigmoid(mlp(ft.mean(dim=(-2, -1))) + mlp(ft.amax(dim=(-2, -1))))
        a = alpha_c[..., None, None] * ft
        mean_a = a.mean(dim=1)  # (b, o, h, X, Y)
        stats = torch.stack([mean_a, a.amax(dim=1)], dim=3)  # (b, o, h, 2, X, Y)
        kx = torch.stack([act_image(self.psi_x, self.group, h) for h in range(n)], dim=1)  # (O, H, 2, kk)
        kx = kx.reshape(o * n, 2, kx.shape[-2], kx.shape[-1])
        alpha_x = torch.sigmoid(F.conv2d(stats.reshape(b, o * n * 2, xo, yo), kx, padding=kx.shape[-1] // 2,
                                         groups=o * n)).reshape(b, o, n, xo, yo)
        out = ft.sum(dim=1) - i * alpha_x * mean_a
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1, 1)
        with torch.no_grad():
            self.last_attention = (1 - alpha_x * alpha_c.mean(dim=1)[..., None, None]).mean(dim=1).detach()
        return out


class ImageAttention(nn.Module):
    """alpha_F (Eq. 20) on the input image, before the lifting layer: ``(B, C, X, Y)`` -> same shape.

    ``alpha^C``: an MLP of the channels' spatial average and maximum (``reduction`` 1 for one channel);
    ``alpha^X``: a lifting convolution of ``[mean, max]`` over channels by ``L_h psi^X`` followed by a max
    over ``H``, so the map is invariant to ``H`` and turns with the image.  Residual branch as
    :class:`InputAttention`.  ``last_attention`` is ``(B, X, Y)``.
    """

    def __init__(self, channels=1, *, group: Group, reduction=1, attention_kernel=7, dilation=1):
        super().__init__()
        _check_exact(group)
        self.group, self.dilation = group, dilation
        hidden = max(1, channels // reduction)
        self.fc1 = nn.Parameter(torch.randn(hidden, channels) / math.sqrt(channels))
        self.fc2 = nn.Parameter(torch.randn(channels, hidden) / math.sqrt(hidden))
        k2 = attention_kernel
        self.psi_x = nn.Parameter(torch.randn(1, 2, k2, k2) / (k2 * math.sqrt(2)))
        self.last_attention = None

    def forward(self, x):
        def mlp(s):  # (b, c)
            return torch.relu(s @ self.fc1.T) @ self.fc2.T

        alpha_c = torch.sigmoid(mlp(x.mean(dim=(-2, -1))) + mlp(x.amax(dim=(-2, -1))))[..., None, None]
        a = alpha_c * x
        stats = torch.cat([a.mean(dim=1, keepdim=True), a.amax(dim=1, keepdim=True)], dim=1)
        kx = torch.cat([act_image(self.psi_x, self.group, h) for h in range(self.group.order)], dim=0)
        pad = self.dilation * (kx.shape[-1] // 2)
        alpha_x = torch.sigmoid(F.conv2d(stats, kx, padding=pad, dilation=self.dilation).amax(dim=1, keepdim=True))
        with torch.no_grad():
            self.last_attention = (1 - alpha_x[:, 0] * alpha_c.mean(dim=1)).detach()
        return x - alpha_x * a
