"""The networks: plain CNN, p4/p4m-CNN and their attentive versions (seed 001), Z2-SA and GSA-Nets (seed 002).

Every model maps ``(B, 1, S, S)`` images (``S`` = 28 by default) to ``(B, n_classes)`` logits and
ends with a max over the group axis and a spatial mean, so its logits are invariant to the group
(exactly for p4, p4m, R4 and R4M; up to resampling for R8-R16).

``MODELS`` lists the names the CLI and the app accept; :func:`build_model` makes one.

CNN family (after Cohen & Welling's rot-MNIST P4CNN, seed 001 Sec. 4.1): a lifting layer and five
group convolutions (3x3, "valid"), one 2x2 max pool after the lifting layer (on an even map, so
exact; 28 -> 26 -> 13 -> 11 -> ... -> 3 pixels), batch norm, ReLU, dropout 0.3 before the final linear
layer.  Channels: 20 (cnn), 10
(p4, ``10 x 4`` maps), 7 (p4m, ``7 x 8``) so the parameter counts stay close.  ``a-`` replaces the
five group convolutions by attentive ones (Eq. 19; ``r = 2``, 7x7 spatial filter); ``aF-`` puts
input attention (Eq. 20) before each of them.

Self-attention family (seed 002, Fig. F.1, scaled down): lifting self-attention, then group
self-attention blocks, each followed by layer norm and Swish; 2x2 max pools at 28 and 14 pixels;
5x5 neighbourhoods, 4 heads.  ``z2sa`` is the same network on the trivial group.
"""
from __future__ import annotations

import torch
from torch import nn

from . import MODEL_NAMES
from .attentive import AttentiveGroupConv, InputAttention
from .gconv import GroupBatchNorm, GroupConv, LiftingConv, group_max_pool, spatial_max_pool
from .groups import Group
from .gsa import GroupSelfAttention, LiftingSelfAttention

__all__ = ["MODELS", "GroupCNN", "GSANet", "build_model", "count_parameters", "model_group"]

# name -> (family, group, default width, attention)
_SPECS = {
    "cnn": ("cnn", Group(1), 20, None),
    "p4cnn": ("cnn", Group(4), 10, None),
    "a-p4cnn": ("cnn", Group(4), 10, "full"),
    "aF-p4cnn": ("cnn", Group(4), 10, "input"),
    "p4mcnn": ("cnn", Group(4, True), 7, None),
    "a-p4mcnn": ("cnn", Group(4, True), 7, "full"),
    "z2sa": ("gsa", Group(1), 16, None),
    "gsa-r4": ("gsa", Group(4), 16, None),
    "gsa-r8": ("gsa", Group(8), 16, None),
    "gsa-r12": ("gsa", Group(12), 16, None),
    "gsa-r16": ("gsa", Group(16), 16, None),
    "gsa-r4m": ("gsa", Group(4, True), 16, None),
}
MODELS = tuple(_SPECS)
assert MODELS == MODEL_NAMES, "iastudio.core.nets.MODEL_NAMES must list the models in models._SPECS"


class GroupCNN(nn.Module):
    """Lifting conv + group convs (optionally attentive) + invariant pooling + linear.

    Parameters
    ----------
    group : Group
        ``Group(1)`` (plain CNN), ``Group(4)`` (p4) or ``Group(4, True)`` (p4m).
    channels : int
        Channels per group element.
    n_classes : int
    attention : {None, "full", "input"}
        None: p4-CNN; "full": alpha (Eq. 19) in every group layer; "input": alpha_F (Eq. 20).
    layers : int
        Number of group convolutions after the lifting layer (5 as the rot-MNIST backbone).
    dropout : float
    """

    def __init__(self, *, group: Group, channels=10, n_classes=10, attention=None, layers=5, dropout=0.3):
        super().__init__()
        self.group, self.attention = group, attention
        self.lift = LiftingConv(1, channels, 3, group=group)
        self.norms = nn.ModuleList([GroupBatchNorm(channels) for _ in range(layers + 1)])
        convs, pre = [], []
        for _ in range(layers):
            if attention == "full":
                convs.append(AttentiveGroupConv(channels, channels, 3, group=group))
            else:
                convs.append(GroupConv(channels, channels, 3, group=group))
            pre.append(InputAttention(channels, group=group) if attention == "input" else nn.Identity())
        self.convs, self.pre = nn.ModuleList(convs), nn.ModuleList(pre)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(channels, n_classes)

    def features(self, x):
        """Feature map on ``G`` before the invariant pooling."""
        x = spatial_max_pool(torch.relu(self.norms[0](self.lift(x))))
        for i, (pre, conv) in enumerate(zip(self.pre, self.convs)):
            x = torch.relu(self.norms[i + 1](conv(pre(x))))
        return x

    def forward(self, x):
        return self.fc(self.drop(group_max_pool(self.features(x)).mean(dim=(-2, -1))))

    def attention_maps(self):
        """Per attentive layer, the last spatial attention map ``(B, |H|, X, Y)`` (empty without attention)."""
        mods = self.convs if self.attention == "full" else self.pre
        return [m.last_attention for m in mods if getattr(m, "last_attention", None) is not None]


