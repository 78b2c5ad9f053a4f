"""CI guard: core/ never imports Qt, pyqtgraph or app."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contract():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("import-linter is not installed (pip install -e .[test])")
    out = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "KEPT" in out.stdout


def test_running_the_engine_loads_no_gui_module():
    code = (
        "import sys, iastudio.core, iastudio.core.cli, iastudio.core.report\n"
        "from iastudio.core import load_demo, preprocess, AttentionRun\n"
        "c = preprocess(load_demo('shapes').images[:4], size=16)\n"
        "AttentionRun(c.images, backend='numpy', iterations=1, mean_steps=1).run()\n"
        "gui = ('PySide6', 'pyqtgraph', 'superqt')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in gui or m.startswith('iastudio.app')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
