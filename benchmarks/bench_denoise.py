"""The denoiser in front of the engine (``core/denoise.py``): which one, how well, at what cost.

``choose``    on the noisy suite's sets (tune split by default): the relative
              L2 error of each denoiser's output against the noise-free images,
              and the ARI of k-means (true k) on rotation-invariant Fourier
              features of its output, for no denoising, steerable PCA
              (Fourier--Bessel) and rotation-augmented pixel PCA, with the
              seconds each took.  The denoiser was picked on ``--split tune``.
``overhead``  a clean run of 60 rotated digits (6 classes x 10, full circle):
              ``preprocess`` + the run with ``denoise="off"`` against
              ``denoise="auto"`` (which must step aside), as a ratio.

Usage::

    python benchmarks/bench_denoise.py choose --split tune
    python benchmarks/bench_denoise.py overhead
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

CHOOSE_SETS = (NoiseSpec("cryo-snr1-30", 1.0, 30), NoiseSpec("cryo-snr0.3-30", 0.3, 30),
               NoiseSpec("cryo-snr0.1-30", 0.1, 30), NoiseSpec("cryo-snr0.1-100", 0.1, 100),
               NoiseSpec("cryo-snr0.05-300", 0.05, 300))


def choose(split: str) -> None:
    from bench_quality import _kmeans, _score, rotation_invariant_features

    from iastudio.core.denoise import augmented_pca, estimate_noise, steerable_pca
    from iastudio.core.preprocess import preprocess

    print(f"# denoisers on the noisy suite, split {split}: rel. L2 error to the clean images / "
          f"ARI of k-means on invariant Fourier features of the output (seconds of denoising)")
    print(f"{'set':18s} {'n':>5s}  {'none':>20s}  {'steerable PCA':>22s}  {'augmented PCA':>22s}")
    for spec in CHOOSE_SETS:
        images, labels, _, truth = make_noise_set(spec, split=split, clean_images=True)
        x = np.stack(images)
        sigma = estimate_noise(x)
        cells = []
        for name in ("none", "steerable", "augmented"):
            t = time.perf_counter()
            if name == "none":
                out = x
            elif name == "steerable":
                out, _ = steerable_pca(x, noise_var=sigma ** 2)
            else:
                out, _ = augmented_pca(x, noise_var=sigma ** 2)
            sec = time.perf_counter() - t
            err = np.linalg.norm(out - truth) / np.linalg.norm(truth)
            feats = rotation_invariant_features(preprocess(list(out), size=48).images)
            ari = _score(labels, _kmeans(feats, spec.views))[0]
            cells.append(f"{err:6.3f} / {ari:5.2f} ({sec:5.1f}s)")
        print(f"{spec.name:18s} {len(x):5d}  " + "  ".join(f"{c:>22s}" for c in cells), flush=True)


def overhead(repeats: int) -> None:
    from quality_suite import SetSpec, make_set

    from iastudio.core.attention import AttentionRun
    from iastudio.core.preprocess import preprocess

    spec = SetSpec("digits-6-clean", "digits", (10,) * 6, rotation=180.0, note="60 rotated digits, clean")
    images, _ = make_set(spec, split="holdout")
    times = {"off": [], "auto": []}
    for _ in range(repeats):
        for mode in ("off", "auto"):
            t = time.perf_counter()
            canvas = preprocess(images, size=48, denoise=mode)
            AttentionRun(canvas.images, backend="numpy").run()
            times[mode].append(time.perf_counter() - t)
    t = time.perf_counter()
    rep = preprocess(images, size=48, denoise="auto").denoise
    dec = time.perf_counter() - t
    off, auto = min(times["off"]), min(times["auto"])
    print(f"# 60 clean rotated digits, 48 px, default run (best of {repeats}); loaded machine")
    print(f"denoise off  {off:7.2f} s")
    print(f"denoise auto {auto:7.2f} s   ratio auto/off {auto / off:.3f}")
    print(f"auto's decision: {rep.note} (preprocess with it: {dec:.2f} s)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("choose")
    c.add_argument("--split", choices=("tune", "holdout"), default="tune")
    o = sub.add_parser("overhead")
    o.add_argument("--repeats", type=int, default=1)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.cmd == "choose":
        choose(args.split)
    else:
        overhead(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
