"""Class averages against the clean truth: IA's invariant means, plain aligned averages, ASPIRE's.

On the noise suite's cryo-EM-like sets (``noise_suite.py``; one tune and one holdout set, small by
default) the images are clustered by IA as ``ia-cluster`` does with k given (``preprocess`` with
``denoise="auto"``, then ``AttentionRun`` defaults).  For each true class (view) the cluster holding
most of its images gives

* ``IA mean``        -- the invariant mean of the cluster's *noisy* images
                        (:func:`~iastudio.core.cluster_means.cluster_invariant_means` with
                        ``realign_rounds=0``: each member aligned onto the cluster's medoid, then
                        the invariant mean; the recipe before issue 30);
* ``IA mean (dn)``   -- the same of the *denoised* images (what the run's means are made of);
* ``IA mean re-al.`` -- the invariant mean of the noisy images after ``--realign-rounds`` rounds of
                        global re-alignment of every member onto the current mean
                        (``cluster_invariant_means(..., realign_rounds=r)``, :func:`realign_to_mean`);
* ``IA mean re-al. (dn)`` -- the same of the denoised images;
* ``aligned avg``    -- the plain average of the cluster's noisy images, each aligned onto the
                        medoid once (the same alignment the invariant mean starts from);
* ``aligned avg (dn)`` -- the same of the denoised images;
* ``run means r0`` / ``run means rN`` -- the run's *own* class averages (``RunResult.cluster_means``,
                        what ``ia-cluster`` writes as ``means.npy`` and the app shows; made of the
                        denoised canvas by :func:`~iastudio.core.run_steps.align_to_clusters`) of the
                        same ``AttentionRun`` with ``realign_rounds=0`` (each image aligned onto its
                        cluster's medoid, then the invariant mean: before issue 30) and with
                        ``realign_rounds=N`` (``--realign-rounds``, the default 3): the cluster of the
                        view's majority, resampled from the canvas (the object scaled to the working
                        size) back to the input's pixels; ``--denoise off``: runs of the noisy images;
* ``run poses, undenoised`` -- the images *before* denoising (``preprocess(..., keep_undenoised=True)``)
                        averaged at the rounds-N run's own poses (``RunResult.image_transforms``,
                        found on the denoised images; :func:`~iastudio.core.cluster_means.pose_averages`:
                        what ``ia-cluster`` writes as ``means_undenoised.npy``), resampled as the
                        run's means; only where the denoiser applied;
* ``undenoised, inv. mean`` -- the invariant mean of the same images before denoising (Invariant
                        Attention, eq. 2.3: :func:`~iastudio.core.invariant_mean.invariant_means`,
                        equal weights, its defaults) *started* at those poses: whether the pose
                        averages are a local minimum of the invariant mean's objective on the raw
                        images, or its refinement moves them (``_undenoised_refined`` also prints
                        by how much the objective fell);
* ``ASPIRE avg``     -- ASPIRE's class average (``DebugClassAvgSource``, run from its own
                        environment by ``aspire_peer.py``) of the image of that view whose
                        neighbour class lies most inside its own ASPIRE cluster (ASPIRE's
                        RIRClass2D neighbours, spectral split, k given).  Its classes hold
                        ``--aspire-nbor`` + 1 images (default: as many as a true class).

Every average is measured in the 48-px frame of the input against the clean projection of its view:
its background (the median outside the disk of radius 20 px) is subtracted, then it is aligned onto
the clean image by the engine's own invariant alignment
(:func:`~iastudio.core.alignment.inspect_pair`); then

* ``relL2``   -- ``|s a - c| / |c|`` with ``s`` the least-squares scale (averages of noisy images
                 have no fixed intensity scale): ``sqrt(1 - cos^2)`` of the aligned average and the truth;
* ``FRC 0.5`` / ``FRC 0.143`` -- the resolution (pixels) where their Fourier ring correlation falls
                 below 0.5 / 0.143 (:func:`~iastudio.core.frc.frc_resolution`; 2 px = Nyquist).

Each column's cell is the mean over the views, and the seconds it took (the IA run's seconds are
the clustering's, shared by the IA columns).  A second table gives the two runs' seconds: the final
stage (``timings["final_s"]``: the class averages and every image's alignment onto them; on a pruned
run they begin while the guard's forecast runs, and these are their own seconds) and the whole
run, with rounds 0 and N, and their ratios (N over 0), measured in the same process one after the
other (so the ratios hold on a loaded machine).  ``--run-only`` measures only the two runs (e.g. a
pruned run: ``--snr 1 --per-view 250``, 1,000 images, pruned by ``neighbors="auto"`` above 300).

Usage::

    python benchmarks/bench_class_averages.py                         # SNR 0.1, 30 per view, tune + holdout
    python benchmarks/bench_class_averages.py --per-view 100 --no-aspire
    python benchmarks/bench_class_averages.py --snr 1 --per-view 250 --run-only   # a pruned run
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from noise_suite import NoiseSpec, make_noise_set  # noqa: E402

COLUMNS = ("IA mean", "IA mean (dn)", "IA mean re-al.", "IA mean re-al. (dn)", "aligned avg", "aligned avg (dn)",
           "run means r0", "run means rN", "run poses, undenoised", "undenoised, inv. mean", "ASPIRE avg")
BACKGROUND_RADIUS = 20.0  # px: outside this disk a 48-px particle frame holds background


def _disk(shape, radius):
    h, w = shape
    yy, xx = np.mgrid[:h, :w]
    return np.hypot(yy - (h - 1) / 2, xx - (w - 1) / 2) <= radius


def measure(average, clean) -> dict:
    """Relative L2 (after alignment and a least-squares scale) and FRC resolutions of one average."""
    from iastudio.core.alignment import inspect_pair
    from iastudio.core.frc import frc_resolution

    a = np.asarray(average, dtype=np.float64)
    a = a - np.median(a[~_disk(a.shape, BACKGROUND_RADIUS)])
    c = np.asarray(clean, dtype=np.float64)
    na, nc = np.linalg.norm(a), np.linalg.norm(c)
    if na == 0:
        return {"relL2": 1.0, "frc0.5": float("inf"), "frc0.143": float("inf")}
    aligned = inspect_pair(a / na, c / nc)["aligned"].astype(np.float64)
    cos = float((aligned * c).sum() / max(np.linalg.norm(aligned) * nc, 1e-300))
    return {"relL2": float(np.sqrt(max(1.0 - cos ** 2, 0.0))) if cos > 0 else 1.0,
            "frc0.5": frc_resolution(aligned, c, threshold=0.5)[1],
            "frc0.143": frc_resolution(aligned, c, threshold=0.143)[1]}


def aligned_averages(images, clusters, *, distances=None) -> np.ndarray:
    """Each cluster's members aligned onto its medoid once (the engine's alignment), then averaged."""
    from iastudio.core.cluster_means import medoid
    from iastudio.core.similarity import invariant_distances
    from iastudio.core.warp import warp

    images = np.asarray(images, dtype=np.float32)
    out = np.zeros((len(clusters), *images.shape[1:]), dtype=np.float32)
    for c, members in enumerate(clusters):
        members = np.asarray(members, dtype=int)
        centre = medoid(members, distances)
        subset = images[members]
        others = np.flatnonzero(members != centre)
        target = int(np.flatnonzero(members == centre)[0])
        t = np.zeros((members.size, 3))
        if others.size:
            sim = invariant_distances(subset, pairs=(others, np.full(others.size, target)))
            t[others] = sim.transform(others, np.full(others.size, target))
        out[c] = warp(subset, t.astype(np.float32)).mean(axis=0)
    return out


def to_input_frame(image, scale: float, shape) -> np.ndarray:
    """A canvas image (content scaled by ``scale`` about the centre) resampled back to the input's ``shape``."""
    from scipy.ndimage import affine_transform

    image = np.asarray(image, dtype=np.float64)
    centre, inner = (np.array(image.shape) - 1) / 2.0, (np.array(shape) - 1) / 2.0
    # output pixel p (input frame) reads the canvas at centre + scale (p - inner)
    return affine_transform(image, np.full(2, float(scale)), offset=centre - scale * inner, output_shape=tuple(shape),
                            order=3, mode="constant")


