"""``ia-cluster``: cluster images with Invariant Attention from the command line.

Exit status: 0 on success (even when some files were skipped), 1 when nothing
is usable or the run fails (one plain line on stderr, the traceback in the
log file), 2 for bad usage, 130 when interrupted by SIGINT (Ctrl+C) and 143 by
SIGTERM.  Results are all-or-nothing: they are written into a hidden folder
beside ``--out`` and moved into place only when complete.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from . import options, se2
from ._version import __version__
from .atomic import ResultFolder, signals_held
from .backend import threads
from .demos import DEMO_NAMES, load_demo
from .filenames import display_name, printable
from .imageset import ImageSet, NoUsableImagesError, load_images, skipped_lines
from .outliers import poor_fit_line, poor_fits
from .project import ProjectError
from .report import write_json

log = logging.getLogger("ia-cluster")


def _positive_float(name):
    def conv(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not v > 0 or not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number > 0, got {text}")
        return v

    return conv


def _declared(name: str):
    """An argparse type for the run option ``name``: :func:`iastudio.core.options.parse` (limits included)."""

    def conv(text):
        try:
            return options.parse(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    conv.__name__ = name  # what argparse names in its own messages
    return conv


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """The options declared in :data:`iastudio.core.options.OPTIONS`: type, limits, default and help from there."""
    for opt in options.OPTIONS:
        default = opt.default_text().replace("`", "")
        values = "" if opt.choices or opt.kind is str else f"; {opt.range_text().replace('`', '')}"
        text = f"{opt.help}{values} (default: {default})"
        if opt.choices:
            p.add_argument(opt.flag, choices=opt.choices, default=opt.default, help=text)
        else:
            p.add_argument(opt.flag, type=_declared(opt.name), default=opt.default, metavar=opt.metavar or None,
                           help=text)


def _transform(text):
    try:
        rot, frac = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--transform takes ROT_DEG,SHIFT_FRAC (e.g. 180,0.1), got {text!r}") from None
    if not (math.isfinite(rot) and math.isfinite(frac)) or rot < 0 or not 0 <= frac < 0.5:
        raise argparse.ArgumentTypeError("--transform needs ROT_DEG >= 0 and 0 <= SHIFT_FRAC < 0.5")
    return rot, frac


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ia-cluster",
        description="Cluster images regardless of rotation and shift (Invariant Attention).",
        epilog=f"Demos: {', '.join('demo:' + d for d in DEMO_NAMES)}. Results go to --out.",
    )
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="image file, folder (recursive; subfolder names are true labels) or demo:NAME")
    p.add_argument("--out", default="ia-results", help="output folder (default: ./ia-results)")
    _add_run_options(p)
    p.add_argument("--paper", action="store_true",
                   help="run the paper's algorithm as written (the 'paper' preset, iastudio.core.presets): identity "
                        "start, fixed-step gradient descent, the best smoothing level, exact sums, one beta "
                        "(default 2) on the paper's intensity scale, no guard, iterate until W stops moving; "
                        "options given explicitly win")
    p.add_argument("--transform", type=_transform, default=None, metavar="ROT_DEG,SHIFT_FRAC",
                   help="first apply random transforms: rotation in [-ROT, ROT], shift up to SHIFT_FRAC of the size")
    p.add_argument("--export", choices=("relion",), default=None,
                   help="relion: also write particles.star (class, psi, origin in Angstrom, score; a STAR "
                        "input's CTF and optics groups kept) and class_averages.mrcs for RELION/cryoSPARC; needs "
                        "MRC inputs and --pixel-size (a STAR file whose rows give the whole CTF gives it)")
    p.add_argument("--pixel-size", type=_positive_float("--pixel-size"), default=None, metavar="A",
                   help="the particles' pixel size in Angstrom (for --export relion; default: the STAR file's)")
    p.add_argument("--phase-flip", action="store_true",
                   help="phase-flip each particle with its own CTF (defocus, voltage, Cs, amplitude contrast and "
                        "pixel size read from the RELION STAR file INPUT) before preprocessing and denoising; "
                        "every INPUT must be such a STAR file")
    p.add_argument("--seed", type=int, default=0, help="seed for demos and --transform")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no closing result line")
    p.add_argument("--save-project", metavar="P.iaproj", default=None,
                   help="also save the run as a project the desktop app opens")
    p.add_argument("--project", metavar="P.iaproj", default=None,
                   help="export a saved project's clusters (edits included) to --out; no INPUT needed")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


class _Progress:
    """The progress bar on stderr: redrawn in place on a terminal, plain lines otherwise (a log, a batch job).

    Called with the run's overall fraction and a stage's text, both from the run's snapshots and from
    :attr:`~iastudio.core.attention.AttentionRun.on_progress` inside a long stage (the invariant similarity
    of a pruned run is most of its time and yields no snapshot until it ends).  Every line shows the time
    since the command started.  Without a terminal a line is written when the overall tenth changes, the
    stage changes, or :data:`LINE_EVERY_S` seconds have passed since the last line.
    """

    LINE_EVERY_S = 10.0
    REDRAW_S = 0.2  # a terminal's bar at most five times a second (the stage's first text always)

    def __init__(self, quiet, *, t0: float | None = None):
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter() if t0 is None else t0
        self.last = -1
        self.drawn = False  # a terminal's bar is on the current line
        self._stage = None
        self._said = -math.inf

    def __call__(self, frac, text):
        if self.quiet:
            return
        pct, now = int(100 * frac), time.perf_counter()
        stage = "".join(c for c in text if not (c.isdigit() or c == "%")).strip()
        new_stage, self._stage = stage != self._stage, stage
        elapsed = int(now - self.t0)
        clock = f" · {elapsed // 60}:{elapsed % 60:02d}"
        if self.tty:
            if new_stage or pct == 100 or now - self._said >= self.REDRAW_S:
                bar = "#" * (pct // 4)
                sys.stderr.write(f"\r[{bar:<25}] {pct:3d}% {text + clock:<48}")
                sys.stderr.flush()
                self.drawn, self._said = True, now
        elif new_stage or pct // 10 != self.last // 10 or pct == 100 or now - self._said >= self.LINE_EVERY_S:
            sys.stderr.write(f"{pct:3d}% {text}{clock}\n")
            sys.stderr.flush()
            self._said = now
        self.last = pct

    def clear(self):
        """End a terminal's bar line, so that a message printed next starts a line of its own."""
        if not self.quiet and self.tty and self.drawn:
            sys.stderr.write("\n")
            self.drawn = False

    def close(self):
        self.clear()


