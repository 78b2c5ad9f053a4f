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
import scipy.sparse as sp

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
    sparse_project,
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
    assert n >= 1
    assert len(p.labels) == n
    assert all(isinstance(x, str) for x in p.paths)
    assert p.transforms.shape == (n, 3)
    assert np.isfinite(p.transforms).all()
    if p.base is not None:
        assert p.base.shape[0] == n
        assert p.base.ndim in (3, 4)
        assert np.isfinite(p.base).all()
    if p.clusters is not None:
        labels = np.asarray(p.clusters.labels)
        assert labels.shape == (n,)
        assert labels.min() >= UNASSIGNED
        assert labels.max() < 10 * n + 1000
    for fr in p.history:
        for key in ("distances", "labels"):
            assert fr[key] is not None
        assert fr["distances"].shape == (n, n)
        assert np.isfinite(_values(fr["distances"])).all()
        assert fr["labels"].shape == (n,)
        assert fr["labels"].min() >= 0
        assert fr["labels"].max() < n
        for key in ("weights", "distances"):
            _sparse_ok(fr[key], n)
    for key in ("weights", "input_distances", "final_distances"):
        _sparse_ok(p.result.get(key), n)
    rl = p.result.get("run_labels")
    if rl is not None:
        assert rl.shape == (n,)
        assert rl.min() >= 0
        assert rl.max() < n
    assert isinstance(p.parameters, dict)
    assert all(isinstance(e, str) for e in p.edits)


def _values(a):
    return a.data if sp.issparse(a) else a


def _sparse_ok(a, n):
    """A loaded sparse array is a consistent (n, n) CSR of finite values, in canonical form."""
    if not sp.issparse(a):
        return
    assert a.format == "csr"
    assert a.shape == (n, n)
    assert np.isfinite(a.data).all()
    a.check_format(full_check=True)
    assert a.has_canonical_format
    assert a.indptr[0] == 0
    assert a.indptr[-1] == a.nnz == len(a.indices)


def outcome(path):
    """'ok' (invariants hold) or 'refused: reason'; anything else fails the test."""
    t = time.perf_counter()
    try:
        p = load_project(path)
    except ProjectError as exc:  # an outcome to classify, not the test's expectation: no pytest.raises
        assert str(exc)  # noqa: PT017
        assert "Traceback" not in str(exc)  # noqa: PT017
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


@pytest.fixture
def sparse_base(tmp_path):
    path = save_project(tmp_path / "sparse.iaproj", sparse_project(n=8))
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
        yield (*prefix, k)
        if len(prefix) < 3:
            yield from _paths(v, (*prefix, k))


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
    assert len(results) > 300
    assert refused > 200
    # the dangerous ones in particular
    assert results[(("n_images",), "1000000000")].startswith("refused")
    assert results[(("clusters", "labels", 0), "1000000000")].startswith("refused")
    assert results[(("history", 0, "iteration"), str(10**30))].startswith("refused")
    assert results[(("parameters", "beta_used"), '"x"')].startswith("refused")


@pytest.mark.parametrize("key", ["transforms", "base", "scale", "offset", "result/run_labels", "result/weights",
                                 "result/cluster_means", "history/0000_labels", "history/0001_distances",
                                 "history/0000_means", "result/weights.data", "result/weights.indices",
                                 "result/input_distances.indptr", "result/final_distances.shape",
                                 "history/0001_distances.data", "history/0000_weights.indices"])
