"""Without PyTorch: the core, the app's Networks panel module and ia-nets still import and say what to do."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCK = "import sys; sys.modules['torch'] = None\n"  # makes `import torch` fail like a missing install


def _run(code):
    return subprocess.run([sys.executable, "-c", BLOCK + code], cwd=ROOT, capture_output=True, text=True)


def test_ia_nets_without_torch_says_how_to_install():
    out = _run("from iastudio.core.nets.cli import main\nsys.exit(main(['train', '--model', 'cnn', '--out', 'x']))")
    assert out.returncode == 2
    assert 'pip install "invariant-attention-studio[nets]"' in out.stderr
    assert "Traceback" not in out.stderr


def test_core_and_panel_module_import_without_torch():
    out = _run("import iastudio.core, iastudio.core.cli, iastudio.core.nets, iastudio.app.nets_panel\n"
               "print(iastudio.core.nets.torch_available(),\n"
               "      'torch' in sys.modules and sys.modules['torch'] is not None)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
