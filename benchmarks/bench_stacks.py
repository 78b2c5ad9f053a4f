"""Reading a big particle stack without holding it twice: peak memory of ``load_images`` on a .mrcs.

    python benchmarks/bench_stacks.py                 # 10,000 particles of 64 x 64 (164 MB of float32)
    python benchmarks/bench_stacks.py --n 2000 --box 128

Writes one MRC stack (float32, mode 2) into a temporary folder, then reads it in fresh processes, one
way each, alternating, and prints for each the wall time, the peak of Python's traced allocations
(``tracemalloc``: NumPy arrays included) and the peak resident memory above what the process held after
its imports (``VmHWM``; the memory-mapped file's pages count there while they are mapped):

* ``stream`` - this package: ``load_images([stack])`` (the header checked, the file memory-mapped, one
  float32 copy per particle, the mapped pages handed back every 256 particles);
* ``stream-keep`` - the same with the hand-back switched off (``RELEASE_EVERY`` = never), to show what
  it saves in resident memory;
* ``whole`` - the baseline: the whole stack read into memory (``mrcfile.read``) and then one float32
  image per particle made from it, as a reader without streaming would.

The set itself (n float32 images) is the floor every way must hold; ratios are against ``whole``,
measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CHILD = r"""
import json, sys, time, tracemalloc
import numpy as np, mrcfile
import iastudio.core.imageset as ims
from iastudio.core.imageset import load_images
mode, path = sys.argv[1], sys.argv[2]
def hwm():  # this process's peak resident memory in kB (VmHWM; ru_maxrss keeps the parent's across exec)
    return int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")).split()[1])
base = hwm()
tracemalloc.start()
t = time.perf_counter()
if mode == "stream":
    images = load_images([path]).images
elif mode == "stream-keep":
    ims.RELEASE_EVERY = 10**12
    images = load_images([path]).images
else:
    whole = mrcfile.read(path)
    images = [ims._to_float(whole[i], path) for i in range(whole.shape[0])]
    del whole
wall = time.perf_counter() - t
_, peak = tracemalloc.get_traced_memory()
held = sum(im.nbytes for im in images)
rss = hwm() - base
print(json.dumps({"wall": wall, "peak_traced": peak, "set": held, "rss_above_imports": rss * 1024,
                  "n": len(images)}))
"""


def main(argv=None) -> int:
    import checkout

    checkout.importable()
    import mrcfile
    import numpy as np

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--box", type=int, default=64)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "particles.mrcs"
        rng = np.random.default_rng(0)
        with mrcfile.new_mmap(path, shape=(a.n, a.box, a.box), mrc_mode=2) as m:
            for k in range(0, a.n, 1000):
                m.data[k:k + 1000] = rng.standard_normal((min(1000, a.n - k), a.box, a.box), dtype=np.float32)
            m.set_image_stack()
        size = path.stat().st_size
        print(f"stack: {a.n} particles of {a.box}x{a.box} float32, {size / 1e6:.0f} MB on disk")
        results: dict[str, list] = {}
        for _ in range(a.repeats):
            for mode in ("stream", "stream-keep", "whole"):
                t = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True,
                                     check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r["process_wall"] = time.perf_counter() - t
                results.setdefault(mode, []).append(r)
        ref = results["whole"][-1]
        print(f"{'way':<12} {'read s':>7} {'set MB':>7} {'peak traced MB':>15} {'x set':>6} {'peak RSS MB':>12} "
              f"{'RSS / whole':>12}")
        for mode, rs in results.items():
            r = min(rs, key=lambda x: x["wall"])
            print(f"{mode:<12} {r['wall']:7.2f} {r['set'] / 1e6:7.0f} {r['peak_traced'] / 1e6:15.0f} "
                  f"{r['peak_traced'] / r['set']:6.2f} {r['rss_above_imports'] / 1e6:12.0f} "
                  f"{r['rss_above_imports'] / ref['rss_above_imports']:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
