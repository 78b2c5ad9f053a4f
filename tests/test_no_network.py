"""No network at run time (issue 32): a normal ``ia-cluster`` run, a project export and an app session
make no network system call at all (``strace -f -e trace=network``: no socket, connect, bind, send...;
the Dask runs, which need one, are not among them)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STRACE = shutil.which("strace")


def _strace_works():
    if STRACE is None or not sys.platform.startswith("linux"):
        return False
    try:
        return subprocess.run([STRACE, "-f", "-qq", "-e", "trace=network", "-o", os.devnull, "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(not _strace_works(), reason="strace is missing or cannot trace here")


def _network_calls(tmp_path, argv, env_extra=None):
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               IA_STUDIO_HOME=str(tmp_path / "home"), IA_STUDIO_LOG_DIR=str(tmp_path / "home" / "logs"),
               QT_QPA_PLATFORM="offscreen", **(env_extra or {}))
    run = subprocess.run([STRACE, "-f", "-qq", "-e", "trace=network", "-o", str(trace), sys.executable, *argv],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return [line for line in trace.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_cli_run_and_an_export_make_no_network_call(tmp_path):
    calls = _network_calls(tmp_path, ["-m", "iastudio.core.cli", "demo:shapes", "--size", "24", "--iterations", "1",
                                      "--quiet", "--out", "o", "--save-project", "p.iaproj"])
    assert calls == [], calls[:20]
    calls = _network_calls(tmp_path, ["-m", "iastudio.core.cli", "--project", "p.iaproj", "--out", "e", "--quiet"])
    assert calls == [], calls[:20]
    assert (tmp_path / "o" / "assignments.csv").is_file()
    assert (tmp_path / "e").is_dir()


@pytest.mark.slow
def test_an_app_session_makes_no_network_call(tmp_path):
    """The self-test: the window, demo images loaded and transformed, a run in the worker, every panel."""
    pytest.importorskip("PySide6")
    calls = _network_calls(tmp_path, ["-m", "iastudio.app", "--selftest"])
    assert calls == [], calls[:20]


def test_the_trace_sees_a_network_call(tmp_path):
    """The check itself: a process that opens a socket is seen."""
    calls = _network_calls(tmp_path, ["-c", "import socket; socket.socket().close()"])
    assert any("socket(" in line for line in calls)
