"""Memory and time of refusing malicious projects (the issue's limits: 500 MB extra, 5 s).

Each project is built on the fly (zip bombs streamed through zlib, never
written uncompressed), then opened in a fresh Python process — by
``iastudio.core.project.load_project`` and, with ``--app``, by the app's model
(``StudioModel().session.open_project``, offscreen) — which reports the peak resident
memory *above its own baseline after imports* and the wall time.  A valid
project at the library's inflate budget (256 MiB of images in a ~260 KB file)
is measured too, as the largest thing a small file can make the loader hold.

    python benchmarks/bench_malicious_projects.py [--app]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from _malicious import (  # noqa: E402
    _deflated,
    bomb_project,
    good_project,
    manifest_bomb,
    many_members,
    npy,
    npy_header,
    raw_zip,
    read_members,
    sparse_project,
    write_project,
)

from iastudio.core.project import FORMAT, save_project  # noqa: E402

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
from iastudio.core.project import ProjectError, load_project
app = {app!r}
if app:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication
    qa = QApplication([])
    from iastudio.app.model import StudioModel
    model = StudioModel()
    model.session.load_demo("shapes")
import gc; gc.collect()
# reset the high-water mark so only the opening counts
open("/proc/self/clear_refs", "w").write("5")
base = rss()
t = time.perf_counter()
try:
    (model.session.open_project if app else load_project)({path!r})
    outcome = "loaded"
except ProjectError as exc:
    outcome = "refused: " + str(exc)[:90]
dt = time.perf_counter() - t
print(json.dumps({{"outcome": outcome, "seconds": dt, "extra_mb": (rss() - base) / 2**20}}))
if app:
    model.shutdown(2000)
"""


def cases(tmp: Path) -> dict:
    out = {}
    out["zip bomb, 1 GiB member, honest header"] = bomb_project(tmp / "b1.iaproj", zeros=2**30, n=4, side=8192)
    out["zip bomb, 1 GiB member, header says 1 KB"] = bomb_project(tmp / "b2.iaproj", zeros=2**30, n=4, side=8192,
                                                                   declared=1000)
    out["manifest bomb, 1 GiB"] = manifest_bomb(tmp / "m1.iaproj", inflated=2**30)
    out["manifest bomb, 1 GiB, header says 100 B"] = manifest_bomb(tmp / "m2.iaproj", inflated=2**30, declared=100)
    objs = b'{"format": "' + FORMAT.encode() + b'", "paths": ["a"], "x": [' + b"{}," * (8 * 2**20 // 3 - 40) + b"{}]}"
    out["manifest of 8 MiB of empty objects"] = raw_zip(tmp / "m3.iaproj", [_deflated("manifest.json", objs)])
    strs = b'{"format": "' + FORMAT.encode() + b'", "paths": ["a"], "x": [' + b'"a",' * (8 * 2**20 // 4 - 40) + b"0]}"
    out["manifest of 8 MiB of short strings"] = raw_zip(tmp / "m5.iaproj", [_deflated("manifest.json", strs)])
    flts = b'{"format": "' + FORMAT.encode() + b'", "paths": ["a"], "x": [' + b"1.5," * (8 * 2**20 // 4 - 40) + b"0]}"
    out["manifest of 8 MiB of floats"] = raw_zip(tmp / "m6.iaproj", [_deflated("manifest.json", flts)])
    objs2 = b'{"format": "' + FORMAT.encode() + b'", "paths": ["a"], "x": [' + b"{}," * 499_000 + b"{}]}"
    out["manifest of 499 000 empty objects"] = raw_zip(tmp / "m7.iaproj", [_deflated("manifest.json", objs2)])
    deep = b"[" * 4_000_000 + b"]" * 4_000_000
    out["manifest nested 4 million deep"] = raw_zip(tmp / "m4.iaproj", [_deflated("manifest.json", deep)])
    out["zip directory of 65534 entries / 2 GiB"] = many_members(tmp / "z.iaproj", 65534)
    good = save_project(tmp / "good.iaproj", good_project(n=4, side=8))
    manifest, members = read_members(good)
    m = dict(members)
    m["arrays/result/run_labels.npy"] = npy(np.array([0, 0, 1, 10**9]))
    out["run label 1e9"] = write_project(tmp / "l.iaproj", manifest, m)
    m = dict(members)
    m["arrays/history/0000_distances.npy"] = b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, " \
        b"'shape': (100000000000,), }" + b" " * 40 + b"\n"
    out["array header declaring 800 GB"] = write_project(tmp / "h.iaproj", manifest, m)
    sparse = save_project(tmp / "sparse.iaproj", sparse_project(n=8, side=8))  # W and distances stored as CSR
    manifest, members = read_members(sparse)
    indptr = np.load(io.BytesIO(members["arrays/result/weights.indptr.npy"]))
    m = dict(members)
    m["arrays/result/weights.indices.npy"] = npy(np.full(indptr[-1], 10**9, dtype=np.int64))
    out["sparse W: column index 1e9"] = write_project(tmp / "s1.iaproj", manifest, m)
    m = dict(members)
    m["arrays/result/weights.indptr.npy"] = npy(np.r_[0, indptr[-1], indptr[2:]])
    out["sparse W: row pointers going back"] = write_project(tmp / "s2.iaproj", manifest, m)
    n = 40_000
    m = {**manifest, "n_images": n, "paths": [f"demo:x/{i}" for i in range(n)], "labels": [None] * n,
         "arrays": [f"result/weights.{p}" for p in ("data", "indices", "indptr", "shape")], "history": [],
         "clusters": None, "sparse": {"result/weights": "csr_matrix"}}
    out["sparse W: header declaring 1.6e9 values (26 GB)"] = write_project(tmp / "s3.iaproj", m, {
        "arrays/result/weights.data.npy": npy_header(np.float64, (n * n,)) + bytes(64),
        "arrays/result/weights.indices.npy": npy_header(np.int64, (n * n,)) + bytes(64),
        "arrays/result/weights.indptr.npy": npy(np.zeros(n + 1, np.int64)),
        "arrays/result/weights.shape.npy": npy(np.array([n, n]))})
    os.mkfifo(tmp / "fifo.iaproj")
    out["FIFO named .iaproj"] = tmp / "fifo.iaproj"
    out["valid: 256 MiB of images in a small file"] = bomb_project(tmp / "v.iaproj", zeros=4 * 4090**2 * 4, n=4,
                                                                   side=4090)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", action="store_true", help="also open each one in the app's model")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"{'case':48s} {'file':>9s}  {'who':4s} {'extra MB':>9s} {'s':>6s}  outcome")
        for name, path in cases(tmp).items():
            size = path.stat().st_size if path.is_file() else 0
            for app in ([False, True] if args.app else [False]):
                code = CHILD.format(root=str(ROOT), path=str(path), app=app)
                r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    print(f"{name:48s} FAILED: {r.stderr.strip().splitlines()[-1:]}")
                    continue
                res = json.loads(r.stdout.strip().splitlines()[-1])
                print(f"{name:48s} {size / 1024:8.0f}K  {'app' if app else 'lib':4s} {res['extra_mb']:9.1f} "
                      f"{res['seconds']:6.2f}  {res['outcome']}")


if __name__ == "__main__":
    main()
