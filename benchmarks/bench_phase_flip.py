"""``ia-cluster particles.star`` with and without ``--phase-flip`` on CTF-affected particle sets.

Each set is a noise-suite CTF set (``noise_suite.make_noise_set`` with ``ctf=True``: projections of a
random 3-D density in 4 views, each convolved with the CTF of its own defocus, then noised), negated
as RELION extracts particles (white on dark; ``--dark`` keeps the microscope's contrast), written as a
RELION 3.1 particle STAR file (each row's ``rlnDefocusU``/``rlnDefocusV``, the microscope in the
optics block) and two ``.mrcs`` stacks.  The same command line runs on it twice, without and with
``--phase-flip``, and prints the ARI of each (against the known views) and the ratio of their times
(measured in the same run).

    python benchmarks/bench_phase_flip.py --snr 1 --per-view 10 --seeds 0 1
"""
from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from noise_suite import CTF_MICROSCOPE, NoiseSpec, ctf_defocus, make_noise_set  # noqa: E402


def write_star_set(folder, *, snr: float, per_view: int, split: str = "tune", seed: int = 0, white: bool = True):
    """Write a CTF set as ``particles.star`` + ``a.mrcs`` + ``b.mrcs`` in ``folder``.

    ``white`` (default): the images negated, as RELION's particle extraction (``--invert_contrast``)
    writes them: white particles, whose CTF is RELION's (``+A`` at frequency 0); False: the
    microscope's own contrast (dark particles, CTFFIND4's sign).

    Returns
    -------
    star : Path
    labels : list of str
        Each row's view, in the STAR file's order.
    images : ndarray, shape (n, 48, 48)
        The raw (CTF-affected, noisy) images as written (float32).
    defocus : ndarray, shape (n,)
        Each row's defocus in Å.
    """
    import mrcfile
    import pandas as pd
    import starfile

    folder = Path(folder)
    name = f"cryo-ctf-snr{snr:g}-{per_view}" if np.isfinite(snr) else f"cryo-ctf-clean-{per_view}"
    spec = NoiseSpec(name, snr, per_view, ctf=True)
    images, labels, _ = make_noise_set(spec, split=split, seed=seed)
    images = np.stack(images).astype(np.float32) * (-1.0 if white else 1.0)
    defocus = ctf_defocus(spec, split=split, seed=seed)
    half = len(images) // 2
    for stack, part in (("a.mrcs", images[:half]), ("b.mrcs", images[half:])):
        with mrcfile.new(folder / stack, overwrite=True) as m:
            m.set_data(part)
            m.set_image_stack()
    names = [f"{k + 1}@a.mrcs" for k in range(half)] + [f"{k + 1}@b.mrcs" for k in range(len(images) - half)]
    optics = pd.DataFrame({"rlnOpticsGroup": [1], "rlnOpticsGroupName": ["opticsGroup1"],
                           "rlnVoltage": [CTF_MICROSCOPE["voltage"]],
                           "rlnSphericalAberration": [CTF_MICROSCOPE["spherical_aberration"]],
                           "rlnAmplitudeContrast": [CTF_MICROSCOPE["amplitude_contrast"]],
                           "rlnImagePixelSize": [CTF_MICROSCOPE["pixel_size"]]})
    particles = pd.DataFrame({"rlnImageName": names, "rlnDefocusU": defocus, "rlnDefocusV": defocus,
                              "rlnOpticsGroup": [1] * len(names)})
    starfile.write({"optics": optics, "particles": particles}, folder / "particles.star", overwrite=True)
    return folder / "particles.star", labels, images, defocus


def cluster_ari(star, labels, out, extra=()) -> tuple[float, float]:
    """``(ARI, seconds)`` of ``ia-cluster star --clusters 4 ...`` against ``labels``."""
    from sklearn.metrics import adjusted_rand_score

    from iastudio.core.cli import main

    t = time.perf_counter()
    rc = main([str(star), "--clusters", "4", "--size", "48", "--quiet", "--out", str(out), *extra])
    seconds = time.perf_counter() - t
    if rc != 0:
        raise RuntimeError(f"ia-cluster exited {rc}")
    with open(Path(out) / "assignments.csv", newline="") as fh:
        found = [int(r["cluster"]) for r in csv.DictReader(fh)]
    return float(adjusted_rand_score(labels, found)), seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snr", type=float, default=1.0)
    p.add_argument("--per-view", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--split", choices=("tune", "holdout"), default="tune")
    p.add_argument("--dark", action="store_true",
                   help="the microscope's own contrast (dark particles) instead of RELION's white particles")
    args = p.parse_args(argv)
    print(f"set: CTF particles, 4 views x {args.per_view}, SNR {args.snr:g}, split {args.split}"
          f"{', dark (not inverted)' if args.dark else ', white (RELION contrast)'}; --clusters 4")
    print("seed | ARI without | ARI with --phase-flip | time with / without")
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            star, labels, _, _ = write_star_set(tmp, snr=args.snr, per_view=args.per_view, split=args.split,
                                                seed=seed, white=not args.dark)
            plain, t0 = cluster_ari(star, labels, Path(tmp) / "plain")
            flipped, t1 = cluster_ari(star, labels, Path(tmp) / "flip", ["--phase-flip"])
        print(f"{seed} | {plain:.3f} | {flipped:.3f} | {t1 / t0:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
