"""How invariant are the networks' logits on real rotated digits, untrained and trained?

    python benchmarks/nets_equivariance.py --models gsa-r8-small,gsa-r12-small,gsa-r16-small --digits 200 \\
        --epochs 3 --n-train 3000

For each model: the mean relative logit change ``|z(g x) - z(x)| / |z(x)|`` over ``--digits`` mnist-rot test
digits under (a) the multiples of 90 degrees (exact pixel permutations), (b) the group's own rotations that are
*not* multiples of 90 degrees (bilinear resampling: R8, R12, R16), (c) the angles halfway between the group's
rotations (off the group) and (d) 20 degrees; once for the untrained model (seed 0) and once after training
it on mnist-rot (Adam, lr 1e-3, batch 64) for ``--epochs`` epochs on ``--n-train`` digits.  Rotations fill the
uncovered corners with the data set's background value.  Prints one markdown table.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import checkout  # noqa: E402  (stages iastudio from core/ and app/ when not installed)

checkout.importable()


def measure(model, x, group, background):
    from iastudio.core.nets.train import group_angles, invariance_error, offgroup_angles

    quarter = [math.pi / 2, math.pi, 3 * math.pi / 2]
    own = [a for a in group_angles(group) if abs(a / (math.pi / 2) - round(a / (math.pi / 2))) > 1e-9]
    kw = dict(background=background)
    return {"90°": invariance_error(model, x, angles=quarter, **kw),
            "own": invariance_error(model, x, angles=own, **kw) if own else float("nan"),
            "off-group": invariance_error(model, x, angles=offgroup_angles(group), **kw),
            "20°": invariance_error(model, x, angles=[math.radians(20)], **kw)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gsa-r8-small,gsa-r12-small,gsa-r16-small")
    ap.add_argument("--digits", type=int, default=200, help="test digits measured")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from iastudio.core.nets.data import Dataset, mnist_rot
    from iastudio.core.nets.models import build_model, model_group
    from iastudio.core.nets.train import set_seed, train_model

    data = mnist_rot()
    x = data.x_test[:args.digits]
    sub = Dataset(data.x_train[:args.n_train], data.y_train[:args.n_train], x, data.y_test[:args.digits],
                  data.classes, data.name, data.background)
    print(f"mnist-rot, {len(x)} test digits, training: {args.epochs} epochs on {len(sub.x_train)} digits; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")
    print("| model | state | test error | 90° | own rotations off the grid | off-group (midway) | 20° |")
    print("|---|---|---|---|---|---|---|")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        group = model_group(name)
        set_seed(0)
        t0 = time.perf_counter()
        rows = [("untrained", float("nan"), measure(build_model(name).eval(), x, group, data.background))]
        model, res = train_model(name, sub, epochs=args.epochs, seed=0, device="cpu")
        rows.append((f"trained ({args.epochs} ep.)", res.test_error, measure(model, x, group, data.background)))
        for state, err, m in rows:
            e = "–" if math.isnan(err) else f"{100 * err:.1f} %"
            own = "–" if math.isnan(m["own"]) else f"{m['own']:.1e}"
            print(f"| {name} | {state} | {e} | {m['90°']:.1e} | {own} | {m['off-group']:.1e} | {m['20°']:.1e} |",
                  flush=True)
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
