"""numpydoc validation of core's public API: what ``iastudio.core`` exports and the options module.

A short list of checks that every one of them passes (``python -m numpydoc lint`` gives the whole list):
a docstring with a one-line summary, every parameter documented and none that does not exist, a Returns
(or Yields) section for what returns (or yields) something.
"""
from __future__ import annotations

import inspect

import pytest

import iastudio.core as core
from iastudio.core import options

validate = pytest.importorskip("numpydoc.validate").validate

FUNCTION_CHECKS = {"GL08", "SS01", "SS03", "PR01", "PR02", "RT01", "YD01"}
CLASS_CHECKS = {"GL08", "SS01", "SS03", "PR02"}  # a class documents its Attributes, not __init__'s Parameters


def _public():
    out = [getattr(core, name) for name in core.__all__]
    out += [getattr(options, name) for name in options.__all__ if name != "OPTIONS"]
    return [o for o in out if inspect.isfunction(o) or inspect.isclass(o)]


@pytest.mark.parametrize("obj", _public(), ids=lambda o: f"{o.__module__.rsplit('.', 1)[-1]}.{o.__qualname__}")
def test_public_docstrings_pass_numpydoc(obj):
    checks = CLASS_CHECKS if inspect.isclass(obj) else FUNCTION_CHECKS
    errors = [f"{code}: {msg}" for code, msg in validate(f"{obj.__module__}.{obj.__qualname__}")["errors"]
              if code in checks]
    assert errors == []


def test_the_checks_catch_a_bad_docstring():
    errors = {code for code, _ in validate(f"{__name__}._undocumented")["errors"]}
    assert {"PR01", "RT01"} <= errors


def _undocumented(x, y=1):
    """Add."""
    return x + y
