"""Build the PyInstaller onedir bundle, archive it and smoke-test it.

    pip install -e ".[build]"
    python build_scripts/build.py            # CPU-only bundle
    python build_scripts/build.py --gpu      # include CuPy (needs the gpu extra installed)
    python build_scripts/build.py --nets     # include PyTorch for the Networks panel (needs the nets extra)

Produces ``dist/InvariantAttentionStudio/`` (executable ``ia-studio``, or
``ia-studio.exe`` on Windows) and ``dist/InvariantAttentionStudio-<version>-<os>-<arch>.tar.xz``
(``.zip`` on Windows).  Then runs the frozen ``ia-studio --selftest`` offscreen and
times a cold start to the first window; the build fails loudly if the self-test fails.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
BUNDLE = DIST / "InvariantAttentionStudio"
INVENTORY = DIST / "selftest-inventory.json"  # what the frozen self-test imported and mapped


def version() -> str:
    from importlib.metadata import version as installed_version

    return installed_version("invariant-attention-studio")


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def component(rel: Path) -> str:
    """The top-level component a bundled file belongs to: its package (``scipy.libs`` counts as ``scipy``)."""
    parts = rel.parts
    if parts[0] != "_internal":
        launcher = parts[0] in ("ia-studio", "ia-studio.exe")
        return f"{parts[0]} (launcher and the Python modules' archive)" if launcher else parts[0]
    if len(parts) == 2:  # a loose file in _internal: the Python runtime and the libraries it links
        name = parts[1]
        if name.startswith(("libpython", "base_library")):
            return "Python runtime"
        return "system libraries (_internal/*.so)" if ".so" in name or name.endswith(".dll") else "other files"
    top = parts[1]
    if top.startswith("python3") or top == "lib-dynload":
        return "Python runtime"
    return top[: -len(".libs")] if top.endswith(".libs") else top.split("-")[0]


def size_table(root: Path = BUNDLE, top: int = 25) -> list[tuple[str, int]]:
    """Bytes by top-level component, largest first (the rest summed in one row)."""
    sizes: dict[str, int] = {}
    for f in root.rglob("*"):
        if f.is_file() and not f.is_symlink():
            key = component(f.relative_to(root))
            sizes[key] = sizes.get(key, 0) + f.stat().st_size
    rows = sorted(sizes.items(), key=lambda kv: -kv[1])
    if len(rows) > top:
        rows = [*rows[:top], (f"{len(rows) - top} others", sum(v for _, v in rows[top:]))]
    return rows


def print_size_table(root: Path = BUNDLE) -> None:
    rows = size_table(root)
    total = sum(v for _, v in rows)
    print(f"{'component':<58} {'MB':>7} {'share':>6}")
    for name, size in rows:
        print(f"{name:<58} {size / 1e6:7.1f} {100 * size / total:5.1f}%")
    print(f"{'total':<58} {total / 1e6:7.1f}")


def never_loaded(mapped: list[str], root: Path = BUNDLE) -> list[tuple[int, Path]]:
    """The bundle's shared libraries and compiled modules that a process never mapped, largest first.

    ``mapped`` lists the files the process had mapped (the frozen self-test writes them to
    :data:`INVENTORY`); a link counts as mapped when the file it points to is.
    """
    seen = {os.path.realpath(p) for p in mapped}
    files = [f for f in root.rglob("*") if f.is_file() and not f.is_symlink()
             and (".so" in f.name or f.suffix in (".dll", ".pyd", ".dylib"))]
    return sorted(((f.stat().st_size, f) for f in files if os.path.realpath(f) not in seen), reverse=True)


def print_never_loaded(mapped: list[str], top: int = 12) -> None:
    rows = never_loaded(mapped)
    print(f"{len(rows)} libraries and compiled modules ({sum(s for s, _ in rows) / 1e6:.1f} MB) were never loaded by "
          f"the self-test (Qt's xcb and Wayland platforms among them: not loaded offscreen); the largest:")
    for size, f in rows[:top]:
        print(f"  {size / 1e6:6.2f} MB  {f.relative_to(BUNDLE)}")


def exe_path() -> Path:
    if sys.platform == "darwin" and (DIST / "Invariant Attention Studio.app").exists():
        return DIST / "Invariant Attention Studio.app" / "Contents" / "MacOS" / "ia-studio"
    return BUNDLE / ("ia-studio.exe" if sys.platform == "win32" else "ia-studio")


def build(gpu: bool, nets: bool = False) -> None:
    env = dict(os.environ, IA_BUILD_GPU="1" if gpu else "0", IA_BUILD_NETS="1" if nets else "0",
               IA_VERSION=version())
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
           "--distpath", str(DIST), "--workpath", str(ROOT / "build" / "pyinstaller"),
           str(ROOT / "build_scripts" / "ia_studio.spec")]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def _loads(paths: list[Path]) -> list[Path]:
    """The libraries among ``paths`` that the dynamic loader refuses (each tried in a fresh process)."""
    code = ("import ctypes, sys\nfor p in sys.argv[1:]:\n    try:\n        ctypes.CDLL(p)\n"
            "    except OSError:\n        print(p)\n")
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True)
    if out.returncode != 0:  # the checking process itself died: check one at a time
        return [p for p in paths if subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True,
                                                   text=True).stdout.strip()]
    return [Path(line) for line in out.stdout.splitlines()]


def strip_libraries() -> int:
    """Strip the symbol tables from the bundle's shared libraries on Linux, and check that each still loads.

    All but the libraries auditwheel grafted into the wheels (the ``*.libs`` folders, OpenBLAS among them:
    stripping those breaks them); a library that no longer loads is put back as it was.
    Returns the bytes saved.
    """
    strip = shutil.which("strip")
    if not sys.platform.startswith("linux") or strip is None:
        return 0
    targets = [f for f in (BUNDLE / "_internal").rglob("*.so*") if f.is_file() and not f.is_symlink()
               and not any(part.endswith(".libs") for part in f.relative_to(BUNDLE).parts)]
    unloadable = set(_loads(targets))  # (a plugin for hardware this machine lacks): left as it is
    targets = [f for f in targets if f not in unloadable]
    saved = 0
    with tempfile.TemporaryDirectory(prefix="ia-strip-") as keep:
        originals = {}
        for i, f in enumerate(targets):
            before = f.stat().st_size
            originals[f] = Path(keep) / str(i)
            shutil.copy2(f, originals[f])
            if subprocess.run([strip, "--strip-unneeded", str(f)], capture_output=True).returncode != 0:
                shutil.copy2(originals[f], f)
            saved += before - f.stat().st_size
        for f in _loads(targets):
            print(f"  {f.relative_to(BUNDLE)} does not load once stripped: kept as it was")
            saved -= originals[f].stat().st_size - f.stat().st_size
            shutil.copy2(originals[f], f)
    return saved


# ICU's data the Qt window reads: the collation and normalisation data, the root and English locales and the
# time-zone tables.  Qt's libraries call ICU's collators, converters, calendars (time-zone names) and case
# mapping only (``nm -D --undefined-only`` on each of them: no ubrk_*, utrans_*, uspoof_*, u_charName), so also
# left out: the break-iterator rules and their dictionaries (brkitr/, 3.5 MB), the transliterators (translit/,
# 1.1 MB), the Unicode character names (unames.icu) and the spoof checker's data (confusables*.cfu); and the
# other locales' names (languages, regions, currencies, units, time zones), their collations, spell-out rules
# and the legacy code pages (.cnv): Qt has its own locale tables, and the app reads and writes only UTF-8 and
# Latin-1 (built into ICU's code).
_ICU_LOCALE = re.compile(r"^[a-z]{2,3}(_[A-Za-z0-9]+)*\.res$")
_ICU_KEPT_LOCALES = {"root.res", "en.res", "res_index.res", "pool.res"}
_ICU_UNUSED_TREES = {"brkitr", "translit"}
_ICU_UNUSED_FILES = {"unames.icu", "confusables.cfu", "confusablesWholeScript.cfu"}


def icu_item_kept(item: str) -> bool:
    """Whether the ICU data item ``item`` (``"coll/de.res"``, as ``icupkg -l`` lists it) stays in the bundle."""
    *tree, name = item.split("/")
    if not tree:
        return (not name.endswith(".cnv") and name not in _ICU_UNUSED_FILES
                and (name in _ICU_KEPT_LOCALES or not _ICU_LOCALE.match(name)))
    if tree[0] in _ICU_UNUSED_TREES:
        return False
    if tree[0] == "coll":
        return name in _ICU_KEPT_LOCALES or not name.endswith(".res")
    return name in _ICU_KEPT_LOCALES


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _elf_symbol_bytes(lib: Path, pattern: str) -> tuple[str, bytes]:
    """The name and bytes of the exported data symbol in ``lib`` whose name matches ``pattern``."""
    for line in _run("nm", "-D", "-S", "--defined-only", str(lib)).splitlines():
        f = line.split()
        if len(f) == 4 and re.fullmatch(pattern, f[3]):
            addr, size, name = int(f[0], 16), int(f[1], 16), f[3]
            break
    else:
        raise RuntimeError(f"{lib.name} exports no {pattern}")
    for line in _run("readelf", "-S", "-W", str(lib)).splitlines():
        m = re.search(r"\]\s+\S+\s+\S+\s+([0-9a-f]{16})\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            start, offset, length = (int(g, 16) for g in m.groups())
            if start <= addr < start + length:
                with lib.open("rb") as fh:
                    fh.seek(addr - start + offset)
                    return name, fh.read(size)
    raise RuntimeError(f"{name} lies outside {lib.name}'s sections")


# What Qt's libraries ask of ICU (their only ICU imports): a collator, converters, a calendar with a time
# zone and its display name, and case mapping; each must still work on the slimmed data
_ICU_CHECK = """
import ctypes, sys
uc, i18n, v = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2]), sys.argv[3]
f = lambda lib, name: getattr(lib, f"{name}_{v}")
e = ctypes.c_int(0)
def ok(what):
    assert e.value <= 0, (what, e.value)
