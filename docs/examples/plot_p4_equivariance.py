"""
The p4 network's rotation invariance
====================================

A p4 group convolutional network (seed paper 001's p4-CNN; ``iastudio.core.nets``)
is equivariant to rotations by multiples of 90° *by construction*: its logits do
not change when the input is turned by 90°, 180° or 270°, before any training.
A plain CNN of the same shape has no such guarantee.  This example measures the
relative change of the logits, ``|z(g x) - z(x)| / |z(x)|``, of both untrained
networks on a few handwritten digits (scikit-learn's ``load_digits``), for
quarter turns and for 45° (which the p4 group does not contain, and which a
square pixel grid cannot turn exactly).

It needs PyTorch (``pip install -e ".[nets]"``); without it, it says so and draws
nothing.
"""

import matplotlib.pyplot as plt
import numpy as np
from scipy.ndimage import zoom
from sklearn.datasets import load_digits

try:
    import torch
except ImportError:  # the networks are optional
    torch = None
    print("PyTorch is not installed: pip install -e '.[nets]' to run this example.")

if torch is not None:
    from iastudio.core.nets.models import build_model
    from iastudio.core.nets.train import invariance_error, set_seed

    digits = load_digits()
    x = np.stack([zoom(img / 16.0, 28 / 8, order=1) for img in digits.images[:32]]).astype(np.float32)

    angles_deg = [90, 180, 270, 45]
    errors = {}
    for name in ("cnn", "p4cnn"):
        set_seed(0)
        model = build_model(name, n_classes=10).eval()
        errors[name] = [invariance_error(model, x, angles=[np.deg2rad(a)]) for a in angles_deg]
        print(name, " ".join(f"{a}°: {e:.1e}" for a, e in zip(angles_deg, errors[name])))

    # %%
    # Relative change of the logits (log scale; the p4 network's quarter turns
    # are at floating-point rounding).
    fig, ax = plt.subplots(figsize=(6, 3.2))
    pos = np.arange(len(angles_deg))
    for i, (name, errs) in enumerate(errors.items()):
        ax.bar(pos + (i - 0.5) * 0.38, np.maximum(errs, 1e-9), width=0.38, label=name)
    ax.set_yscale("log")
    ax.set_xticks(pos, [f"{a}°" for a in angles_deg])
    ax.set_ylabel("relative change of the logits")
    ax.set_title("Untrained networks: rotate the input, compare the output")
    ax.legend()
    plt.show()
