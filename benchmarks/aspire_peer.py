"""ASPIRE as a peer, run from its own environment (never imported by the project).

ASPIRE is heavy and pins its own NumPy/SciPy, so it lives in a virtual environment of
its own and the benchmarks call this script there by subprocess, passing images and
results as ``.npz`` files (plain arrays: ``allow_pickle=False`` both ways)::

    python3 -m venv /path/venv-aspire && /path/venv-aspire/bin/pip install aspire
    /path/venv-aspire/bin/python benchmarks/aspire_peer.py IN.npz OUT.npz --k 4 [--averages]

``IN.npz`` holds ``images`` (n, L, L).  The script runs ASPIRE's rotation-invariant
classification (``RIRClass2D``: steerable PCA, bispectrum features, nearest neighbours
under rotation and reflection), splits the symmetrised neighbour graph into ``k``
clusters by spectral clustering (as ``bench_quality.py``'s ASPIRE column does), and
with ``--averages`` also ASPIRE's class averages (``DebugClassAvgSource``: each image
with its neighbours, aligned by brute-force rotation and averaged).

``OUT.npz`` holds ``labels`` (n,), ``classes`` (n, n_nbor: row i is image i's class,
itself first), ``reflections``, ``wall_s``, ``cpu_s`` (this process, children included),
``peak_rss_mb`` and, with ``--averages``, ``averages`` (n, L, L: row i is the class
average of image i's class).  Benchmarks call :func:`run_peer` from their own
environment.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: Where the benchmarks look for ASPIRE's interpreter (``IA_ASPIRE_PYTHON`` overrides).
DEFAULT_PYTHON = "/work/venv-aspire/bin/python"


def aspire_python() -> str | None:
    """The interpreter of ASPIRE's own environment, or None when there is none."""
    path = os.environ.get("IA_ASPIRE_PYTHON", DEFAULT_PYTHON)
    return path if Path(path).is_file() else None


def run_peer(images, k, *, averages=False, n_nbor=10, timeout=7200) -> dict:
    """Run this script under ASPIRE's interpreter on ``images``; return OUT.npz as a dict.

    Raises ``RuntimeError`` (with ASPIRE's stderr) when no interpreter is found, the run fails or
    it runs past ``timeout`` seconds.
    """
    python = aspire_python()
    if python is None:
        raise RuntimeError("ASPIRE's environment not found: set IA_ASPIRE_PYTHON to its python")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.npz"), Path(tmp, "out.npz")
        np.savez(src, images=np.asarray(images, dtype=np.float64))
        cmd = [python, str(Path(__file__).resolve()), str(src), str(dst), "--k", str(int(k)),
               "--n-nbor", str(int(n_nbor))] + (["--averages"] if averages else [])
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:  # the callers catch RuntimeError: one cell left empty
            raise RuntimeError(f"ASPIRE did not finish within {timeout} s") from exc
        if done.returncode != 0:
            raise RuntimeError(f"ASPIRE failed ({done.returncode}): {done.stderr[-2000:]}")
        with np.load(dst, allow_pickle=False) as out:
            return {name: out[name] for name in out.files}


def _classify(images, k, n_nbor, want_averages):
    from aspire.classification import RIRClass2D
    from aspire.denoising import DebugClassAvgSource
    from aspire.source import ArrayImageSource
    from sklearn.cluster import SpectralClustering

    n = len(images)
    src = ArrayImageSource(images, pixel_size=1.0)
    rir = RIRClass2D(src, fspca_components=min(400, 4 * n), bispectrum_components=min(300, n - 1),
                     n_nbor=min(n_nbor, n - 1), seed=0)
    out = {}
    if want_averages:
        # the classifier runs inside the class-average source; its classes are read back from it
        avg_src = DebugClassAvgSource(src, n_nbor=min(n_nbor, n - 1), classifier=rir)
        out["averages"] = np.asarray(avg_src.images[:].asnumpy(), dtype=np.float32)
        classes, refl = avg_src.class_indices, avg_src.class_refl
    else:
        classes, refl, _ = rir.classify()
    classes = np.asarray(classes)
    graph = np.zeros((n, n))
    for i, row in enumerate(classes):
        graph[i, row] = 1.0
    graph = np.maximum(graph, graph.T) + np.eye(n)
    if k <= 1:
        labels = np.zeros(n, dtype=int)
    else:
        labels = SpectralClustering(k, affinity="precomputed", random_state=0).fit_predict(graph)
    out.update(labels=labels.astype(np.int64), classes=classes.astype(np.int64),
               reflections=np.asarray(refl, dtype=bool))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("inp", help=".npz with 'images' (n, L, L)")
    p.add_argument("out", help=".npz to write")
    p.add_argument("--k", type=int, required=True, help="clusters for the spectral split of the neighbour graph")
    p.add_argument("--n-nbor", type=int, default=10, help="neighbours per image (default 10)")
    p.add_argument("--averages", action="store_true", help="also ASPIRE's class averages")
    args = p.parse_args(argv)
    with np.load(args.inp, allow_pickle=False) as f:
        images = np.asarray(f["images"], dtype=np.float64)
    t0, c0 = time.perf_counter(), time.process_time()
    out = _classify(images, args.k, args.n_nbor, args.averages)
    wall = time.perf_counter() - t0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - c0 + children.ru_utime + children.ru_stime
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    np.savez(args.out, wall_s=wall, cpu_s=cpu, peak_rss_mb=peak, **out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
