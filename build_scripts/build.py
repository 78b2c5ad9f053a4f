"""Build the PyInstaller onedir bundle, archive it and smoke-test it.

    pip install -e ".[build]"
    python build_scripts/build.py            # CPU-only bundle
    python build_scripts/build.py --gpu      # include CuPy (needs the gpu extra installed)
    python build_scripts/build.py --nets     # include PyTorch for the Networks panel (needs the nets extra)

Produces ``dist/InvariantAttentionStudio/`` (executable ``ia-studio``, or
``ia-studio.exe`` on Windows) and ``dist/InvariantAttentionStudio-<version>-<os>-<arch>.tar.gz``
(``.zip`` on Windows).  Then runs the frozen ``ia-studio --selftest`` offscreen and
times a cold start to the first window; the build fails loudly if the self-test fails.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
BUNDLE = DIST / "InvariantAttentionStudio"


def version() -> str:
    from importlib.metadata import version as installed_version

    return installed_version("invariant-attention-studio")


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


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


def strip_python_libraries() -> int:
    """Strip debug symbols from the interpreter's own libraries (libpython, lib-dynload) on Linux.

    Only these: PyPI wheels' libraries are left alone (stripping OpenBLAS breaks it).
    Returns the bytes saved.
    """
    strip = shutil.which("strip")
    if not sys.platform.startswith("linux") or strip is None:
        return 0
    internal = BUNDLE / "_internal"
    targets = list(internal.glob("libpython3*.so*")) + list(internal.glob("python3*/lib-dynload/*.so"))
    saved = 0
    for f in targets:
        if f.is_symlink() or not f.is_file():
            continue
        before = f.stat().st_size
        subprocess.run([strip, "--strip-unneeded", str(f)], check=True)
        saved += before - f.stat().st_size
    return saved


def archive() -> Path:
    osname = {"win32": "windows", "darwin": "macos"}.get(sys.platform, sys.platform.rstrip("0123456789"))
    arch = platform.machine().lower().replace("amd64", "x86_64")
    base = DIST / f"InvariantAttentionStudio-{version()}-{osname}-{arch}"
    fmt = "zip" if sys.platform == "win32" else "gztar"
    for old in DIST.glob(base.name + ".*"):
        old.unlink()
    return Path(shutil.make_archive(str(base), fmt, root_dir=DIST, base_dir=BUNDLE.name))


def smoke_test() -> float:
    """Run the frozen self-test offscreen; return the cold-start time to the first window."""
    exe = exe_path()
    home = Path(tempfile.mkdtemp(prefix="ia-smoke-"))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", IA_STUDIO_LOG_DIR=str(home / "logs"))
    shot = DIST / "selftest.png"
    t0 = time.perf_counter()
    proc = subprocess.run([str(exe), "--selftest", "--screenshot", str(shot)], env=env,
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout.strip())
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"SMOKE TEST FAILED: the frozen ia-studio --selftest exited {proc.returncode}")
    print(f"frozen self-test passed in {time.perf_counter() - t0:.1f} s; screenshot {shot}")
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
        print(f"stripped {strip_python_libraries() / 1e6:.0f} MB of debug symbols from the Python runtime")
        if sys.platform.startswith("linux"):  # the per-user installer travels inside the archive
            shutil.copy2(ROOT / "build_scripts" / "install_linux.sh", BUNDLE / "install_linux.sh")
    arc = archive()
    onedir_mb = folder_size(BUNDLE) / 1e6
    arc_mb = arc.stat().st_size / 1e6
    print(f"onedir {BUNDLE}: {onedir_mb:.0f} MB (goal <= 250 MB)")
    print(f"archive {arc.name}: {arc_mb:.0f} MB (goal <= 110 MB)")
    fastest, slowest = smoke_test()
    print(f"cold start to the first window: {fastest:.2f} s best, {slowest:.2f} s worst of 3 (goal <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