def gather_inputs(inputs, seed) -> ImageSet:
    """Load files, folders and ``demo:NAME`` inputs into one set."""
    result = None
    files = []
    for item in inputs:
        if str(item).startswith("demo:"):
            part = load_demo(str(item), seed=seed)
            result = part if result is None else result.extend(part)
        else:
            files.append(item)
    if files:
        try:
            part = load_images(files)
        except NoUsableImagesError as exc:
            if result is None:
                raise
            part = ImageSet([], [], [], exc.skipped)
        result = part if result is None else result.extend(part)
    return result


def check_options(args) -> str | None:
    """The first problem with the parsed options, in plain words, or None.

    Checked before anything is loaded or computed, so absurd values are a
    usage error (exit 2) and not a failure after minutes of work.
    """
    if getattr(args, "out", None) is not None:
        if not str(args.out).strip():
            return "--out must name a folder (it is empty)"
        problem = _path_problem("--out", args.out)
        if problem:
            return problem
        out = Path(args.out)
        try:
            if out.exists() and not out.is_dir():
                return f"--out {_short(args.out)} exists and is not a folder"
            on_the_way = next((p for p in out.absolute().parents if p.exists()), None)
            if on_the_way is not None and not on_the_way.is_dir():
                return (f"--out: cannot write the results to {_short(args.out)}: {printable(on_the_way)} is a "
                        f"file, not a folder")
        except OSError as exc:  # e.g. a folder on the way that may not be searched
            return f"--out {_short(args.out)}: cannot be used ({(exc.strerror or type(exc).__name__).lower()})"
    for opt in ("save_project", "project"):
        v = getattr(args, opt, None)
        if v is not None and not str(v).strip():
            return f"--{opt.replace('_', '-')} needs a file name"
        problem = v is not None and _path_problem(f"--{opt.replace('_', '-')}", v)
        if problem:
            return problem
    try:
        if getattr(args, "save_project", None) and Path(args.save_project).is_dir():
            return f"--save-project {_short(args.save_project)} is a folder"
    except OSError as exc:
        return f"--save-project {_short(args.save_project)}: cannot be used ({(exc.strerror or '').lower()})"
    dask = getattr(args, "dask", None)
    if dask is not None and not str(dask).strip():
        return "--dask needs a scheduler address: local:N or tcp://host:port (it is empty)"
    if getattr(args, "readout", "auto") == "collapse" and getattr(args, "clusters", "auto") != "auto":
        return "--readout collapse finds the number of clusters itself: leave --clusters at auto, or use " \
               "--readout spectral"
    seed = getattr(args, "seed", 0)
    if seed is not None and not 0 <= seed < 2**32:
        return f"--seed must be between 0 and {2**32 - 1}, got {seed}"
    if getattr(args, "transform", None) is not None and args.transform[0] > 360:
        return "--transform ROT_DEG must be at most 360"
    if getattr(args, "export", None) == "relion":
        stars = any(str(item).lower().endswith(".star") for item in getattr(args, "inputs", None) or ())
        if getattr(args, "pixel_size", None) is None and not stars:  # a STAR file may give it: checked once read
            return "--export relion needs --pixel-size (the particles' pixel size in Angstrom)"
        if getattr(args, "group", "se2") == "e2":
            return "--export relion cannot write mirrored images (RELION's 2-D poses have no mirror): use --group se2"
    return None


_TEMP_EXTRA = 32  # what a temporary name beside a result adds to its name (".NAME.PID.HEX.partial")


