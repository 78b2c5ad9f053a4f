"""A small default run, this code against a baseline revision, in the same session.

    python benchmarks/bench_small_run.py                      # baseline: where this branch left main
    python benchmarks/bench_small_run.py --baseline 5d44abf --repeats 3

The issue's "small sets feel interactive" target: a full default run
(``AttentionRun(images).run()``, every setting at its default) of 60 images at
64 px.  Two sets, made once here and given to both codes as the same arrays:

* ``digits60`` - 60 real handwritten digits (scikit-learn, all ten classes)
  rotated over the whole circle and shifted by up to 3 px
  (:func:`bench_scale.make_set`);
* ``demo-digits`` - ``load_demo("digits")`` preprocessed to 64 px (40 images);
* ``letters60`` and ``photos60`` - the quality suite's material (``quality_suite.py``, holdout
  split, seed 3): 6 letter silhouettes x 10 and 4 photograph crops x 15, turned over the whole
  circle and preprocessed to 64 px; sets whose clusters the first iteration leaves as they were.

The baseline's ``core/`` and ``app/`` are taken from git (``git archive``) and
each run is a fresh process importing one code or the other, alternating, so
both see the same machine load.  Printed per set: wall and CPU seconds (CPU
time counts every thread) of each run, the medians, the ratios baseline / this
code, and whether the results agree: identical labels and the largest
difference of the input and final invariant distances.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _shim(src: Path, dest: Path) -> Path:
    """A folder whose ``iastudio`` namespace maps ``core`` and ``app`` to ``src``'s (put it on PYTHONPATH)."""
    pkg = dest / "iastudio"
    pkg.mkdir(parents=True)
    for name in ("core", "app"):
        (pkg / name).symlink_to(src / name)
    return dest


def _baseline_tree(rev: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "core", "app"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def _default_baseline() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True)
    return out.stdout.strip() or "HEAD~1"


def _make_sets(folder: Path) -> dict:
    sys.path.insert(0, str(HERE))
    from bench_scale import make_set
    from quality_suite import SetSpec
    from quality_suite import make_set as suite_set

    from iastudio.core.demos import load_demo
    from iastudio.core.preprocess import preprocess

    def suite(kind, sizes, **kw):
        return preprocess(suite_set(SetSpec(kind, kind, sizes, rotation=180.0, **kw), split="holdout", seed=3)[0],
                          size=64).images

    sets = {"digits60": make_set(60, 64, seed=0)[0],
            "demo-digits": preprocess(load_demo("digits", seed=0).images, size=64).images,
            "letters60": suite("letters", (10,) * 6, shift=6), "photos60": suite("photos", (15,) * 4)}
    paths = {}
    for name, x in sets.items():
        paths[name] = folder / f"{name}.npy"
        np.save(paths[name], np.asarray(x, dtype=np.float32))
    return paths


def _child(images: str, out: str) -> None:
    """One full default run on the images in ``images``; its results to ``out`` (npz), timings as JSON."""
    import iastudio.core
    from iastudio.core.attention import AttentionRun

    x = np.load(images)
    t0, c0 = time.perf_counter(), time.process_time()
    res = AttentionRun(x, backend="numpy").run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.savez(out, labels=res.labels, input=np.asarray(res.input_distances), final=np.asarray(res.final_distances))
    print("RESULT " + json.dumps(dict(wall=wall, cpu=cpu, code=str(Path(iastudio.core.__file__).parent),
                                      iterations=int(res.iterations), clusters=int(res.n_clusters))))


def _run(shim: Path, images: Path, out: Path) -> dict:
    import os

    env = dict(os.environ, PYTHONPATH=str(shim))
    proc = subprocess.run([sys.executable, __file__, "_child", str(images), str(out)], capture_output=True,
                          text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"run failed:\n{proc.stderr[-3000:]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", default="compare", choices=("compare", "_child"))
    p.add_argument("args", nargs="*")
    p.add_argument("--baseline", default=None, help="git revision to compare with (default: the fork from main)")
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args(argv)
    if a.what == "_child":
        _child(*a.args)
        return
    rev = a.baseline or _default_baseline()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        codes = {"baseline": _shim(_baseline_tree(rev, tmp / "base"), tmp / "shim-base"),
                 "this code": _shim(ROOT, tmp / "shim-new")}
        sets = _make_sets(tmp)
        print(f"full default runs, 64 px, NumPy backend; baseline {rev[:10]} vs this code ({ROOT}), "
              f"{a.repeats} runs each, alternating")
        for name, images in sets.items():
            rec = {k: [] for k in codes}
            for rep in range(a.repeats):
                for code, shim in codes.items():
                    out = tmp / f"{name}-{code.replace(' ', '_')}-{rep}.npz"
                    r = _run(shim, images, out)
                    r["out"] = out
                    rec[code].append(r)
                    print(f"  {name} {code:9s} run {rep + 1}: {r['wall']:6.1f} s wall, {r['cpu']:6.1f} s CPU, "
                          f"{r['clusters']} clusters, {r['iterations']} iterations kept", flush=True)
            _summary(name, rec)


def _summary(name, rec):
    med = {k: (float(np.median([r["wall"] for r in v])), float(np.median([r["cpu"] for r in v])))
           for k, v in rec.items()}
    b, n = med["baseline"], med["this code"]
    old, new = np.load(rec["baseline"][0]["out"]), np.load(rec["this code"][0]["out"])
    same = bool(np.array_equal(old["labels"], new["labels"]))
    d_in = float(np.abs(old["input"] - new["input"]).max())
    d_fin = float(np.abs(old["final"] - new["final"]).max())
    print(f"{name}: baseline {b[0]:.1f} s wall / {b[1]:.1f} s CPU, this code {n[0]:.1f} s wall / {n[1]:.1f} s CPU "
          f"(medians) -> {b[0] / n[0]:.2f}x wall, {b[1] / n[1]:.2f}x CPU; labels identical: {same}; "
          f"max |d_this - d_baseline|: input {d_in:.1e}, final {d_fin:.1e}", flush=True)


if __name__ == "__main__":
    main()
