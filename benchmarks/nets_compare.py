"""Rot-digits comparison of the networks: train rotated / test rotated, and train upright / test rotated.

    python benchmarks/nets_compare.py --models cnn,p4cnn --epochs 5 --seeds 0,1,2 --budget 300 --out OUT

Runs ``ia-nets compare`` on both settings (the same seeds and budget for every model) and prints both
tables.  ``--data-dir`` reads/writes the two rot-digits sets as .npz (so a machine without scikit-learn
or scikit-image can run it with files made elsewhere: ``--make-data`` writes them and exits).
"""
from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
try:
    import iastudio.core  # noqa: F401
except ImportError:  # not installed, or core/__init__ needs SciPy & co.: the networks need only PyTorch and NumPy
    for name, path in (("iastudio", []), ("iastudio.core", [str(ROOT / "core")])):
        shim = types.ModuleType(name)
        shim.__path__ = path
        sys.modules[name] = shim

SETTINGS = {"rotated": "rot-digits", "upright": "rot-digits-upright"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cnn,p4cnn,a-p4cnn,aF-p4cnn,z2sa,gsa-r4")
    ap.add_argument("--epochs", default="10")
    ap.add_argument("--batch", default="64")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget", type=float, default=None, help="seconds per setting")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--make-data", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tables-from", nargs="*", default=None, metavar="DIR",
                    help="only print the tables of runs already in these output folders (merging seeds)")
    args = ap.parse_args()
    from iastudio.core.nets.cli import main as nets_main

    if args.tables_from is not None:
        return _tables(args.tables_from, args.models.split(","))

    specs = {}
    if args.data_dir:
        d = Path(args.data_dir)
        if args.make_data:
            from iastudio.core.nets.data import rot_digits, save_npz

            d.mkdir(parents=True, exist_ok=True)
            save_npz(rot_digits(), d / "rot-digits.npz")
            save_npz(rot_digits(train_rotated=False), d / "rot-digits-upright.npz")
            return 0
        specs = {k: f"npz:{d / (v + '.npz')}" for k, v in SETTINGS.items()}
    else:
        specs = {k: f"demo:{v}" for k, v in SETTINGS.items()}
    rc = 0
    for key, spec in specs.items():
        cmd = ["compare", "--models", args.models, "--seeds", args.seeds, "--data", spec, "--epochs", args.epochs,
               "--batch", args.batch, "--device", args.device, "--quiet", "--out", str(Path(args.out) / key)]
        if args.budget:
            cmd += ["--time-budget", str(args.budget)]
        print(f"\n## {key} training, rotated test", flush=True)
        rc |= nets_main(cmd)
        sys.stdout.flush()
    return rc


def _tables(folders, models) -> int:
    import json

    from iastudio.core.nets.cli import compare_table
    from iastudio.core.nets.train import TrainResult

    for key in SETTINGS:
        results = {}
        for folder in folders:
            for f in sorted(Path(folder, key).glob("*-seed*/metrics.json")):
                res = TrainResult(**json.loads(f.read_text()))
                results.setdefault(res.model, []).append(res)
        ordered = {m: sorted(results[m], key=lambda r: r.seed) for m in models if m in results}
        if ordered:
            runs = next(iter(ordered.values()))
            print(f"\n## {key} training, rotated test ({runs[0].epochs} epochs, device {runs[0].device}, seeds "
                  f"{sorted({r.seed for v in ordered.values() for r in v})})")
            print(compare_table(ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
