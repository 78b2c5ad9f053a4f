"""Scale: time and peak memory of full default runs, and the mean stage against its previous rules.

Real handwritten digits (scikit-learn's ``load_digits``, all ten classes,
drawn with replacement above 1,797) rotated over the full circle and shifted
by up to 3 px, on a 48-px working size by default.  Every size runs in its
own subprocess so its peak resident memory (``ru_maxrss``) is its own.

    python benchmarks/bench_scale.py means               # mean stage: current and 0.1 rules vs a converged run
    python benchmarks/bench_scale.py run60               # a full default run of 60 images at 64 px
    python benchmarks/bench_scale.py sizes 250 1000 4000 # pruned (auto) runs; exhaustive up to --exhaustive-max
    python benchmarks/bench_scale.py recall 1000         # recall of the true 10 nearest invariant neighbours
    python benchmarks/bench_scale.py project 4000        # save / open a project of a pruned run (sparse W)
    QT_QPA_PLATFORM=offscreen python benchmarks/bench_scale.py autosave 4000  # the window during its autosave
    python benchmarks/bench_scale.py agree               # pruned vs every pair on held-out mid-size sets
    python benchmarks/bench_scale.py readout --draws 5   # the two read-outs on 22 mid-size sets, two k rules
    python benchmarks/bench_scale.py peer 1000 4000 10000  # IA against ASPIRE (aspire_peer.py, its own venv)

``peer`` runs, per size and per kind of set (``--kinds digits particles``: the rotated digits
below, and cryo-like particles of ``noise_suite`` at SNR 1, 4 views, denoised as ``ia-cluster``
does; IA's wall and CPU time include what the denoiser adds to the preparation, as ASPIRE's include
its steerable PCA), a full default IA run in its own process, then ASPIRE's ``RIRClass2D`` + spectral
clustering with k given on the same images (the particles without IA's denoiser) through
``aspire_peer.py`` under ASPIRE's own interpreter (``IA_ASPIRE_PYTHON``, default
``/work/venv-aspire/bin/python``), and prints wall, CPU, peak memory and ARI of both and their
ratios.  ``--no-forecast`` runs IA without the guard's forecast.

``agree`` builds six sets of 280-400 images from the quality suite's holdout
material (letters, photo crops, mixed, odd-numbered digit samples; sizes and
mixes the suite does not have; seed 7) and runs each with every pair and with
K = 30 (3 iterations, 48 px), printing k, ARI, time and the ARI between the
two runs (about 8 minutes on 2 cores).

``readout`` builds 22 sets of 260-400 images (``_readout_sets``: 12 from the quality suite's
*tune* material, the 8 ``h-`` and the 2 ``mid-`` sets from its *holdout* material; mostly rotated
digits, whose silhouette curves are flat, and four clearly separated controls), aligns every pair
and, separately, the K = 30 graph with its probes, and reads clusters out of both *input*
distances (the read-out the guard keeps on digit sets) with this version's rule for near-tied
silhouettes and with the plain best silhouette (``NEAR_TIE = 0``: the previous version's rule, on
this version's graph silhouette), printing k / ARI on both paths and whether they agree within
0.01 (about 20 minutes).  ``--draws N`` repeats the pruned read-out with N - 1 other random
probe samples (their distances read from the every-pair run) and averages over the draws: on flat
silhouette curves which k the pruned run takes depends on its probe draw.

``project`` builds the project a finished pruned run of n images leaves
(embedded images, ``--frames`` recorded steps each with its per-image means
and its sparse W and distances on the real K = 30 candidate graph, the
result) and prints the time to save it, its size, the time to read it
(``load_project``) and to reopen it as the app does (``Session.open_project``:
the frames, maps and curves rebuilt).  The distances are plain L2 between the
candidate pairs (no alignment is run), W follows from them by the engine's
own rule.

``autosave`` opens that project in the app's window (offscreen), renames a
cluster, and measures how long the GUI thread is blocked by its autosave: the
old way (the write on the GUI thread) against the app's (the snapshot on the
GUI thread, the write in a worker thread), with the longest gap between the
ticks of a 10 ms timer while the worker writes.

``sizes`` prints, per n: wall and CPU seconds, peak memory, clusters, ARI
against the digit classes, the growth exponent ``log(t2/t1) / log(n2/n1)``
between consecutive sizes and, up to ``--exhaustive-max`` images, the other
side of the comparison (every pair where ``auto`` pruned, K = 30 where
``auto`` took every pair) if it finished within ``--timeout`` seconds, with
the ARI between the two runs' labels.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from checkout import importable  # noqa: E402

importable()  # a bare checkout (a lent GPU machine): iastudio staged from core/ and app/


def make_set(n, size, seed=0, sources=None, vary=None):
    """``n`` unit-norm digit images on one canvas, rotated over the full circle; and their classes.

    scikit-learn has 1,797 digits: beyond that they are drawn again (from the first ``sources`` only, if
    given).  ``vary`` (default: when there are more than 20 draws per digit) gives every draw its own
    height and width (20-28 px instead of 24) so that the copies of one digit are not the same image
    up to a rotation: 100,000 images hold 56 copies of each digit, and a candidate graph of 30 copies of
    oneself has no edge between different digits.
    """
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    from iastudio.core import se2
    from iastudio.core.preprocess import preprocess
    from iastudio.core.warp import warp

    rng = np.random.default_rng(seed)
    data = load_digits()
    m = len(data.target) if sources is None else int(sources)
    pick = rng.permutation(m)[:n] if n <= m else rng.integers(0, m, n)
    vary = n > 20 * m if vary is None else vary
    side = 64
    canvas = np.zeros((n, side, side))
    for k, i in enumerate(pick):
        h, w = rng.integers(20, 29, 2) if vary else (24, 24)
        d = resize(data.images[i] / 16.0, (h, w), order=1, anti_aliasing=False)
        canvas[k, 32 - h // 2:32 - h // 2 + h, 32 - w // 2:32 - w // 2 + w] = d
    from scipy.ndimage import gaussian_filter

    canvas = gaussian_filter(canvas, (0, 1.0, 1.0))
    tau = se2.random_transforms(n, rotation_range=180, shift_range=3, seed=rng)
    moved = np.clip(warp(canvas, tau), 0, None).astype(np.float32)
    if n < 20_000:
        return preprocess(list(moved), size=size).images, data.target[pick]
    # a large set: each image is prepared on its own (scale "content"), so chunks on every core give the same images
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    chunks = [list(moved[lo:lo + 5000]) for lo in range(0, n, 5000)]
    with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("fork")) as pool:
        parts = list(pool.map(_prepared, chunks, [size] * len(chunks)))
    return np.concatenate(parts), data.target[pick]


def _prepared(images, size):
    """``preprocess(images, size=size).images`` (a worker of :func:`make_set`)."""
    from iastudio.core.preprocess import preprocess

    return preprocess(images, size=size).images


def make_particles(n, size, seed=0, snr=1.0, denoise="auto", timed=None):
    """``n`` cryo-like particle images (4 views of a random density, SNR ``snr``, ``noise_suite``), as
    ``ia-cluster`` reads them (``--denoise auto``), and their classes.

    ``timed``: a dict that gets ``denoise_s`` and ``denoise_cpu_s``, what the denoiser adds to the
    preparation (the preparation with ``denoise`` less the one without, both timed here).
    """
    from noise_suite import NoiseSpec, make_noise_set

    from iastudio.core.preprocess import preprocess

    per_view = -(-n // 4)
    images, labels, _ = make_noise_set(NoiseSpec(f"scale-snr{snr:g}-{per_view}", snr, per_view), seed=seed)
    images, labels = images[:n], np.array([int(v[4:]) for v in labels[:n]])
    if timed is not None:
        t0, c0 = time.perf_counter(), time.process_time()
        preprocess(images, size=size, denoise="off")
        plain, plain_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    out = preprocess(images, size=size, denoise=denoise).images
    if timed is not None:
        timed["denoise_s"] = max(0.0, time.perf_counter() - t0 - plain)
        timed["denoise_cpu_s"] = max(0.0, time.process_time() - c0 - plain_cpu)
    return out, labels


def _readout_sets():
    """(name, SetSpec, split, seed) of ``readout``: tune material to choose on, holdout to report."""
    from quality_suite import SetSpec

    full = 180.0
    tune = {"t-digits-10": (1, (35,) * 10, full, 0.0), "t-digits-8": (2, (40,) * 8, full, 0.0),
            "t-digits-10u": (3, (60, 50, 45, 40, 35, 30, 25, 20, 15, 10), full, 0.0),
            "t-digits-6": (4, (50,) * 6, 45.0, 0.0), "t-digits-5": (5, (60,) * 5, full, 0.0),
            "t-digits-7u": (6, (80, 60, 45, 35, 25, 15, 10), full, 0.0),
            "t-digits-10-45": (7, (30,) * 10, 45.0, 0.0), "t-digits-4": (8, (70,) * 4, full, 0.0),
            "t-digits-6u": (9, (85, 70, 55, 40, 20, 10), full, 0.0), "t-digits-8n": (12, (35,) * 8, full, 0.2)}
    holdout = {"h-digits-8": (21, (40,) * 8, full, 0.0),
               "h-digits-10u": (22, (55, 50, 45, 40, 35, 30, 25, 20, 15, 10), full, 0.0),
               "h-digits-7-45": (23, (40,) * 7, 45.0, 0.0), "h-digits-5n": (24, (60,) * 5, full, 0.2),
               "h-digits-9": (25, (35,) * 9, full, 0.0), "h-digits-6u": (26, (85, 60, 50, 30, 20, 15), full, 0.0)}
    out = [(name, SetSpec(name, "digits", sizes, rotation=rot, noise=noise), "tune", seed)
           for name, (seed, sizes, rot, noise) in tune.items()]
    out += [("t-letters-7n", SetSpec("t-letters-7n", "letters", (40,) * 7, rotation=full, shift=6, noise=0.8),
             "tune", 10),
            ("t-mixed-10n", SetSpec("t-mixed-10n", "mixed", (30,) * 10, rotation=full, noise=0.6), "tune", 11)]
    out += [(name, SetSpec(name, "digits", sizes, rotation=rot, noise=noise), "holdout", seed)
            for name, (seed, sizes, rot, noise) in holdout.items()]
    out += [("h-mixed-12u", SetSpec("h-mixed-12u", "mixed", (50, 45, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5),
                                    rotation=full, noise=0.4), "holdout", 27),
            ("h-letters-7n", SetSpec("h-letters-7n", "letters", (40,) * 7, rotation=full, shift=6, noise=0.8),
             "holdout", 28),
            ("mid-digits-10", SetSpec("mid-digits-10", "digits", (40,) * 10, rotation=full), "holdout", 7),
            ("mid-digits-6-unequal", SetSpec("mid-digits-6-unequal", "digits", (85, 70, 55, 40, 20, 10),
                                             rotation=full), "holdout", 7)]
    return out


def readout(size=48, k=30, only=(), draws=1):
    """Exhaustive against pruned read-outs of the input distances, this rule and the previous one.

    ``draws`` > 1: the pruned read-out is repeated with other random probes (seeds 1, 2, ...: the
    pairs a run with that seed would probe, their distances read from the every-pair run, which
    aligns those pairs with the same code), and agreement and ARI are averaged over the draws.
    """
    import scipy.sparse as sp
    from quality_suite import make_set as make_suite_set
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core import clustering
    from iastudio.core.neighbors import probe_pairs, pruned_distances
    from iastudio.core.preprocess import preprocess
    from iastudio.core.similarity import invariant_distances

    rules = {"this version": clustering.NEAR_TIE, "best silhouette (NEAR_TIE = 0)": 0.0}
    totals = {}
    print(f"every pair against K = {k}, input distances, {size} px, {draws} probe draw(s); per rule: k every "
          f"pair / K = {k}, ARI every pair / K, '=' when the ARIs agree within 0.01")
    for name, spec, split, seed in _readout_sets():
        if only and name not in only:
            continue
        images, truth = make_suite_set(spec, split=split, seed=seed)
        x = preprocess(images, size=size).images
        _, graph, probes = pruned_distances(x, k)
        dense = invariant_distances(x).distances
        n = dense.shape[0]
        on_graph = sp.triu(graph, 1).tocoo()
        samples = [probes]
        for draw in range(1, draws):
            r, c = probe_pairs((on_graph.row, on_graph.col), n, seed=draw)
            sample = sp.coo_matrix((dense[r, c], (r, c)), shape=(n, n))
            samples.append((sample + sample.T).tocsr())
        cells = []
        for rule, near_tie in rules.items():
            ld, cd = clustering.read_clusters(dense, near_tie=near_tie)
            a = adjusted_rand_score(truth, ld)
            reads = []
            for sample in samples:
                lp, cp = clustering.read_clusters(graph, probes=sample, near_tie=near_tie)
                b = adjusted_rand_score(truth, lp)
                reads.append((cp.k, b, abs(a - b) <= 0.01))
            totals.setdefault((split, rule), []).append(
                (a, np.mean([r[1] for r in reads]), np.mean([r[2] for r in reads])))
            cells.append(f"{rule}: {cd.k}/" + ",".join(str(r[0]) for r in reads) + f" {a:.3f}/"
                         + ",".join(f"{r[1]:.3f}" for r in reads) + " " + "".join("=" if r[2] else "x" for r in reads))
        print(f"  {name} ({split}, n = {len(truth)}): " + "; ".join(cells), flush=True)
    for (split, rule), v in sorted(totals.items()):
        v = np.array(v, dtype=float)
        print(f"{split}, {rule}: mean ARI every pair {v[:, 0].mean():.3f}, K = {k} {v[:, 1].mean():.3f}; "
              f"agree on {v[:, 2].sum():.1f} of {len(v)}" + (" (mean over the draws)" if draws > 1 else ""))


def _one(n, size, neighbors, backend, iterations, warmup=False, kind="digits", forecast=True):
    """Child process: one full run, JSON on stdout.

    ``warmup``: first a small run of 40 other images on the same backend (pruned, one
    iteration, without the forecast), so that compiling the GPU kernels is not timed.  ``iteration_s`` holds the
    seconds of each IA iteration (distances, W and the invariant means: from the start, or
    from the end of the previous iteration, to the end of this one's means).
    """
    import os

    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.attention import AttentionRun, Stage

    timed = {"denoise_s": 0.0, "denoise_cpu_s": 0.0}  # the particles' denoiser: part of IA's time
    x, y = make_set(n, size) if kind == "digits" else make_particles(n, size, timed=timed)
    if warmup:  # without the forecast, so that the means' kernels compile here too (it may skip the iteration)
        AttentionRun(make_set(40, size, seed=5)[0], backend=backend, neighbors=10, iterations=1, forecast=False).run()
    t0, c0 = time.perf_counter(), time.process_time()
    run = AttentionRun(x, backend=backend, neighbors=neighbors, iterations=iterations, forecast=forecast)
    marks = [0.0]
    prof_path = os.environ.get("IA_BENCH_PROFILE")  # write the top functions of a profile of the run here
    if prof_path:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    for snap in run.steps():
        if snap.stage == Stage.ITERATION:
            marks.append(time.perf_counter() - t0)
    res = run.result()
    if prof_path:
        import io
        import pstats

        prof.disable()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
        Path(prof_path).write_text(text.getvalue())
    from iastudio.core.warp import describe_code, describe_gpu_code

    out = dict(n=n, size=size, neighbors=neighbors, backend=run.backend.describe(),
               warp=describe_code() if backend == "numpy" else describe_gpu_code(), warmed_up=warmup,
               wall_s=time.perf_counter() - t0 + timed["denoise_s"],
               cpu_s=time.process_time() - c0 + timed["denoise_cpu_s"], denoise_s=timed["denoise_s"],
               first_iteration_s=marks[1] if len(marks) > 1 else None,
               iteration_s=[round(b - a, 3) for a, b in itertools.pairwise(marks)],
               peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
               clusters=int(res.n_clusters), ari=float(adjusted_rand_score(y, res.labels)),
               similarity_s=res.timings["similarity_s"], mean_s=res.timings["mean_s"],
               forecast_s=res.timings.get("forecast_s", 0.0), notes=list(res.notes),
               iterations=int(res.iterations), labels=[int(v) for v in res.labels])
    print("RESULT " + json.dumps(out))


def run_child(n, size, neighbors, backend="numpy", iterations=3, timeout=None, warmup=False, env=None,
              kind="digits", forecast=True):
    """Run :func:`_one` in a fresh process; ``None`` when it did not finish in ``timeout`` seconds.

    ``env``: variables set for that process (e.g. ``IASTUDIO_CUDA_WARP=off``).
    """
    import os

    cmd = [sys.executable, __file__, "_one", str(n), "--size", str(size), "--neighbors", str(neighbors),
           "--backend", backend, "--iterations", str(iterations), "--kind", kind] + \
        (["--warmup"] if warmup else []) + ([] if forecast else ["--no-forecast"])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"run n={n} failed:\n{proc.stderr[-3000:]}")


def bench_means(size=64, n=60, converged=60):
    """The mean stage on one W: the current rules, the version-0.1 rules and every weight, in the same run.

    Every rule's means are compared with a converged computation (every weight, the best of three
    smoothings at each step, ``converged`` steps) as images (relative L2 per mean) and through what
    the next iteration sees: the invariant distances between the means (absolute, every pair).
    Times are given as ratios to the full computation at the default 10 steps and to the
    version-0.1 rules.
    """
    from iastudio.core.invariant_mean import invariant_means
    from iastudio.core.similarity import invariant_distances
    from iastudio.core.weights import attention_weights

    x, _ = make_set(n, size, seed=1)
    sim = invariant_distances(x)
    w, _ = attention_weights(sim.distances)
    w = w.astype(np.float32)
    every = dict(tol=0.0, mass=1.0, first_improvement=False, rtol=0.0)
    rules = {
        f"converged (every weight, best of 3 smoothings, {converged} steps)": dict(every, steps=converged),
        "every weight, best of 3 smoothings, 10 steps": dict(every, steps=10),
        "version 0.1 (absolute 2e-3 cut, best of 3 smoothings, 10 steps)":
            dict(tol=2e-3, first_improvement=False, rtol=0.0, steps=10),
        "first improvement only": dict(tol=2e-3, rtol=0.0, steps=10),
        "current defaults (99.9 % mass, first improvement, rtol 3e-4, <= 10 steps)":
            dict(mass=0.999, rtol=3e-4, steps=10),
    }
    ref, cpus = None, []
    off = ~np.eye(n, dtype=bool)
    print(f"mean stage, {n} rotated digits at {size} px, pairwise starts; differences against the converged means")
    for name, kw in rules.items():
        t0, c0 = time.perf_counter(), time.process_time()
        st = invariant_means(x, w, sim.transforms, **kw)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        cpus.append(cpu)
        means = np.asarray(st.means, dtype=np.float32)
        dist = invariant_distances(means).distances
        if ref is None:
            ref = (means.astype(float), dist)
        rel = np.linalg.norm((means - ref[0]).reshape(n, -1), axis=1) / np.linalg.norm(ref[0].reshape(n, -1), axis=1)
        err = np.abs(dist - ref[1])[off]
        ratios = "" if len(cpus) < 2 else f" ({cpus[1] / cpu:4.1f}x CPU of every weight at 10 steps" + (
            f", {cpus[2] / cpu:4.1f}x of version 0.1)" if len(cpus) > 2 else ")")
        print(f"  {name}: {wall:6.1f} s wall, {cpu:6.1f} s CPU{ratios}, entries {st.entry_src.size}, "
              f"steps {st.step}\n"
              f"      means (relative L2): median {np.median(rel):.1e}, 90th percentile {np.quantile(rel, 0.9):.1e}, "
              f"max {rel.max():.1e}; distances between the means: median {np.median(err):.1e}, 99th percentile "
              f"{np.quantile(err, 0.99):.1e}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("means", "run60", "sizes", "recall", "project", "autosave", "agree", "readout",
                                    "peer", "_one"))
    p.add_argument("n", nargs="*", type=int)
    p.add_argument("--size", type=int, default=48)
    p.add_argument("--neighbors", default="auto")
    p.add_argument("--backend", default="numpy")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--warmup", action="store_true", help="_one: a small untimed run first (GPU kernels compiled)")
    p.add_argument("--exhaustive-max", type=int, default=250, help="also run every pair up to this n")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--only", nargs="*", default=(), help="readout: these sets only")
    p.add_argument("--draws", type=int, default=1, help="readout: probe draws per set (agreement averaged)")
    p.add_argument("--frames", type=int, default=7, help="project: recorded steps (7: a 3-iteration run)")
    p.add_argument("--kind", choices=("digits", "particles"), default="digits",
                   help="_one: rotated digits, or cryo-like particles at SNR 1 (denoised as ia-cluster does)")
    p.add_argument("--kinds", nargs="*", default=["digits", "particles"], help="peer: the kinds of set")
    p.add_argument("--no-forecast", action="store_true", help="_one, peer: without the guard's forecast")
    a = p.parse_args(argv)
    nb = a.neighbors if a.neighbors in ("all", "auto") else int(a.neighbors)
    if a.what == "_one":
        _one(a.n[0], a.size, nb, a.backend, a.iterations, warmup=a.warmup, kind=a.kind, forecast=not a.no_forecast)
    elif a.what == "peer":
        peer(a.n or [1000, 4000, 10000], a)
    elif a.what == "means":
        bench_means()
    elif a.what == "run60":
        r = run_child(60, 64, "auto", a.backend)
        print(f"60 images at 64 px, full default run: {r['wall_s']:.1f} s wall ({r['similarity_s']:.1f} s "
              f"similarity, {r['mean_s']:.1f} s means), {r['cpu_s']:.1f} s CPU, ARI {r['ari']:.3f}")
    elif a.what == "recall":
        recall(a.n[0] if a.n else 1000, a.size)
    elif a.what == "project":
        bench_project(a.n[0] if a.n else 4000, a.size, frames=a.frames)
    elif a.what == "autosave":
        bench_autosave(a.n[0] if a.n else 4000, a.size, frames=a.frames)
    elif a.what == "agree":
        agree(a.size, a.iterations)
    elif a.what == "readout":
        readout(a.size, only=a.only, draws=a.draws)
    else:
        sizes(a.n or [250, 1000, 4000], a)


def peer(ns, a):
    """IA (defaults, ``--size``) and ASPIRE (``aspire_peer.py`` in its own environment, k given) on the same sets."""
    import platform

    from aspire_peer import aspire_python, run_peer
    from sklearn.metrics import adjusted_rand_score

    have_aspire = aspire_python() is not None
    where = "its own environment" if have_aspire else "NOT FOUND"
    print(f"IA (defaults: k auto, pruned above 300 images, {a.size} px{'' if not a.no_forecast else ', no forecast'})"
          f" against ASPIRE RIRClass2D + spectral clustering (k given, {where}),"
          f" one after the other; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for n in ns:
        for kind in a.kinds:
            ia = run_child(n, a.size, "auto", a.backend, a.iterations, timeout=a.timeout, kind=kind,
                           forecast=not a.no_forecast)
            line = f"  {kind:9s} n={n:6d}  IA: "
            line += (f"did not finish in {a.timeout:.0f} s" if ia is None else
                     f"{ia['wall_s']:.1f} s wall, {ia['cpu_s']:.1f} s CPU, {ia['peak_mb']:.0f} MB, k {ia['clusters']}, "
                     f"ARI {ia['ari']:.3f} (similarity {ia['similarity_s']:.1f} s, means {ia['mean_s']:.1f} s"
                     + (f", denoiser {ia['denoise_s']:.1f} s" if kind == "particles" else "") + ")")
            print(line, flush=True)
            if not have_aspire:
                continue
            if kind == "digits":
                x, y = make_set(n, a.size)
            else:
                x, y = make_particles(n, a.size, denoise="off")
            t0 = time.perf_counter()
            try:
                r = run_peer(x, len(set(y.tolist())), timeout=a.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"  {kind:9s} n={n:6d}  ASPIRE: failed or did not finish ({str(e)[-300:]})", flush=True)
                continue
            outside = time.perf_counter() - t0
            ari = adjusted_rand_score(y, r["labels"])
            line = (f"  {kind:9s} n={n:6d}  ASPIRE: {float(r['wall_s']):.1f} s wall ({outside:.1f} s with its start "
                    f"and the .npz files), {float(r['cpu_s']):.1f} s CPU, {float(r['peak_rss_mb']):.0f} MB, "
                    f"ARI {ari:.3f}")
            if ia is not None:
                mem = ia['peak_mb'] / float(r['peak_rss_mb'])
                line += (f"\n  {kind:9s} n={n:6d}  IA / ASPIRE: wall {ia['wall_s'] / float(r['wall_s']):.2f}x, CPU "
                         f"{ia['cpu_s'] / float(r['cpu_s']):.2f}x, memory {mem:.2f}x, "
                         f"ARI {ia['ari']:.3f} vs {ari:.3f}")
            print(line, flush=True)


def sizes(ns, a):
    from sklearn.metrics import adjusted_rand_score

    prev = None
    print(f"full default runs ({a.iterations} iterations, {a.size} px, rotated digits), backend {a.backend}")
    for n in ns:
        r = run_child(n, a.size, "auto", a.backend, a.iterations, timeout=a.timeout)
        if r is None:
            print(f"  n={n}: did not finish within {a.timeout:.0f} s")
            continue
        grow = ""
        if prev is not None:
            grow = f", growth exponent {np.log(r['wall_s'] / prev['wall_s']) / np.log(n / prev['n']):.2f}"
        print(f"  n={n} (neighbors auto): {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, peak "
              f"{r['peak_mb']:.0f} MB, {r['clusters']} clusters, ARI {r['ari']:.3f}, first iteration "
              f"{r['first_iteration_s']:.1f} s{grow}", flush=True)
        prev = r
        if n <= a.exhaustive_max:
            # the other side of the comparison: every pair, or K = 30 where auto already took every pair
            from iastudio.core.neighbors import AUTO_K, resolve_neighbors

            other = "all" if resolve_neighbors("auto", n) is not None else AUTO_K
            e = run_child(n, a.size, other, a.backend, a.iterations, timeout=a.timeout)
            what = "exhaustive (every pair)" if other == "all" else f"pruned (K={other})"
            if e is None:
                print(f"  n={n} {what}: did not finish within {a.timeout:.0f} s")
            else:
                agree = adjusted_rand_score(e["labels"], r["labels"])
                print(f"  n={n} {what}: {e['wall_s']:.1f} s wall, {e['cpu_s']:.1f} s CPU, peak "
                      f"{e['peak_mb']:.0f} MB, ARI {e['ari']:.3f}; labels ARI between the two runs {agree:.3f}",
                      flush=True)


def pruned_project(n, size, frames=7, k=30):
    """The project a finished pruned run of ``n`` images leaves (see the module's docstring)."""
    import scipy.sparse as sp
    from scipy.ndimage import gaussian_filter

    from iastudio.core.clusterbook import ClusterBook
    from iastudio.core.neighbors import candidate_pairs
    from iastudio.core.project import Project
    from iastudio.core.weights import attention_weights

    x, y = make_set(n, size)
    x = x.astype(np.float32)
    t0 = time.perf_counter()
    rows, cols = candidate_pairs(x, k)
    print(f"{n} images of {size} px; K = {k} candidates: {rows.size} pairs ({time.perf_counter() - t0:.1f} s)")
    flat = x.reshape(n, -1)
    labels = np.asarray(y, dtype=np.int64)
    history = []
    for f in range(frames):
        means = gaussian_filter(x, (0, 0.5 + 0.25 * f, 0.5 + 0.25 * f)).astype(np.float32)
        m = means.reshape(n, -1)
        d = np.sqrt(np.maximum(((m[rows] - m[cols]) ** 2).sum(1), 0)) if f else \
            np.sqrt(((flat[rows] - flat[cols]) ** 2).sum(1))
        dist = sp.csr_matrix((np.r_[d, d], (np.r_[rows, cols], np.r_[cols, rows])), shape=(n, n))
        w, _ = attention_weights(dist)
        stage = "similarity" if f % 2 == 0 and f < frames - 1 else "iteration" if f < frames - 1 else "done"
        history.append({"iteration": (f + 1) // 2, "stage": stage, "weights": w.astype(np.float32).tocsr(),
                        "means": means, "distances": dist.astype(np.float32).tocsr(), "labels": labels})
    nnz = np.diff(history[-1]["weights"].tocsc().indptr)
    last = history[-1]
    proj = Project(paths=[f"demo:digits/{i:05d}" for i in range(n)], labels=[str(v) for v in y], size=size,
                   transforms=np.zeros((n, 3)), base=x, scale=np.ones(n), offset=np.zeros((n, 2)),
                   parameters={"method": "ia", "neighbors": k, "beta_used": 1.0},
                   clusters=ClusterBook.from_labels(labels), history=history,
                   result={"cluster_means": np.stack([x[labels == c].mean(0) for c in range(labels.max() + 1)]),
                           "image_transforms": np.zeros((n, 3)), "scores": np.ones(n),
                           "weights": last["weights"], "input_distances": history[0]["distances"],
                           "final_distances": last["distances"], "run_labels": labels})
    print(f"W: {last['weights'].nnz} stored values, {nnz.min()}-{nnz.max()} per column (median "
          f"{int(np.median(nnz))}); {frames} recorded steps")
    return proj


def bench_project(n, size, frames=7, k=30):
    """Save / open time and file size of the project of a pruned run of ``n`` images (sparse W and distances)."""
    import tempfile
    import zipfile

    import scipy.sparse as sp

    from iastudio.core.project import load_project, save_project
    from iastudio.core.session import Session

    proj = pruned_project(n, size, frames, k)
    last = proj.history[-1]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.iaproj"
        t0 = time.perf_counter()
        save_project(path, proj)
        t_save = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        with zipfile.ZipFile(path) as zf:
            parts = {"sparse W and distances": 0, "per-image means": 0, "embedded images": 0, "other": 0}
            for info in zf.infolist():
                name = info.filename
                kind = ("sparse W and distances" if "." in name[:-4] else "per-image means" if "means" in name
                        and "cluster" not in name else "embedded images" if name == "arrays/base.npy" else "other")
                parts[kind] += info.compress_size
        t0 = time.perf_counter()
        back = load_project(path)
        t_load = time.perf_counter() - t0
        assert type(back.result["weights"]) is sp.csr_matrix
        assert (back.result["weights"] != last["weights"]).nnz == 0
        t0 = time.perf_counter()
        session = Session()
        session.open_project(path)
        t_open = time.perf_counter() - t0
        assert sp.issparse(session.final.result.weights)
    print(f"save {t_save:.1f} s, file {size_mb:.0f} MB ("
          + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in parts.items()) + ")")
    print(f"load_project {t_load:.1f} s; Session.open_project (frames, maps, curves rebuilt) {t_open:.1f} s; "
          f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def bench_autosave(n, size, frames=7, k=30):
    """How long the window's GUI thread is blocked by the autosave of a pruned run of ``n`` images."""
    import os
    import tempfile

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from iastudio.core.project import save_project

    proj = pruned_project(n, size, frames, k)
    with tempfile.TemporaryDirectory() as folder:
        os.environ["IA_STUDIO_HOME"] = folder  # the window's settings, lock and autosave: thrown away
        from iastudio.app.main_window import MainWindow

        app = QApplication.instance() or QApplication([])
        path = save_project(Path(folder) / "big.iaproj", proj)
        del proj
        w = MainWindow()
        w.show()
        assert w.projects.open_project(str(path))
        while w.projects.writing or not w.projects.autosave_path().exists():  # opening a run autosaves it
            app.processEvents()
            time.sleep(0.01)
        m = w.model
        m.session.rename_cluster(0, "renamed")
        t0 = time.perf_counter()
        snapshot = [m.session.to_project() for _ in range(5)]
        t_snap = (time.perf_counter() - t0) / 5
        del snapshot
        t0 = time.perf_counter()
        m.session.autosave(w.projects.autosave_path())  # the old way: written on the GUI thread
        t_old = time.perf_counter() - t0
        ticks = []
        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
        timer.start(10)
        t0 = time.perf_counter()
        w.projects.autosave()  # the app's way: the snapshot here, the write in a worker thread
        t_call = time.perf_counter() - t0
        job = w.projects._autosaving  # noqa: SLF001 - the write being measured
        assert job is not None
        assert not job.ended.is_set()
        while w.projects.writing:
            app.processEvents()
            time.sleep(0.001)
        t_all = time.perf_counter() - t0
        timer.stop()
        gaps = np.diff([t0, *ticks]) * 1e3
        print(f"autosave of {n} images ({path.stat().st_size / 1e6:.0f} MB):")
        print(f"  before (written on the GUI thread): the window blocked {t_old:.1f} s")
        print(f"  after: the GUI thread takes the snapshot in {t_snap * 1e3:.2f} ms (Session.to_project; "
              f"autosave() returned in {t_call * 1e3:.2f} ms); the worker wrote it in {job.seconds:.1f} s "
              f"({t_all:.1f} s until its end was reported)")
        print(f"  during the write, a 10 ms timer ticked {len(ticks)} times: gap median "
              f"{np.median(gaps):.0f} ms, 95th percentile {np.percentile(gaps, 95):.0f} ms, "
              f"longest {gaps.max():.0f} ms")
        w.projects.ask = lambda *a, **k: "discard"
        w.close()


def recall(n, size, queries=20, k=30):
    """Recall of each query's true 10 nearest invariant neighbours among its ``k`` candidates, and on the
    graph a pruned run aligns (candidates + pairs that share a near neighbour)."""
    from iastudio.core.neighbors import candidate_pairs, pruned_distances
    from iastudio.core.similarity import invariant_distances

    x, _ = make_set(n, size)
    rng = np.random.default_rng(0)
    qs = rng.choice(n, queries, replace=False)
    t0 = time.perf_counter()
    rows, cols = candidate_pairs(x, k)
    t_cand = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, graph, _ = pruned_distances(x, k)
    t_graph = time.perf_counter() - t0
    others = np.arange(n)
    hits = on_graph = 0
    for q in qs:
        o = others[others != q]
        d = invariant_distances(x, pairs=(np.full(o.size, q), o)).distances[q].toarray().ravel()
        d[q] = np.inf
        true = np.argsort(d)[:10]
        cand = set(cols[rows == q]) | set(rows[cols == q])
        hits += sum(int(t in cand) for t in true)
        aligned = set(graph[q].indices)
        on_graph += sum(int(t in aligned) for t in true)
    print(f"n={n}, {size} px: recall of the true 10 nearest invariant neighbours (exact distances to all "
          f"{n - 1} others, {queries} queries): among the K={k} candidates {hits / (10 * queries):.3f} "
          f"(found for all {n} images in {t_cand:.1f} s); on the aligned graph with the shared-neighbour "
          f"pairs {on_graph / (10 * queries):.3f} ({graph.nnz / n:.1f} aligned neighbours per image; "
          f"the pruned similarity stage took {t_graph:.1f} s)")



def agree(size=48, iterations=3, k=30):
    """Pruned (K = ``k``) against every pair on held-out sets of a few hundred images."""
    from quality_suite import SetSpec, make_set
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.attention import AttentionRun
    from iastudio.core.preprocess import preprocess

    full = 180.0  # (the names seed the sets)
    specs = [SetSpec("mid-letters-7", "letters", (45,) * 7, rotation=full, shift=6, noise=0.3),
             SetSpec("mid-photos-5", "photos", (70,) * 5, rotation=full, noise=0.5),
             SetSpec("mid-mixed-8", "mixed", (40,) * 8, rotation=full, noise=0.3),
             SetSpec("mid-mixed-12-unequal", "mixed", (60, 50, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5),
                     rotation=full, noise=0.2),
             SetSpec("mid-digits-6-unequal", "digits", (85, 70, 55, 40, 20, 10), rotation=full),
             SetSpec("mid-digits-10", "digits", (40,) * 10, rotation=full)]
    print(f"every pair against K = {k} ({iterations} iterations, {size} px, holdout material, seed 7)")
    for spec in specs:
        images, truth = make_set(spec, split="holdout", seed=7)
        x = preprocess(images, size=size).images
        row, labels = [], {}
        for nb in ("all", k):
            t = time.perf_counter()
            res = AttentionRun(x, backend="numpy", iterations=iterations, neighbors=nb).run()
            labels[nb] = res.labels
            row.append(f"{res.n_clusters} / {adjusted_rand_score(truth, res.labels):.3f} / "
                       f"{time.perf_counter() - t:.0f} s")
        print(f"  {spec.name} (n = {len(truth)}): every pair {row[0]}; K = {k} {row[1]}; between "
              f"{adjusted_rand_score(labels['all'], labels[k]):.3f}", flush=True)


if __name__ == "__main__":
    main()
