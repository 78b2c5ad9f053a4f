"""Cluster quality on image sets the engine was not tuned on.

Builds the suite of :mod:`quality_suite` (digits, letters, photographs, keys;
2 to 10 classes; equal and unequal sizes down to classes of 2 and 3; +-45 deg
and full-circle rotations; shifts; noise; frames of different pixel sizes;
two classes that differ by a small detail; one class) and prints one table:
per set, ARI / NMI / k found and the time for

* ``IA auto``      -- the defaults: k, beta and iterations automatic
* ``IA k``         -- the defaults with the true k given
* ``spec(D0) k``   -- spectral clustering (the same read-out) of the *input*
                      invariant distances, true k given: what IA must not fall below
* ``KA k``         -- kernel attention (plain distances), true k
* ``km pixels``    -- k-means on the raw (preprocessed) pixels, true k
* ``km rotF``      -- k-means on rotation- and translation-invariant Fourier
                      features (polar |FFT| with the angle's |FFT|), true k
* ``km rotF+dn``   -- the same features of the denoised images (only with
                      ``--noise``: what the denoiser alone gives the baseline)
* ``ASPIRE``       -- ASPIRE's ``RIRClass2D`` neighbours split by spectral
                      clustering, true k, run in ASPIRE's own environment by
                      ``aspire_peer.py`` (only when that environment exists;
                      ``IA_ASPIRE_PYTHON`` names its interpreter); with
                      ``--noise`` too, on the images as they are

``--noise`` runs the noisy suite of :mod:`noise_suite` instead (cryo-EM-like
projections of random 3-D densities, 4 views, SNR 3 ... 0.05, 30 ... 300
images per view; ``--noise full`` every SNR x size).  ``--denoise`` (default
``auto``, as ``ia-cluster``) is the denoiser in front of the IA columns; the
baseline columns always see the images as they are, except ``km rotF+dn``.
``--ctf`` gives the particle sets a contrast transfer function (``noise_suite(ctf=True)``);
``--phase-flip`` phase-flips those images first with each image's known defocus
(``core.ctf.ctf_phase_flip``), for every column.  ``--astigmatism`` makes the CTF astigmatic
(``noise_suite(ctf=True, astigmatism=True)``); the flip then uses each image's astigmatism, or with
``--flip-mean`` only the mean of its U and V defocus (what was done before astigmatism was read).

Usage::

    python benchmarks/bench_quality.py                 # both splits, 48 px
    python benchmarks/bench_quality.py --split holdout --size 48
    python benchmarks/bench_quality.py --fast          # the small subset the tests run
    python benchmarks/bench_quality.py --neighbors 12 --methods "IA auto" "IA k" "spec(D0) k"
                                                       # the pruned path (K = 12) on the same sets
    python benchmarks/bench_quality.py --noise --split holdout   # the noisy suite
    python benchmarks/bench_quality.py --noise --denoise off     # ... without the denoiser
    python benchmarks/bench_quality.py --noise --ctf --split tune               # particles with a CTF
    python benchmarks/bench_quality.py --noise --ctf --phase-flip --split tune  # ... phase-flipped first
    python benchmarks/bench_quality.py --noise --ctf --astigmatism --phase-flip [--flip-mean]

``--split tune`` is the material the defaults were chosen on; ``holdout`` is
disjoint material (other digits, other samples, other letters and photos)
used only to report.
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

from noise_suite import (  # noqa: E402
    CTF_MICROSCOPE,
    NoiseSpec,
    ctf_astigmatism,
    ctf_defocus,
    make_noise_set,
    noise_suite,
)
from quality_suite import make_set, suite  # noqa: E402

METHODS = ("IA auto", "IA k", "spec(D0) k", "KA k", "km pixels", "km rotF")
NOISE_METHODS = ("IA auto", "IA k", "spec(D0) k", "km rotF", "km rotF+dn")


def rotation_invariant_features(images: np.ndarray, n_radii: int = 12, n_angles: int = 32) -> np.ndarray:
    """|FFT| (shift-invariant), sampled on a polar grid, |FFT| along the angle (rotation-invariant)."""
    from scipy.ndimage import map_coordinates

    n, h, w = images.shape
    mag = np.abs(np.fft.fftshift(np.fft.fft2(images), axes=(1, 2)))
    c = np.array([h // 2, w // 2], dtype=float)
    r = np.linspace(1, min(h, w) / 2 - 1, n_radii)
    a = np.linspace(0, np.pi, n_angles, endpoint=False)  # |F| is symmetric
    rr, aa = np.meshgrid(r, a, indexing="ij")
    coords = np.stack([c[0] + rr * np.sin(aa), c[1] + rr * np.cos(aa)])
    polar = np.stack([map_coordinates(m, coords, order=1) for m in mag])
    feats = np.abs(np.fft.rfft(polar, axis=2))[:, :, :8]
    feats = feats.reshape(n, -1)
    return feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)


def _kmeans(x, k):
    from sklearn.cluster import KMeans

    if k == 1:
        return np.zeros(len(x), dtype=int)
    return KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(x)


def _score(truth, labels):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    k_true = len(set(truth))
    if k_true == 1:  # ARI is undefined for one true class: 1 when everything is together
        one = float(len(set(labels)) == 1)
        return one, one
    return adjusted_rand_score(truth, labels), normalized_mutual_info_score(truth, labels)


def phase_flipped(images, spec, *, split: str, mean_only: bool = False) -> np.ndarray:
    """A CTF set's images phase-flipped with each image's known defocus (``core.ctf.ctf_phase_flip``).

    An astigmatic set's images are flipped with their astigmatism, or with ``mean_only`` with the mean
    of U and V along every direction.
    """
    from iastudio.core.ctf import ctf_phase_flip

    scope = {k: v for k, v in CTF_MICROSCOPE.items() if k != "b_factor"}
    if getattr(spec, "astigmatism", False) and not mean_only:
        u, v, angle = ctf_astigmatism(spec, split=split)
        return ctf_phase_flip(np.stack(images), u, defocus_v=v, astigmatism_angle=angle, **scope)
    return ctf_phase_flip(np.stack(images), ctf_defocus(spec, split=split), **scope)


def evaluate(spec, *, split: str, size: int, iterations: int = 3, methods=METHODS, neighbors="auto",
             denoise: str = "off", phase_flip: bool = False, flip_mean: bool = False) -> dict:
    """Run every method on one set; returns ``{method: (ari, nmi, k, seconds)}``.

    ``denoise`` is the denoiser's mode in front of the IA columns (``preprocess(denoise=)``);
    ``phase_flip``: a CTF set's images are phase-flipped first, for every column (a user's
    preprocessing: the defocus is known); ``flip_mean``: an astigmatic set's with the mean defocus.
    """
    from iastudio.core.attention import AttentionRun
    from iastudio.core.clustering import read_clusters
    from iastudio.core.preprocess import preprocess

    if isinstance(spec, NoiseSpec):
        images, truth, _ = make_noise_set(spec, split=split)
    else:
        images, truth = make_set(spec, split=split)
    k_true = len(set(truth))
    out = {"_k_choice": None, "_notes": []}
    if phase_flip and getattr(spec, "ctf", False):
        images = list(phase_flipped(images, spec, split=split, mean_only=flip_mean))
        out["_notes"].append("phase-flipped with each image's defocus"
                             + (" (the mean of U and V)" if flip_mean and getattr(spec, "astigmatism", False) else ""))
    t = time.perf_counter()
    canvas = preprocess(images, size=size, denoise=denoise)
    prep = time.perf_counter() - t
    x = canvas.images
    rep = canvas.denoise
    if rep is not None:
        out["_notes"].append(f"{rep.note} ({prep:.1f} s with preprocessing)")
    raw = preprocess(images, size=size).images if rep is not None and rep.applied else x

    if "IA auto" in methods:
        t = time.perf_counter()
        res = AttentionRun(x, backend="numpy", iterations=iterations, neighbors=neighbors).run()
        out["IA auto"] = (*_score(truth, res.labels), res.n_clusters, prep + time.perf_counter() - t)
        out["_k_choice"] = res.k_choice
        out["_notes"] += [f"IA auto: {note}" for note in res.notes]
    if "IA k" in methods or "spec(D0) k" in methods:
        t = time.perf_counter()
        res_k = AttentionRun(x, backend="numpy", iterations=iterations, clusters=k_true, neighbors=neighbors).run()
        out["IA k"] = (*_score(truth, res_k.labels), res_k.n_clusters, prep + time.perf_counter() - t)
        out["_notes"] += [f"IA k: {note}" for note in res_k.notes]
        t = time.perf_counter()
        lab0, _ = read_clusters(res_k.input_distances if neighbors == "auto" else
                                _dense_inputs(x), k=k_true)
        out["spec(D0) k"] = (*_score(truth, lab0), k_true, time.perf_counter() - t)
    if "KA k" in methods:
        t = time.perf_counter()
        ka = AttentionRun(x, backend="numpy", method="ka", iterations=iterations, clusters=k_true).run()
        out["KA k"] = (*_score(truth, ka.labels), ka.n_clusters, prep + time.perf_counter() - t)
    if "km pixels" in methods:
        t = time.perf_counter()
        out["km pixels"] = (*_score(truth, _kmeans(raw.reshape(len(raw), -1), k_true)), k_true,
                            time.perf_counter() - t)
    if "km rotF" in methods:
        t = time.perf_counter()
        feats = rotation_invariant_features(raw)
        out["km rotF"] = (*_score(truth, _kmeans(feats, k_true)), k_true, time.perf_counter() - t)
    if "km rotF+dn" in methods:
        t = time.perf_counter()
        feats = rotation_invariant_features(x)
        out["km rotF+dn"] = (*_score(truth, _kmeans(feats, k_true)), k_true, prep + time.perf_counter() - t)
    if "ASPIRE" in methods:
        out["ASPIRE"] = _aspire(raw, truth, k_true)
    return out


def _dense_inputs(x):
    """Every pair's invariant distances (the spectral column is always the exhaustive one)."""
    from iastudio.core.similarity import invariant_distances

    return invariant_distances(x).distances


