"""What the checks of a model file cost: ``load_model`` against the unchecked load it replaced.

    python benchmarks/bench_model_file.py [--repeats 20]

For each model (its default width, 10 classes), saved with ``save_model``: the median time of
``load_model`` (``model.json`` read and bounded, the model counted on the meta device, the zip's
records bounded, tensors checked) and of the baseline measured in the same run, alternating - the
old code's steps: ``json.loads``, ``build_model``, ``torch.load(weights_only=True)``,
``load_state_dict``.  Printed: both medians and the ratio checked / baseline.  Then the time to refuse
a few bad files (a FIFO, 10**9 classes, a 256 MiB zip bomb, a complex tensor).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout import importable  # noqa: E402

importable()

import torch  # noqa: E402

from iastudio.core.nets.modelfile import load_model, save_model  # noqa: E402
from iastudio.core.nets.models import MODELS, build_model  # noqa: E402


def baseline(path):
    info = json.loads(path.with_suffix(".json").read_text())
    model = build_model(info["model"], n_classes=info["n_classes"], **info["options"])
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def refusal_seconds(fn):
    t = time.perf_counter()
    try:
        fn()
    except ValueError:
        return time.perf_counter() - t
    raise AssertionError("not refused")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"{'model':10s} {'checked ms':>11s} {'baseline ms':>12s} {'ratio':>6s}")
        for name in MODELS:
            folder = tmp / name
            folder.mkdir()
            path = folder / "model.pt"
            save_model(build_model(name, n_classes=10), path, name=name, n_classes=10, options={})
            checked, base = [], []
            for _ in range(args.repeats):  # alternating, so both see the same load
                checked.append(timed(load_model, path))
                base.append(timed(baseline, path))
            c, b = statistics.median(checked), statistics.median(base)
            print(f"{name:10s} {1e3 * c:11.2f} {1e3 * b:12.2f} {c / b:6.2f}")
        good = tmp / "p4cnn" / "model.pt"
        bad = tmp / "bad"
        bad.mkdir()
        (bad / "model.json").write_text(json.dumps({"model": "p4cnn", "n_classes": 10, "options": {}}))
        os.mkfifo(bad / "model.pt")
        cases = {"FIFO model.pt": lambda: load_model(bad / "model.pt")}
        huge = tmp / "huge"
        huge.mkdir()
        (huge / "model.pt").write_bytes(good.read_bytes())
        (huge / "model.json").write_text(json.dumps({"model": "p4cnn", "n_classes": 10**9}))
        cases["10**9 classes"] = lambda: load_model(huge / "model.pt")
        bomb = tmp / "bomb"
        bomb.mkdir()
        (bomb / "model.json").write_text((tmp / "p4cnn" / "model.json").read_text())
        with zipfile.ZipFile(bomb / "model.pt", "w", zipfile.ZIP_DEFLATED) as zf, zf.open("a/data/0", "w",
                                                                                          force_zip64=True) as fh:
            for _ in range(16):
                fh.write(bytes(1 << 24))
        cases[f"zip bomb ({(bomb / 'model.pt').stat().st_size // 1024} KB -> 256 MiB)"] = \
            lambda: load_model(bomb / "model.pt")
        cplx = tmp / "complex"
        cplx.mkdir()
        (cplx / "model.json").write_text((tmp / "p4cnn" / "model.json").read_text())
        sd = torch.load(good, weights_only=True)
        key = next(iter(sd))
        sd[key] = sd[key].to(torch.complex64)
        torch.save(sd, cplx / "model.pt")
        cases["complex64 tensor"] = lambda: load_model(cplx / "model.pt")
        print()
        for what, fn in cases.items():
            print(f"refused {what}: {1e3 * statistics.median(refusal_seconds(fn) for _ in range(5)):.1f} ms")


if __name__ == "__main__":
    main()
