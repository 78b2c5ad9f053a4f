"""Distances at low SNR: aligned invariant distances against rotation-invariant features (issue 30, item 2).

For each set of the noise suite (``noise_suite.py``) the images are prepared as
``ia-cluster`` does (``preprocess(images, size=48, denoise="auto")``: steerable
PCA, then one content scale) and these distances are read out with
``read_clusters`` (k given, and k = auto):

* ``aligned``: the engine's aligned invariant distances of the denoised canvas
  (``invariant_distances``), what a run clusters today;
* ``fb-mag``: Euclidean distances of the magnitudes ``|a_kq|`` of the canvas's
  Fourier--Bessel coefficients (the denoiser's basis, ``fourier_bessel_basis``),
  ``sqrt 2``-weighted for ``k > 0`` (each stands for two real functions), unit norm;
* ``fb-power``: the Frobenius distance of the per-frequency power spectra
  ``P_k = a_k a_k^H`` (``q x q'``: keeps the relative phases of one frequency's
  radial terms), unit norm;
* ``fb-bispec``: a bispectrum of the set's leading steerable components (:func:`fb_bispectrum`);
* ``polar``: the pruned path's candidate features (``neighbors.invariant_features``:
  angular power spectra of the rings of ``|FFT|``), Euclidean;
* ``aligned+fb-mag``: the mean of the two, ``fb-mag`` scaled to the aligned distances' median.

All are rotation invariant; the FB features are invariant about the canvas centre
only (the canvas puts each object's centroid there), ``polar`` also to shifts.

Usage: ``python benchmarks/bench_lowsnr.py [--split tune|holdout] [--sets NAME ...] [--diagnose]``.
Prints one row per set and distance: ARI with k given, k found and its ARI, seconds.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from noise_suite import make_noise_set, noise_suite  # noqa: E402

SETS = ("cryo-clean-15", "cryo-snr1-30", "cryo-snr0.3-30", "cryo-snr0.1-30", "cryo-snr0.1-100")


def fb_coefficients(images):
    """Complex Fourier--Bessel coefficients of a stack, one array ``(n, n_k)`` per angular frequency ``k``."""
    from iastudio.core.denoise import fourier_bessel_basis

    x = np.asarray(images, dtype=np.float64)
    fb = fourier_bessel_basis(tuple(x.shape[1:]))
    proj = x[:, fb.mask] @ fb.real
    out, start = [], 0
    for k, m in enumerate(fb.counts):
        if k == 0:
            out.append(proj[:, :m].astype(complex))
            start = m
        else:
            out.append(proj[:, start:start + m] - 1j * proj[:, start + m:start + 2 * m])
            start += 2 * m
    return out


def _unit(f):
    return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)


def fb_magnitudes(coefs):
    """``|a_kq|``, ``sqrt 2``-weighted for ``k > 0``, unit norm: ``(n, sum n_k)``."""
    return _unit(np.concatenate([np.abs(a) * (1.0 if k == 0 else np.sqrt(2.0)) for k, a in enumerate(coefs)], axis=1))


def fb_power(coefs):
    """The upper triangles of ``a_k a_k^H`` (real and imaginary parts, off-diagonals ``sqrt 2``), unit norm."""
    parts = []
    for k, a in enumerate(coefs):
        p = a[:, :, None] * a[:, None, :].conj()
        iu = np.triu_indices(a.shape[1])
        w = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0)) * (1.0 if k == 0 else 2.0)
        v = p[:, iu[0], iu[1]] * w
        parts += [v.real, v.imag[:, iu[0] != iu[1]]]
    return _unit(np.concatenate(parts, axis=1))


def fb_bispectrum(coefs, *, k_max: int = 16, comps: int = 2):
    """Bispectrum of the set's leading steerable components: ``c_k1,i c_k2,j conj(c_k1+k2,l)``, unit norm.

    ``c_k,i`` is an image's coefficient on the ``i``-th eigenvector of the set's frequency-``k``
    covariance (as the steerable PCA finds it); a turn by ``phi`` multiplies it by ``exp(-i k phi)``,
    so the triple products are invariant and keep the phases *between* frequencies that ``fb-mag``
    and ``fb-power`` drop.  Each product is scaled to the cube root of its magnitude (amplitude units).
    """
    c = []
    for a in coefs[:k_max + 1]:
        _, vecs = np.linalg.eigh(a.T @ a.conj() / len(a))
        c.append(a @ vecs[:, ::-1][:, :comps].conj())
    parts = [np.abs(c[0])]
    for k1 in range(1, k_max + 1):
        for k2 in range(k1, k_max + 1 - k1):
            t = (c[k1][:, :, None, None] * c[k2][:, None, :, None]
                 * c[k1 + k2][:, None, None, :].conj()).reshape(len(c[0]), -1)
            t = t / np.maximum(np.abs(t), 1e-300) ** (2.0 / 3.0)
            parts += [t.real, t.imag]
    return _unit(np.concatenate(parts, axis=1))


def euclidean(f):
    from scipy.spatial.distance import cdist

    return cdist(f, f)


def study(spec, *, split: str, size: int = 48) -> list:
    """Rows ``(set, n, distance, ari k given, k found, ari k found, seconds)`` for one set."""
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.clustering import read_clusters
    from iastudio.core.neighbors import invariant_features
    from iastudio.core.preprocess import preprocess
    from iastudio.core.similarity import invariant_distances

    images, labels, _ = make_noise_set(spec, split=split)
    truth = np.unique(labels, return_inverse=True)[1]
    k_true = int(truth.max() + 1)
    t = time.perf_counter()
    x = np.asarray(preprocess(images, size=size, denoise="auto").images)
    prep = time.perf_counter() - t
    dist, secs = {}, {}
    t = time.perf_counter()
    dist["aligned"] = np.asarray(invariant_distances(x).distances, dtype=float)
    secs["aligned"] = time.perf_counter() - t
    t = time.perf_counter()
    coefs = fb_coefficients(x)
    t_coef = time.perf_counter() - t
    for name, feat in (("fb-mag", fb_magnitudes), ("fb-power", fb_power), ("fb-bispec", fb_bispectrum)):
        t = time.perf_counter()
        dist[name] = euclidean(feat(coefs))
        secs[name] = t_coef + time.perf_counter() - t
    t = time.perf_counter()
    dist["polar"] = euclidean(invariant_features(x).astype(float))
    secs["polar"] = time.perf_counter() - t
    off = ~np.eye(len(x), dtype=bool)
    # on the aligned distances' scale: read_clusters' "same" / "distinct" checks are absolute
    med = np.median(dist["aligned"][off])
    dist["aligned+fb-mag"] = 0.5 * (dist["aligned"] + dist["fb-mag"] * med / np.median(dist["fb-mag"][off]))
    secs["aligned+fb-mag"] = secs["aligned"] + secs["fb-mag"]
    rows = []
    for name, d in dist.items():
        lab_k, _ = read_clusters(d, k=k_true)
        lab_a, choice = read_clusters(d)
        rows.append((spec.name, len(x), name, adjusted_rand_score(truth, lab_k), int(choice.k),
                     adjusted_rand_score(truth, lab_a), secs[name], prep))
    return rows


def diagnose(spec, *, split: str) -> list:
    """Where the features lose: rows ``(set, input, feature, ari k given, k found, ari k found)``.

    The features of (1) the noise-free images (``preprocess``, no denoising), (2) the denoised
    images (``denoise(mode="auto")``, background = median removed) moved so that the *noise-free*
    image's centroid is at the frame centre (oracle centring), (3) the same centred on their own
    centroid.
    """
    from scipy import ndimage
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.clustering import read_clusters
    from iastudio.core.denoise import denoise
    from iastudio.core.preprocess import preprocess

    images, labels, _, clean = make_noise_set(spec, split=split, clean_images=True)
    truth = np.unique(labels, return_inverse=True)[1]
    den, _ = denoise(images, mode="auto")
    centre = (np.asarray(clean.shape[1:]) - 1) / 2.0

    def centred(src):
        return np.stack([ndimage.shift(np.asarray(d, float) - np.median(d), centre - np.asarray(
            ndimage.center_of_mass(np.clip(c - np.median(c), 0, None))), order=3) for d, c in zip(den, src)])

    inputs = {"noise-free canvas": np.asarray(preprocess(list(clean), size=48).images),
              "denoised, oracle centre": centred(clean), "denoised, own centroid": centred(den)}
    rows = []
    for what, x in inputs.items():
        coefs = fb_coefficients(x)
        for name, feat in (("fb-mag", fb_magnitudes), ("fb-bispec", fb_bispectrum)):
            d = euclidean(feat(coefs))
            lab_k, _ = read_clusters(d, k=int(truth.max() + 1))
            lab_a, choice = read_clusters(d)
            rows.append((spec.name, what, name, adjusted_rand_score(truth, lab_k), int(choice.k),
                         adjusted_rand_score(truth, lab_a)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="tune", choices=("tune", "holdout"))
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--diagnose", action="store_true", help="where the features lose (see diagnose())")
    args = ap.parse_args(argv)
    specs = [s for s in noise_suite() if s.name in args.sets]
    if args.diagnose:
        print("| set | input | feature | k given | k found (ARI) |\n|---|---|---|---|---|")
        for spec in specs:
            for s, what, name, ari_k, k, ari_a in diagnose(spec, split=args.split):
                print(f"| {s} | {what} | {name} | {ari_k:.2f} | {k} ({ari_a:.2f}) |", flush=True)
        return
    print(f"split {args.split}; preprocess(size=48, denoise='auto'); ARI; seconds of the distances "
          f"(the denoising and preprocessing, the same for all, in brackets)")
    print("| set | n | distance | k given | k found (ARI) | s |")
    print("|---|---|---|---|---|---|")
    for spec in specs:
        for s, n, name, ari_k, k, ari_a, sec, prep in study(spec, split=args.split):
            print(f"| {s} | {n} | {name} | {ari_k:.2f} | {k} ({ari_a:.2f}) | {sec:.1f} (+{prep:.1f}) |", flush=True)


if __name__ == "__main__":
    main()