def _majority_labels(labels, truth, views):
    """For each view, the predicted cluster holding most of its images."""
    labels = np.asarray(labels)
    return [int(np.bincount(labels[truth == v]).argmax()) for v in views]


def _majority_clusters(labels, truth, views):
    """For each view, the members of the predicted cluster holding most of its images."""
    labels = np.asarray(labels)
    return [np.flatnonzero(labels == best) for best in _majority_labels(labels, truth, views)]


def _aspire_picks(peer, truth, views):
    """For each view: the image of that view whose neighbour class lies most inside its ASPIRE cluster."""
    labels, classes = np.asarray(peer["labels"]), np.asarray(peer["classes"])
    inside = np.array([np.mean(labels[row] == labels[i]) for i, row in enumerate(classes)])
    picks = []
    for v in views:
        idx = np.flatnonzero(truth == v)
        picks.append(int(idx[np.argmax(inside[idx])]))
    return picks, inside


def _undenoised_refined(raw, labels, transforms) -> tuple:
    """Each cluster's invariant mean of ``raw`` started at ``transforms``; and the objective's largest relative fall."""
    from iastudio.core.invariant_mean import invariant_means

    means, fall = [], 0.0
    for c in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == c)
        init = np.asarray(transforms, dtype=float)[members][:, None, :]
        weights = np.full((members.size, 1), 1.0 / members.size, dtype=np.float32)
        state = invariant_means(raw[members], weights, init, rtol=1e-3)
        first, last = float(np.ravel(state.objective[0])[0]), float(np.ravel(state.objective[-1])[0])
        fall = max(fall, (first - last) / first if first > 0 else 0.0)
        means.append(np.asarray(state.means[0], dtype=np.float32))
    return np.stack(means), fall


