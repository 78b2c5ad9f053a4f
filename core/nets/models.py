"""The networks: plain CNN, p4/p4m-CNN and their attentive versions (seed 001), Z2-SA and GSA-Nets (seed 002).

Every model maps ``(B, 1, 28, 28)`` images to ``(B, n_classes)`` logits and ends with a max over the
group axis, so its logits are invariant to the group (exactly for p4, p4m, R4 and R4M; up to resampling
for R8-R16).  ``MODELS`` lists the names the CLI and the app accept; :func:`build_model` makes one;
:data:`PAPER_PARAMETERS` holds the papers' parameter counts.

**As the papers built them** (``docs/networks.md`` has the counts layer by layer):

* ``cnn``, ``p4cnn``, ``p4mcnn`` (:class:`PaperGroupCNN`): Cohen & Welling's rot-MNIST backbone that seed
  001 trains (Appx. B.2): a lifting layer and five 3x3 group convolutions ("valid", 10 channels per group
  element, 20 for the plain CNN), batch norm (eps 2e-5), ReLU, dropout 0.3 (after layers 1, 3-6), a 2x2
  max pool after layer 2 (24 -> 12 pixels, even, so exact), a final 4x4 group convolution to the 10
  classes (4 -> 1 pixel) and a max over ``H``.  No biases in the group networks (24,610 parameters for
  p4, seed 001 Tab. 1); the plain CNN has them (21,750, seed 002 Tab. 2).
* ``a-p4cnn``, ``a-p4mcnn``: every one of the seven layers attentive (Eq. 19) with attention per output
  channel (Eq. 14): reduction 2 (1 on the one-channel image), 7x7 spatial filters; 73,130 for p4.
* ``aF-p4cnn``, ``aF-p4mcnn``: alpha_F (Eq. 20) on the input of every layer, the image included; 29,462
  for p4 (the paper's table: 29.46K).
* ``z2sa``, ``gsa-r4`` ... ``gsa-r16``, ``gsa-r4m``, ``gsa-r8m`` (:class:`PaperGSANet`, seed 002 Appx. F.1):
  lifting self-attention, then 5 residual blocks (layer norm, Swish, group self-attention, layer norm,
  Swish, dropout; then a pointwise MLP 20 -> 10 -> 20 with its own residual), 20 channels, 9 heads of 10
  channels, 5x5 neighbourhoods, a 2x2 max pool after the second block, border crops (2, 0, 2, 1, 1) after
  the blocks, a pointwise linear map to the classes, max over ``H`` and a spatial mean: 44,668 parameters
  for every group (the paper: 44.67K).

**The small versions** (``*-small``, the earlier defaults, quick on a CPU): a lifting layer and five 3x3
group convolutions, one pool, batch norm, ReLU, max over ``H``, spatial mean, dropout 0.3, linear (20 /
10 / 7 channels for cnn / p4 / p4m) with attention shared over output channels and none on the lifting
layer; self-attention networks with 16 channels, 2 plain blocks, 4 heads of 4 and a learned table per
pair of group elements.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from . import MODEL_NAMES
from .attentive import AttentiveGroupConv, AttentiveLiftingConv, ImageAttention, InputAttention
from .gconv import GroupBatchNorm, GroupConv, LiftingConv, group_max_pool, spatial_max_pool
from .groups import Group
from .gsa import GroupSelfAttention, LiftingSelfAttention

__all__ = [
    "MODELS",
    "PAPER_PARAMETERS",
    "GSANet",
    "GroupCNN",
    "PaperGSANet",
    "PaperGroupCNN",
    "build_model",
    "count_parameters",
    "model_group",
]

# name -> (family, group, default width, attention)
_SPECS = {
    "cnn": ("paper-cnn", Group(1), 20, None),
    "p4cnn": ("paper-cnn", Group(4), 10, None),
    "a-p4cnn": ("paper-cnn", Group(4), 10, "full"),
    "aF-p4cnn": ("paper-cnn", Group(4), 10, "input"),
    "p4mcnn": ("paper-cnn", Group(4, True), 10, None),
    "a-p4mcnn": ("paper-cnn", Group(4, True), 10, "full"),
    "aF-p4mcnn": ("paper-cnn", Group(4, True), 10, "input"),
    "z2sa": ("paper-gsa", Group(1), 20, None),
    "gsa-r4": ("paper-gsa", Group(4), 20, None),
    "gsa-r8": ("paper-gsa", Group(8), 20, None),
    "gsa-r12": ("paper-gsa", Group(12), 20, None),
    "gsa-r16": ("paper-gsa", Group(16), 20, None),
    "gsa-r4m": ("paper-gsa", Group(4, True), 20, None),
    "gsa-r8m": ("paper-gsa", Group(8, True), 20, None),
    "cnn-small": ("cnn", Group(1), 20, None),
    "p4cnn-small": ("cnn", Group(4), 10, None),
    "a-p4cnn-small": ("cnn", Group(4), 10, "full"),
    "aF-p4cnn-small": ("cnn", Group(4), 10, "input"),
    "p4mcnn-small": ("cnn", Group(4, True), 7, None),
    "a-p4mcnn-small": ("cnn", Group(4, True), 7, "full"),
    "z2sa-small": ("gsa", Group(1), 16, None),
    "gsa-r4-small": ("gsa", Group(4), 16, None),
    "gsa-r8-small": ("gsa", Group(8), 16, None),
    "gsa-r12-small": ("gsa", Group(12), 16, None),
    "gsa-r16-small": ("gsa", Group(16), 16, None),
    "gsa-r4m-small": ("gsa", Group(4, True), 16, None),
}

#: The papers' parameter counts of the presets: name -> (count as printed, where).  The tables print
#: thousands with two decimals, so a count matches when it rounds to the printed figure.
PAPER_PARAMETERS = {
    "cnn": (21_750, "seed 002 Tab. 2 (Z2-CNN of Cohen & Welling)"),
    "p4cnn": (24_610, "seed 001 Tab. 1"),
    "a-p4cnn": (73_130, "seed 001 Tab. 1"),
    "aF-p4cnn": (29_460, "seed 001 Tab. 1"),
    **{name: (44_670, "seed 002 Tab. 2 (the same for every group, Sec. 6)")
       for name in ("z2sa", "gsa-r4", "gsa-r8", "gsa-r12", "gsa-r16", "gsa-r4m", "gsa-r8m")},
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


class PaperGroupCNN(nn.Module):
    """Cohen & Welling's rot-MNIST network on a group, with seed 001's attention (see the module docstring).

    Parameters
    ----------
    group : Group
        ``Group(1)`` (the plain Z2-CNN), ``Group(4)`` (p4) or ``Group(4, True)`` (p4m).
    channels : int
        Channels per group element (10; 20 for the plain CNN).
    n_classes : int
    attention : {None, "full", "input"}
        None; ``"full"``: every layer an attentive convolution (Eq. 19) with attention per output channel;
        ``"input"``: alpha_F (Eq. 20) on the input of every layer.
    dropout : float
        After layers 1 and 3-6 (0.3, seed 001 Appx. B.2).
    bias : bool
        Biases in the convolutions (the Z2-CNN has them, the group networks not).
    """

    def __init__(self, *, group: Group, channels=10, n_classes=10, attention=None, dropout=0.3, bias=False):
        super().__init__()
        if attention not in (None, "full", "input"):
            raise ValueError(f"unknown attention {attention!r}: use None, 'full' or 'input'")
        self.group, self.attention = group, attention
        c, kw = channels, dict(group=group, bias=bias)
        shapes = [(c, c, 3)] * 5 + [(c, n_classes, 4)]
        if attention == "full":
            self.lift = AttentiveLiftingConv(1, c, 3, reduction=1, **kw)
            self.convs = nn.ModuleList([AttentiveGroupConv(i, o, k, reduction=2, per_output=True, **kw)
                                        for i, o, k in shapes])
        else:
            self.lift = LiftingConv(1, c, 3, **kw)
            self.convs = nn.ModuleList([GroupConv(i, o, k, **kw) for i, o, k in shapes])
        if attention == "input":
            self.pre = nn.ModuleList([ImageAttention(1, group=group, reduction=1)]
                                     + [InputAttention(i, group=group, reduction=2, bias=False) for i, _, _ in shapes])
        else:
            self.pre = nn.ModuleList([nn.Identity() for _ in range(7)])
        self.norms = nn.ModuleList([GroupBatchNorm(c) for _ in range(6)])
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        side = x.shape[-1]
        if x.shape[-2] != side or (side - 4) % 2 or (side - 4) // 2 - 8 < 4:
            raise ValueError(f"{type(self).__name__} needs square images of an even side >= 28, got "
                             f"{tuple(x.shape[-2:])}")
        y = self.drop(torch.relu(self.norms[0](self.lift(self.pre[0](x)))))
        y = spatial_max_pool(torch.relu(self.norms[1](self.convs[0](self.pre[1](y)))))
        for k in range(1, 5):
            y = self.drop(torch.relu(self.norms[k + 1](self.convs[k](self.pre[k + 1](y)))))
        y = self.convs[5](self.pre[6](y))  # (B, classes, |H|, s, s): 1 x 1 for 28 x 28 images
        return group_max_pool(y).mean(dim=(-2, -1))

    def attention_maps(self):
        """Per attentive layer on ``G``, the last spatial attention map ``(B, |H|, X, Y)`` (empty without attention)."""
        mods = [self.lift, *self.convs] if self.attention == "full" else list(self.pre)
        maps = [getattr(m, "last_attention", None) for m in mods]
        return [m for m in maps if m is not None and m.ndim == 4]


class _Crop(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return x[..., self.c:x.shape[-2] - self.c, self.c:x.shape[-1] - self.c] if self.c else x


def _pointwise(cin, cout, bias=True):
    """A linear map of the channels at every ``(h, x)`` of a ``(B, C, |H|, X, Y)`` map."""
    return nn.Conv3d(cin, cout, kernel_size=1, bias=bias)


def _norm(channels):
    """Layer norm over the whole feature map of each sample (channels, ``H`` and space), per-channel affine."""
    return nn.GroupNorm(1, channels, eps=1e-12)


class _ResidualAttentionBlock(nn.Module):
    """Seed 002's block: ``y = crop(att(x)) + crop(x)``, then ``y + mlp(y)``.

    ``att``: norm, Swish, group self-attention, norm, Swish, dropout; ``mlp``: pointwise linear, norm, Swish,
    pointwise linear, norm.
    """

    def __init__(self, channels, crop, *, value_dropout, **gsa):
        super().__init__()
        self.attention = nn.Sequential(_norm(channels), nn.SiLU(), GroupSelfAttention(channels, channels, **gsa),
                                       _norm(channels), nn.SiLU(), nn.Dropout(value_dropout))
        half = channels // 2
        self.mlp = nn.Sequential(_pointwise(channels, half), _norm(half), nn.SiLU(), _pointwise(half, channels),
                                 _norm(channels))
        self.crop = _Crop(crop)

    @property
    def gsa(self):
        return self.attention[2]

    def forward(self, x):
        y = self.crop(self.attention(x)) + self.crop(x)
        return self.mlp(y) + y


class PaperGSANet(nn.Module):
    """Seed 002's rot-MNIST GSA-Net (Appx. F.1, Fig. F.1; see the module docstring).

    Parameters
    ----------
    group : Group
        ``Group(N)`` for R_N, ``Group(N, True)`` with mirrors, ``Group(1)`` for Z2-SA.
    channels : int
        20.
    n_classes : int
    heads, head_dim : int
        9 heads of 10 channels (half the block's channels, as the authors' code).
    blocks : int
        Residual attention blocks (5); a 2x2 max pool follows the second.
    crops : sequence of int
        Border pixels cut after each block ((2, 0, 2, 1, 1): 28 -> 24 -> 24 -> 12 -> 8 -> 6 -> 4).
    size : int
        Neighbourhood side (5).
    dropout : float
        Attention and value dropout (0.1).
    """

    def __init__(self, *, group: Group, channels=20, n_classes=10, heads=9, head_dim=None, blocks=5,
                 crops=(2, 0, 2, 1, 1), size=5, dropout=0.1):
        super().__init__()
        self.group = group
        d = head_dim or max(channels // 2, 1)
        if len(crops) != blocks:
            raise ValueError(f"crops needs one value per block ({blocks}), got {len(crops)}")
        self.lift = LiftingSelfAttention(1, channels, group=group, heads=heads, head_dim=d, size=size, dropout=dropout,
                                         encoding="rowcol", qkv_bias=True, scale=1.0)
        self.lift_norm = _norm(channels)
        gsa = dict(group=group, heads=heads, head_dim=d, size=size, dropout=dropout, encoding="rowcol",
                   qkv_bias=True, scale=1.0 / math.sqrt(channels), position_dim=d // 3, group_encoding="mlp",
                   group_dim=d - 2 * (d // 3))
        self.blocks = nn.ModuleList([_ResidualAttentionBlock(channels, c, value_dropout=dropout, **gsa) for c in crops])
        self.fc = _pointwise(channels, n_classes, bias=False)

    def features(self, x):
        x = nn.functional.silu(self.lift_norm(self.lift(x)))
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == 1:
                x = spatial_max_pool(x)
        return x

    def forward(self, x):
        return group_max_pool(self.fc(self.features(x))).mean(dim=(-2, -1))

    def attention_maps(self):
        """Attention weights of the lifting layer and each block (see :mod:`iastudio.core.nets.gsa`)."""
        mods = [self.lift, *(b.gsa for b in self.blocks)]
        return [m.last_attention for m in mods if m.last_attention is not None]


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
        Passed to the model's class: :class:`PaperGroupCNN` (``dropout``), :class:`PaperGSANet` (``heads``,
        ``head_dim``, ``blocks``, ``crops``, ``size``, ``dropout``), :class:`GroupCNN` (``layers``,
        ``dropout``) or :class:`GSANet` (``blocks``, ``heads``, ``head_dim``, ``size``, ``dropout``).
    """
    family, group, width, attention = _SPECS.get(name, (None,) * 4)
    if family is None:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    width = channels or width
    if family == "cnn":
        return GroupCNN(group=group, channels=width, n_classes=n_classes, attention=attention, **options)
    if family == "paper-cnn":
        return PaperGroupCNN(group=group, channels=width, n_classes=n_classes, attention=attention,
                             bias=group.order == 1, **options)
    if family == "paper-gsa":
        return PaperGSANet(group=group, channels=width, n_classes=n_classes, **options)
    return GSANet(group=group, channels=width, n_classes=n_classes, **options)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
