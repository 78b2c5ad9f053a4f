"""``benchmarks/gpu_check.py`` runs where there is no GPU only as a dry run, and its steps work end to end.

The script is meant to run unchanged on a lent CUDA machine, from a checkout that is not installed.
Here NumPy stands in for CuPy (``--dry-run``) and ``iastudio`` is hidden (``python -S``: no
site-packages processing, so no installed or editable package), so the checkout staging is exercised too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _run_bare(*args, tmp_path):
    """The script under ``python -S``: site-packages only as a plain path (their .pth hooks not run)."""
    site = str(Path(np.__file__).resolve().parents[1])
    (tmp_path / "tmp").mkdir(exist_ok=True)  # the staged package goes here (and must be gone afterwards)
    env = dict(os.environ, PYTHONPATH=site, TMPDIR=str(tmp_path / "tmp"))
    return subprocess.run([sys.executable, "-S", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)


def test_a_bare_checkout_imports_iastudio_from_its_folders(tmp_path):
    import importlib.util

    site = str(Path(np.__file__).resolve().parents[1])
    hidden = subprocess.run([sys.executable, "-S", "-c", "import importlib.util as u; print(u.find_spec('iastudio'))"],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=site), cwd=tmp_path)
    if hidden.stdout.strip() != "None":
        pytest.skip("iastudio is installed into site-packages itself here: nothing to hide")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from checkout import stage
    finally:
        sys.path.remove(str(SCRIPT.parent))
    folder = stage(tmp_path / "staged")
    code = "import iastudio.core as c, iastudio.app as a; print(c.__file__); print(a.__file__)"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), site])))
    assert out.returncode == 0, out.stderr[-2000:]
    core_file, app_file = (Path(line).resolve() for line in out.stdout.split())
    root = SCRIPT.parents[1]
    assert core_file == root / "core" / "__init__.py"
    assert app_file == root / "app" / "__init__.py"
    assert importlib.util.find_spec("iastudio") is not None  # this process is untouched


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_step_from_a_bare_checkout(tmp_path):
    out = _run_bare("--dry-run", "--skip-tests", "--budget", "280", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.split("summary ", 1)[1])
    assert summary["dry_run"] is True
    assert summary["device"] == "CPU"
    for case in summary["equality"].values():
        assert case["ok"]
        assert case["labels_equal"]
        np.testing.assert_allclose([case["input_dist_maxdiff"], case["final_dist_maxdiff"]], 0.0, atol=1e-12)
    for n in (60, 120):
        r = summary[f"n{n}"]
        assert isinstance(r, dict), r  # else: skipped or over its time limit
        assert r["n"] == n
        assert r["neighbors"] == 10
        assert r["wall_s"] > 0
        assert r["clusters"] >= 1
    assert summary["iastudio"].startswith(str(tmp_path / "tmp"))  # the staged package was used ...
    assert "FAILED" not in out.stdout
    assert not list((tmp_path / "tmp").iterdir())


def test_gpu_check_without_a_gpu_says_so_and_exits_2(tmp_path):
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    out = _run_bare(tmp_path=tmp_path)
    assert out.returncode == 2
    assert "no GPU check here" in out.stdout
    assert "CuPy is not installed" in out.stdout
    assert "--dry-run" in out.stdout