def test_every_array_with_every_corruption(tmp_path, base, sparse_base, key):
    manifest, members = sparse_base if "." in key else base  # "name.part": a component of a sparse array
    name = f"arrays/{key}.npy"
    arr = np.load(io.BytesIO(members[name]))
    good = members[name]
    head = good[: len(good) - arr.nbytes]
    variants = {
        "empty": b"", "truncated": good[: len(good) // 2], "header only": head, "garbage": b"\x93NUMPY" + b"\xff" * 40,
        "version 9": b"\x93NUMPY\x09\x00" + good[8:], "extra data": good + b"\x00" * 64,
        "huge shape": npy_header(arr.dtype, (10 ** 12, *arr.shape[1:])) + b"\x00" * 64,
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
    if "labels" in key or "." in key:  # cluster numbers, and a sparse array's indices, pointers and shape
        assert seen["huge labels"].startswith("refused")
        assert seen["negative labels"].startswith("refused")
    if arr.dtype.kind == "f" and key != "result/scores":
        assert seen["nan"].startswith("refused")
        assert seen["inf"].startswith("refused")
    assert seen["fortran"] == "ok"
    assert seen["big endian"] == "ok"


def _npy_of(members, key):
    return np.load(io.BytesIO(members[f"arrays/{key}.npy"]), allow_pickle=False)


def test_sparse_components_that_lie_are_refused_with_the_reason(tmp_path, sparse_base):
    """Each component has a valid .npy header of the right type and length; the contents lie."""
    manifest, members = sparse_base
    n = manifest["n_images"]
    key = "result/weights"
    data, indices, indptr = (_npy_of(members, f"{key}.{part}") for part in ("data", "indices", "indptr"))
    nnz = data.size

    def with_parts(**parts):
        m = dict(members)
        for part, arr in parts.items():
            m[f"arrays/{key}.{part}.npy"] = npy(arr)
        return outcome(write_project(tmp_path / "s.iaproj", manifest, m))

    def changed(arr, at, value):
        arr = arr.copy()
        arr[at] = value
        return arr

    unsorted = indices.copy()
    unsorted[indptr[0]:indptr[1]] = unsorted[indptr[0]:indptr[1]][::-1]
    repeated = indices.copy()
    repeated[indptr[1] - 1] = repeated[indptr[1] - 2]
    cases = {
        "shape n x n+1": (dict(shape=np.array([n, n + 1])), "has shape (8, 9), which does not match the 8 images"),
        "shape 1e12": (dict(shape=np.array([10**12, 10**12])), "does not match the 8 images"),
        "shape negative": (dict(shape=np.array([-n, -n])), "does not match the 8 images"),
        "pointers from 1": (dict(indptr=changed(indptr, 0, 1)), "do not run from 0"),
        "pointers end short": (dict(indptr=changed(indptr, -1, nnz - 1)), "do not run from 0"),
        "pointers beyond the values": (dict(indptr=changed(indptr.astype(np.int64), -1, 10**12)), "do not run from 0"),
        "pointers decreasing": (dict(indptr=changed(indptr, 3, 0)), "decreasing row pointers"),
        "pointers uint64 wrap": (dict(indptr=changed(indptr.astype(np.uint64), 3, 2**64 - 1)), "decreasing"),
        "column n": (dict(indices=changed(indices, 0, n)), "column index out of range"),
        "column -1": (dict(indices=changed(indices, 0, -1)), "column index out of range"),
        "column 2^40 as uint64": (dict(indices=changed(indices.astype(np.uint64), 0, 2**40)), "out of range"),
        "row unsorted": (dict(indices=unsorted), "unsorted or repeated column indices"),
        "row repeated": (dict(indices=repeated), "unsorted or repeated column indices"),
        "values nan": (dict(data=changed(data, 0, np.nan)), "'result/weights' holds NaN or infinite values"),
        "values inf": (dict(data=changed(data, -1, -np.inf)), "holds NaN or infinite"),
        "one value fewer": (dict(data=data[:-1]), "column indices for"),
        "more values than n*n": (dict(data=np.zeros(n * n + 1, np.float32),
                                      indices=np.zeros(n * n + 1, np.int32)), "does not match the 8 images"),
        "values as int": (dict(data=data.astype(np.int32)), "wrong type"),
        "pointers as float": (dict(indptr=indptr.astype(np.float64)), "wrong type"),
        "pointers 2-D": (dict(indptr=indptr[:, None]), "does not match the 8 images"),
    }
    for what, (parts, reason) in cases.items():
        got = with_parts(**parts)
        assert got.startswith("refused: s.iaproj: "), (what, got)
        assert reason in got, (what, got)
    # the untouched components load, as the same csr_matrix
    p = load_project(write_project(tmp_path / "ok.iaproj", manifest, members))
    assert type(p.result["weights"]) is sp.csr_matrix
    assert p.result["weights"].nnz == nnz


def test_the_sparse_entries_of_the_manifest_are_checked(tmp_path, sparse_base):
    manifest, members = sparse_base
    assert manifest["format_version"] == 2
    assert len(manifest["sparse"]) == 7
    for value in NASTY:  # the whole list, and the type of one entry
        for field in (("sparse",), ("sparse", "result/weights")):
            m = json.loads(json.dumps(manifest))
            _set(m, field, value)
            assert outcome(write_project(tmp_path / "m.iaproj", m, members)).startswith("refused"), (field, value)
    cases = {}
    m = json.loads(json.dumps(manifest))
    m["format_version"] = 1
    cases["format 1"] = (m, members, "sparse arrays in a project of format version 1")
    m = json.loads(json.dumps(manifest))
    m["sparse"]["result/weights"] = "coo_matrix"
    cases["another type"] = (m, members, "the list of sparse arrays is malformed")
    for other in ("result/cluster_means", "history/0000_means", "history/0000_labels", "history/0002_weights",
                  "base", "../result/weights"):
        m = json.loads(json.dumps(manifest))
        m["sparse"][other] = "csr_matrix"
        cases[f"sparse {other}"] = (m, members, "the list of sparse arrays is malformed")
    m = json.loads(json.dumps(manifest))
    m["arrays"].remove("result/weights.indptr")
    cases["a part not listed"] = (m, members, "the sparse array 'result/weights' lacks its indptr")
    m = json.loads(json.dumps(manifest))
    del m["sparse"]["result/weights"]
    cases["parts of an array not declared sparse"] = (m, members, "unexpected array 'result/weights.data'")
    m = json.loads(json.dumps(manifest))
    m["arrays"].append("result/weights")
    cases["dense and sparse at once"] = (m, {**members, "arrays/result/weights.npy": npy(np.zeros((8, 8)))},
                                         "unexpected array 'result/weights'")
    m = json.loads(json.dumps(manifest))
    m["arrays"].append("result/weights.extra")
    cases["an unknown part"] = (m, members, "unexpected array 'result/weights.extra'")
    m = json.loads(json.dumps(manifest))
    gone = dict(members)
    del gone["arrays/result/weights.indices.npy"]
    cases["a part missing from the zip"] = (m, gone, "the array 'result/weights.indices' is missing")
    for what, (m, mem, reason) in cases.items():
        got = outcome(write_project(tmp_path / "c.iaproj", m, mem))
        assert got.startswith("refused: c.iaproj: "), (what, got)
        assert reason in got, (what, got)


def test_a_sparse_bomb_is_refused_from_its_header(tmp_path, sparse_base):
    """Components declaring n * n values of 8 bytes for a large n: the inflate budget, before any data."""
    manifest, _members = sparse_base
    n = 50_000
    m = json.loads(json.dumps(manifest))
    m["n_images"], m["paths"], m["labels"] = n, [f"demo:x/{i}" for i in range(n)], [None] * n
    m["arrays"] = [f"result/weights.{part}" for part in ("data", "indices", "indptr", "shape")]
    m["history"], m["clusters"] = [], None
    m["sparse"] = {"result/weights": "csr_matrix"}
    huge = {"arrays/result/weights.data.npy": npy_header(np.float64, (n * n,)) + b"\x00" * 64,
            "arrays/result/weights.indices.npy": npy_header(np.int64, (n * n,)) + b"\x00" * 64,
            "arrays/result/weights.indptr.npy": npy(np.zeros(n + 1, np.int64)),
            "arrays/result/weights.shape.npy": npy(np.array([n, n]))}
    t = time.perf_counter()
    got = outcome(write_project(tmp_path / "b.iaproj", m, huge))
    assert "zip bomb" in got, got
    assert time.perf_counter() - t < 2, got


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
    assert cp.inflated_limit(10**8) == 20 * 10**8
    assert cp.inflated_limit(10**10) == cp._MAX_BUDGET


def test_round_trip_of_every_valid_mutation_still_saves(tmp_path):
    """A loaded project can be saved and loaded again unchanged (the app's Save after Open)."""
    p = good_project(n=6, side=8, frames=3)
    q = load_project(save_project(tmp_path / "a.iaproj", p))
    r = load_project(save_project(tmp_path / "b.iaproj", q))
    assert r.paths == p.paths
    assert np.array_equal(r.base, p.base)
    assert r.clusters == p.clusters
    p = sparse_project(n=6, frames=3)
    r = load_project(save_project(tmp_path / "d.iaproj", load_project(save_project(tmp_path / "c.iaproj", p))))
    for key in ("weights", "input_distances", "final_distances"):
        assert type(r.result[key]) is sp.csr_matrix
        assert (r.result[key] != p.result[key]).nnz == 0
    assert struct.calcsize("<I") == 4
    assert zipfile.is_zipfile(tmp_path / "b.iaproj")
