"""build_scripts/build.py's helpers: the size table, which ICU data stays, the BLAS shim, the library pruning (#35).

None of these needs a full build: each works on a few files laid out as the bundle lays them out.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from numpy.testing import assert_allclose

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
    ("zone/en.res", True), ("zone/fr.res", False), ("curr/ja.res", False),
    # what Qt never asks ICU for (no ubrk_*, utrans_*, uspoof_*, u_charName in Qt's imports): break iterators
    # and their dictionaries, transliterators, character names, the spoof checker
    ("brkitr/root.res", False), ("brkitr/cjdict.dict", False), ("brkitr/word.brk", False),
    ("translit/root.res", False), ("unames.icu", False), ("confusables.cfu", False),
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


LINUX_ELF = sys.platform.startswith("linux") and all(shutil.which(t) for t in ("readelf", "nm"))
needs_elf = pytest.mark.skipif(not LINUX_ELF, reason="Linux bundles only; needs binutils")
needs_cc = pytest.mark.skipif(not LINUX_ELF or not (shutil.which("cc") or shutil.which("gcc")),
                              reason="Linux bundles only; needs binutils and a C compiler")


def _wheel_libs(package: str, pattern: str) -> list[Path]:
    import numpy

    return sorted((Path(numpy.__file__).parents[1] / f"{package}.libs").glob(pattern))


def _scipy_lp64() -> Path:
    libs = [p for p in _wheel_libs("scipy", "libscipy_openblas*.so") if "openblas64_" not in p.name]
    if len(libs) != 1:
        pytest.skip("needs SciPy's wheel with its OpenBLAS (scipy.libs/libscipy_openblas-*.so)")
    return libs[0]


def _compile(tmp_path: Path, source: str, out: Path, *args: str) -> Path:
    (tmp_path / "src.c").write_text(source)
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(tmp_path / "src.c"), *args], check=True)
    return out


@needs_cc
def test_blas_shim_gives_the_known_answers(build, tmp_path):
    lp64 = _scipy_lp64()
    shim = tmp_path / "libscipy_openblas64_-test.so"
    build.compile_blas_shim(shim, lp64, soname=shim.name, rpath=str(lp64.parent))
    assert build.check_blas_shim(shim) == ""


@needs_cc
def test_blas_shim_check_fails_on_a_library_that_passes_64_bit_integers_through(build, tmp_path):
    """Forwarding NumPy's names straight to the 32-bit routines (no narrowing) must not pass the check."""
    lp64 = _scipy_lp64()
    source = "\n".join(f"extern void scipy_{n}_(); void scipy_{n}_64_(void *a, void *b, void *c, void *d, void *e, "
                       f"void *f, void *g, void *h, void *i, void *j, void *k, void *l, void *m, void *o) "
                       f"{{ scipy_{n}_(a, b, c, d, e, f, g, h, i, j, k, l, m, o); }}" for n in ("dgesv", "dsyevd"))
    naive = _compile(tmp_path, source, tmp_path / "naive.so", f"-L{lp64.parent}", f"-l:{lp64.name}",
                     f"-Wl,-rpath,{lp64.parent}")
    assert build.check_blas_shim(naive) != ""


@needs_cc
def test_numpy_linear_algebra_through_the_shim_matches_numpys_own_openblas(build, tmp_path):
    """A copy of NumPy whose OpenBLAS is the shim: solve, det, inv, eigh, eig, svd, lstsq, qr, cholesky, products."""
    import numpy

    ilp64 = _wheel_libs("numpy", "libscipy_openblas64_*.so")
    lp64 = _scipy_lp64()
    if len(ilp64) != 1:
        pytest.skip("needs NumPy's wheel with its OpenBLAS (numpy.libs/libscipy_openblas64_*.so)")
    site = Path(numpy.__file__).parents[1]
    shutil.copytree(site / "numpy", tmp_path / "numpy", ignore=shutil.ignore_patterns("tests", "__pycache__"))
    shutil.copytree(site / "numpy.libs", tmp_path / "numpy.libs")
    build.compile_blas_shim(tmp_path / "numpy.libs" / ilp64[0].name, lp64, soname=ilp64[0].name,
                            rpath=str(lp64.parent))
    code = r"""
import json, re, sys
import numpy as np
rng = np.random.default_rng(0)
a, b = rng.random((60, 60)), rng.random((60, 3))
s = a @ a.T + 60 * np.eye(60)
c = a + 1j * rng.random((60, 60))
w, v = np.linalg.eigh(s)
out = {"solve": np.linalg.solve(a, b), "det": np.linalg.det(a), "slogdet": np.linalg.slogdet(a)[1],
       "inv": np.linalg.inv(a), "eigh": w, "eigvals": np.sort_complex(np.linalg.eigvals(a)),
       "svd": np.linalg.svd(a, compute_uv=False), "lstsq": np.linalg.lstsq(a[:, :40], b, rcond=None)[0],
       "qr": np.abs(np.linalg.qr(a)[1]), "cholesky": np.linalg.cholesky(s), "matmul": a @ b, "dot": a[0] @ a[1],
       "complex": np.linalg.solve(c, b) , "csvd": np.linalg.svd(c, compute_uv=False), "pinv": np.linalg.pinv(a[:, :30])}
libs = sorted(set(re.findall(r"/\S*openblas\S*", open("/proc/self/maps").read())))
json.dump({"libs": libs, **{k: np.asarray(v).ravel().view(float).tolist() for k, v in out.items()}}, sys.stdout)
"""
    def run(path):
        env = dict(os.environ, PYTHONPATH=str(path))
        return json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                         check=True, cwd=tmp_path).stdout)

    shimmed, own = run(tmp_path), run(site)
    assert any(str(tmp_path) in lib for lib in shimmed["libs"])  # the shim, and SciPy's library behind it
    assert any(lp64.name in lib for lib in shimmed["libs"])
    for key in own:
        if key != "libs":
            assert_allclose(shimmed[key], own[key], rtol=1e-9, atol=1e-12, err_msg=key)


