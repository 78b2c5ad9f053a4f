"""Pairwise invariant distances: the engine vs a straightforward scikit-image loop.

For every pair and every angle of a 5-degree grid (full circle) the baseline
calls ``skimage.transform.rotate`` and ``skimage.registration.
phase_cross_correlation`` and keeps the angle with the smallest error.  Both
are timed in the same run on the same images (handwritten digits from
scikit-learn, rotated over the whole circle and shifted, 40 px), and both
alignments are scored on pairs with known transforms.

    python benchmarks/bench_similarity.py            # n = 24 and 100
    python benchmarks/bench_similarity.py --full-baseline

For n = 100 the baseline is timed on a random sample of pairs and scaled to
all pairs (its cost per pair is constant) unless ``--full-baseline``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from iastudio.core import se2  # noqa: E402
from iastudio.core.backend import get_backend, to_host  # noqa: E402
from iastudio.core.demos import _digit_images  # noqa: E402
from iastudio.core.preprocess import preprocess  # noqa: E402
from iastudio.core.similarity import invariant_distances  # noqa: E402
from iastudio.core.warp import warp  # noqa: E402

STEP = 5.0


def make_set(n, size, seed):
    rng = np.random.default_rng(seed)
    per = int(np.ceil(n / 4))
    originals, _ = _digit_images((0, 1, 3, 4), per, rng)
    originals = originals[rng.permutation(len(originals))[:n]]
    tau = se2.random_transforms(n, rotation_range=180, shift_range=4, seed=rng)
    imgs = np.clip(warp(originals, tau), 0, None)
    return preprocess(list(imgs), size=size).images, originals


def known_pairs(originals, size, k, seed):
    rng = np.random.default_rng(seed + 1)
    tau = se2.random_transforms(k, rotation_range=180, shift_range=4, seed=rng)
    base = originals[:k]
    moved = np.clip(warp(base, tau), 0, None)
    canvas = preprocess(list(base) + list(moved), size=size)
    scale = canvas.scale[0]
    tau_canvas = tau.copy()
    tau_canvas[:, 1:] *= scale
    return canvas.images[:k], canvas.images[k:], tau_canvas


def baseline_pair(vi, vj, angles_deg):
    """Best (angle, shift, error) aligning vi onto vj by rotate + phase correlation."""
    from skimage.registration import phase_cross_correlation
    from skimage.transform import rotate

    best = (np.inf, 0.0, np.zeros(2))
    for a in angles_deg:
        rot = rotate(vi, a, order=3, mode="constant")
        shift, err, _ = phase_cross_correlation(vj, rot, normalization=None)
        if err < best[0]:
            best = (err, a, shift)
    return best


def baseline_distances(images, pairs, angles_deg):
    for i, j in pairs:
        baseline_pair(images[i], images[j], angles_deg)


def baseline_transform(vi, vj, angles_deg, sign):
    _, a, shift = baseline_pair(vi, vj, angles_deg)
    theta = sign * np.deg2rad(a)
    d = -np.asarray(shift, dtype=float)  # ndimage.shift semantics -> sampling offset
    c, s = np.cos(theta), np.sin(theta)
    return np.array([theta, -s * d[0] + c * d[1], c * d[0] + s * d[1]])


def rotate_sign(img):
    """+1 if skimage's rotate(a) equals our warp by +a, else -1."""
    from skimage.transform import rotate

    r = rotate(img, 30, order=3, mode="constant")
    plus = warp(img[None], np.array([[np.deg2rad(30), 0, 0]]))[0]
    minus = warp(img[None], np.array([[np.deg2rad(-30), 0, 0]]))[0]
    return 1.0 if np.abs(r - plus).sum() < np.abs(r - minus).sum() else -1.0


def errors(est, true):
    dth = np.abs(np.rad2deg(se2.wrap_angle(est[:, 0] - true[:, 0])))
    dt = np.hypot(est[:, 1] - true[:, 1], est[:, 2] - true[:, 2])
    return dth, dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="24,100")
    ap.add_argument("--px", type=int, default=40)
    ap.add_argument("--sample-pairs", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs for n <= 50")
    ap.add_argument("--full-baseline", action="store_true")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--no-baseline", action="store_true",
                    help="time the engine only and report its peak memory (e.g. --sizes 500 --px 64)")
    args = ap.parse_args(argv)
    backend = get_backend(args.backend)
    angles_deg = np.arange(0, 360, STEP)
    print(f"backend: {backend.describe()}; {args.px} px; {STEP:g} degree grid, full circle")
    for n in [int(x) for x in args.sizes.split(",")]:
        images, originals = make_set(n, args.px, seed=n)
        xs = backend.asarray(images)
        invariant_distances(xs[:3], angle_step=STEP)  # warm-up (imports, FFT plans)
        repeat = args.repeat if n <= 50 else 1  # short runs: best of a few, for both methods
        t_ours = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = invariant_distances(xs, angle_step=STEP)
            t_ours = min(t_ours, time.perf_counter() - t0)
        if args.no_baseline:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"n={n:4d}: engine {t_ours:8.2f} s, peak resident memory of the process {peak:.0f} MB")
            continue
        pairs = np.column_stack(np.triu_indices(n, 1))
        sample = pairs
        if not args.full_baseline and len(pairs) > args.sample_pairs:
            sample = pairs[np.random.default_rng(0).choice(len(pairs), args.sample_pairs, replace=False)]
        t_base = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            baseline_distances(images, sample, angles_deg)
            t_base = min(t_base, (time.perf_counter() - t0) * len(pairs) / len(sample))
        note = "" if len(sample) == len(pairs) else f" (timed on {len(sample)} of {len(pairs)} pairs, scaled)"
        best = f" (best of {repeat} each)" if repeat > 1 else ""
        print(f"n={n:4d}: engine {t_ours:8.2f} s | skimage loop {t_base:8.2f} s{note} | "
              f"speed-up {t_base / t_ours:6.1f}x{best}")
        _ = to_host(res.distances)

    if args.no_baseline:
        return
    # alignment error on pairs with known transforms
    _, originals = make_set(24, args.px, seed=7)
    a, b, true = known_pairs(originals, args.px, 20, seed=7)
    both = backend.asarray(np.concatenate([a, b]))
    k = len(a)
    ours = np.array([invariant_distances(both[[i, k + i]], angle_step=STEP).transforms[0, 1] for i in range(k)])
    sign = rotate_sign(a[0])
    base = np.array([baseline_transform(a[i], b[i], angles_deg, sign) for i in range(k)])
    for name, est in (("engine", ours), ("skimage loop", base)):
        dth, dt = errors(est, true)
        print(f"alignment error, {name:12s}: angle mean {dth.mean():.3f} deg (max {dth.max():.3f}), "
              f"shift mean {dt.mean():.3f} px (max {dt.max():.3f})")


if __name__ == "__main__":
    main()