def _short(name, limit: int = 80) -> str:
    """``name`` printable, and at most ``limit`` characters (the middle elided)."""
    text = printable(name)
    return text if len(text) <= limit else text[:limit // 2 - 1] + "…" + text[-(limit // 2 - 1):]


def _path_problem(option: str, name) -> str | None:
    """Why the path ``name`` cannot be written (a name too long for the file system, with the
    temporary name beside it), or None."""
    path = Path(name)
    try:
        path.exists()
        anchor = next((a for a in (path, *path.parents) if a.exists()), Path("."))
        name_max = os.pathconf(anchor if anchor.is_dir() else anchor.parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError) as exc:
        if isinstance(exc, OSError) and exc.errno not in (errno.ENAMETOOLONG, None):
            return None  # another reason (permission, a loop): said where the path is used
        name_max = 255
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > name_max or len(os.fsencode(path.name)) + _TEMP_EXTRA > name_max:
        return (f"{option} {_short(name)}: the name is too long (a file or folder name may have at most "
                f"{name_max - _TEMP_EXTRA} bytes here)")
    return None


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; ``code`` is the exit status (128 + signal number)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
        self.code = 128 + int(signum)


def _on_signal(signum, _frame):
    raise Interrupted(signum)


RESEND_S = 0.02  # s: a signal swallowed where it could not be raised is sent again this much later


def _resending_hook(previous):
    """A ``sys.unraisablehook`` that sends a signal whose :class:`Interrupted` was swallowed once more.

    Python cannot let an exception out of a weakref callback or a ``__del__`` (importlib runs such
    callbacks for its module locks during every import): it prints "Exception ignored in ..." with a
    traceback and goes on.  A signal landing there would be lost — the run would go on, and the user
    would see a traceback.  Instead it is logged, and a helper thread sends the same signal to the main
    thread again a moment later, when it is back in ordinary code, where the handler's exception stops
    the run as usual.  Anything else goes to ``previous``.
    """
    import threading

    def hook(unraisable):
        exc = unraisable.exc_value
        if not isinstance(exc, Interrupted):
            previous(unraisable)
            return
        log.info("signal %s arrived in %r, where it could not be raised; sending it again", exc.signum,
                 unraisable.object)
        if hasattr(signal, "pthread_kill"):  # to the main thread: it wakes from a blocking call, too
            again = threading.Timer(RESEND_S, signal.pthread_kill, (threading.main_thread().ident, exc.signum))
        else:
            again = threading.Timer(RESEND_S, signal.raise_signal, (exc.signum,))
        again.daemon = True
        again.start()

    return hook


def _install_signal_handlers():
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            old[sig] = signal.signal(sig, _on_signal)
    if old:
        sys.unraisablehook = _resending_hook(sys.unraisablehook)
    return old


def _handles_signals(fn):
    """Run ``fn`` with SIGINT/SIGTERM raising :class:`Interrupted` (exit 130/143, one line)."""
    import functools

    @functools.wraps(fn)
    def wrapper(argv=None):
        unraisable = sys.unraisablehook
        old = _install_signal_handlers()
        try:
            return fn(argv)
        except Interrupted as exc:  # while parsing or logging was being set up
            print(f"ia-cluster: interrupted by {signal.Signals(exc.signum).name}; no results were written",
                  file=sys.stderr)
            return exc.code
        finally:
            # From the command line (no argv) the process ends right after: a signal arriving in that
            # moment must not kill it with the default action once the results are complete.
            for sig, handler in old.items():
                signal.signal(sig, signal.SIG_IGN if argv is None else handler)
            sys.unraisablehook = unraisable

    return wrapper


@_handles_signals
def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_options(args)
    if problem:
        parser.error(problem)
    if args.project and args.inputs:
        parser.error("give either INPUTs or --project, not both")
    if not args.inputs and not args.project:
        parser.error("give at least one INPUT (an image, a folder or demo:shapes)")
    for item in args.inputs:
        if item.startswith("demo:") and item[5:] not in DEMO_NAMES:
            parser.error(f"unknown demo {item!r}; choose one of {', '.join('demo:' + d for d in DEMO_NAMES)}")
    from .logs import setup_file_logging, where_details

    log_path = setup_file_logging("ia-cluster")
    args.results = ResultFolder(args.out)
    try:
        if args.project:
            return _export_project(args)
        return _run(args, parser)
    except ProjectError as exc:
        log.info("project refused: %s", exc)
        print(f"ia-cluster: {printable(exc)}", file=sys.stderr)
        return 1
    except NoUsableImagesError as exc:
        log.info("no usable images: %s", exc)
        print(f"ia-cluster: {printable(exc)}", file=sys.stderr)
        return 1
    except _UsageError as exc:
        parser.error(str(exc))
    except Interrupted as exc:
        return _interrupted(args, exc)
    except Exception as exc:  # noqa: BLE001 - the user sees one line, the log the traceback
        if (signalled := _interruption(exc)) is not None:
            log.info("the signal's exception became %r inside the threading module", exc, exc_info=exc)
            return _interrupted(args, signalled)
        log.exception("run failed")
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else (
            "not enough memory" if isinstance(exc, MemoryError) else type(exc).__name__)
        text = _os_error_text(exc, args.out) if isinstance(exc, OSError) and exc.strerror else printable(text)
        print(f"ia-cluster: failed: {text} ({where_details(log_path)})", file=sys.stderr)
        return 1
    finally:
        args.results.discard()  # nothing after a commit; the partial folder after a failure


class _UsageError(Exception):
    pass


def _os_error_text(exc: OSError, out) -> str:
    """An OSError in plain words: the path and the reason, without Python's "[Errno 17]".

    >>> _os_error_text(PermissionError(13, "Permission denied", "/r/x/.x.partial"), "/r/x")
    'cannot write the results to /r/x: /r/x/.x.partial: permission denied'
    >>> _os_error_text(FileNotFoundError(2, "No such file or directory", "/in/a.png"), "/r/x")
    '/in/a.png: no such file or directory'
    >>> _os_error_text(PermissionError(13, "Permission denied", "/r/imgs"), "/r/x")  # beside it, not its own
    '/r/imgs: permission denied'
    """
    reason = exc.strerror[:1].lower() + exc.strerror[1:]
    if not exc.filename:
        return reason
    where, final = Path(os.fsdecode(exc.filename)).absolute(), Path(out).absolute()
    try:
        if isinstance(exc, (FileExistsError, NotADirectoryError)) and where.exists() and not where.is_dir() \
                and where in final.parents:
            reason = "is a file, not a folder"
    except OSError:
        pass
    text = f"{printable(exc.filename)}{' ' if reason.startswith('is a') else ': '}{reason}"
    ours = where == final or where in final.parents or final in where.parents or (
        where.parent == final.parent and where.name.startswith(f".{final.name}"))  # its hidden partial folder
    return f"cannot write the results to {printable(out)}: {text}" if ours else text


def _interruption(exc: BaseException) -> Interrupted | None:
    """The :class:`Interrupted` that ``exc`` arose while handling, if any.

    A signal that lands while the main thread waits on a worker's result can raise inside
    ``threading.Condition.wait`` between its release and re-acquire of the lock; leaving the ``with``
    block then fails with ``RuntimeError: cannot release un-acquired lock``, whose context is the
    :class:`Interrupted`.  That is the signal, not a failure of the run.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Interrupted):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _interrupted(args, exc: Interrupted) -> int:
    """Discard the partial results, say so in one line, and return the signal's exit status."""
    args.results.discard()
    log.info("interrupted by signal %s", exc.signum)
    lead = "\n" if sys.stderr.isatty() else ""
    what = (f"the results in {printable(args.out)} are complete" if args.results.committed
            else "no results were written")
    print(f"{lead}ia-cluster: interrupted by {signal.Signals(exc.signum).name}; {what}", file=sys.stderr)
    return exc.code


def _import_engine() -> None:
    """Import the compiled libraries a run loads lazily, with SIGINT/SIGTERM held back meanwhile.

    An interruption raised inside a C extension's initialisation leaves a half-built module behind,
    and the interpreter can then abort while exiting; held back, the signal is delivered right after
    the imports, where it stops the run cleanly.
    """
    import importlib

    with signals_held():
        for name in ("scipy.fft", "scipy.ndimage", "scipy.sparse", "scipy.sparse.linalg", "sklearn.cluster",
                     "sklearn.metrics", "sklearn.neighbors", "skimage.transform", "matplotlib"):
            importlib.import_module(name)
        from . import attention  # noqa: F401


def _realign_rounds_used(run) -> int | None:
    """The rounds of re-alignment the run's class averages had (``"auto"`` resolved); None for KA (no means)."""
    from .neighbors import resolve_neighbors
    from .run_steps import realign_rounds

    if run.settings.method != "ia":
        return None
    return realign_rounds(run.settings.realign_rounds,
                          pruned=resolve_neighbors(run.settings.neighbors, run.n) is not None)


def _phase_flip_problem(args) -> str | None:
    """With ``--phase-flip``: why the inputs cannot be phase-flipped (not all STAR files with CTF columns), or None.

    Read before any image is, so a wrong input stops at once (exit 2).
    """
    if not getattr(args, "phase_flip", False):
        return None
    from .imagefile import ImageLoadError
    from .particle_ctf import star_ctf

    for item in args.inputs:
        if str(item).startswith("demo:") or Path(item).suffix.lower() != ".star":
            return (f"--phase-flip needs each particle's defocus, read from a RELION STAR file; "
                    f"{_short(item)} is not a STAR file (a folder, an image or a stack records no CTF)")
        try:
            star_ctf(item)
        except ImageLoadError as exc:
            return f"--phase-flip cannot read the CTF of {_short(item)}: {printable(exc)}"
    return None


def _run(args, parser) -> int:
    problem = _phase_flip_problem(args)
    if problem:
        raise _UsageError(problem)
    _import_engine()
    client = None
    if args.dask:  # first, so a wrong address fails before any work
        from .distributed import DaskUnavailableError, connect

        try:
            client = connect(args.dask)
        except DaskUnavailableError as exc:
            log.info("dask refused: %s", exc)
            print(f"ia-cluster: {exc}", file=sys.stderr)
            return 2
    try:
        return _run_body(args, client)
    finally:
        if client is not None:
            from .distributed import close

            close(client)


def _run_body(args, client) -> int:
    from .warmup import start_warmup

    t_start = time.perf_counter()
    start_warmup(numpy_warp=args.backend != "cupy")  # the compiled warp loads while the images are read
    progress = _Progress(args.quiet, t0=t_start)
    try:
        return _run_with(args, client, progress, t_start)
    finally:
        progress.close()  # a terminal's bar line ends: an error or Ctrl-C printed next starts a line of its own


def _run_with(args, client, progress, t_start) -> int:
    from .attention import AttentionRun

    progress(0.0, "reading the images")
    data = _usable_inputs(args, progress)
    relion = _relion_inputs(args, data)
    progress(0.0, f"preparing the images (denoise {getattr(args, 'denoise', 'off')})")
    canvas, images, tau = _working_images(args, data)
    run = AttentionRun(images, backend=args.backend, method=args.method, beta=args.beta,
                       iterations=args.iterations, clusters=args.clusters,
                       rotation_range=args.rotation_range, angle_step=args.angle_step, group=args.group,
                       neighbors=args.neighbors, client=client, threads=args.threads,
                       readout=getattr(args, "readout", "auto"),
                       realign_rounds=getattr(args, "realign_rounds", options.option("realign_rounds").default),
                       preset="paper" if getattr(args, "paper", False) else None)
    run.on_progress = progress  # inside a long stage: the similarity yields no snapshot until it ends
    history = _iterate(run, args, progress)
    res = run.result()
    progress(1.0, "writing the results")  # the class averages before denoising, the figures: seconds
    out = args.results.open()  # a hidden folder beside --out; moved into place when complete
    undenoised = _undenoised_means(args, canvas, res)
    _write_results(out, args, data, canvas, res, undenoised)
    if relion is not None:
        _write_relion(out, args, data, canvas, res, tau, relion, undenoised)
    summary = _summary(args, data, canvas, run, res, time.perf_counter() - t_start)
    write_json(out / "summary.json", summary)
    if args.save_project:
        from .clusterbook import ClusterBook
        from .particle_ctf import ctf_to_array
        from .project import Project, run_record, save_project

        proj = Project(
            paths=list(data.paths), labels=list(data.labels), skipped=list(data.skipped), size=args.size,
            transforms=tau, base=canvas.images, scale=canvas.scale, offset=canvas.offset,
            parameters={**summary["parameters"], **run_record(res)}, clusters=ClusterBook.from_labels(res.labels),
            history=history,
            result=res.arrays(), ctf=ctf_to_array(data.ctf, len(data)), undenoised_means=undenoised,
        )
        save_project(args.save_project, proj)
    progress.close()
    out = args.results.commit()
    if not args.quiet:
        extra = f", ARI {summary['metrics']['ari']:.3f}" if "metrics" in summary else ""
        print(f"{len(data)} images -> {_k_text(res)}{extra}; results in {printable(out)}",
              file=sys.stderr)
    if summary["blank"]:
        print(f"ia-cluster: {len(summary['blank'])} blank image(s) put in a cluster of their own", file=sys.stderr)
    if summary["poor_fits"]:
        print(f"ia-cluster: {poor_fit_line(summary['poor_fits'])}", file=sys.stderr)
    for note in _notes(canvas, res, printed=True):
        print(f"ia-cluster: {note}", file=sys.stderr)
    if (line := _left_out_line(canvas, data)) is not None:
        print(f"ia-cluster: {line}", file=sys.stderr)
    return 0


def _notes(canvas, res, *, printed: bool = False) -> list:
    """The run's notes, after what the denoiser did (``--denoise auto`` or ``on``).

    ``printed`` (stderr): the denoiser's note only when it denoised; that it stepped aside (clean
    images, most runs) is said in ``summary.json`` alone.
    """
    rep = getattr(canvas, "denoise", None)
    said = rep is not None and rep.note and (rep.applied or not printed or rep.mode == "on"
                                             or (rep.mode != "off" and not rep.clean))
    return ([rep.note] if said else []) + list(res.notes)


def _left_out_line(canvas, data) -> str | None:
    """The files the denoiser left as they were (another size or colour than the stack), named; or None."""
    rep = getattr(canvas, "denoise", None)
    if rep is None or not rep.applied or not rep.left_out:
        return None
    names = [display_name(data.paths[i]) for i in rep.left_out[:3]]
    more = len(rep.left_out) - len(names)
    return ("not denoised (another size or colour than the rest): " + ", ".join(printable(n) for n in names)
            + (f" and {more} more" if more else ""))


def _usable_inputs(args, progress=None) -> ImageSet:
    """The inputs, loaded; skipped files reported; at least 2 images and no more clusters than images."""
    data = gather_inputs(args.inputs, args.seed)
    if progress is not None and data.skipped:
        progress.clear()
    for line in skipped_lines(data.skipped):  # a missing stack: one line, not one per particle
        print(f"ia-cluster: skipped {printable(line)}", file=sys.stderr)
    n = len(data)
    if n < 2:
        raise NoUsableImagesError(f"need at least 2 usable images, found {n}", data.skipped)
    if args.clusters != "auto" and args.clusters > n:
        raise _UsageError(f"--clusters {args.clusters} is more than the {n} usable images")
    return data


def _relion_inputs(args, data) -> tuple[list[str], list | None] | None:
    """With ``--export relion``: each image's ``rlnImageName`` and CTF (None: not every image has one from its
    STAR row), checked before the run (MRC files, one box size, a pixel size: ``--pixel-size`` or the STAR's)."""
    if args.export != "relion":
        return None
    from .relion import relion_image_name

    names = [relion_image_name(p) for p in data.paths]
    other = [p for p, n in zip(data.paths, names) if n is None]
    if other:
        raise _UsageError(f"--export relion needs images from MRC files (.mrcs, .mrc or a STAR file listing them); "
                          f"{len(other)} of {len(names)} are not, e.g. {printable(other[0])}")
    shapes = {tuple(img.shape[:2]) for img in data.images}
    if len(shapes) > 1 or any(h != w for h, w in shapes):
        listed = ", ".join(f"{w}x{h}" for h, w in sorted(shapes)[:4])
        raise _UsageError(f"--export relion needs square particles of one box size; found {listed}")
    return names, _relion_ctf(args, data)


def _relion_ctf(args, data) -> list | None:
    """Each particle's CTF where every one came from a STAR row with one; fills in ``args.pixel_size`` from them."""
    from .particle_ctf import ParticleCtf

    ctf = list(data.ctf or [])
    if len(ctf) != len(data) or not all(isinstance(c, ParticleCtf) for c in ctf):
        if args.pixel_size is None:
            why = next((c for c in ctf if isinstance(c, str)), "")
            raise _UsageError("--export relion needs --pixel-size (the particles' pixel size in Angstrom): it is "
                              "taken from a STAR file only where every image's row gives its whole CTF (defocus, "
                              "voltage, Cs, amplitude contrast, pixel size)" + (f"; {why}" if why else ""))
        return None
    pixels = sorted({c.pixel_size for c in ctf})
    if args.pixel_size is not None and any(abs(px - args.pixel_size) > 1e-3 * px for px in pixels):
        raise _UsageError(f"--pixel-size {args.pixel_size:g} differs from the STAR file's pixel size "
                          f"({', '.join(f'{px:g}' for px in pixels[:3])} Angstrom): leave --pixel-size out to "
                          "use the file's")
    if args.pixel_size is None:
        args.pixel_size = float(np.median([c.pixel_size for c in ctf]))  # each particle's own goes in its row
    return ctf


def _write_relion(out, args, data, canvas, res, tau, relion, undenoised=None) -> None:
    """``particles.star`` and ``class_averages.mrcs`` (see :mod:`iastudio.core.relion` for the conventions);
    ``class_averages_undenoised.mrcs`` where the run denoised (``undenoised``: :func:`_undenoised_means`).
    ``relion``: what :func:`_relion_inputs` returned, each image's name and CTF."""
    names, ctf = relion
    from .relion import relion_poses, write_class_averages, write_particles_star

    box = int(data.images[0].shape[0])
    # the file's image, through --transform, onto the mean
    poses = relion_poses(se2.compose(np.asarray(tau, dtype=float), np.asarray(res.image_transforms, dtype=float)),
                         canvas, box=box)
    write_particles_star(out / "particles.star", names=names, clusters=res.labels, poses=poses, scores=res.scores,
                         pixel_size=args.pixel_size, box=box, ctf=ctf)
    write_class_averages(out / "class_averages.mrcs", res.cluster_means,
                         pixel_size=args.pixel_size / float(np.mean(canvas.scale)))
    if undenoised is not None:
        write_class_averages(out / "class_averages_undenoised.mrcs", undenoised,
                             pixel_size=args.pixel_size / float(np.mean(canvas.scale)))


def _working_images(args, data):
    """``(canvas, images, transforms)``: the preprocessed images and, with ``--transform``, them moved."""
    from .preprocess import apply_transforms, preprocess

    n = len(data)
    images = data.images
    if getattr(args, "phase_flip", False):
        images = _phase_flipped(data)
    canvas = preprocess(images, size=args.size, scale=args.scale, denoise=getattr(args, "denoise", "off"),
                        keep_undenoised=True)  # where it denoised: the images before it, for means_undenoised
    if args.transform is None:
        return canvas, canvas.images, np.zeros((n, 3))
    rot, frac = args.transform
    tau = se2.random_transforms(n, rotation_range=rot, shift_range=frac * args.size, seed=args.seed + 1)
    if canvas.undenoised is not None:  # moved as the working images are (not clipped: noise keeps its sign)
        from .warp import warp

        canvas = dataclasses.replace(canvas, undenoised=warp(canvas.undenoised, tau))
    return canvas, apply_transforms(canvas.images, tau), tau


def _phase_flipped(data) -> list:
    """``data``'s images, each phase-flipped with its STAR row's CTF (every image has one: checked first)."""
    from .particle_ctf import flip_problem, phase_flip_particles

    problem = flip_problem(data.ctf, data.images, paths=data.paths)
    if problem:  # checked before loading; a file changed meanwhile, or colour images a STAR file names
        raise _UsageError(f"--phase-flip: {problem}")
    return phase_flip_particles(data.images, data.ctf)


def _phase_flip_record(data, applied: bool) -> dict:
    """What ``summary.json`` says about phase flipping (:func:`iastudio.core.particle_ctf.phase_flip_record`)."""
    from .particle_ctf import phase_flip_record

    return phase_flip_record(data.ctf) if applied else {"applied": False}


def _iterate(run, args, progress=None) -> list:
    """Run to the end with a progress bar (``progress``, a :class:`_Progress`); the project history (when
    ``--save-project``)."""
    from .attention import Stage
    from .project import RECORDED_STAGES, history_entry

    stage_names = {Stage.SIMILARITY: "invariant similarity", Stage.MEANS: "invariant means",
                   Stage.ITERATION: "iteration done", Stage.DONE: "done"}
    if args.method == "ka":
        stage_names[Stage.SIMILARITY] = "kernel similarity"
    own = progress is None
    progress = progress or _Progress(args.quiet)
    history = []
    for snap in run.steps():
        progress(snap.progress, f"iteration {snap.iteration}: {stage_names.get(snap.stage, snap.stage)}")
        if args.save_project and snap.stage in RECORDED_STAGES:
            history.append(history_entry(snap))
    if own:
        progress.close()
    return history


def _write_results(out, args, data, canvas, res, undenoised=None) -> None:
    """``assignments.csv``, the weights and distances, the means and the figures into ``out``
    (``undenoised``: the averages of the images before denoising, :func:`_undenoised_means`)."""
    import scipy.sparse as sp

    from .report import assignment_rows, save_convergence_png, save_means_png, save_weights_png, write_assignments

    rows = assignment_rows(data.paths, res.labels, true_labels=data.labels, transforms=res.image_transforms,
                           scores=res.scores, canvas=canvas, mirrored=res.mirrored if args.group == "e2" else None)
    write_assignments(out / "assignments.csv", rows)
    if sp.issparse(res.weights):  # a pruned run above the dense-view size: the K-neighbour graph
        sp.save_npz(out / "weights.npz", res.weights.tocsr())
        sp.save_npz(out / "distances.npz", sp.csr_matrix(res.input_distances))
    else:
        np.save(out / "weights.npy", res.weights.astype(np.float32))
        np.save(out / "distances.npy", res.input_distances.astype(np.float32))
        save_weights_png(out / "weights.png", res.weights, res.labels)
        save_convergence_png(out / "convergence.png", res.history, res.labels)
    np.save(out / "means.npy", res.cluster_means.astype(np.float32))
    save_means_png(out / "means.png", res.cluster_means)
    if undenoised is not None:
        np.save(out / "means_undenoised.npy", undenoised)
        save_means_png(out / "means_undenoised.png", undenoised,
                       title="Class averages before denoising (at the run's poses)")


def _undenoised_means(args, canvas, res):
    """Where the run denoised: the images before denoising averaged at the run's poses (else None;
    :func:`iastudio.core.frames.undenoised_means`, as the app makes them)."""
    if getattr(canvas, "undenoised", None) is None:
        return None
    from .frames import undenoised_means

    return undenoised_means(canvas.undenoised, res, group=args.group)


def _summary(args, data, canvas, run, res, seconds: float) -> dict:
    """What ``summary.json`` holds: counts, parameters, timings, the k evidence and, with labels, ARI/NMI."""
    summary = {
        "n_images": len(data),
        "n_clusters": int(res.n_clusters),
        "skipped": data.skipped,
        "backend": run.backend.describe(),
        "threads": run.threads or threads(),
        "iterations": int(res.iterations),
        "parameters": {
            "method": args.method, "clusters": args.clusters, "beta": run.settings.beta, "beta_used": res.beta,
            "iterations": run.settings.iterations, "rotation_range": args.rotation_range,
            "angle_step": args.angle_step, "size": args.size, "scale": args.scale, "group": args.group,
            "canvas": canvas.size, "neighbors": run.settings.neighbors, "dask": args.dask,
            "transform": list(args.transform) if args.transform else None, "seed": args.seed,
            "export": args.export, "pixel_size": args.pixel_size,
            "denoise": getattr(args, "denoise", "off"), "phase_flip": bool(getattr(args, "phase_flip", False)),
            "preset": run.settings.preset, "readout": run.settings.readout,
            "realign_rounds": run.settings.realign_rounds, "realign_rounds_used": _realign_rounds_used(run),
        },
        "timings": {
            "total_s": round(seconds, 3),
            "similarity_s": round(res.timings.get("similarity_s", 0.0), 3),
            "mean_s": round(res.timings.get("mean_s", 0.0), 3),
        },
        "version": __version__,
    }
    summary.update(_k_evidence(res, data.paths))
    summary["notes"] = _notes(canvas, res)
    rep = getattr(canvas, "denoise", None)
    summary["denoise"] = rep.as_dict() if rep is not None else {"applied": False, "mode": "off"}
    summary["denoise"]["undenoised_means"] = getattr(canvas, "undenoised", None) is not None
    summary["phase_flip"] = _phase_flip_record(data, bool(getattr(args, "phase_flip", False)))
    if data.has_labels:
        from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

        summary["metrics"] = {
            "ari": float(adjusted_rand_score(data.labels, res.labels)),
            "nmi": float(normalized_mutual_info_score(data.labels, res.labels)),
        }
    return summary


def _k_text(res) -> str:
    if res.k_choice is None:
        return f"{res.n_clusters} clusters"
    return res.k_choice.describe(res.n_clusters)


def _k_evidence(res, paths) -> dict:
    """The evidence for k in `summary.json` (``k_candidates`` ... ``k_stability``), ``blank`` and ``notes``."""
    ch = res.k_choice
    out = {"k_candidates": [], "k_confidence": None, "k_method": None, "k_unsure": None, "k_clear": None,
           "k_stability": None}
    if ch is not None:
        d = ch.as_dict()
        out = {"k_candidates": d["candidates"], "k_confidence": d["confidence"], "k_method": d["method"],
               "k_unsure": d["unsure"], "k_clear": d["clear"], "k_stability": d["stability"]}
    blank = res.blank if res.blank is not None else np.zeros(len(paths), dtype=bool)
    out["blank"] = [paths[i] for i in np.flatnonzero(blank)]
    out["poor_fits"] = [paths[i] for i in poor_fits(res.labels, res.scores)]
    out["notes"] = list(res.notes)
    return out


def _export_project(args) -> int:
    """``--project P``: write the saved clusters, edits included, to ``--out``."""
    from .clusterbook import UNASSIGNED
    from .preprocess import Canvas
    from .project import load_project
    from .report import assignment_rows, cluster_number, write_assignments

    proj = load_project(args.project)
    book = proj.clusters
    if book is None:
        raise ProjectError(f"{Path(args.project).name}: the project has no clusters yet (run it first)")
    out = args.results.open()
    side = int(proj.base.shape[1]) if proj.base is not None else proj.size
    canvas = None
    if proj.scale is not None and proj.offset is not None:
        canvas = Canvas(np.zeros((0, side, side), np.float32), proj.scale, proj.offset, [])
    transforms, scores, changed = _project_poses(proj)
    rows = assignment_rows(proj.paths, book.labels, true_labels=proj.labels, names=book.name_of,
                           transforms=transforms, scores=scores, canvas=canvas)
    write_assignments(out / "assignments.csv", rows)
    counts = book.counts()
    summary = {
        "n_images": proj.n,
        "n_clusters": len(book.cluster_ids()),
        "clusters": [{"cluster": cluster_number(c), "name": book.name_of(c), "count": counts[c]}
                     for c in book.cluster_ids()],
        "unassigned": counts[UNASSIGNED],
        "skipped": proj.skipped,
        "parameters": proj.parameters,
        "edits": proj.edits,
        "posed_onto_edited_means": sorted(cluster_number(c) for c in changed),
        "project": str(args.project),
        "version": __version__,
    }
    if all(lab is not None for lab in proj.labels) and counts[UNASSIGNED] == 0:
        from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

        summary["metrics"] = {"ari": float(adjusted_rand_score(proj.labels, book.labels)),
                              "nmi": float(normalized_mutual_info_score(proj.labels, book.labels))}
    write_json(out / "summary.json", summary)
    out = args.results.commit()
    if not args.quiet:
        print(f"{proj.n} images in {len(book.cluster_ids())} clusters exported to {printable(out)}",
              file=sys.stderr)
    return 0


def _project_poses(proj) -> tuple:
    """Each image's pose onto its (edited) cluster's mean and its score, and the clusters the edits changed.

    The run's poses where a cluster is the run's own; the poses onto an edited cluster's own invariant
    mean (:func:`~iastudio.core.cluster_means.poses_onto_clusters`; its medoid picked by the run's
    input distances, where the app may fall back on its last ones) where the project embeds its
    images.  Without embedded images, an image the edits moved keeps no pose, and the others of an
    edited cluster keep the run's (onto their run cluster's mean); without the run's clusters, none
    has one (``(transforms, scores, changed)``; NaN: none).
    """
    from .cluster_means import poses_onto_clusters
    from .preprocess import apply_transforms

    labels = np.asarray(proj.clusters.labels, dtype=int)
    res = proj.result
    run_labels, run_t, means = res.get("run_labels"), res.get("image_transforms"), res.get("cluster_means")
    if run_labels is None or run_t is None:
        return None, None, {}
    if proj.base is None:  # the images are not in the project: only the run's own clusters have poses
        keep = np.asarray(run_labels) == labels
        t = np.where(keep[:, None], np.asarray(run_t, dtype=float), np.nan)
        sc = res.get("scores")
        return t, None if sc is None else np.where(keep, np.asarray(sc, dtype=float), np.nan), {}
    base = np.asarray(proj.base, dtype=np.float32)
    moved = proj.transforms is not None and np.asarray(proj.transforms).any()
    working = apply_transforms(base, np.asarray(proj.transforms, dtype=float)) if moved else base
    return poses_onto_clusters(working, labels, run_labels=run_labels, transforms=run_t, scores=res.get("scores"),
                               n_run=None if means is None else len(means), distances=res.get("input_distances"),
                               **options.alignment_options(proj.parameters or {}))


if __name__ == "__main__":
    sys.exit(main())