def _tiny_library(tmp_path: Path, out: Path, *links: Path) -> Path:
    """A shared library (or module) that links ``links`` by their file names."""
    args = ["-Wl,--no-as-needed", *(a for lib in links for a in (f"-L{lib.parent}", f"-l:{lib.name}"))]
    return _compile(tmp_path, "int tiny(void) { return 1; }\n", out, *args)


@needs_cc
def test_pruning_reaches_grafted_libraries_through_modules_and_links(build, tmp_path, monkeypatch):
    """A wheel's grafted library that a module links stays, with what it links; one nothing links goes."""
    gfortran = _wheel_libs("numpy", "libgfortran-*.so*")
    quadmath = _wheel_libs("numpy", "libquadmath-*.so*")
    if len(gfortran) != 1 or len(quadmath) != 1:
        pytest.skip("needs NumPy's wheel with its grafted libgfortran and libquadmath")
    internal = tmp_path / "bundle" / "_internal"
    (internal / "numpy.libs").mkdir(parents=True)
    (internal / "scipy.libs").mkdir()
    (internal / "mod").mkdir()
    for lib in (*gfortran, *quadmath):
        shutil.copyfile(lib, internal / "numpy.libs" / lib.name)
    # scipy.libs: a link to NumPy's gfortran (as link_duplicate_libraries makes it) and a library nothing links
    (internal / "scipy.libs" / gfortran[0].name).symlink_to(f"../numpy.libs/{gfortran[0].name}")
    orphan = _tiny_library(tmp_path, internal / "scipy.libs" / "libnobody-1234abcd.so")
    orphan_size = orphan.stat().st_size
    # a module that links scipy.libs' gfortran (the link), as SciPy's Fortran modules do
    _tiny_library(tmp_path, internal / "mod" / "_fortran.cpython-311-x86_64-linux-gnu.so",
                  internal / "scipy.libs" / gfortran[0].name)
    shutil.copyfile("/bin/true", tmp_path / "bundle" / "ia-studio")
    monkeypatch.setattr(build, "BUNDLE", tmp_path / "bundle")
    monkeypatch.setattr(build, "exe_path", lambda: tmp_path / "bundle" / "ia-studio")
    saved = build.prune_orphan_libraries()
    assert not orphan.exists()  # nothing links it
    assert saved == orphan_size
    assert (internal / "scipy.libs" / gfortran[0].name).is_symlink()  # the link the module loads
    assert (internal / "numpy.libs" / gfortran[0].name).is_file()  # the file it points to
    assert (internal / "numpy.libs" / quadmath[0].name).is_file()  # what that file links


@needs_elf
def test_same_runtime_from_two_wheels_becomes_one_file_but_another_library_does_not(build, tmp_path, monkeypatch):
    numpy_gf, scipy_gf = _wheel_libs("numpy", "libgfortran-*.so*"), _wheel_libs("scipy", "libgfortran-*.so*")
    other = [p for p in scipy_gf if all(p.read_bytes() != q.read_bytes() for q in numpy_gf)]
    if len(numpy_gf) != 1 or not other:
        pytest.skip("needs NumPy's and SciPy's wheels with two different builds of libgfortran")
    if build._exports(numpy_gf[0]) != build._exports(other[0]):
        pytest.skip("the two builds of libgfortran export different symbols here")
    internal = tmp_path / "bundle" / "_internal"
    (internal / "numpy.libs").mkdir(parents=True)
    (internal / "scipy.libs").mkdir()
    shutil.copyfile(numpy_gf[0], internal / "numpy.libs" / numpy_gf[0].name)
    shutil.copyfile(other[0], internal / "scipy.libs" / other[0].name)
    # same name and version, other exports (zlib's): not the same library, stays a file
    shutil.copyfile("/usr/lib/x86_64-linux-gnu/libz.so.1", internal / "scipy.libs" / "libgfortran-0000beef.so.5")
    monkeypatch.setattr(build, "BUNDLE", tmp_path / "bundle")
    saved = build.link_same_runtime()
    linked = internal / "scipy.libs" / other[0].name
    assert linked.is_symlink()
    assert linked.resolve() == (internal / "numpy.libs" / numpy_gf[0].name).resolve()
    assert saved == other[0].stat().st_size
    assert not (internal / "scipy.libs" / "libgfortran-0000beef.so.5").is_symlink()