f(uc, "u_init")(ctypes.byref(e)); ok("u_init")
f(i18n, "ucol_open").restype = ctypes.c_void_p
assert f(i18n, "ucol_open")(b"de_DE", ctypes.byref(e)); ok("ucol_open")
f(uc, "ucnv_open").restype = ctypes.c_void_p
for name in (b"UTF-8", b"ISO-8859-1", b"UTF-16LE"):
    assert f(uc, "ucnv_open")(name, ctypes.byref(e)); ok(name)
zone = "Europe/Berlin".encode("utf-16-le")
f(i18n, "ucal_open").restype = ctypes.c_void_p
cal = f(i18n, "ucal_open")(zone, 13, b"en_US", 0, ctypes.byref(e)); ok("ucal_open")
buf = ctypes.create_string_buffer(256)
n = f(i18n, "ucal_getTimeZoneDisplayName")(ctypes.c_void_p(cal), 0, b"en_US", buf, 128, ctypes.byref(e))
ok("ucal_getTimeZoneDisplayName")
assert "Europe" in buf.raw[: 2 * n].decode("utf-16-le"), buf.raw[: 2 * n]
text = "stra\u00dfe".encode("utf-16-le")
n = f(uc, "u_strToUpper")(buf, 128, text, 6, b"de", ctypes.byref(e)); ok("u_strToUpper")
assert buf.raw[: 2 * n].decode("utf-16-le") == "STRASSE", buf.raw[: 2 * n]
"""


def _icu_works(lib_dir: Path) -> bool:
    """ICU in ``lib_dir`` does what Qt asks of it (:data:`_ICU_CHECK`; a fresh process, so the build's own ICU
    is not used)."""
    uc = next(lib_dir.glob("libicuuc.so.*"), None)
    i18n = next(lib_dir.glob("libicui18n.so.*"), None)
    if uc is None or i18n is None:
        return False
    v = uc.name.rsplit(".", 1)[-1]
    out = subprocess.run([sys.executable, "-c", _ICU_CHECK, str(uc), str(i18n), v], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"  the slimmed ICU failed: {(out.stderr.strip().splitlines() or ['died'])[-1]}")
    return out.returncode == 0


def slim_icu_data() -> int:
    """Rebuild Qt's ``libicudata`` with only the data items :func:`icu_item_kept` keeps (Linux).

    Needs ``icupkg`` (Debian/Ubuntu: icu-devtools) and binutils (``nm``, ``readelf``, ``as``, ``ld``); without
    them, or if the slimmed ICU fails to start, the library is left as it was.  Returns the bytes saved.
    """
    if not sys.platform.startswith("linux"):
        return 0
    libs = [p for p in BUNDLE.rglob("libicudata.so.*") if p.is_file() and not p.is_symlink()]
    tools = [shutil.which(t) for t in ("icupkg", "nm", "readelf", "as", "ld")]
    if not libs or None in tools:
        print("ICU data kept whole (needs icupkg from icu-devtools, and binutils)")
        return 0
    saved = 0
    for lib in libs:
        try:
            saved += _slim_icu_library(lib)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"ICU data kept whole: {lib.name}: {exc}")
    return saved


def _slim_icu_library(lib: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="ia-icu-") as tmp:
        tmp = Path(tmp)
        symbol, blob = _elf_symbol_bytes(lib, r"icudt\d+_dat")
        package = symbol[: -len("_dat")] + "l"  # icudt73l: the entries' prefix, from the file's name
        (tmp / "in").mkdir()
        (tmp / "out").mkdir()
        (tmp / "in" / f"{package}.dat").write_bytes(blob)
        items = _run("icupkg", "-l", str(tmp / "in" / f"{package}.dat")).split()
        (tmp / "drop.txt").write_text("".join(i + "\n" for i in items if not icu_item_kept(i)))
        _run("icupkg", "-r", str(tmp / "drop.txt"), str(tmp / "in" / f"{package}.dat"),
             str(tmp / "out" / f"{package}.dat"))
        soname = re.search(r"soname: \[(.+?)\]", _run("readelf", "-d", str(lib))).group(1)
        (tmp / "data.s").write_text(
            f'.section .rodata\n.balign 16\n.globl {symbol}\n.type {symbol}, @object\n{symbol}:\n'
            f'.incbin "{tmp / "out" / f"{package}.dat"}"\n.size {symbol}, . - {symbol}\n'
            '.section .note.GNU-stack,"",@progbits\n')
        _run("as", str(tmp / "data.s"), "-o", str(tmp / "data.o"))
        _run("ld", "-shared", "-soname", soname, "-o", str(tmp / soname), str(tmp / "data.o"))
        before = lib.stat().st_size
        shutil.copy2(lib, tmp / "original")
        shutil.copyfile(tmp / soname, lib)
        if not _icu_works(lib.parent):
            shutil.copyfile(tmp / "original", lib)
            print(f"ICU data kept whole: the slimmed {lib.name} did not start")
            return 0
        kept = sum(map(icu_item_kept, items))
        after = lib.stat().st_size
        print(f"ICU data: kept {kept} of {len(items)} items, {before / 1e6:.1f} -> {after / 1e6:.1f} MB")
        return before - after


def _needed(lib: Path) -> list[str]:
    return re.findall(r"NEEDED.*\[(.+?)\]", subprocess.run(["readelf", "-d", str(lib)], capture_output=True,
                                                              text=True).stdout)


def prune_orphan_libraries() -> int:
    """Delete the shared libraries in the bundle that nothing in it links (Linux).

    Looked at: the system libraries loose in ``_internal/`` (what a left-out part, the GTK theme or Qt's
    network TLS, linked) and the libraries auditwheel grafted into the wheels' ``*.libs`` folders (NumPy's
    OpenBLAS once a shim takes its place, a runtime :func:`link_same_runtime` made one).  A library stays when
    the launcher or any other library or module in the bundle links it, directly or through others; the
    interpreter's own ``libpython`` (opened by the launcher) always stays.  Never a top-level extension
    module.  Returns the bytes saved.
    """
    readelf = shutil.which("readelf")
    internal = BUNDLE / "_internal"
    if not sys.platform.startswith("linux") or readelf is None:
        return 0
    elf = [p for p in internal.rglob("*.so*") if p.is_file() and not p.is_symlink()]
    # shared libraries only: a top-level Python extension module (e.g. psygnal's mypyc runtime,
    # ``<hash>__mypyc.cpython-311-….so``) is imported, not linked, and must stay
    loose = {p.name: p for p in internal.iterdir()
             if not p.is_dir() and p.name.startswith("lib") and ".so" in p.name and ".cpython-" not in p.name}
    for folder in internal.glob("*.libs"):  # names may repeat across folders: the loader finds each by RPATH
        loose.update({f"{folder.name}/{p.name}": p for p in folder.iterdir()})
    by_name: dict[str, list[str]] = {}
    for key in loose:
        by_name.setdefault(key.rsplit("/", 1)[-1], []).append(key)
    candidates = {p.resolve() for p in loose.values()}
    wanted = [n for p in elf if p.resolve() not in candidates for n in _needed(p)] + _needed(exe_path())
    reached: set[str] = set()
    while wanted:
        for key in by_name.get(wanted.pop(), []):
            if key in reached:
                continue
            reached.add(key)
            target = loose[key].resolve()
            if loose[key].is_symlink():  # a link made by link_duplicate_libraries: its file stays too
                wanted.append(target.name)
            wanted += _needed(target)
    saved = 0
    for key, path in sorted(loose.items()):
        if key not in reached and not path.name.startswith("libpython"):
            if not path.is_symlink():
                saved += path.stat().st_size
            path.unlink()
    return saved


def link_duplicate_libraries() -> int:
    """Replace a wheel's copy of a library another wheel already ships by a link to it (Linux, macOS).

    NumPy's and SciPy's wheels each graft the same libgfortran and libquadmath into their ``*.libs``
    folders; the dynamic loader follows the link and loads one copy.  Returns the bytes saved.
    """
    import hashlib

    if sys.platform == "win32":
        return 0
    first: dict[tuple[int, str], Path] = {}
    saved = 0
    for f in sorted((BUNDLE / "_internal").glob("*.libs/*")):
        if not f.is_file() or f.is_symlink():
            continue
        saved += _link_to_first(first, (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest()), f)
    return saved


def required_system_libraries(main: Path = ROOT / "app" / "__main__.py") -> list[str]:
    """The Linux libraries the app's start-up check requires from the system (``_LINUX_LIBS`` in
    ``app/__main__.py``: without one, the app names its package and stops; the README lists the packages)."""
    import ast

    for node in ast.walk(ast.parse(main.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LINUX_LIBS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return [lib for group in table.values() for lib, _package in group]
    raise RuntimeError(f"{main} defines no _LINUX_LIBS")


def _system_paths() -> dict[str, Path]:
    """The system's shared libraries by name, as the dynamic loader's cache lists them (64-bit x86 ones)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    paths: dict[str, Path] = {}
    for line in _run(ldconfig, "-p").splitlines():
        m = re.match(r"\s*(\S+) \((.*?)\) => (\S+)", line)
        if m and (platform.machine() != "x86_64" or "x86-64" in m.group(2)):
            paths.setdefault(m.group(1), Path(m.group(3)))
    return paths