def evaluate(spec, *, split: str, aspire: bool, aspire_nbor: int = 10, seed: int = 0, realign_rounds: int = 3,
             leave_one_out: bool = True, run_only: bool = False, run_denoise: str = "auto",
             run_scale: str = "content") -> dict:
    """All columns on one set: ``{column: (mean relL2, mean FRC0.5 px, mean FRC0.143 px, seconds)}``.

    ``_runs`` holds the two runs' seconds: ``{rounds: (final stage, whole run)}`` (rounds 0 and
    ``realign_rounds``; the preprocessing and denoising, shared, are not in them).
    """
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.attention import AttentionRun
    from iastudio.core.cluster_means import cluster_invariant_means, pose_averages
    from iastudio.core.denoise import denoise
    from iastudio.core.preprocess import preprocess

    images, labels, clean = make_noise_set(spec, split=split, seed=seed)
    truth = np.array([int(s.removeprefix("view")) for s in labels])
    views = list(range(spec.views))
    k = len(views)
    stack = np.stack(images).astype(np.float64)
    out = {"_n": len(images)}

    t0 = time.perf_counter()
    canvas = preprocess(images, size=stack.shape[1], denoise=run_denoise, scale=run_scale, keep_undenoised=True)
    t_prep = time.perf_counter() - t0
    runs, out["_runs"] = {}, {}
    for rounds in (0, realign_rounds):  # the same run but its final stage; the old way first
        t = time.perf_counter()
        runs[rounds] = AttentionRun(canvas.images, backend="numpy", clusters=k, realign_rounds=rounds).run()
        out["_runs"][rounds] = (runs[rounds].timings["final_s"], time.perf_counter() - t)
    res = runs[realign_rounds]
    t_run = t_prep + out["_runs"][0][1]
    out["_ari"] = adjusted_rand_score(truth, res.labels)
    out["_note"] = canvas.denoise.note if canvas.denoise is not None else ""
    scales = np.asarray(canvas.scale, dtype=float)
    out["_canvas_scale"] = (float(np.min(scales)), float(np.max(scales)))
    out["_same_labels"] = bool(np.array_equal(runs[0].labels, res.labels))
    picked = _majority_labels(res.labels, truth, views)
    for rounds, name in ((0, "run means r0"), (realign_rounds, "run means rN")):
        # the canvas frame back to the input's (each cluster: its members' median canvas scale)
        rows = [measure(to_input_frame(runs[rounds].cluster_means[c], np.median(scales[res.labels == c]),
                                       clean[v].shape), clean[v])
                for c, v in zip(picked, views, strict=True)]
        out[name] = (*(float(np.mean([r[key] for r in rows])) for key in ("relL2", "frc0.5", "frc0.143")),
                     out["_runs"][rounds][0], rows)
    if canvas.undenoised is not None:  # the images before denoising, averaged at the run's poses
        t = time.perf_counter()
        raw = pose_averages(canvas.undenoised, res.labels, res.image_transforms, mirrored=res.mirrored)
        secs = time.perf_counter() - t
        rows = [measure(to_input_frame(raw[c], np.median(scales[res.labels == c]), clean[v].shape), clean[v])
                for c, v in zip(picked, views, strict=True)]
        out["run poses, undenoised"] = (*(float(np.mean([r[key] for r in rows]))
                                          for key in ("relL2", "frc0.5", "frc0.143")), secs, rows)
        if res.mirrored is None or not np.any(res.mirrored):  # (invariant_means starts from no mirrored pose)
            t = time.perf_counter()
            refined, out["_refined_fall"] = _undenoised_refined(np.asarray(canvas.undenoised, dtype=np.float32),
                                                                res.labels, res.image_transforms)
            secs = time.perf_counter() - t
            rows = [measure(to_input_frame(refined[c], np.median(scales[res.labels == c]), clean[v].shape), clean[v])
                    for c, v in zip(picked, views, strict=True)]
            out["undenoised, inv. mean"] = (*(float(np.mean([r[key] for r in rows]))
                                              for key in ("relL2", "frc0.5", "frc0.143")), secs, rows)
    out["_run_s"] = t_run
    if run_only:
        return out
    clusters = _majority_clusters(res.labels, truth, views)

    scale = 1.0 / float(np.mean(np.linalg.norm(stack, axis=(1, 2))))  # one factor: intensities kept
    noisy = (stack * scale).astype(np.float32)
    den, _ = denoise(list(stack), mode="auto")
    den = np.stack(den).astype(np.float32) * np.float32(scale)

    def cols(name, make):
        t = time.perf_counter()
        avgs = make()
        secs = time.perf_counter() - t
        rows = [measure(avgs[i], clean[v]) for i, v in enumerate(views)]
        out[name] = (*(float(np.mean([r[key] for r in rows])) for key in ("relL2", "frc0.5", "frc0.143")),
                     secs, rows)

    dists = res.input_distances
    cols("IA mean", lambda: cluster_invariant_means(noisy, clusters, distances=dists, realign_rounds=0))
    cols("IA mean (dn)", lambda: cluster_invariant_means(den, clusters, distances=dists, realign_rounds=0))
    again = dict(distances=dists, realign_rounds=realign_rounds, leave_one_out=leave_one_out)
    cols("IA mean re-al.", lambda: cluster_invariant_means(noisy, clusters, **again))
    cols("IA mean re-al. (dn)", lambda: cluster_invariant_means(den, clusters, **again))
    cols("aligned avg", lambda: aligned_averages(noisy, clusters, distances=dists))
    cols("aligned avg (dn)", lambda: aligned_averages(den, clusters, distances=dists))
    if aspire:
        from aspire_peer import aspire_python, run_peer

        if aspire_python() is None:
            out["_aspire"] = "ASPIRE's environment not found"
        else:
            try:
                t = time.perf_counter()
                peer = run_peer(stack, k, averages=True, n_nbor=aspire_nbor)
                secs = time.perf_counter() - t
                picks, _ = _aspire_picks(peer, truth, views)
                rows = [measure(peer["averages"][i], clean[v]) for i, v in zip(picks, views, strict=True)]
                out["ASPIRE avg"] = (*(float(np.mean([r[key] for r in rows]))
                                       for key in ("relL2", "frc0.5", "frc0.143")), secs, rows)
                out["_aspire_ari"] = adjusted_rand_score(truth, peer["labels"])
            except (RuntimeError, OSError, KeyError) as exc:  # the peer's failure is reported, the rest stands
                out["_aspire"] = f"ASPIRE failed: {str(exc)[:200]}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--snr", type=float, default=0.1)
    p.add_argument("--per-view", type=int, default=30, help="images per view (4 views; default 30)")
    p.add_argument("--split", choices=("tune", "holdout", "both"), default="both")
    p.add_argument("--no-aspire", action="store_true", help="skip ASPIRE's class averages (slow)")
    p.add_argument("--aspire-nbor", type=int, default=None,
                   help="neighbours in each ASPIRE class (default: images per view - 1, so that its averages "
                        "hold as many images as a true class; ASPIRE's peer default is 10)")
    p.add_argument("--realign-rounds", type=int, default=3, help="rounds of the re-aligned means (default 3)")
    p.add_argument("--all-in-mean", action="store_true",
                   help="re-align each member onto the mean of all (default: onto the others' mean)")
    p.add_argument("--denoise", choices=("auto", "off"), default="auto",
                   help="the runs' preprocessing (default auto, as ia-cluster; off: the runs' means of the noisy "
                        "images)")
    p.add_argument("--scale", choices=("content", "frame"), default="content",
                   help="the runs' preprocessing (default content, as ia-cluster; frame: every image at its own "
                        "scale, for --denoise off, where finding the object in a noisy image fails)")
    p.add_argument("--run-only", action="store_true",
                   help="only the run's own means and the two runs' seconds (no other columns, no ASPIRE)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    spec = NoiseSpec(f"cryo-snr{args.snr:g}-{args.per_view}", args.snr, args.per_view)
    splits = ("tune", "holdout") if args.split == "both" else (args.split,)
    nbor = args.aspire_nbor if args.aspire_nbor is not None else max(args.per_view - 1, 1)
    print(f"# class averages against the clean views, {spec.name} (48 px, NumPy); cells: "
          "relative L2 after alignment / FRC resolution at 0.5 / at 0.143 (px, 2 = Nyquist) / seconds; "
          f"ASPIRE classes of {nbor + 1} images; re-aligned: {args.realign_rounds} rounds; the runs: --denoise "
          f"{args.denoise} --scale {args.scale}"
          + (", onto the mean of all" if args.all_in_mean else ", leave-one-out"))
    print("| split | n | IA ARI (k given) | " + " | ".join(COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    timing_rows = []
    for split in splits:
        r = evaluate(spec, split=split, aspire=not (args.no_aspire or args.run_only), aspire_nbor=nbor,
                     realign_rounds=args.realign_rounds, leave_one_out=not args.all_in_mean, run_only=args.run_only,
                     run_denoise=args.denoise, run_scale=args.scale)
        (f0, w0), (f1, w1) = r["_runs"][0], r["_runs"][args.realign_rounds]
        timing_rows.append(f"| {split} | {r['_n']} | {f0:.1f} | {f1:.1f} | {f1 / max(f0, 1e-9):.2f} | {w0:.1f} | "
                           f"{w1:.1f} | {w1 / max(w0, 1e-9):.2f} | {(f1 - f0) / max(w0, 1e-9):+.1%} |")
        cells = []
        for col in COLUMNS:
            if col in r:
                rel, f5, f1, secs = r[col][:4]
                cells.append(f"{rel:.3f} / {f5:.1f} / {f1:.1f} / {secs:.0f} s")
            else:
                cells.append("–")
        print(f"| {split} | {r['_n']} | {r['_ari']:.2f} ({r['_run_s']:.0f} s) | " + " | ".join(cells) + " |",
              flush=True)
        for col in COLUMNS:
            if col in r:
                per_view = ", ".join(f"{row['relL2']:.2f}/{row['frc0.5']:.1f}/{row['frc0.143']:.1f}"
                                     for row in r[col][4])
                print(f"#   {split} {col} per view: {per_view}")
        print(f"#   {split}: {r['_note']}" + (f"; ASPIRE ARI {r['_aspire_ari']:.2f}" if "_aspire_ari" in r else "")
              + (f"; {r['_aspire']}" if "_aspire" in r else "")
              + (f"; the invariant mean of the undenoised images lowered its objective by at most "
                 f"{r['_refined_fall']:.2%} from the run's poses" if "_refined_fall" in r else "")
              + f"; canvas scale {r['_canvas_scale'][0]:.3f}-{r['_canvas_scale'][1]:.3f}; the two runs' clusters "
              + ("equal" if r["_same_labels"] else "DIFFER"), flush=True)
    print(f"\n# the run's seconds, realign_rounds 0 and {args.realign_rounds} (one after the other, one process)")
    print("| split | n | final stage, r0 (s) | final stage, rN (s) | ratio | run, r0 (s) | run, rN (s) | ratio | "
          "added, share of the r0 run |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(timing_rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
