"""
Clustering noisy images
=======================

The shapes demo again (18 images, three shapes turned by up to ±65° and
shifted), now with Gaussian noise added to every pixel: its standard deviation
is 0.3, 1 and 2 times the image's own standard deviation (the quality suite
measures 0.1 and 0.3 on held-out sets, see the Quality page).  Every option is
automatic, k included.  The invariant means average the noise away as they
align the copies, so each cluster's mean is cleaner than any of its images;
at the strongest noise the read-out is expected to break down — the ARI
printed below says how far.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import adjusted_rand_score

from iastudio.core import AttentionRun, load_demo, preprocess

data = load_demo("shapes", seed=0)
clean = preprocess(data.images, size=24).images
rng = np.random.default_rng(0)

levels = [0.3, 1.0, 2.0]
runs = []
for level in levels:
    noisy = clean + rng.normal(size=clean.shape) * level * clean.std(axis=(1, 2), keepdims=True)
    noisy = (noisy / np.linalg.norm(noisy, axis=(1, 2), keepdims=True)).astype(np.float32)
    res = AttentionRun(noisy, iterations=1).run()
    runs.append((noisy, res))
    print(f"noise {level}: {res.n_clusters} clusters found, ARI {adjusted_rand_score(data.labels, res.labels):.2f}")

# %%
# One noisy input per noise level (left) and the invariant means of the
# clusters found (right).
fig, axes = plt.subplots(len(levels), 4, figsize=(6.4, 1.8 * len(levels)))
for row, (level, (noisy, res)) in enumerate(zip(levels, runs)):
    axes[row, 0].imshow(noisy[0], cmap="gray")
    axes[row, 0].set_title(f"an input, noise {level}", fontsize=8)
    ari = adjusted_rand_score(data.labels, res.labels)
    for c in range(3):
        ax = axes[row, c + 1]
        if c < res.n_clusters:
            ax.imshow(res.cluster_means[c], cmap="gray")
            ax.set_title(f"mean {c + 1} (k={res.n_clusters}, ARI {ari:.2f})" if c == 0 else f"mean {c + 1}",
                         fontsize=8)
for ax in axes.ravel():
    ax.set_axis_off()
fig.tight_layout()
plt.show()
