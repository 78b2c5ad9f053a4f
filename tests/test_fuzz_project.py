"""Fuzzing load_project with malicious projects made on the fly.

Every outcome must be a valid :class:`Project` (whose invariants are checked)
or a :class:`ProjectError` with a plain reason — never another exception, a
hang or a memory blow-up.  Zip bombs are streamed (zeros through zlib), and
the inflate budget is lowered here so the same code paths run in milliseconds.
"""
import io
import json
import os
import struct
import sys
import time
import zipfile

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _malicious import (  # noqa: E402
    bomb_project,
    good_project,
    manifest_bomb,
    many_members,
    npy,
    npy_header,
    read_members,
    save_good,
    write_project,
)

import iastudio.core.project as cp  # noqa: E402
from iastudio.core.clusterbook import UNASSIGNED  # noqa: E402
from iastudio.core.project import MAX_JSON_DEPTH, Project, ProjectError, load_project, save_project  # noqa: E402

NASTY = [None, -1, 0, 10**9, 10**30, -(10**30), 1.5, float("nan"), float("inf"), "x", "", [], {}, [[[]]], True,
         [None], [-5], [10**9], ["a"] * 3, {"labels": "x"}]


def check_invariants(p: Project):
    """What every loaded project guarantees to the app and the CLI."""
    n = p.n
    assert 1 <= n and len(p.labels) == n and all(isinstance(x, str) for x in p.paths)
    assert p.transforms.shape == (n, 3) and np.isfinite(p.transforms).all()
    if p.base is not None:
        assert p.base.shape[0] == n and p.base.ndim in (3, 4) and np.isfinite(p.base).all()
    if p.clusters is not None:
        labels = np.asarray(p.clusters.labels)
        assert labels.shape == (n,) and labels.min() >= UNASSIGNED and labels.max() < 10 * n + 1000
    for fr in p.history:
        for key in ("distances", "labels"):
            assert fr[key] is not None
        assert fr["distances"].shape == (n, n) and np.isfinite(fr["distances"]).all()
        assert fr["labels"].shape == (n,) and 0 <= fr["labels"].min() and fr["labels"].max() < n
    rl = p.result.get("run_labels")
    if rl is not None:
        assert rl.shape == (n,) and 0 <= rl.min() and rl.max() < n
    assert isinstance(p.parameters, dict) and all(isinstance(e, str) for e in p.edits)


def outcome(path):
    """'ok' (invariants hold) or 'refused: reason'; anything else fails the test."""
    t = time.perf_counter()
    try:
        p = load_project(path)
    except ProjectError as exc:
        assert str(exc) and "Traceback" not in str(exc)
        result = f"refused: {exc}"
    else:
        check_invariants(p)
        result = "ok"
    assert time.perf_counter() - t < 5.0
    return result


@pytest.fixture
def base(tmp_path):
    path = save_good(tmp_path / "good.iaproj")
    return read_members(path)


@pytest.fixture(autouse=True)
def small_budget(monkeypatch):
    monkeypatch.setattr(cp, "_MIN_BUDGET", 8 * 2**20)  # bombs of tens of MiB exercise the budget quickly


