"""One prepared GPU check (< 8 minutes on one CUDA card): tests, CuPy-vs-NumPy equality, timings.

    python benchmarks/gpu_check.py                 # everything, within --budget seconds
    python benchmarks/gpu_check.py --budget 420 --skip-tests
    python benchmarks/gpu_check.py --dry-run       # no GPU: the same steps on NumPy, small sizes

Runs from an installed package or from a bare checkout (``iastudio`` is then
staged from ``core/`` and ``app/``, see ``checkout.py``).

1. ``pytest -m gpu`` on the test files that need no Qt (a GPU machine may have none);
2. the same runs on NumPy and on CuPy - the shapes demo (every pair) and 60
   rotated digits (pruned, 10 neighbours): identical labels, distances within 1e-4;
3. timings of full default runs on CuPy at 64 px, each in its own process
   after an untimed warm-up run (the GPU kernels compiled), with the time left
   as its limit: n = 1,000 (pruned, K = 30; also the seconds of each IA
   iteration), the same with the CUDA warp switched off (the CuPy array code:
   the speed-up of the kernel, measured in the same call), and n = 10,000
   (pruned);
4. with ``--profile-dir``: the n = 10,000 run again under cProfile, if time is left.

Needs CuPy, NumPy, SciPy, scikit-image and scikit-learn; prints one line per
result and a JSON summary at the end.  Nothing here needs a display.  Without a
usable GPU it says why and exits with 2.  ``--dry-run`` checks the script
itself where there is no GPU: NumPy stands in for CuPy, and the timed runs are
60 and 120 images at 32 px with 10 neighbours (its numbers mean nothing).
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
sys.path.insert(0, str(HERE))
from checkout import importable  # noqa: E402

importable()  # a bare checkout (a lent GPU machine): iastudio staged from core/ and app/

T0 = time.perf_counter()
SUMMARY: dict = {}
PROFILE_DIR = None
GPU = dict(backend="cupy", sizes=(1000, 10000), px=64, neighbors="auto")  # auto: K = 30 at these sizes
DRY = dict(backend="numpy", sizes=(60, 120), px=32, neighbors="10")
PLAN = dict(GPU)


def left(budget):
    return budget - (time.perf_counter() - T0)


def say(text):
    print(f"[{time.perf_counter() - T0:6.1f} s] {text}", flush=True)


def gpu_test_files() -> list:
    """The test files with GPU tests, none needing Qt (collecting every file needs packages a GPU machine may lack)."""
    files = []
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        text = f.read_text()
        if "mark.gpu" in text and not any(s in text for s in ("PySide6", "qtbot", "iastudio.app")):
            files.append(str(f))
    return files


def gpu_tests(budget):
    files = gpu_test_files()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(90, min(150, left(budget) - 300)),
                              cwd=ROOT)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        SUMMARY["pytest_gpu"] = {"rc": proc.returncode, "tail": tail[-1] if tail else ""}
        say(f"pytest -m gpu: rc {proc.returncode}\n  " + "\n  ".join(tail))
    except subprocess.TimeoutExpired:
        SUMMARY["pytest_gpu"] = {"rc": None, "tail": "timed out"}
        say("pytest -m gpu: timed out")


def _dense(d):
    """Host dense array of a run's distances (a pruned run's are a SciPy sparse graph)."""
    import scipy.sparse as sp

    return d.toarray() if sp.issparse(d) else np.asarray(d)


def equality():
    from iastudio.core.attention import AttentionRun
    from iastudio.core.backend import get_backend
    from iastudio.core.demos import load_demo
    from iastudio.core.preprocess import preprocess

    bk = get_backend(PLAN["backend"])
    other = "CuPy" if PLAN["backend"] == "cupy" else "NumPy2"  # a dry run compares NumPy with itself
    import iastudio.core
    from iastudio.core.warp import describe_code, describe_gpu_code

    say(f"device: {bk.device}; iastudio from {Path(iastudio.core.__file__).parent}")
    SUMMARY["device"] = bk.device
    SUMMARY["iastudio"] = str(Path(iastudio.core.__file__).parent)  # the code measured (installed or staged)
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
        dd = float(np.abs(_dense(a.input_distances) - _dense(b.input_distances)).max())
        df = float(np.abs(_dense(a.final_distances) - _dense(b.final_distances)).max())
        ok = same and dd <= 1e-4 and df <= 1e-4
        out[name] = dict(labels_equal=same, input_dist_maxdiff=dd, final_dist_maxdiff=df, ok=ok,
                         numpy_s=round(t_np, 2), cupy_s=round(t_cp, 2))
        say(f"equality {name}: labels equal {same}, max |d_numpy - d_{other.lower()}| input {dd:.2e} final "
            f"{df:.2e} -> {'OK' if ok else 'DIFFERENT'} (NumPy {t_np:.1f} s, {other} {t_cp:.1f} s incl. warm-up)")
    SUMMARY["equality"] = out
    SUMMARY["warp_code"] = {"numpy": describe_code(), "cupy": describe_gpu_code()}  # as the runs above used


def timing(n, budget, label=None, env=None, profile=False, forecast=False):
    """A full default run of ``n`` images in its own process (warmed up), within the time left.

    ``forecast``: with the guard's forecast, as ``ia-cluster`` runs by default (it may skip the
    iteration whose means on the card the other timings measure, so they go without it).
    """
    from bench_scale import run_child

    label = label or f"n{n}"
    limit = left(budget) - 5
    if limit < 20:
        say(f"{label}: skipped, {limit:.0f} s left")
        SUMMARY[label] = "skipped (no time left)"
        return
    import os

    if profile:
        Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)
        os.environ["IA_BENCH_PROFILE"] = str(Path(PROFILE_DIR) / f"profile_n{n}.txt")
    try:
        # without the guard's forecast: it would skip the very iteration (the means on the card) timed here
        r = run_child(n, PLAN["px"], PLAN["neighbors"], PLAN["backend"], timeout=limit, warmup=True, env=env,
                      forecast=forecast)
    finally:
        os.environ.pop("IA_BENCH_PROFILE", None)
    if r is None:
        say(f"{label}: did not finish within {limit:.0f} s")
        SUMMARY[label] = f"> {limit:.0f} s"
        return
    r.pop("labels", None)
    SUMMARY[label] = r
    k = 30 if PLAN["neighbors"] == "auto" else PLAN["neighbors"]
    say(f"{label}: n={n} at {PLAN['px']} px, pruned (K={k}), {r['backend']}, warp: {r['warp']}"
        f"{' (profiled)' if profile else ''}, {'with' if forecast else 'without'} the forecast: full default run "
        f"{r['wall_s']:.1f} s (similarity "
        f"{r['similarity_s']:.1f} s, means {r['mean_s']:.1f} s), IA iterations "
        f"{', '.join(f'{t:.2f}' for t in r['iteration_s'])} s (warmed up), peak host {r['peak_mb']:.0f} MB, "
        f"{r['clusters']} clusters, ARI {r['ari']:.3f}")
    base = SUMMARY.get(f"n{n}")
    if label != f"n{n}" and isinstance(base, dict) and not profile and r["first_iteration_s"] \
            and base["first_iteration_s"]:
        say(f"  without the CUDA warp the full run took {r['wall_s'] / base['wall_s']:.2f}x as long, the first IA "
            f"iteration {r['first_iteration_s'] / base['first_iteration_s']:.2f}x")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=460.0, help="seconds for everything (default 460)")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--profile-dir", default=None,
                   help="profile the largest run once more and write its top functions here")
    p.add_argument("--dry-run", action="store_true", help="no GPU: NumPy stands in for CuPy, small sizes")
    p.add_argument("--sizes", default=None, metavar="SMALL,LARGE",
                   help="the two run sizes (default 1000,10000; a dry run 60,120)")
    p.add_argument("--skip-array", action="store_true", help="leave out the run without the CUDA warp")
    p.add_argument("--large-forecast", action="store_true",
                   help="run the large size as ia-cluster does by default, with the guard's forecast")
    a = p.parse_args(argv)
    global PROFILE_DIR
    PROFILE_DIR = a.profile_dir
    PLAN.update(DRY if a.dry_run else GPU)
    SUMMARY["dry_run"] = a.dry_run
    if not a.dry_run:
        from iastudio.core.backend import BackendUnavailableError, get_backend

        try:
            get_backend("cupy")
        except BackendUnavailableError as exc:
            say(f"no GPU check here: {exc} (--dry-run checks this script on NumPy)")
            return 2
    steps = [] if a.skip_tests else [("tests", lambda: gpu_tests(a.budget))]
    small, large = PLAN["sizes"] if a.sizes is None else (int(v) for v in a.sizes.split(","))
    steps += [("equality", equality), (f"n{small}", lambda: timing(small, a.budget))]
    if not a.skip_array:
        steps.append((f"n{small}_array", lambda: timing(small, a.budget, label=f"n{small}_array",
                                                        env={"IASTUDIO_CUDA_WARP": "off"})))
    steps.append((f"n{large}", lambda: timing(large, a.budget, forecast=a.large_forecast)))
    if PROFILE_DIR:
        steps.append(("profile", lambda: timing(large, a.budget, label="profile", profile=True)))
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report and go on to the next check
            SUMMARY[name] = f"failed: {exc!r}"
            say(f"{name} FAILED:\n{traceback.format_exc()}")
    say("summary " + json.dumps(SUMMARY, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