def _aspire(x, truth, k_true):
    """ASPIRE's rotation-invariant class averaging as a peer (not a dependency).

    ``RIRClass2D`` gives each image its nearest neighbours under rotation (and
    reflection) from bispectrum features; the symmetrised neighbour graph is
    split into the true k by spectral clustering, as for the other columns.  It
    runs in ASPIRE's own environment (``aspire_peer.py``, by subprocess); the
    seconds are ASPIRE's own wall time there (without starting its interpreter).
    """
    from aspire_peer import run_peer

    if k_true == 1:
        return (*_score(truth, np.zeros(len(x), dtype=int)), 1, 0.0)
    try:
        peer = run_peer(np.asarray(x, dtype=np.float64), k_true)
    except (RuntimeError, OSError) as exc:  # a failed peer leaves its cell empty, the table goes on
        print(f"# ASPIRE failed: {str(exc)[-300:]}", file=sys.stderr)
        return None
    return (*_score(truth, peer["labels"]), k_true, float(peer["wall_s"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=("tune", "holdout", "both"), default="both")
    p.add_argument("--size", type=int, default=48)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--fast", action="store_true", help="only the small subset the tests run")
    p.add_argument("--only", nargs="*", help="set names to run")
    p.add_argument("--methods", nargs="*", help="columns to compute (default: all; ASPIRE when installed)")
    p.add_argument("--neighbors", default="auto",
                   help="IA columns: candidate neighbours K (a number prunes even these small sets; default auto)")
    p.add_argument("--noise", nargs="?", const="default", choices=("default", "full", "fast", "cells"), default=None,
                   help="the noisy cryo-EM-like suite instead (full: every SNR x size; fast: two small sets; "
                        "cells: fluorescence-like cells with Poisson noise)")
    p.add_argument("--ctf", action="store_true",
                   help="with --noise: the particle sets with a CTF (cryo-ctf-...; default list: clean, SNR 1, 0.3, "
                        "0.1 at 30 per view, SNR 0.1 at 100)")
    p.add_argument("--phase-flip", action="store_true",
                   help="with --ctf: phase-flip each image with its known defocus first (every column)")
    p.add_argument("--astigmatism", action="store_true",
                   help="with --ctf: an astigmatic CTF (dU - dV 500-1500 Å, random angles; cryo-ctf-astig-...)")
    p.add_argument("--flip-mean", action="store_true",
                   help="with --phase-flip on astigmatic sets: flip with the mean of U and V, not the astigmatism")
    p.add_argument("--denoise", choices=("auto", "on", "off"), default="auto",
                   help="the denoiser in front of the IA columns (default auto, as ia-cluster)")
    args = p.parse_args(argv)
    if args.ctf and args.noise in (None, "cells"):
        p.error("--ctf needs the particle noise suite (--noise, --noise full or --noise fast)")
    if args.phase_flip and not args.ctf:
        p.error("--phase-flip needs --ctf (only the CTF sets have a defocus)")
    if args.astigmatism and not args.ctf:
        p.error("--astigmatism needs --ctf")
    if args.flip_mean and not (args.phase_flip and args.astigmatism):
        p.error("--flip-mean needs --phase-flip and --astigmatism")
    warnings.filterwarnings("ignore")
    splits = ("tune", "holdout") if args.split == "both" else (args.split,)
    aspire = _aspire_available()
    base = NOISE_METHODS if args.noise else METHODS
    methods = tuple(args.methods) if args.methods else base + (("ASPIRE",) if aspire else ())
    if "ASPIRE" in methods and not aspire:
        p.error("ASPIRE's environment not found: set IA_ASPIRE_PYTHON to its python (see aspire_peer.py)")
    print(f"# cluster quality, {args.size}-px working size, NumPy backend, denoise {args.denoise}"
          + (", with a" + ("n astigmatic" if args.astigmatism else "") + " CTF"
             + (", phase-flipped" + (" with the mean defocus" if args.flip_mean else "") if args.phase_flip
                else ", not phase-flipped") if args.ctf else "")
          + "; cells: ARI/NMI/k (seconds)")
    if not aspire:
        print("# ASPIRE (RIRClass2D): its environment was not found, peer column left out")
    for split in splits:
        print(f"\n## split: {split}")
        print(f"{'set':22s} {'n':>4s} {'K':>3s}  " + "  ".join(f"{m:>21s}" for m in methods) + "  IA k-choice")
        sums = {m: [] for m in methods}
        specs = (noise_suite(full=args.noise == "full", fast=args.noise == "fast", cells=args.noise == "cells",
                             ctf=args.ctf, astigmatism=args.astigmatism)
                 if args.noise
                 else suite(fast=args.fast))
        for spec in specs:
            if args.only and spec.name not in args.only:
                continue
            n, k_true = ((spec.views * spec.per_view, spec.views) if isinstance(spec, NoiseSpec)
                         else (sum(spec.sizes), len(spec.sizes)))
            nb = args.neighbors if args.neighbors in ("auto", "all") else int(args.neighbors)
            r = evaluate(spec, split=split, size=args.size, iterations=args.iterations, methods=methods,
                         neighbors=nb, denoise=args.denoise, phase_flip=args.phase_flip, flip_mean=args.flip_mean)
            cells = []
            for m in methods:
                v = r.get(m)
                if v is None:
                    cells.append(f"{'-':>21s}")
                    continue
                sums[m].append(v[0])
                cells.append(f"{v[0]:5.2f}/{v[1]:4.2f}/{v[2]:<2d} ({v[3]:6.1f}s)")
            ch = r["_k_choice"]
            alt = ",".join(str(k) for k in ch.plausible()) if ch is not None else ""
            choice = f"{ch.method} conf {ch.confidence:.2f}" + (f" also {alt}" if alt else "") if ch else ""
            print(f"{spec.name:22s} {n:4d} {k_true:3d}  " + "  ".join(cells) + "  " + choice, flush=True)
            for note in r["_notes"]:
                print(f"{'':28s}note: {note}")
        print(f"{'mean ARI':22s} {'':8s}  " + "  ".join(
            f"{np.mean(sums[m]) if sums[m] else float('nan'):21.3f}" for m in methods))
    return 0


def _aspire_available() -> bool:
    """Whether ASPIRE's own environment is there (``aspire_peer.aspire_python``)."""
    from aspire_peer import aspire_python

    return aspire_python() is not None


if __name__ == "__main__":
    raise SystemExit(main())
