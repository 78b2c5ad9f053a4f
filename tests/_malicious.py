"""Builders of malicious project files, shared by the fuzz tests and benchmarks/malicious_projects.py.

Everything is made on the fly; large inflated members are produced by
streaming zeros through zlib (never held in memory or written uncompressed).
"""
from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from iastudio.core.clusterbook import ClusterBook
from iastudio.core.project import FORMAT, Project, save_project


def good_project(n=4, side=8, frames=2, seed=0) -> Project:
    """A small valid project with a finished run (history, result, clusters)."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 0, 1, 1] * (n // 4) + [1] * (n % 4))
    d = rng.random((n, n))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    hist = [{"iteration": k, "stage": "similarity" if k == 0 else "iteration",
             "weights": rng.random((n, n)).astype(np.float32), "means": rng.random((n, side, side)).astype(np.float32),
             "distances": d, "labels": labels} for k in range(frames)]
    return Project(
        paths=[f"demo:shapes/{i:03d}" for i in range(n)], labels=["x"] * n, size=side,
        transforms=np.zeros((n, 3)), base=rng.random((n, side, side)).astype(np.float32),
        scale=np.ones(n), offset=np.zeros((n, 2)), parameters={"method": "ia", "beta_used": 3.0},
        clusters=ClusterBook.from_labels(labels), history=hist,
        result={"cluster_means": rng.random((2, side, side)).astype(np.float32),
                "image_transforms": np.zeros((n, 3)), "scores": rng.random(n), "weights": rng.random((n, n)),
                "input_distances": d, "final_distances": d, "run_labels": labels},
        edits=[],
    )


def sparse_w(n, per_row=2, seed=0, dtype=np.float32):
    """A K-neighbour-like ``csr_matrix`` (n, n): ``per_row`` other images per row, positive values."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = (rows + rng.integers(1, n, rows.size)) % n
    return sp.csr_matrix((rng.uniform(0.1, 1.0, rows.size).astype(dtype), (rows, cols)), shape=(n, n))


def sparse_project(n=8, side=8, frames=2, seed=0) -> Project:
    """:func:`good_project` whose W and distances are SciPy sparse, as a pruned run above 2,000 images keeps them."""
    p = good_project(n=n, side=side, frames=frames, seed=seed)
    for k, key in enumerate(("weights", "input_distances", "final_distances")):
        p.result[key] = sparse_w(n, seed=seed + k)
    for k, fr in enumerate(p.history):
        fr["weights"], fr["distances"] = sparse_w(n, seed=seed + 10 + k), sparse_w(n, seed=seed + 20 + k)
    return p


def read_members(path) -> tuple[dict, dict]:
    """``(manifest, {member name: bytes})`` of a project file."""
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    return manifest, members


def write_project(path, manifest, members: dict, *, raw_manifest: bytes | None = None):
    """A zip of ``manifest`` (or ``raw_manifest``) and ``members`` (name -> bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", raw_manifest if raw_manifest is not None else json.dumps(manifest))
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def npy_header(dtype, shape) -> bytes:
    """Just the ``.npy`` header of an array (the data is streamed separately)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                               "shape": tuple(shape)})
    return buf.getvalue()


def deflate_zeros(head: bytes, zeros: int) -> tuple[bytes, int]:
    """``(raw deflate stream, crc32)`` of ``head`` + ``zeros`` zero bytes, made chunk by chunk."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    crc = zlib.crc32(head)
    parts = [comp.compress(head)]
    chunk = bytes(1 << 22)
    left = zeros
    while left > 0:
        k = min(left, len(chunk))
        piece = chunk if k == len(chunk) else chunk[:k]
        crc = zlib.crc32(piece, crc)
        parts.append(comp.compress(piece))
        left -= k
    parts.append(comp.flush())
    return b"".join(parts), crc


def raw_zip(path, entries):
    """Write a zip by hand: ``entries`` = ``(name, data, crc, size, method)``; ``size`` may lie."""
    out = bytearray()
    central = bytearray()
    for name, data, crc, size, method in entries:
        nb = name.encode()
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(nb), 0)
        out += nb + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data), size,
                               len(nb), 0, 0, 0, 0, 0, off) + nb
    cd_off = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_off, 0)
    with open(path, "wb") as fh:
        fh.write(bytes(out))
    return path


def _deflated(name, data: bytes):
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = comp.compress(data) + comp.flush()
    return (name, body, zlib.crc32(data), len(data), 8)


def bomb_project(path, *, zeros: int, n=1, side=None, declared=None, manifest_extra=None):
    """A project whose ``arrays/base.npy`` inflates to a header plus ``zeros`` zero bytes.

    ``side`` defaults to the square side the zeros fill as float32 (``n``
    images); ``declared`` writes a lying uncompressed size into the headers.
    """
    if side is None:
        side = max(2, int((zeros / 4 / n) ** 0.5))
    manifest = {"format": FORMAT, "format_version": 1, "n_images": n, "paths": [f"demo:x/{i}" for i in range(n)],
                "labels": [None] * n, "size": min(side, 4096), "arrays": ["base"], "history": []}
    manifest.update(manifest_extra or {})
    head = npy_header(np.float32, (n, side, side))
    data, crc = deflate_zeros(head, zeros)
    size = len(head) + zeros if declared is None else declared
    return raw_zip(path, [_deflated("manifest.json", json.dumps(manifest).encode()),
                          ("arrays/base.npy", data, crc, size, 8)])


def manifest_bomb(path, *, inflated: int, declared=None):
    """A manifest.json inflating to about ``inflated`` bytes."""
    head = b'{"format": "' + FORMAT.encode() + b'", "paths": ["a"], "x": "'
    data, crc = deflate_zeros(head, inflated)
    size = len(head) + inflated if declared is None else declared
    return raw_zip(path, [("manifest.json", data, crc, size, 8)])


def many_members(path, count: int):
    """A zip whose end record declares ``count`` entries and a huge directory."""
    raw_zip(path, [_deflated("manifest.json", b"{}")])
    data = bytearray(Path(path).read_bytes())
    at = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, at + 8, min(count, 0xFFFE), min(count, 0xFFFE))
    struct.pack_into("<I", data, at + 12, 0x7FFFFFF0)
    Path(path).write_bytes(bytes(data))
    return path


def save_good(path, **kw):
    return save_project(path, good_project(**kw))
