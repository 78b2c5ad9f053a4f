"""The guard's forecast (issue #30 item 6): runs with and without it, one after the other.

For each set, a default run (``forecast=False``: the iteration is computed and the guard
then decides) and the same run with the forecast (``forecast=True``: the guard's question
is put to the forecast distances first, and an iteration it would undo is not run), in
the same process, one after the other.  Printed per set and column: what the guard did
without the forecast (``undone``: computed and undone; ``settled``: kept, the clusters
unchanged; ``kept``: kept with other clusters; ``ran``: no guard decision), whether the
forecast skipped the iteration, the ARI of both runs and whether their labels are the
same, and the seconds of both (ratio).  A skip where the guard would have *kept* the
iteration is a wrong forecast (it changes the result: counted as such).

Usage::

    python benchmarks/bench_guard.py suite --split tune holdout     # the quality suite (every pair)
    python benchmarks/bench_guard.py suite --fast                   # the small subset
    python benchmarks/bench_guard.py suite --neighbors 12           # the pruned path on the same sets
    python benchmarks/bench_guard.py noise --split holdout          # the noisy suite (denoise auto)
    python benchmarks/bench_guard.py scale 1000 --kind digits       # bench_scale's rotated digits
    python benchmarks/bench_guard.py scale 1000 --kind particles    # cryo-like particles, SNR 1
    python benchmarks/bench_guard.py suite --sharpen                # sharpen=True against sharpen=False

``--sharpen`` compares two runs with the forecast on: ``sharpen=True`` (an iteration whose
forecast keeps the clusters is run) against ``sharpen=False`` (it is not: the run stops as
it stops after an iteration that left the clusters as they were).  A skip is wrong where the
computed iteration moved images between clusters and the guard kept it (``kept``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkout import importable  # noqa: E402

importable()


def outcome(notes) -> str:
    """What the guard did, from a run's notes."""
    text = " ".join(notes)
    if "not run: its forecast" in text:
        return "skipped"
    if "moved images between clusters" in text:
        return "undone"
    if "left the clusters as they were" in text:
        return "settled"
    return "ran"


def compare(name, x, truth, *, clusters="auto", neighbors="auto", iterations=3, sharpen=False):
    """Both runs on one set; returns a dict of what happened.

    The first run without the forecast and the second with it, or (``sharpen``) both with it,
    the first with ``sharpen=True`` and the second with ``sharpen=False``.
    """
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.attention import AttentionRun

    out = {}
    for second in (False, True):
        opts = dict(forecast=True, sharpen=not second) if sharpen else dict(forecast=second, sharpen=True)
        t0, c0 = time.perf_counter(), time.process_time()
        run = AttentionRun(x, backend="numpy", iterations=iterations, clusters=clusters, neighbors=neighbors,
                           **opts)
        res = run.run()
        out[second] = dict(res=res, seen=list(run._forecasts), wall=time.perf_counter() - t0,
                             cpu=time.process_time() - c0, what=outcome(res.notes),
                             ari=adjusted_rand_score(truth, res.labels))
    a, b = out[False], out[True]
    same = bool(np.array_equal(a["res"].labels, b["res"].labels))
    identical = same and np.array_equal(a["res"].features, b["res"].features)
    wrong = b["what"] == "skipped" and a["what"] in (("kept", "ran") if sharpen else ("settled", "kept", "ran"))
    seen = b["seen"][0] if b["seen"] else None
    if seen is None:
        told = "forecast: none"
    elif seen["same"]:
        told = "forecast: same clusters"
    else:
        told = (f"forecast: silhouette {seen['before'] if seen['before'] is None else round(seen['before'], 3)} -> "
                f"{seen['after'] if seen['after'] is None else round(seen['after'], 3)}")
    print(f"  {name:28s} k={clusters!s:4s} without: {a['what']:8s} with: {b['what']:8s} "
          f"ARI {a['ari']:.3f} / {b['ari']:.3f} labels {'same' if same else 'DIFFER'}"
          f"{' (features same)' if identical else ''}{' WRONG SKIP' if wrong else ''}  "
          f"{a['wall']:.1f} s / {b['wall']:.1f} s ({b['wall'] / a['wall']:.2f}x), "
          f"CPU {a['cpu']:.1f} / {b['cpu']:.1f} s (similarity {a['res'].timings['similarity_s']:.1f} / "
          f"{b['res'].timings['similarity_s']:.1f} s, means {a['res'].timings['mean_s']:.1f} / "
          f"{b['res'].timings['mean_s']:.1f} s), forecast {b['res'].timings.get('forecast_s', 0.0):.2f} s",
          f"; {told}", flush=True)
    return dict(seen=seen, without=a["what"], with_=b["what"], same=same, wrong=wrong, wall=(a["wall"], b["wall"]),
                cpu=(a["cpu"], b["cpu"]), ari=(a["ari"], b["ari"]))


