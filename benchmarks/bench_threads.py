"""Both cores: a full default run on one thread, on every core, and the baseline revision, in one session.

    python benchmarks/bench_threads.py                        # 1,000 rotated digits at 48 px
    python benchmarks/bench_threads.py --n 300 --baseline HEAD~3
    python benchmarks/bench_threads.py --kind particles --no-one-thread --baseline HEAD   # this change vs HEAD

The set (``bench_scale.make_set``: real handwritten digits, all ten classes,
rotated over the whole circle and shifted) is made once and given to every
run as the same array.  Each run is a fresh process (``AttentionRun(images,
threads=...).run()``, every other setting at its default), in this order:
this code on one thread (``threads=1``), this code with the default thread
count (one per core), and the baseline revision's code (``git archive``) with
its defaults; ``--repeats`` repeats the three, alternating, so all see the
same machine load.

Printed per run: wall and CPU seconds (CPU time counts every thread), their
ratio (how many cores the run kept busy), the *demand* (CPU time plus the
time the process's threads waited for a free core, over the wall time: the
cores the run would keep busy on an otherwise idle machine; read from
``/proc/self/task/*/schedstat``, Linux), the load average before and after,
the CPU time of the main thread (the work that no other thread shares: while
the engine's pool works, the main thread waits) and from it an estimate of
CPU / wall on an idle machine, ``CPU / (main + rest / cores)`` (an upper
bound: it assumes the rest spreads evenly over the cores), the clusters and
ARI against the digit classes, and whether the labels equal those of the
first run.  Then the ratios against this code on one thread and
against the baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _schedstat() -> dict:
    """``{thread id: (ns on a CPU, ns waiting for one)}`` of this process's live threads."""
    out = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            run_ns, wait_ns, _ = (int(v) for v in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out[task.name] = (run_ns, wait_ns)
    return out


def child(images_path: str, threads: int | None) -> None:
    """One run in this process; JSON on stdout."""
    from iastudio.core.attention import AttentionRun

    x = np.load(images_path)
    kwargs = {} if threads is None else {"threads": threads}
    load0 = os.getloadavg()
    s0 = _schedstat()
    t0, c0 = time.perf_counter(), time.process_time()
    run = AttentionRun(x, backend="numpy", **kwargs)
    res = run.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = _schedstat()
    waited = sum(w - s0.get(t, (0, 0))[1] for t, (_, w) in s1.items()) / 1e9
    main = str(threading.get_native_id())
    main_cpu = (s1[main][0] - s0[main][0]) / 1e9
    print("RESULT " + json.dumps(dict(
        wall_s=wall, cpu_s=cpu, waited_s=waited, main_s=main_cpu, threads=threads or len(os.sched_getaffinity(0)),
        load=[load0[0], os.getloadavg()[0]],
        similarity_s=res.timings["similarity_s"], mean_s=res.timings["mean_s"],
        clusters=int(res.n_clusters), labels=[int(v) for v in res.labels])))


def _idle(r: dict, ncpu: int) -> float:
    """CPU / wall on an idle machine if the work off the main thread spread evenly over the cores (an upper bound)."""
    rest = r["cpu_s"] - r["main_s"]
    return r["cpu_s"] / max(1e-9, r["main_s"] + rest / max(1, min(ncpu, r["threads"])))


def _run(shim: Path, images_path: str, threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "_child", images_path] + ([] if threads is None else ["--threads", str(threads)])
    env = {**os.environ, "PYTHONPATH": str(shim)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"run failed:\n{proc.stderr[-3000:]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="compare", choices=("compare", "_child"))
    ap.add_argument("images", nargs="?")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--baseline", default=None, help="git revision (default: where this branch left main)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--kind", choices=("digits", "particles"), default="digits",
                    help="rotated digits, or cryo-like particles at SNR 1, denoised as ia-cluster does "
                         "(bench_scale.make_particles)")
    ap.add_argument("--no-one-thread", action="store_true", help="leave out the run on one thread")
    a = ap.parse_args(argv)
    if a.what == "_child":
        child(a.images, a.threads)
        return
    from bench_scale import make_particles, make_set
    from bench_small_run import _baseline_tree, _default_baseline, _shim
    from sklearn.metrics import adjusted_rand_score

    tmp = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    x, y = make_set(a.n, a.size) if a.kind == "digits" else make_particles(a.n, a.size)
    images_path = str(tmp / "images.npy")
    np.save(images_path, x)
    this = _shim(ROOT, tmp / "this")
    variants = [("this code, default threads", this, None)]
    if not a.no_one_thread:
        variants.insert(0, ("this code, 1 thread", this, 1))
    if not a.no_baseline:
        rev = a.baseline or _default_baseline()
        base = _shim(_baseline_tree(rev, tmp / "base-src"), tmp / "base")
        variants.append((f"baseline {rev[:9]}, defaults", base, None))
    ncpu = len(os.sched_getaffinity(0))
    what = "rotated digits" if a.kind == "digits" else "cryo-like particles (SNR 1, 4 views, denoised)"
    print(f"{a.n} {what} at {a.size} px, a full default run per process; {ncpu} cores here", flush=True)
    results = {name: [] for name, _, _ in variants}
    first = None
    for _ in range(a.repeats):
        for name, shim, threads in variants:
            r = _run(shim, images_path, threads)
            results[name].append(r)
            first = first or r["labels"]
            same = "identical labels" if r["labels"] == first else \
                f"labels differ (ARI to the first run {adjusted_rand_score(first, r['labels']):.3f})"
            print(f"  {name:32s} wall {r['wall_s']:7.1f} s  CPU {r['cpu_s']:7.1f} s  CPU/wall "
                  f"{r['cpu_s'] / r['wall_s']:4.2f}  demand {(r['cpu_s'] + r['waited_s']) / r['wall_s']:4.2f}  "
                  f"main thread {r['main_s']:.1f} s CPU, idle-machine estimate {_idle(r, ncpu):4.2f}  "
                  f"(similarity {r['similarity_s']:.1f} s, means {r['mean_s']:.1f} s)  load "
                  f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}  k {r['clusters']}  ARI "
                  f"{adjusted_rand_score(y, r['labels']):.3f}  {same}", flush=True)
    med = {name: {k: float(np.median([r[k] for r in rs])) for k in ("wall_s", "cpu_s", "waited_s")}
           for name, rs in results.items()}
    default = med["this code, default threads"]
    if not a.no_one_thread:
        one = med["this code, 1 thread"]
        print(f"default threads vs 1 thread: wall {one['wall_s'] / default['wall_s']:.2f}x faster, "
              f"CPU {default['cpu_s'] / one['cpu_s']:.2f}x")
    if not a.no_baseline:
        base = med[variants[-1][0]]
        print(f"this code vs the baseline (both default threads): wall {base['wall_s'] / default['wall_s']:.2f}x, "
              f"CPU {base['cpu_s'] / default['cpu_s']:.2f}x; CPU/wall {default['cpu_s'] / default['wall_s']:.2f} "
              f"against {base['cpu_s'] / base['wall_s']:.2f}")


if __name__ == "__main__":
    main()
