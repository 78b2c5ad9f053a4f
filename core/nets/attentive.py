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
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .gconv import GroupConv, _check_exact
from .groups import Group, act

__all__ = ["AttentiveGroupConv", "InputAttention"]


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
    """

    def __init__(self, in_channels, out_channels, kernel_size, *, group: Group, padding=0, reduction=2,
                 attention_kernel=7):
        super().__init__()
        _check_exact(group)
        self.group, self.padding = group, padding
        n = group.order
        hidden = max(1, in_channels // reduction)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, n, kernel_size, kernel_size))
        nn.init.kaiming_uniform_(self.weight.view(out_channels, -1, kernel_size, kernel_size), a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        # Eq. 17: W1: H -> R^{hidden x Cin}, W2: H -> R^{Cin x hidden}
        self.w1 = nn.Parameter(torch.randn(n, hidden, in_channels) / math.sqrt(in_channels))
        self.w2 = nn.Parameter(torch.randn(n, in_channels, hidden) / math.sqrt(hidden))
        # Eq. 18: psi^X: G -> R^2
        k2 = attention_kernel
        self.psi_x = nn.Parameter(torch.randn(2, n, k2, k2) / (k2 * math.sqrt(2 * n)))
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
        w1 = self.w1[self.rel]  # (H, T, hidden, I)
        w2 = self.w2[self.rel]  # (H, T, I, hidden)

        def mlp(s):  # s: (b, i, t, o, h)
            z = torch.relu(torch.einsum("htri,bitoh->bohtr", w1, s))
            return torch.einsum("htir,bohtr->bitoh", w2, z)

        alpha_c = torch.sigmoid(mlp(ft.mean(dim=(-2, -1))) + mlp(ft.amax(dim=(-2, -1))))
        a = alpha_c[..., None, None] * ft  # (b, i, t, o, h, X, Y)
        # Eq. 18: spatial statistics over channels, group-convolutional filter L_h psi^X, no pooling over t
        mean_a = a.mean(dim=1)  # (b, t, o, h, X, Y)
        stats = torch.stack([mean_a, a.amax(dim=1)], dim=1)  # (b, 2, t, o, h, X, Y)
        stats = stats.permute(0, 3, 4, 2, 1, 5, 6).reshape(b * o, n * n * 2, xo, yo)  # (h, t, stat)
        kx = torch.stack([act(self.psi_x, self.group, h, dim=1) for h in range(n)], dim=0)  # (h, 2, t, kk)
        kx = kx.permute(0, 2, 1, 3, 4).reshape(n * n, 1, 2, kx.shape[-2], kx.shape[-1])
        # one dense convolution with a block-diagonal filter: much faster on CPU than n*n groups
        eye = torch.eye(n * n, dtype=kx.dtype, device=kx.device).reshape(n * n, n * n, 1, 1, 1)
        kx = (kx * eye).reshape(n * n, n * n * 2, kx.shape[-2], kx.shape[-1])
        alpha_x = torch.sigmoid(F.conv2d(stats, kx, padding=kx.shape[-1] // 2))
        alpha_x = alpha_x.reshape(b, o, n, n, xo, yo).permute(0, 3, 1, 2, 4, 5)  # (b, t, o, h, X, Y)
        # residual attention branch: sum_{i,t} (1 - alpha^X alpha^C) f~ = sum f~ - sum_t alpha^X sum_i alpha^C f~
        out = ft.sum(dim=(1, 2)) - i * (alpha_x * mean_a).sum(dim=1) + self.bias.view(1, -1, 1, 1, 1)
        with torch.no_grad():
            self.last_attention = (1 - alpha_x * alpha_c.mean(dim=1)[..., None, None]).mean(dim=(1, 2)).detach()
        return out


class InputAttention(nn.Module):
    """alpha_F (Eq. 20): channel then spatial attention on a feature map on ``G``, shape kept.

    ``alpha^C(h)``: two 1x1 group convolutions (matrix kernels on ``H`` shifted by ``L_h``) on the
    spatial average and maximum; ``alpha^X``: a group convolution of ``[mean, max]`` over channels.
    """

    def __init__(self, channels, *, group: Group, reduction=2, attention_kernel=7):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.fc1 = GroupConv(channels, hidden, 1, group=group, bias=False)
        self.fc2 = GroupConv(hidden, channels, 1, group=group, bias=False)
        self.spatial = GroupConv(2, 1, attention_kernel, group=group, padding=attention_kernel // 2)
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