def test_never_loaded_lists_the_files_no_process_mapped_largest_first(build, tmp_path):
    for name, size in (("a.so", 300), ("b.cpython-311-x86_64-linux-gnu.so", 200), ("libc.so.6", 100)):
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "data.txt").write_bytes(b"x" * 999)  # not a library
    (tmp_path / "link.so").symlink_to("libc.so.6")  # a link: counted through its file
    rows = build.never_loaded([str(tmp_path / "link.so")], root=tmp_path)
    assert [(size, path.name) for size, path in rows] == [(300, "a.so"), (200, "b.cpython-311-x86_64-linux-gnu.so")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_selftest_inventory_lists_the_imported_modules_and_mapped_libraries(tmp_path):
    from iastudio.app.selftest import write_inventory

    write_inventory(None)  # no path: nothing is written
    write_inventory(str(tmp_path / "inventory.json"))
    inventory = json.loads((tmp_path / "inventory.json").read_text())
    assert {"iastudio.app.selftest", "json"} <= set(inventory["modules"])
    assert any("_multiarray_umath" in path for path in inventory["mapped"])  # NumPy's compiled core


def test_the_qtopengl_stand_in_lets_pyqtgraph_draw_and_says_why_it_is_missing(tmp_path):
    """The bundle's runtime hook: pyqtgraph imports PySide6.QtOpenGL, draws without it; a use of it says why."""
    code = r"""
import runpy, sys
runpy.run_path(sys.argv[1])
import numpy as np
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication
app = QApplication([])
import pyqtgraph as pg
w = pg.PlotWidget(background="w")
w.plot(np.arange(10.0), pen=pg.mkPen((255, 0, 0), width=3))
w.resize(200, 150); w.show(); app.processEvents()
im = w.grab().toImage()
red = sum(im.pixelColor(x, y) == QColor(255, 0, 0) for x in range(im.width()) for y in range(im.height()))
import PySide6.QtOpenGL as gl
try:
    gl.QOpenGLBuffer
    print("no error")
except AttributeError as exc:
    print(red, "QtOpenGL.abi3" in open("/proc/self/maps").read(), exc)
"""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "build_scripts" / "rthooks" / "no_qtopengl.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    red, mapped, message = out.stdout.strip().split(" ", 2)
    assert int(red) > 50  # the curve was drawn
    assert mapped == "False"  # QtOpenGL's bindings were never loaded
    assert "without OpenGL" in message


def test_required_system_libraries_are_the_apps_start_up_check(build):
    """The build leaves to the system exactly what the app refuses to start without (app/__main__.py)."""
    from iastudio.app.__main__ import _LINUX_LIBS

    assert build.required_system_libraries() == [lib for group in _LINUX_LIBS.values() for lib, _ in group]


@needs_cc
def test_system_closure_follows_what_the_systems_copies_link(build, tmp_path):
    """On made-up system copies: a required library brings what it links, transitively, and nothing else."""
    paths = {name: _tiny_library(tmp_path, tmp_path / name, *links) for name, links in (
        ("libdeep.so.1", []), ("libmid.so.2", []), ("libother.so.3", []))}
    paths["libmid.so.2"] = _tiny_library(tmp_path, tmp_path / "libmid.so.2", paths["libdeep.so.1"])
    paths["libtop.so.0"] = _tiny_library(tmp_path, tmp_path / "libtop.so.0", paths["libmid.so.2"])
    assert build.system_closure(["libtop.so.0", "libabsent.so.9"], paths) == {"libtop.so.0", "libmid.so.2",
                                                                               "libdeep.so.1"}


@needs_cc
def test_system_libraries_leave_the_bundle_but_grafted_qt_and_modules_stay(build, tmp_path, monkeypatch):
    internal = tmp_path / "bundle" / "_internal"
    (internal / "pillow.libs").mkdir(parents=True)
    (internal / "PySide6" / "Qt" / "lib").mkdir(parents=True)
    for rel in ("libfontconfig.so.1", "libfreetype.so.6", "libstdc++.so.6", "pillow.libs/libfreetype.so.6",
                "PySide6/Qt/lib/libfreetype.so.6", "libfreetype.so.6.cpython-311-x86_64-linux-gnu.so"):
        (internal / rel).write_bytes(b"x" * 10)
    monkeypatch.setattr(build, "BUNDLE", tmp_path / "bundle")
    monkeypatch.setattr(build, "required_system_libraries", lambda: ["libfontconfig.so.1"])
    monkeypatch.setattr(build, "system_closure", lambda names: {"libfontconfig.so.1", "libfreetype.so.6", "libz.so.1"})
    assert build.use_system_libraries() == 20
    assert not (internal / "libfontconfig.so.1").exists()
    assert not (internal / "libfreetype.so.6").exists()
    for rel in ("libstdc++.so.6", "pillow.libs/libfreetype.so.6", "PySide6/Qt/lib/libfreetype.so.6",
                "libfreetype.so.6.cpython-311-x86_64-linux-gnu.so"):
        assert (internal / rel).exists(), rel