def system_closure(names: list[str], paths: dict[str, Path] | None = None) -> set[str]:
    """``names`` and every library the system's copies of them link, directly or through others.

    A package manager installs these with the packages that provide ``names``.  A name the system lacks is
    left out (with what only it would link).
    """
    paths = _system_paths() if paths is None else paths
    found: set[str] = set()
    todo = [n for n in names if n in paths]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [n for n in _needed(paths[name]) if n in paths]
    return found


def use_system_libraries() -> int:
    """Leave out the bundled copies of the libraries the system must provide anyway (Linux).

    The app does not start without the libraries of :func:`required_system_libraries` (its start-up check
    names the missing package), so a machine that runs it has them, and everything they link (their
    packages' dependencies: fontconfig brings FreeType, libpng and zlib, D-Bus brings systemd's library,
    libGL brings libX11 and libxcb, …).  The bundle's copies of those are deleted from ``_internal/``; the
    system's are loaded instead, as the pip-installed PySide6 loads them.  A library only the wheels
    graft (``*.libs``) and Qt's own libraries stay.  Returns the bytes saved.
    """
    if not sys.platform.startswith("linux") or shutil.which("readelf") is None:
        return 0
    try:
        provided = system_closure(required_system_libraries())
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"system libraries kept in the bundle: {exc}")
        return 0
    saved = 0
    for f in sorted((BUNDLE / "_internal").iterdir()):
        if f.name in provided and (f.is_file() or f.is_symlink()):
            saved += 0 if f.is_symlink() else f.stat().st_size
            f.unlink()
    return saved


