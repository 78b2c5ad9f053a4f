"""Issue #35 item 5: a missing optional extra is named with ``pip install`` in a Python install, never in
the packaged app (which cannot install anything): there it says which edition has it."""
import sys

import pytest

from iastudio.core import backend, extras
from iastudio.core.distributed import DaskUnavailableError, _import_distributed
from iastudio.core.imageset import ImageLoadError
from iastudio.core.stacks import star_members


@pytest.fixture
def packaged(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # what PyInstaller's bootloader sets


def test_missing_extra_in_a_python_install_says_the_command(monkeypatch):
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert not extras.is_packaged()
    expected = "Dask is not installed (pip install 'invariant-attention-studio[dask]')"
    assert extras.missing_extra("Dask", extra="dask") == expected


def test_missing_extra_in_the_packaged_app_names_the_edition_not_pip(packaged):
    assert extras.is_packaged()
    text = extras.missing_extra("CuPy", extra="gpu")
    assert text.startswith("CuPy is not part of this installed edition")
    assert "'gpu' extra" in text
    assert "Install" in text
    assert "pip" not in text


def test_missing_extra_refuses_an_extra_that_is_not_a_name():
    with pytest.raises(ValueError, match="plain name"):
        extras.missing_extra("CuPy", extra="gpu]; rm -rf /")


def _star(tmp_path):
    path = tmp_path / "particles.star"
    path.write_text("data_\nloop_\n_rlnImageName #1\n1@p.mrcs\n")
    return path


@pytest.mark.parametrize("frozen", [False, True])
def test_every_message_a_packaged_user_can_reach_leaves_pip_out(tmp_path, monkeypatch, frozen):
    monkeypatch.setattr(sys, "frozen", frozen, raising=False)
    for name in ("starfile", "distributed"):  # as in the installer, which leaves both out
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImageLoadError) as star:
        star_members(_star(tmp_path))
    with pytest.raises(DaskUnavailableError) as dask:
        _import_distributed()
    gpu = backend._reason(ImportError("No module named 'cupy'"))
    messages = [str(star.value), str(dask.value), gpu]
    assert "STAR files" in messages[0]
    assert "Dask" in messages[1]
    assert "CuPy" in messages[2]
    if frozen:
        assert not [m for m in messages if "pip" in m]
        assert all("installed edition" in m for m in messages)
    else:
        assert all("pip install 'invariant-attention-studio[" in m for m in messages)
