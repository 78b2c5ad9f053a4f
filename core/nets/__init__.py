"""Equivariant attention networks (PyTorch; optional extra ``[nets]``).

From the companion papers of the project: attentive group convolutions (alpha-p4/p4m-CNN,
seed 001) and group equivariant stand-alone self-attention (GSA-Nets, seed 002), with a plain
CNN and non-equivariant self-attention (Z2-SA) as baselines.

Modules: :mod:`~iastudio.core.nets.groups` (the groups and their action), :mod:`~iastudio.core.nets.gconv` (lifting and
group convolutions), :mod:`~iastudio.core.nets.attentive` (alpha and alpha_F attention),
:mod:`~iastudio.core.nets.gsa` (lifting and group self-attention), :mod:`~iastudio.core.nets.models`,
:mod:`~iastudio.core.nets.data`, :mod:`~iastudio.core.nets.train` and the ``ia-nets`` CLI
(:mod:`~iastudio.core.nets.cli`).
Importing this package does not import PyTorch; the submodules do.
"""
from __future__ import annotations

import importlib.util

INSTALL_HINT = 'pip install "invariant-attention-studio[nets]"'

#: The model names (also :data:`iastudio.core.nets.models.MODELS`), available without importing PyTorch.
#: The plain names are the papers' networks; ``-small`` marks the scaled-down versions (quick on a CPU).
MODEL_NAMES = ("cnn", "p4cnn", "a-p4cnn", "aF-p4cnn", "p4mcnn", "a-p4mcnn", "aF-p4mcnn", "z2sa", "gsa-r4", "gsa-r8",
               "gsa-r12", "gsa-r16", "gsa-r4m", "gsa-r8m",
               "cnn-small", "p4cnn-small", "a-p4cnn-small", "aF-p4cnn-small", "p4mcnn-small", "a-p4mcnn-small",
               "z2sa-small", "gsa-r4-small", "gsa-r8-small", "gsa-r12-small", "gsa-r16-small", "gsa-r4m-small")


def torch_available() -> bool:
    """True when PyTorch is installed (checked without importing it)."""
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
