"""The ASPIRE peer's runner (benchmarks/aspire_peer.py): its failures are RuntimeError, which the tables catch."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def _fake_python(tmp_path, body):
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_peer_that_runs_past_its_timeout_raises_runtime_error(tmp_path, monkeypatch):
    from aspire_peer import run_peer

    monkeypatch.setenv("IA_ASPIRE_PYTHON", _fake_python(tmp_path, "exec sleep 20"))
    with pytest.raises(RuntimeError, match=r"did not finish within 0\.5 s"):
        run_peer(np.zeros((2, 8, 8)), 2, timeout=0.5)


def test_a_failing_peer_raises_runtime_error_with_its_stderr(tmp_path, monkeypatch):
    from aspire_peer import run_peer

    monkeypatch.setenv("IA_ASPIRE_PYTHON", _fake_python(tmp_path, "echo 'no module named aspire' >&2; exit 3"))
    with pytest.raises(RuntimeError, match="no module named aspire"):
        run_peer(np.zeros((2, 8, 8)), 2)
