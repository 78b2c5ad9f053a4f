"""build_scripts/build.py's pure helpers: the size table's components and which ICU data items stay (#35)."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("ia_build", ROOT / "build_scripts" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("item", "kept"), [
    ("root.res", True), ("en.res", True), ("res_index.res", True), ("pool.res", True),
    ("de.res", False), ("zh_Hant_TW.res", False), ("sr_Latn.res", False),     # other locales' data
    ("ibm-1047_P100-1995.cnv", False), ("cnvalias.icu", True),                  # legacy code pages, their aliases
    ("supplementalData.res", True), ("zoneinfo64.res", True), ("nfkc.nrm", True), ("uts46.nrm", True),
    ("coll/root.res", True), ("coll/ucadata.icu", True), ("coll/de.res", False),
    ("brkitr/root.res", True), ("brkitr/cjdict.dict", True), ("brkitr/de.res", True),
    ("zone/en.res", True), ("zone/fr.res", False), ("curr/ja.res", False), ("translit/root.res", True),
])
def test_icu_items_kept_are_the_root_and_english_data(build, item, kept):
    assert build.icu_item_kept(item) is kept


@pytest.mark.parametrize(("path", "component"), [
    ("ia-studio", "ia-studio (launcher and the Python modules' archive)"),
    ("install_linux.sh", "install_linux.sh"),
    ("_internal/libpython3.11.so.1.0", "Python runtime"),
    ("_internal/base_library.zip", "Python runtime"),
    ("_internal/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", "Python runtime"),
    ("_internal/libglib-2.0.so.0", "system libraries (_internal/*.so)"),
    ("_internal/scipy.libs/libscipy_openblas-6cdc3b4a.so", "scipy"),
    ("_internal/scipy/linalg/_flapack.cpython-311-x86_64-linux-gnu.so", "scipy"),
    ("_internal/PySide6/Qt/lib/libQt6Core.so.6", "PySide6"),
    ("_internal/numpy-2.4.6.dist-info/METADATA", "numpy"),
])
def test_each_bundled_file_counts_for_its_package(build, path, component):
    assert build.component(Path(path)) == component


def test_size_table_sums_by_component_largest_first(build, tmp_path):
    files = {"_internal/scipy/a.so": 300, "_internal/scipy.libs/b.so": 200, "_internal/numpy/c.so": 400,
             "_internal/libz.so.1": 50, "ia-studio": 10}
    for rel, size in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x" * size)
    rows = build.size_table(tmp_path, top=2)
    assert rows == [("scipy", 500), ("numpy", 400), ("2 others", 60)]


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="Linux bundles only; needs binutils' readelf")
def test_orphan_pruning_deletes_unlinked_libraries_but_never_an_extension_module(build, tmp_path, monkeypatch):
    """psygnal's mypyc runtime lies loose in _internal/ and is imported, not linked: it must stay."""
    import psygnal

    mypyc = sorted(Path(psygnal.__file__).parents[1].glob("*__mypyc*.so"))
    zlib = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
    if not mypyc or not zlib.exists():
        pytest.skip("needs psygnal's compiled wheel and the system zlib")
    internal = tmp_path / "bundle" / "_internal"
    internal.mkdir(parents=True)
    for src in (mypyc[0], zlib):
        shutil.copyfile(src, internal / src.name)
    shutil.copyfile("/bin/true", tmp_path / "bundle" / "ia-studio")  # the launcher links libc only
    monkeypatch.setattr(build, "BUNDLE", tmp_path / "bundle")
    monkeypatch.setattr(build, "exe_path", lambda: tmp_path / "bundle" / "ia-studio")
    saved = build.prune_orphan_libraries()
    assert not (internal / zlib.name).exists()  # nothing links it: deleted
    assert saved == zlib.stat().st_size
    assert (internal / mypyc[0].name).exists()  # an extension module: kept