# GCC's runtime libraries: one soname (libgfortran.so.5) is one ABI, whichever build of GCC made the copy
_GCC_RUNTIMES = ("libgfortran", "libquadmath", "libgcc_s", "libgomp")


def _exports(lib: Path) -> frozenset[str]:
    """The dynamic symbols ``lib`` defines, with their versions (``_gfortran_st_write@@GFORTRAN_8``)."""
    out = _run("nm", "-D", "--defined-only", str(lib))
    return frozenset(f[-1] for f in (line.split() for line in out.splitlines()) if len(f) >= 3)


def link_same_runtime() -> int:
    """Make two wheels' builds of one GCC runtime library one file (Linux).

    NumPy's and SciPy's wheels graft different builds of ``libgfortran.so.5`` (and of ``libquadmath.so.0``
    that it links); SciPy's Fortran modules then load one and OpenBLAS the other.  A copy with the same
    library name and major version and the very same exported symbols and symbol versions as one met before
    becomes a link to it.  Returns the bytes saved.
    """
    if not sys.platform.startswith("linux") or shutil.which("nm") is None:
        return 0
    first: dict[tuple, Path] = {}
    saved = 0
    for f in sorted((BUNDLE / "_internal").glob("*.libs/*")):
        major = re.search(r"\.so\.(\d+)", f.name)
        if not f.is_file() or f.is_symlink() or not major or f.name.split("-")[0] not in _GCC_RUNTIMES:
            continue
        saved += _link_to_first(first, (f.name.split("-")[0], major.group(1), _exports(f)), f)
    return saved