def _paths(obj, prefix=()):
    """Every (path, value) in the manifest, a few levels deep."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = list(enumerate(obj))[:3]
    else:
        return
    for k, v in items:
        yield prefix + (k,)
        if len(prefix) < 3:
            yield from _paths(v, prefix + (k,))


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def test_every_manifest_field_with_every_nasty_value(tmp_path, base):
    manifest, members = base
    results = {}
    for field in list(_paths(manifest)):
        for value in NASTY:
            m = json.loads(json.dumps(manifest))
            _set(m, field, value)
            path = write_project(tmp_path / "m.iaproj", m, members)
            results[(field, json.dumps(value))] = outcome(path)
    refused = sum(r.startswith("refused") for r in results.values())
    assert len(results) > 300 and refused > 200  # most mutations are caught, none escaped as another error
    # the dangerous ones in particular
    assert results[(("n_images",), "1000000000")].startswith("refused")
    assert results[(("clusters", "labels", 0), "1000000000")].startswith("refused")
    assert results[(("history", 0, "iteration"), str(10**30))].startswith("refused")
    assert results[(("parameters", "beta_used"), '"x"')].startswith("refused")


@pytest.mark.parametrize("key", ["transforms", "base", "scale", "offset", "result/run_labels", "result/weights",
                                 "result/cluster_means", "history/0000_labels", "history/0001_distances",
                                 "history/0000_means"])
def test_every_array_with_every_corruption(tmp_path, base, key):
    manifest, members = base
    name = f"arrays/{key}.npy"
    arr = np.load(io.BytesIO(members[name]))
    good = members[name]
    head = good[: len(good) - arr.nbytes]
    variants = {
        "empty": b"", "truncated": good[: len(good) // 2], "header only": head, "garbage": b"\x93NUMPY" + b"\xff" * 40,
        "version 9": b"\x93NUMPY\x09\x00" + good[8:], "extra data": good + b"\x00" * 64,
        "huge shape": npy_header(arr.dtype, (10**12,) + arr.shape[1:]) + b"\x00" * 64,
        "negative shape": good.replace(str(arr.shape).encode(), b"(-1,)" + b" " * (len(str(arr.shape)) - 5)),
        "transposed extra dim": npy(arr[..., None]), "one more row": npy(np.concatenate([arr, arr[:1]])),
        "complex": npy(arr.astype(np.complex64)), "strings": npy(arr.astype(str)),
        "structured": npy(np.zeros(arr.shape[0], dtype=[("a", "f4")])),
        "object header": npy_header(object, arr.shape) + b"\x00" * 64,
        "nan": npy(np.full(arr.shape, np.nan)), "inf": npy(np.full(arr.shape, np.inf)),
        "huge labels": npy(np.full(arr.shape, 10**9, dtype=np.int64)),
        "negative labels": npy(np.full(arr.shape, -7, dtype=np.int64)),
        "fortran": npy(np.asfortranarray(arr)), "big endian": npy(arr.astype(arr.dtype.newbyteorder(">"))),
        "bool": npy(arr.astype(bool)),
    }
    seen = {}
    for what, data in variants.items():
        m = dict(members)
        m[name] = data
        seen[what] = outcome(write_project(tmp_path / "a.iaproj", manifest, m))
    for what in ("empty", "truncated", "header only", "garbage", "version 9", "extra data", "huge shape",
                 "negative shape", "transposed extra dim", "one more row", "complex", "strings", "structured",
                 "object header"):
        assert seen[what].startswith("refused"), (what, seen[what])
    if "labels" in key:
        assert seen["huge labels"].startswith("refused") and seen["negative labels"].startswith("refused")
    if arr.dtype.kind == "f" and key != "result/scores":
        assert seen["nan"].startswith("refused") and seen["inf"].startswith("refused")
    assert seen["fortran"] == "ok" and seen["big endian"] == "ok"  # legal .npy variants load


def test_zip_level_damage(tmp_path):
    path = save_good(tmp_path / "good.iaproj")
    data = path.read_bytes()
    rng = np.random.default_rng(1)
    outcomes = []
    for _ in range(150):  # random byte damage
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 8))):
            bad[pos] = int(rng.integers(0, 256))
        p = tmp_path / "flip.iaproj"
        p.write_bytes(bytes(bad))
        outcomes.append(outcome(p))
    for cut in range(0, len(data), max(1, len(data) // 60)):  # truncation anywhere
        p = tmp_path / "cut.iaproj"
        p.write_bytes(data[:cut])
        assert outcome(p).startswith("refused")
    assert sum(o.startswith("refused") for o in outcomes) > 50


def test_missing_unknown_and_duplicate_members(tmp_path, base):
    manifest, members = base
    m = dict(members)
    del m["arrays/base.npy"]
    assert "is missing" in outcome(write_project(tmp_path / "a.iaproj", manifest, m))
    m2 = json.loads(json.dumps(manifest))
    m2["arrays"].append("../../etc/passwd")
    assert "unexpected array" in outcome(write_project(tmp_path / "b.iaproj", m2, members))
    m3 = json.loads(json.dumps(manifest))
    m3["arrays"].append(m3["arrays"][0])
    assert outcome(write_project(tmp_path / "c.iaproj", m3, members)).startswith("refused")
    for raw in (b"[]", b"\xff\xfe{}", b"", b"{" * 100000, b"[" * 5000 + b"]" * 5000, b"null", b'"x"'):
        assert outcome(write_project(tmp_path / "d.iaproj", None, members, raw_manifest=raw)).startswith("refused")


def test_nesting_and_manifest_size_limits(tmp_path, base):
    manifest, members = base
    m = json.loads(json.dumps(manifest))
    deep = []
    cur = deep
    for _ in range(MAX_JSON_DEPTH + 2):
        cur.append([])
        cur = cur[0]
    m["parameters"] = {"x": deep}
    assert "nested" in outcome(write_project(tmp_path / "a.iaproj", m, members))
    # a manifest inflating far beyond the limit is refused from its header, before inflating
    t = time.perf_counter()
    assert "manifest would inflate" in outcome(manifest_bomb(tmp_path / "b.iaproj", inflated=64 * 2**20))
    # ... and when its header lies about the size, while streaming
    assert outcome(manifest_bomb(tmp_path / "c.iaproj", inflated=64 * 2**20, declared=100)).startswith("refused")
    assert time.perf_counter() - t < 5


def test_zip_bombs_are_refused_within_the_budget(tmp_path):
    budget = cp.inflated_limit(1)
    assert budget == 8 * 2**20
    # honest header: refused from the size in the zip directory
    assert "zip bomb" in outcome(bomb_project(tmp_path / "a.iaproj", zeros=4 * budget, n=4, side=1024))
    # lying header (says 1000 bytes): refused while streaming, nothing beyond the declared size is read
    assert outcome(bomb_project(tmp_path / "b.iaproj", zeros=4 * budget, n=4, side=1024,
                                declared=1000)).startswith("refused")
    # a consistent array just under the budget loads (a real project can be that large)
    assert outcome(bomb_project(tmp_path / "c.iaproj", zeros=4 * 2**20, n=1, side=1024)) == "ok"
    # ... and a larger one when the caller raises the limit
    big = bomb_project(tmp_path / "e.iaproj", zeros=4 * 4 * 2**20, n=4, side=1024)
    assert "zip bomb" in outcome(big)
    assert load_project(big, max_bytes=64 * 2**20).base.shape == (4, 1024, 1024)
    # the zip directory itself is bounded before zipfile parses it
    assert "zip directory is too large" in outcome(many_members(tmp_path / "d.iaproj", 60000))


def test_inflated_limit_scales_with_the_file():
    assert cp.inflated_limit(10) == cp._MIN_BUDGET
    assert cp.inflated_limit(10**8) == 20 * 10**8 and cp.inflated_limit(10**10) == cp._MAX_BUDGET


def test_round_trip_of_every_valid_mutation_still_saves(tmp_path):
    """A loaded project can be saved and loaded again unchanged (the app's Save after Open)."""
    p = good_project(n=6, side=8, frames=3)
    q = load_project(save_project(tmp_path / "a.iaproj", p))
    r = load_project(save_project(tmp_path / "b.iaproj", q))
    assert r.paths == p.paths and np.array_equal(r.base, p.base) and r.clusters == p.clusters
    assert struct.calcsize("<I") == 4 and zipfile.is_zipfile(tmp_path / "b.iaproj")