class _LayerNorm(nn.Module):
    """Layer norm over channels at every ``(h, x)``: equivariant."""

    def __init__(self, channels):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


class GSANet(nn.Module):
    """Lifting self-attention + group self-attention blocks + invariant pooling + linear.

    Parameters
    ----------
    group : Group
        ``Group(N)`` for R_N, ``Group(N, True)`` with mirrors, ``Group(1)`` for Z2-SA.
    channels, n_classes : int
    blocks : int
        Group self-attention blocks after the lifting block (pools after the lifting and second block).
    heads, head_dim, size : int
        Heads, their width, neighbourhood side (5 as in seed 002).
    dropout : float
        Attention dropout (seed 002 uses 0.1; 0 here, it costs CPU time); 0.3 before the final layer.
    """

    def __init__(self, *, group: Group, channels=16, n_classes=10, blocks=2, heads=4, head_dim=4, size=5,
                 dropout=0.0):
        super().__init__()
        self.group = group
        kw = dict(group=group, heads=heads, head_dim=head_dim, size=size, dropout=dropout)
        self.lift = LiftingSelfAttention(1, channels, **kw)
        self.blocks = nn.ModuleList([GroupSelfAttention(channels, channels, **kw) for _ in range(blocks)])
        self.norms = nn.ModuleList([_LayerNorm(channels) for _ in range(blocks + 1)])
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(channels, n_classes)

    def features(self, x):
        x = nn.functional.silu(self.norms[0](self.lift(x)))
        x = spatial_max_pool(x)
        for i, block in enumerate(self.blocks):
            x = nn.functional.silu(self.norms[i + 1](block(x)))
            if i == 0 and x.shape[-1] % 2 == 0:
                x = spatial_max_pool(x)
        return x

    def forward(self, x):
        return self.fc(self.drop(group_max_pool(self.features(x)).mean(dim=(-2, -1))))

    def attention_maps(self):
        """Attention weights of the lifting layer and each block (see :mod:`iastudio.core.nets.gsa`)."""
        return [m.last_attention for m in [self.lift, *self.blocks] if m.last_attention is not None]


def model_group(name: str) -> Group:
    """The symmetry group a model is built on."""
    if name not in _SPECS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return _SPECS[name][1]


def build_model(name: str, *, n_classes: int = 10, channels: int | None = None, **options) -> nn.Module:
    """Make a model by name (see ``MODELS``).

    Parameters
    ----------
    name : str
        One of ``MODELS``.
    n_classes : int
    channels : int, optional
        Width per group element (default: the model's own).
    **options
        Passed to :class:`GroupCNN` (``layers``, ``dropout``) or :class:`GSANet` (``blocks``, ``heads``,
        ``head_dim``, ``size``, ``dropout``).
    """
    family, group, width, attention = _SPECS[name] if name in _SPECS else (None,) * 4
    if family is None:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    width = channels or width
    if family == "cnn":
        return GroupCNN(group=group, channels=width, n_classes=n_classes, attention=attention, **options)
    return GSANet(group=group, channels=width, n_classes=n_classes, **options)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
