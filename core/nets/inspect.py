"""Looking inside a trained network: prediction and attention maps for one (rotated) image."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .groups import rotate_images
from .models import GroupCNN, GSANet, PaperGroupCNN, PaperGSANet

__all__ = ["Inspection", "inspect_image"]


@dataclass
class Inspection:
    """What :func:`inspect_image` returns.

    Attributes
    ----------
    image : ndarray (S, S)
        The rotated input.
    probabilities : ndarray (n_classes,)
    maps : ndarray of shape ``(|H|, X, Y)``, or None
        One attention map per group element (rotation), see :func:`inspect_image`.
    kind : str
        What ``maps`` shows, in words.
    """

    image: np.ndarray
    probabilities: np.ndarray
    maps: np.ndarray | None
    kind: str


def _rotate_point(point, angle_deg, side):
    """Where pixel ``(row, col)`` goes when the image turns by ``angle_deg`` (rounded to a pixel)."""
    c0 = (side - 1) / 2
    a = np.deg2rad(angle_deg)
    dr, dc = point[0] - c0, point[1] - c0
    r = c0 + np.cos(a) * dr - np.sin(a) * dc
    c = c0 + np.sin(a) * dr + np.cos(a) * dc
    return int(np.clip(round(r), 0, side - 1)), int(np.clip(round(c), 0, side - 1))


@torch.no_grad()
def inspect_image(model, image: np.ndarray, *, angle_deg: float = 0.0, query=None) -> Inspection:
    """Predict one image rotated by ``angle_deg`` and collect its attention maps.

    * alpha / alpha_F CNNs (seed 001): the spatial attention ``alpha^+`` of the first attentive layer,
      averaged over channels: one map per group element.
    * GSA-Nets and Z2-SA (seed 002): the lifting layer's attention weights, averaged over heads and
      summed onto the key pixels over all queries (how much each pixel is attended to), divided by
      the same sum for uniform weights (1 = attended as much as with uniform attention): one map per
      group element.
    * Models without attention: ``maps`` is None.

    * With ``query=(row, col)`` (a pixel of the *unrotated* image; it turns with the image), GSA-Nets
      and Z2-SA show that query's attention weights in the lifting layer instead, averaged over heads
      and placed on its neighbourhood.

    Maps of an equivariant model rotate with the input and permute over the group elements.
    """
    x = torch.as_tensor(np.asarray(image, dtype=np.float32))[None, None]
    if angle_deg:
        x = rotate_images(x, float(np.deg2rad(angle_deg)))
    model.eval()
    probs = torch.softmax(model(x), dim=1)[0].numpy()
    maps, kind = None, "no attention in this model"
    if isinstance(model, (GroupCNN, PaperGroupCNN)) and model.attention:
        found = model.attention_maps()
        if found:
            maps, kind = found[0][0].numpy(), "spatial attention α⁺ of the first attentive layer, per rotation"
    elif isinstance(model, (GSANet, PaperGSANet)) and model.lift.last_attention is not None and query is not None:
        p = model.lift.last_attention[0].mean(dim=0)  # (H, XY, K)
        side, size = x.shape[-1], model.lift.size
        qr, qc = _rotate_point(query, angle_deg, side)
        maps = np.zeros((p.shape[0], side, side), np.float32)
        half = size // 2
        for kk in range(size * size):
            r, c = qr + kk // size - half, qc + kk % size - half
            if 0 <= r < side and 0 <= c < side:
                maps[:, r, c] = p[:, qr * side + qc, kk].numpy()
        kind = f"lifting self-attention weights of the query at row {qr}, column {qc}, per rotation"
    elif isinstance(model, (GSANet, PaperGSANet)) and model.lift.last_attention is not None:
        p = model.lift.last_attention[0].mean(dim=0)  # (H, XY, K)
        side = x.shape[-1]
        size = model.lift.size
        received = F.fold(p.transpose(1, 2), (side, side), size, padding=size // 2)  # (H, 1, S, S)
        # relative to uniform attention over each query's valid neighbours (removes the border effect)
        valid = model.lift._valid(side, side, x.device).float()  # (K, XY)
        uniform = F.fold((valid / valid.sum(0, keepdim=True))[None], (side, side), size, padding=size // 2)
        maps = (received / uniform)[:, 0].numpy()
        kind = "lifting self-attention received by each pixel relative to uniform attention, per rotation"
    return Inspection(x[0, 0].numpy(), probs, maps, kind)
