"""Warp speed: the engine's batched Keys warp *with* derivatives vs a per-image
loop over ``scipy.ndimage.map_coordinates(order=3)`` without derivatives.

On NumPy the engine's warp is Numba's compiled loop (``core/warp_kernel.py``)
when Numba is installed; the NumPy array code it falls back to is timed too,
on the same images, with and without derivatives.

    python benchmarks/bench_warp.py [--n 1000] [--px 64] [--repeat 3]

Both run in the same process on the same images and transforms; the best of
``--repeat`` runs is reported.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from iastudio.core.backend import get_backend, to_host  # noqa: E402
from iastudio.core.warp import warp  # noqa: E402


def scipy_loop(images, params):
    from scipy.ndimage import map_coordinates

    n, h, w = images.shape
    rr, cc = np.mgrid[:h, :w].astype(float)
    rr -= (h - 1) / 2
    cc -= (w - 1) / 2
    out = np.empty_like(images)
    for i in range(n):
        th, tx, ty = params[i]
        r = np.cos(th) * rr + np.sin(th) * cc + (h - 1) / 2 + ty
        c = -np.sin(th) * rr + np.cos(th) * cc + (w - 1) / 2 + tx
        out[i] = map_coordinates(images[i], [r, c], order=3, mode="constant")
    return out


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--px", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="numpy")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    from scipy.ndimage import gaussian_filter

    images = gaussian_filter(rng.random((args.n, args.px, args.px)), (0, 1.5, 1.5)).astype(np.float32)
    params = np.column_stack([rng.uniform(-np.pi, np.pi, args.n), rng.uniform(-5, 5, (args.n, 2))])
    b = get_backend(args.backend)
    xi, xp_ = b.asarray(images), b.asarray(params)

    def ours():
        out, _grad = warp(xi, xp_, gradient=True)
        to_host(out[:1])

    warp(xi[:8], xp_[:8], gradient=True)  # warm-up (and Numba's compile or cache load)
    t_ours = best(ours, args.repeat)
    t_ref = best(lambda: scipy_loop(images, params), args.repeat)
    wmod = sys.modules["iastudio.core.warp"]
    compiled = b.name == "numpy" and wmod._compiled() is not None
    print(f"{args.n} images of {args.px}x{args.px}, backend {b.describe()}, "
          f"{'compiled loop (Numba)' if compiled else 'array code'}")
    print(f"engine (Keys warp + d/d(theta, tx, ty)): {t_ours:7.3f} s")
    print(f"scipy map_coordinates(order=3) loop   : {t_ref:7.3f} s (no derivatives)")
    print(f"ratio (scipy / engine)                 : {t_ref / t_ours:7.2f}x")
    if compiled:  # the array code on the same images, this run
        timed = {}
        for gradient in (True, False):
            fast = best(lambda g=gradient: warp(xi, xp_, gradient=g), args.repeat)
            wmod._KERNEL = False
            try:
                slow = best(lambda g=gradient: warp(xi, xp_, gradient=g), args.repeat)
            finally:
                wmod._KERNEL = None
            timed[gradient] = (fast, slow)
        for gradient, (fast, slow) in timed.items():
            what = "with derivatives" if gradient else "values only     "
            print(f"{what}: compiled loop {fast:7.3f} s, array code {slow:7.3f} s, ratio {slow / fast:5.2f}x")


if __name__ == "__main__":
    main()