def _link_to_first(first: dict, key, f: Path) -> int:
    """Keep ``f`` as the first file with ``key``, or replace it by a link to that one; the bytes saved."""
    if key not in first:
        first[key] = f
        return 0
    size = f.stat().st_size
    f.unlink()
    f.symlink_to(os.path.relpath(first[key], f.parent))
    return size


SHIM_SOURCE = ROOT / "build_scripts" / "blas_ilp64_shim.c"


def _defined(lib: Path) -> set[str]:
    out = _run("nm", "-D", "--defined-only", str(lib))
    return {f[-1].split("@")[0] for f in (line.split() for line in out.splitlines()) if len(f) >= 3}


def _undefined(lib: Path) -> set[str]:
    out = _run("nm", "-D", "--undefined-only", str(lib))
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def compile_blas_shim(out: Path, lp64: Path, *, soname: str, rpath: str) -> None:
    """Compile ``blas_ilp64_shim.c`` into ``out``: NumPy's ILP64 BLAS/LAPACK names over SciPy's LP64 ``lp64``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc)")
    subprocess.run([cc, "-O2", "-std=c11", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(out),
                    str(SHIM_SOURCE), f"-L{lp64.parent}", f"-l:{lp64.name}", f"-Wl,-soname,{soname}",
                    f"-Wl,-rpath,{rpath}", "-Wl,--no-undefined"], check=True, capture_output=True, text=True)


# A known answer through the shim, in a fresh process: a 3x3 solve whose LU pivots rows (the pivots come back
# widened to 64 bits), a matrix product, a dot product, and a symmetric eigen-decomposition that first asks
# for its workspace (an integer workspace answer widened back)
_SHIM_CHECK = r"""
import ctypes, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
i64, f64 = ctypes.c_int64, ctypes.c_double
P = lambda a: a.ctypes.data_as(ctypes.c_void_p)
r = lambda v: ctypes.byref(i64(v))
a = np.array([[0., 2, 1], [1, 1, 0], [3, 0, 1]]); b = np.array([3., 2, 4])
A, B, piv, info = a.T.copy(), b.copy(), np.zeros(3, np.int64), i64(-7)
lib.scipy_dgesv_64_(r(3), r(1), P(A), r(3), P(piv), P(B), r(3), ctypes.byref(info))
assert info.value == 0 and np.allclose(a @ B, b) and piv.tolist() == [3, 3, 3], (info.value, B, piv)
x, y, c = np.arange(6.).reshape(2, 3), np.arange(12.).reshape(3, 4), np.zeros((2, 4))
lib.scipy_cblas_dgemm64_(101, 111, 111, i64(2), i64(4), i64(3), f64(1), P(x), i64(3), P(y), i64(4), f64(0),
                         P(c), i64(4))
