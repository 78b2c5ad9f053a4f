"""CI guard: core/ never imports Qt, pyqtgraph or app; functions and classes stay short enough to read."""
import ast
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


MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300
# Known exceptions, each with its reason; the list only shrinks.
LONG_ALLOWED = {
    "core/attention.py: class AttentionRun": "the engine's state machine; split once the options declaration "
                                             "(issue #34 item 1, which edits its __init__) has landed",
}


def too_long(source: str, filename: str) -> list[str]:
    """``"file: def name (n lines)"`` for each function over 80 lines and class over 300 in ``source``.

    A definition's lines run from its ``def``/``class`` line to its last line, docstring included.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            lines = node.end_lineno - node.lineno + 1
            is_class = isinstance(node, ast.ClassDef)
            if lines > (MAX_CLASS_LINES if is_class else MAX_FUNCTION_LINES):
                found.append(f"{filename}: {'class' if is_class else 'def'} {node.name} ({lines} lines)")
    return found


def test_the_length_check_counts_a_definition_from_its_first_to_its_last_line():
    def function(n_lines):
        return "def f():\n" + "    x = 1\n" * (n_lines - 2) + "    return x\n"

    def klass(n_lines):
        return "class C:\n" + "".join(f"    a{i} = {i}\n" for i in range(n_lines - 1))

    assert too_long(function(80), "a.py") == []
    assert too_long(function(81), "a.py") == ["a.py: def f (81 lines)"]
    assert too_long(klass(300), "b.py") == []
    assert too_long(klass(301), "b.py") == ["b.py: class C (301 lines)"]
    nested = "class D:\n    def m(self):\n" + "        y = 2\n" * 80
    assert too_long(nested, "c.py") == ["c.py: def m (81 lines)"]


def test_no_function_over_80_lines_and_no_class_over_300_in_core_and_app():
    found = []
    for path in sorted([*ROOT.glob("core/**/*.py"), *ROOT.glob("app/**/*.py")]):
        found += too_long(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    unexpected = [f for f in found if f.split(" (")[0] not in LONG_ALLOWED]
    assert unexpected == []
    stale = sorted(set(LONG_ALLOWED) - {f.split(" (")[0] for f in found})
    assert stale == []  # an allowed exception that is fixed leaves the list
