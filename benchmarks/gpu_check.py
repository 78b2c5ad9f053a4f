"""One prepared GPU check (< 8 minutes on one CUDA card): tests, CuPy-vs-NumPy equality, timings.

    python benchmarks/gpu_check.py                 # everything, within --budget seconds
    python benchmarks/gpu_check.py --budget 420 --skip-tests

1. ``pytest -m gpu`` on the test files that need no Qt (a GPU machine may have none);
2. the same runs on NumPy and on CuPy - the shapes demo (every pair) and 60
   rotated digits (pruned, 10 neighbours): identical labels, distances within 1e-4;
3. timings of full default runs on CuPy at 64 px: n = 1,000 (pruned, K = 30;
   also the time of the first IA iteration) and n = 10,000 (pruned), each in
   its own process with the time left as its limit.

Needs CuPy, NumPy, SciPy, scikit-image and scikit-learn; prints one line per
result and a JSON summary at the end.  Nothing here needs a display.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

T0 = time.perf_counter()
SUMMARY: dict = {}
PROFILE_DIR = None


def left(budget):
    return budget - (time.perf_counter() - T0)


def say(text):
    print(f"[{time.perf_counter() - T0:6.1f} s] {text}", flush=True)


def gpu_tests(budget):
    files = [str(f) for f in sorted((ROOT / "tests").glob("test_*.py"))
             if not any(s in f.read_text() for s in ("PySide6", "qtbot", "iastudio.app"))]
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, min(150, left(budget) - 300)),
                              cwd=ROOT)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        SUMMARY["pytest_gpu"] = {"rc": proc.returncode, "tail": tail[-1] if tail else ""}
        say(f"pytest -m gpu: rc {proc.returncode}\n  " + "\n  ".join(tail))
    except subprocess.TimeoutExpired:
        SUMMARY["pytest_gpu"] = {"rc": None, "tail": "timed out"}
        say("pytest -m gpu: timed out")


def equality():
    from iastudio.core.attention import AttentionRun
    from iastudio.core.backend import get_backend
    from iastudio.core.demos import load_demo
    from iastudio.core.preprocess import preprocess

    bk = get_backend("cupy")
    say(f"GPU: {bk.device}")
    SUMMARY["device"] = bk.device
    from bench_scale import make_set

    s = load_demo("shapes", seed=0)
    cases = [("shapes, every pair", preprocess(s.images, size=32).images, "all"),
             ("60 digits, pruned K=10", make_set(60, 32, seed=2)[0], 10)]
    out = {}
    for name, x, nb in cases:
        t = time.perf_counter()
        a = AttentionRun(x, backend="numpy", neighbors=nb).run()
        t_np = time.perf_counter() - t
        t = time.perf_counter()
        b = AttentionRun(x, backend=bk, neighbors=nb).run()
        t_cp = time.perf_counter() - t
        same = bool(np.array_equal(a.labels, b.labels))
        dd = float(np.abs(np.asarray(a.input_distances) - np.asarray(b.input_distances)).max())
        df = float(np.abs(np.asarray(a.final_distances) - np.asarray(b.final_distances)).max())
        ok = same and dd <= 1e-4 and df <= 1e-4
        out[name] = dict(labels_equal=same, input_dist_maxdiff=dd, final_dist_maxdiff=df, ok=ok,
                         numpy_s=round(t_np, 2), cupy_s=round(t_cp, 2))
        say(f"equality {name}: labels equal {same}, max |d_numpy - d_cupy| input {dd:.2e} final {df:.2e} "
            f"-> {'OK' if ok else 'DIFFERENT'} (NumPy {t_np:.1f} s, CuPy {t_cp:.1f} s incl. warm-up)")
    SUMMARY["equality"] = out


def timing(n, budget, size=64):
    from bench_scale import run_child

    limit = left(budget) - 5
    if limit < 20:
        say(f"n={n}: skipped, {limit:.0f} s left")
        SUMMARY[f"n{n}"] = "skipped (no time left)"
        return
    import os

    if PROFILE_DIR:
        os.environ["IA_BENCH_PROFILE"] = str(Path(PROFILE_DIR) / f"profile_n{n}.txt")
    r = run_child(n, size, "auto", "cupy", timeout=limit)
    if r is None:
        say(f"n={n}: did not finish within {limit:.0f} s")
        SUMMARY[f"n{n}"] = f"> {limit:.0f} s"
        return
    r.pop("labels", None)
    SUMMARY[f"n{n}"] = r
    say(f"n={n} at {size} px, pruned (K=30), {r['backend']}: full default run {r['wall_s']:.1f} s "
        f"(similarity {r['similarity_s']:.1f} s, means {r['mean_s']:.1f} s), first IA iteration "
        f"{r['first_iteration_s']:.1f} s (process start-up and CUDA warm-up included), peak host "
        f"{r['peak_mb']:.0f} MB, {r['clusters']} clusters, ARI {r['ari']:.3f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=460.0, help="seconds for everything (default 460)")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--profile-dir", default=None, help="write a profile of each timed run here")
    a = p.parse_args(argv)
    global PROFILE_DIR
    PROFILE_DIR = a.profile_dir
    steps = [] if a.skip_tests else [("tests", lambda: gpu_tests(a.budget))]
    steps += [("equality", equality), ("n1000", lambda: timing(1000, a.budget)),
              ("n10000", lambda: timing(10000, a.budget))]
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report and go on to the next check
            SUMMARY[name] = f"failed: {exc!r}"
            say(f"{name} FAILED:\n{traceback.format_exc()}")
    say("summary " + json.dumps(SUMMARY, default=str))


if __name__ == "__main__":
    main()
