"""start_warmup: the warp and the read-out's imports set up on a thread of their own, once per process."""
import json
import subprocess
import sys

import pytest

_PROBE = r"""
import json, sys, threading
from iastudio.core.warp import describe_code
from iastudio.core.warmup import READOUT_MODULES, start_warmup
before = {m: m in sys.modules for m in READOUT_MODULES}
code_before = describe_code()
{body}
print(json.dumps(dict(before=before, code_before=code_before, after={m: m in sys.modules for m in READOUT_MODULES},
                      code_after=describe_code(), **extra)))
"""


def _probe(body, env=None):
    import os

    out = subprocess.run([sys.executable, "-c", _PROBE.replace("{body}", body)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, **(env or {})}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_warmup_sets_the_warp_up_and_imports_the_readout_once():
    pytest.importorskip("numba")
    got = _probe("t = start_warmup(); same = start_warmup() is t; t.join()\n"
                 "extra = dict(same=same, name=t.name, daemon=t.daemon)")
    assert not any(got["before"].values())  # a fresh process has not loaded them
    assert all(got["after"].values())
    assert got["code_before"].endswith("at the first warp)")
    assert got["code_after"].startswith("compiled loop")
    assert "first warp" not in got["code_after"]
    assert got["same"]
    assert got["name"] == "ia-warmup"
    assert got["daemon"] is False


@pytest.mark.slow
def test_without_the_numpy_warp_only_the_readout_is_imported():
    got = _probe("start_warmup(numpy_warp=False).join(); extra = {}")
    assert all(got["after"].values())
    assert got["code_after"] == got["code_before"]  # the warp still sets itself up at its first use


@pytest.mark.slow
def test_a_run_starts_the_warmup_when_it_starts_aligning_not_before():
    """Not at the run's start (the candidate search's loops would queue behind its imports), at the alignment."""
    got = _probe("from iastudio.core.attention import AttentionRun\n"
                 "from iastudio.core import similarity\n"
                 "import numpy as np\n"
                 "def warming():\n"
                 "    code = describe_code()\n"
                 "    return (any(t.name == 'ia-warmup' for t in threading.enumerate()) or\n"
                 "            code.startswith('compiled loop (Numba') and 'first' not in code)\n"
                 "run = AttentionRun(np.random.default_rng(0).random((6, 16, 16), dtype=np.float32), backend='numpy')\n"
                 "at_start, aligning = [], []\n"
                 "orig, align = run._advance, similarity._align_here\n"
                 "def first():\n"
                 "    at_start.append(warming())\n"
                 "    run._advance = orig\n"
                 "    return orig()\n"
                 "def aligned(*a, **k):\n"
                 "    aligning.append(warming())\n"
                 "    return align(*a, **k)\n"
                 "run._advance, similarity._align_here = first, aligned\n"
                 "run.run()\n"
                 "extra = dict(at_start=at_start, aligning=aligning[:1])")
    assert got["at_start"] == [False]
    assert got["aligning"] == [True]