def summarize(rows):
    if not rows:
        return
    wall = np.array([r["wall"] for r in rows])
    cpu = np.array([r["cpu"] for r in rows])
    undone = sum(r["without"] == "undone" for r in rows)
    caught = sum(r["without"] == "undone" and r["with_"] == "skipped" for r in rows)
    print(f"{len(rows)} runs: labels the same in {sum(r['same'] for r in rows)}; the guard undid the iteration in "
          f"{undone}, the forecast skipped {caught} of those; wrong skips {sum(r['wrong'] for r in rows)}; "
          f"mean ARI {np.mean([r['ari'][0] for r in rows]):.3f} / {np.mean([r['ari'][1] for r in rows]):.3f}; "
          f"total wall {wall[:, 0].sum():.1f} s / {wall[:, 1].sum():.1f} s "
          f"({wall[:, 1].sum() / wall[:, 0].sum():.2f}x), "
          f"CPU {cpu[:, 0].sum():.1f} s / {cpu[:, 1].sum():.1f} s ({cpu[:, 1].sum() / cpu[:, 0].sum():.2f}x)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("suite", "noise", "scale"))
    p.add_argument("n", nargs="*", type=int)
    p.add_argument("--split", nargs="*", default=["tune", "holdout"])
    p.add_argument("--fast", action="store_true")
    p.add_argument("--only", nargs="*", default=())
    p.add_argument("--neighbors", default="auto")
    p.add_argument("--size", type=int, default=48)
    p.add_argument("--kind", choices=("digits", "particles"), default="digits")
    p.add_argument("--columns", nargs="*", default=["auto", "k"])
    p.add_argument("--sharpen", action="store_true", help="sharpen=True against sharpen=False (forecast on)")
    a = p.parse_args(argv)
    nb = a.neighbors if a.neighbors in ("all", "auto") else int(a.neighbors)
    from iastudio.core.preprocess import preprocess

    rows = []
    if a.what == "scale":
        from bench_scale import make_particles, make_set

        for n in a.n or [1000]:
            x, y = make_set(n, a.size) if a.kind == "digits" else make_particles(n, a.size)
            for col in a.columns:
                rows.append(compare(f"{a.kind}-{n}", x, y, neighbors=nb,
                                    clusters="auto" if col == "auto" else len(set(y)), sharpen=a.sharpen))
        summarize(rows)
        return
    if a.what == "noise":
        from noise_suite import make_noise_set, noise_suite

        specs = noise_suite()
    else:
        from quality_suite import make_set as make_suite_set
        from quality_suite import suite

        specs = suite(fast=a.fast)
    for split in a.split:
        print(f"{a.what}, split {split}, neighbors {nb}, {a.size} px", flush=True)
        for spec in specs:
            if a.only and spec.name not in a.only:
                continue
            if a.what == "noise":
                images, truth, _ = make_noise_set(spec, split=split)
                x = preprocess(images, size=a.size, denoise="auto").images
            else:
                images, truth = make_suite_set(spec, split=split)
                x = preprocess(images, size=a.size).images
            for col in a.columns:
                rows.append(compare(f"{split}/{spec.name}", x, truth, neighbors=nb,
                                    clusters="auto" if col == "auto" else len(set(truth)), sharpen=a.sharpen))
    summarize(rows)


if __name__ == "__main__":
    main()
