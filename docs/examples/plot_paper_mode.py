"""
W per iteration in paper mode (like the paper's Figure 4)
=========================================================

Paper mode runs the paper's plain iteration: every invariant mean starts from
the identity, β is fixed (20) and nothing stops the run early
(:data:`iastudio.core.demos.PAPER_MODE`).  On the Show-me set
(:data:`iastudio.core.demos.PAPER_DEMO`: three shapes, each drawn six times a
little differently, turned and shifted) the first W puts about half of each
column on the image itself; iteration by iteration the blocks of the three
shapes fill in until W is block-diagonal.  Fewer iterations than the app's 6
are drawn here, at 24 px instead of the app's 32, to keep the build fast.
"""

import matplotlib.pyplot as plt
import numpy as np

from iastudio.core import AttentionRun, load_demo, preprocess
from iastudio.core.demos import PAPER_DEMO, PAPER_MODE
from iastudio.core.weights import block_diagonality

data = load_demo(PAPER_DEMO["demo"], seed=PAPER_DEMO["seed"])
canvas = preprocess(data.images, size=24)
order = np.argsort(data.labels, kind="stable")  # rows and columns grouped by the true shape

settings = dict(PAPER_MODE, iterations=4)
run = AttentionRun(canvas.images, clusters=PAPER_DEMO["clusters"], **settings)
weights = [snap.weights for snap in run.steps() if snap.stage == "iteration"]
print("block-diagonality per iteration:", [round(block_diagonality(w, data.labels), 2) for w in weights])

# %%
# W after each iteration, one colour scale for all; the title gives W's
# block-diagonality (1 for a W of even blocks on the three shapes).
vmax = max(float(w.max()) for w in weights)
fig, axes = plt.subplots(1, len(weights), figsize=(2.4 * len(weights), 2.8))
for i, (ax, w) in enumerate(zip(np.atleast_1d(axes), weights)):
    ax.imshow(w[np.ix_(order, order)], cmap="viridis", vmin=0, vmax=vmax)
    ax.set_title(f"iteration {i + 1}\nblock-diag. {block_diagonality(w, data.labels):.2f}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle("W per iteration, paper mode")
plt.show()