assert np.array_equal(c, x @ y), c
lib.scipy_cblas_ddot64_.restype = f64
assert lib.scipy_cblas_ddot64_(i64(3), P(b), i64(1), P(b), i64(1)) == 29.0
s = np.array([[2., 1], [1, 2]]); w, work, iwork = np.zeros(2), np.zeros(1), np.zeros(1, np.int64)
lib.scipy_dsyevd_64_(b"V", b"L", r(2), P(s), r(2), P(w), P(work), r(-1), P(iwork), r(-1), ctypes.byref(info))
assert info.value == 0 and iwork[0] >= 1 and work[0] >= 1, (info.value, iwork, work)
work, iwork = np.zeros(int(work[0])), np.zeros(int(iwork[0]), np.int64)
lib.scipy_dsyevd_64_(b"V", b"L", r(2), P(s), r(2), P(w), P(work), r(work.size), P(iwork), r(iwork.size),
                     ctypes.byref(info))
assert info.value == 0 and np.allclose(w, [1, 3]), w
"""


def check_blas_shim(lib: Path) -> str:
    """Run the known answers of :data:`_SHIM_CHECK` through the shim ``lib``; return what failed ('' if none)."""
    out = subprocess.run([sys.executable, "-c", _SHIM_CHECK, str(lib)], capture_output=True, text=True)
    return "" if out.returncode == 0 else (out.stderr.strip().splitlines() or ["died"])[-1]


def share_openblas() -> int:
    """Let NumPy use SciPy's OpenBLAS (Linux): NumPy's own 64-bit-integer copy is replaced by a small shim.

    The shim (:data:`SHIM_SOURCE`) takes the place of NumPy's ``libscipy_openblas64_*.so`` under the same
    name and answers NumPy's calls with SciPy's ``libscipy_openblas*.so``.  It is kept only if it exports
    every routine the bundle's modules take from NumPy's copy, and gives the known answers of
    :func:`check_blas_shim`; otherwise NumPy's copy stays.  Returns the bytes saved.
    """
    if not sys.platform.startswith("linux") or None in (shutil.which("nm"), shutil.which("readelf")):
        return 0
    internal = BUNDLE / "_internal"
    ilp64 = sorted(internal.glob("numpy.libs/libscipy_openblas64_*.so"))
    lp64 = [p for p in internal.glob("scipy.libs/libscipy_openblas*.so") if "openblas64_" not in p.name]
    if len(ilp64) != 1 or len(lp64) != 1:
        print("NumPy keeps its own OpenBLAS: did not find exactly one copy in numpy.libs and one in scipy.libs")
        return 0
    ilp64, lp64 = ilp64[0], lp64[0]
    try:
        provided = _defined(ilp64)
        users = [p for p in internal.rglob("*.so*") if p.is_file() and not p.is_symlink() and p != ilp64
                 and ilp64.name in _needed(p)]
        wanted = set().union(*(_undefined(p) & provided for p in users)) if users else set()
        with tempfile.TemporaryDirectory(prefix="ia-blas-") as tmp:
            shim = Path(tmp) / ilp64.name
            compile_blas_shim(shim, lp64, soname=ilp64.name,
                              rpath="$ORIGIN/" + os.path.relpath(lp64.parent, ilp64.parent))
            missing = wanted - _defined(shim)
            if missing:
                print(f"NumPy keeps its own OpenBLAS: the shim lacks {', '.join(sorted(missing))}")
                return 0
            before = ilp64.stat().st_size
            shutil.copy2(ilp64, Path(tmp) / "original")
            shutil.copyfile(shim, ilp64)
            failed = check_blas_shim(ilp64)
            if failed:
                shutil.copyfile(Path(tmp) / "original", ilp64)
                print(f"NumPy keeps its own OpenBLAS: the shim gave a wrong answer ({failed})")
                return 0
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"NumPy keeps its own OpenBLAS: {exc}")
        return 0
    print(f"NumPy's {len(wanted)} BLAS/LAPACK routines now run on SciPy's OpenBLAS ({lp64.name})")
    return before - ilp64.stat().st_size


def archive() -> Path:
    osname = {"win32": "windows", "darwin": "macos"}.get(sys.platform, sys.platform.rstrip("0123456789"))
    arch = platform.machine().lower().replace("amd64", "x86_64")
    base = DIST / f"InvariantAttentionStudio-{version()}-{osname}-{arch}"
    # xz packs the Linux and macOS bundle about a fifth smaller than gzip (tar xf unpacks either)
    fmt = "zip" if sys.platform == "win32" else "xztar"
    for old in DIST.glob(base.name + ".*"):
        old.unlink()
    return Path(shutil.make_archive(str(base), fmt, root_dir=DIST, base_dir=BUNDLE.name))


def smoke_test() -> float:
    """Run the frozen self-test offscreen; return the cold-start time to the first window."""
    exe = exe_path()
    home = Path(tempfile.mkdtemp(prefix="ia-smoke-"))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", IA_STUDIO_LOG_DIR=str(home / "logs"),
               IA_SELFTEST_INVENTORY=str(INVENTORY))
    shot = DIST / "selftest.png"
    t0 = time.perf_counter()
    proc = subprocess.run([str(exe), "--selftest", "--screenshot", str(shot)], env=env,
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout.strip())
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"SMOKE TEST FAILED: the frozen ia-studio --selftest exited {proc.returncode}")
    print(f"frozen self-test passed in {time.perf_counter() - t0:.1f} s; screenshot {shot}")
    if INVENTORY.exists():
        print_never_loaded(json.loads(INVENTORY.read_text())["mapped"])
    starts = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run([str(exe), "--quit-after-show"], env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"SMOKE TEST FAILED: start-up exited {r.returncode}: {r.stderr[-2000:]}")
        starts.append(time.perf_counter() - t)
    return min(starts), max(starts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="include CuPy (pip install -e '.[gpu]' first)")
    ap.add_argument("--nets", action="store_true", help="include PyTorch (pip install -e '.[nets]' first)")
    ap.add_argument("--bundle-system-libraries", action="store_true",
                    help="Linux: keep the bundle's copies of the libraries the app requires from the system "
                         "(glib, fontconfig, D-Bus, xkbcommon, the xcb set) and of what they link")
    ap.add_argument("--skip-build", action="store_true", help="only archive and smoke-test an existing bundle")
    args = ap.parse_args(argv)
    if args.gpu:
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise SystemExit("--gpu needs CuPy: pip install -e '.[gpu]'") from None
    if args.nets:
        try:
            import torch  # noqa: F401
        except ImportError:
            raise SystemExit("--nets needs PyTorch: pip install -e '.[nets]'") from None
    t0 = time.perf_counter()
    if not args.skip_build:
        build(args.gpu, args.nets)
    print(f"built in {time.perf_counter() - t0:.0f} s")
    if not exe_path().exists():
        raise SystemExit(f"BUILD FAILED: {exe_path()} was not produced")
    if not args.skip_build:
        print(f"left out {prune_orphan_libraries() / 1e6:.1f} MB of system libraries nothing in the bundle links")
        if not args.bundle_system_libraries:
            print(f"left out {use_system_libraries() / 1e6:.1f} MB of system libraries the app requires from the "
                  "system (and what they link)")
        print(f"slimmed Qt's ICU data by {slim_icu_data() / 1e6:.1f} MB")
        print(f"left out {share_openblas() / 1e6:.1f} MB: NumPy's own OpenBLAS (a shim to SciPy's takes its place)")
        print(f"stripped {strip_libraries() / 1e6:.1f} MB of symbol tables from the libraries")
        print(f"linked {link_duplicate_libraries() / 1e6:.1f} MB of libraries two wheels both ship")
        print(f"linked {link_same_runtime() / 1e6:.1f} MB of GCC runtime libraries two wheels ship in two builds")
        print(f"left out {prune_orphan_libraries() / 1e6:.1f} MB of libraries nothing links any more")
        if sys.platform.startswith("linux"):  # the per-user installer travels inside the archive
            shutil.copy2(ROOT / "build_scripts" / "install_linux.sh", BUNDLE / "install_linux.sh")
    print_size_table()
    arc = archive()
    onedir_mb = folder_size(BUNDLE) / 1e6
    arc_mb = arc.stat().st_size / 1e6
    print(f"onedir {BUNDLE}: {onedir_mb:.0f} MB (goal <= 200 MB)")
    print(f"archive {arc.name}: {arc_mb:.0f} MB (goal <= 90 MB)")
    fastest, slowest = smoke_test()
    print(f"cold start to the first window: {fastest:.2f} s best, {slowest:.2f} s worst of 3 (goal <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
