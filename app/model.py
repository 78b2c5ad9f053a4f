"""The studio model: the driver of the Qt-free :class:`~iastudio.core.session.Session`'s background work.

The session holds and changes the state and emits typed events the views connect to; this adapter drives its
runs in a standard thread worker (superqt's generator worker), and the reading of image files (decode
and preprocess, :func:`~iastudio.core.session.read_images`) in a function worker.  The workers' output
reaches the GUI thread only through queued signals, and only the GUI thread changes the session; views
never compute, they draw what these signals carry.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
import traceback

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThreadPool, Signal
from superqt.utils import create_worker

from iastudio.core.backend import BackendUnavailableError, get_backend
from iastudio.core.cluster_means import edited_cluster_means
from iastudio.core.frames import FrameBuilder
from iastudio.core.session import Session, read_images, read_originals, run_subset, stream_run

from .events import listen

log = logging.getLogger(__name__)
QUEUED = Qt.ConnectionType.QueuedConnection
FINISHING = 0.99  # the bar while the worker makes a finished run's final frame (the engine's part is done)


def gpu_status() -> tuple[bool, str]:
    """``(available, reason)`` for the GPU backend."""
    try:
        b = get_backend("cupy")
        return True, b.device
    except BackendUnavailableError as exc:
        return False, str(exc)


class StudioModel(QObject):
    """The driver of the session's background work: its runs, the reading of images, edited clusters' means.

    The session (:attr:`session`) holds the state and emits its own typed events, which the views connect
    to (:func:`~iastudio.app.events.listen`); this object only starts the workers, hands what they return
    to the session on the GUI thread, and says how the reading of images goes.
    """

    imagesLoading = Signal(int, int, str)  # files done, total, the file being read now
    imagesLoaded = Signal(list)  # the skipped files: a load ended (its images are in the session, if any)
    loadFailed = Signal(str, str)  # message, traceback: the loading itself failed (not one file)
    originalsReading = Signal()  # an opened project's original files are being read (progress: imagesLoading)
    originalsRead = Signal(bool)  # their reading ended: True when they were taken (the change goes on)
    _progressed = Signal(float, str)  # emitted in the worker thread, queued to the GUI thread
    _reading = Signal(int, int, str)  # emitted in the worker thread, queued to imagesLoading

    def __init__(self, parent=None, *, session: Session | None = None):
        super().__init__(parent)
        self.session = session or Session()
        self._progressed.connect(self._on_progress, QUEUED)
        self._reading.connect(self.imagesLoading, QUEUED)
        self.builder: FrameBuilder | None = None
        self.worker = None
        self.loader = None  # the worker reading images, while it does
        self._load_replace = False
        self._load_size = None
        self._load_cancel = threading.Event()
        # Asked on the GUI thread once images were read and before they replace a run or its edits:
        # ``confirm(action) -> bool`` (the window asks the user; None: no one to ask, go on).
        self.confirm = None
        self._t_launch = 0.0
        self.means_worker = None  # computing the invariant means of edited clusters, while it does
        self._means_again = False
        self.shut_down = False  # the window closed: results of workers still in flight are dropped
        listen(self.session.events.clusters, self._update_cluster_means)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # ---------------------------------------------------------------- loading images
    @property
    def loading(self) -> bool:
        """True while a worker reads images (:meth:`load_paths`)."""
        return self.loader is not None

    def refuse_while_loading(self) -> bool:
        """True (with a message) while images are loading: the inputs must not change meanwhile."""
        if self.loading:
            self.session.message("Wait for the images to load, or cancel the loading.")
        return self.loading

    def after_originals(self, then, *, cancelled=None) -> bool:
        """Call ``then()`` (an input change) once the opened project's original files it needs are read.

        A reopened project whose run denoised its images reads its original files again at the first
        input change (:attr:`~iastudio.core.session.Session.originals_to_read`): they are read here in a
        worker thread (:func:`~iastudio.core.session.read_originals`), with :attr:`originalsReading`,
        :attr:`imagesLoading` and :attr:`originalsRead` for a progress dialog, and the session takes
        them (:meth:`~iastudio.core.session.Session.take_originals`) on this thread before ``then()``.
        Cancelling (:meth:`cancel_loading`) changes nothing: ``cancelled()`` is called instead of ``then``.

        Returns whether ``then()`` changed something when no file is read; else True (False while images load).
        """
        paths = self.session.originals_to_read
        if paths is None:
            return then() is not False
        if self.refuse_while_loading():
            return False
        ended = functools.partial(self._originals_read, then, cancelled)
        _start_reading(self, read_originals, paths, size=self.session.size,
                       returned=ended, errored=lambda exc: ended(None, exc))
        self.originalsReading.emit()
        return True

    def _originals_read(self, then, cancelled, originals, exc: BaseException | None = None) -> None:
        if self.loader is None:  # abandoned (the window closed)
            return
        self.loader = None
        if exc is not None:
            tb = "".join(traceback.format_exception(exc))
            log.error("reading the project's original files failed\n%s", tb)
            self.loadFailed.emit(str(exc) or type(exc).__name__, tb)
        elif self._load_cancel.is_set():
            self.session.message("Cancelled: nothing changed (the project's original files were not read).")
        taken = exc is None and not self._load_cancel.is_set()
        if taken:
            self.session.take_originals(originals)
        self.originalsRead.emit(taken)
        if taken:
            then()
        elif cancelled is not None:
            cancelled()

    def load_paths(self, paths, *, replace: bool = False, size: int | None = None) -> bool:
        """Read and preprocess files/folders in a worker thread; the session takes them on the GUI thread.

        Returns at once: False (with a message) when refused, a run or another loading going on.
        :attr:`imagesLoading` tells which file is read, :attr:`imagesLoaded` when the loading ended.
        """
        if self.refuse_while_loading():
            return False
        if not self.session.begin_adding():
            return False
        self._load_replace = replace
        self._load_size = size if replace else None  # the new set's working size (None: the session's)
        _start_reading(self, read_images, list(paths), size=self._load_size or self.session.size,
                       returned=self._loaded, errored=self._load_failed)
        return True

    def cancel_loading(self) -> None:
        """Stop loading after the file being read; what was read is kept."""
        if self.loading and not self._load_cancel.is_set():
            self._load_cancel.set()
            self.session.message("Cancelling: the file being read is the last one.")

    def _loaded(self, loaded) -> None:
        if self.loader is None:  # abandoned (the window closed)
            return
        action = "Opening a folder" if self._load_replace else "Adding images"
        if len(loaded.data) and self.confirm is not None and not self.confirm(action, replaces=self._load_replace):
            self.loader = None  # the user kept their work: nothing read is added
            self.session.message(f"Nothing {'opened' if self._load_replace else 'added'}: your work is kept as it was.")
            self.imagesLoaded.emit([])
            return
        if not self._load_replace and len(loaded.data) and self.session.originals_to_read is not None:
            # added to a reopened project whose run denoised its images: its original files are read first
            def kept():
                self.session.message("Nothing added: your work is kept as it was.")
                self.imagesLoaded.emit([])

            self.loader = None
            self.after_originals(lambda: self._add_loaded(loaded), cancelled=kept)
            return
        self._add_loaded(loaded)

    def _add_loaded(self, loaded) -> None:
        try:
            skipped = self.session.add_loaded(loaded, replace=self._load_replace, size=self._load_size)
        except Exception as exc:  # noqa: BLE001 -- shown in the error window; the window must leave its loading state
            self.loader = None
            self._report_load_failure(exc)
            return
        self.loader = None
        self.imagesLoaded.emit(skipped)

    def _load_failed(self, exc: BaseException) -> None:
        if self.loader is None:
            return
        self.loader = None
        self._report_load_failure(exc)

    def _report_load_failure(self, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(exc))
        log.error("loading images failed\n%s", tb)
        self.loadFailed.emit(str(exc) or type(exc).__name__, tb)
        self.imagesLoaded.emit([])

    # ---------------------------------------------------------------- runs
    def start(self, *, backend: str = "auto", cancelled=None, **options) -> bool:
        """Start a new run on the transformed set; False (with a message) when refused.

        A reopened project whose run denoised its images has its original files read first, in a worker
        (:meth:`after_originals`; True meanwhile): the run starts once they are in, and ``cancelled()`` is
        called instead when the user cancels their reading.
        """
        if self.refuse_while_loading():
            return False
        return self.after_originals(functools.partial(self._start, backend=backend, **options),
                                    cancelled=cancelled)

    def _start(self, *, backend: str, **options) -> bool:
        run = self.session.start(backend=backend, **options)
        if run is None:
            return False
        self.builder = FrameBuilder()
        self._launch(run, prepare=self.session.run_inputs)  # the worker denoises first (never this thread)
        return True

    def resume(self) -> bool:
        if self.refuse_while_loading():
            return False
        run = self.session.resume()
        if run is None:
            return False
        self._launch(run, prepare=self.session.run_inputs)  # stopped before its inputs were made: made now
        return True

    def stop(self) -> None:
        """Cancel the run: the engine stops between steps and the worker reports "stopped"."""
        self.session.stop()

    def _launch(self, run, *, prepare=None) -> None:
        try:
            _warm_imports()
        except Exception as exc:  # noqa: BLE001 -- e.g. a module an installed edition lacks: the run fails, shown
            self._on_error(exc)
            return
        self._t_launch = time.perf_counter()
        run.on_progress = lambda fraction, text: self._progressed.emit(fraction, text)  # worker thread
        # handlers given at creation (superqt re-raises errors in the GUI thread when no handler was)
        # a resumed denoised run: its images before denoising, for their class averages when it finishes
        stream = functools.partial(stream_run, prepare=prepare, undenoised=self.session.undenoised)
        worker = create_worker(_reraising, stream, run, self.builder,
                               _start_thread=False,
                               _connect={"yielded": self._on_yield, "errored": self._on_error})
        self.worker = worker
        worker.start()

    def _on_yield(self, item) -> None:
        self.session.take(item)
        if item[0] == "frame":
            _frame_progress(self, item[1].snapshot)

    def _on_error(self, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(exc))
        log.error("run failed\n%s", tb)
        self.session.on_failed(str(exc) or type(exc).__name__, tb)

    def _on_progress(self, fraction: float, text: str) -> None:
        el = time.perf_counter() - self._t_launch
        eta = el * (1 - fraction) / fraction if fraction > 0.02 else -1.0
        self.session.on_progress(fraction, text, eta)

    # ---------------------------------------------------------------- edited clusters' means
    def _update_cluster_means(self) -> None:
        """Compute the invariant means of clusters the edits made, in a worker (the views show each
        cluster's medoid mean meanwhile); one computation at a time, the latest edits last."""
        if self.means_worker is not None:
            self._means_again = True
            return
        missing = self.session.missing_cluster_means()
        if not missing:
            return
        final = self.session.final
        distances = final.result.input_distances if final.result is not None else final.snapshot.distances
        worker = create_worker(edited_cluster_means, self.session.working, missing, distances=distances,
                               undenoised=self.session.undenoised if final.undenoised_means is not None else None,
                               **self.session.alignment_options(), _start_thread=False,
                               _connect={"returned": lambda out: self._cluster_means_done(final, missing, *out),
                                         "errored": self._cluster_means_failed})
        self.means_worker = worker
        worker.start()

    def _cluster_means_done(self, final, members, means, undenoised=None) -> None:
        self.means_worker = None
        if self.shut_down:  # delivered after the window closed: its views are gone, nothing to draw
            return
        if self.session.final is final:  # the same run: its edited clusters' means
            self.session.set_cluster_means(members, means, undenoised)
        if self._means_again or self.session.final is not final:
            self._means_again = False
            self._update_cluster_means()

    def _cluster_means_failed(self, exc: BaseException) -> None:
        self.means_worker = None
        self._means_again = False
        log.error("computing the means of edited clusters failed (their medoids' means are shown)\n%s",
                  "".join(traceback.format_exception(exc)))

    def split_by_rerun(self, cluster: int) -> bool:
        """Split a cluster by running Invariant Attention on its images alone (in a worker thread)."""
        if self.refuse_while_loading():
            return False
        prepared = self.session.start_subset(cluster)
        if prepared is None:
            return False
        run, members = prepared
        _warm_imports()
        self._t_launch = time.perf_counter()
        name = self.session.book.name_of(cluster)
        run.on_progress = lambda fraction, text: self._progressed.emit(fraction, f"re-running {name}: {text}")
        self._subset = (cluster, members)
        worker = create_worker(run_subset, run, _start_thread=False,
                               _connect={"returned": self._subset_returned, "errored": self._subset_failed})
        self.subset_worker = worker
        worker.start()
        return True

    def _subset_returned(self, labels) -> None:
        if not self.shut_down:
            self.session.on_subset_done(*self._subset, labels)

    def _subset_failed(self, exc) -> None:
        log.error("re-run on a cluster failed\n%s", "".join(traceback.format_exception(exc)))
        if not self.shut_down:
            self.session.on_subset_done(*self._subset, None)

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Stop the runs and the loading and wait for their threads (window closing); True if they ended in time.

        Images still loading are dropped, and so are the results of the edited clusters' means and of a
        cluster's re-run that arrive afterwards (queued to this thread, they would reach deleted views).
        """
        self.shut_down = True
        self.stop()
        self._load_cancel.set()
        self.loader = None
        done = QThreadPool.globalInstance().waitForDone(timeout_ms)
        self.session.close()
        return done


def _start_reading(model: StudioModel, read, *args, returned, errored, **kwargs) -> None:
    """Start ``model``'s loader: ``read(*args, progress=..., **kwargs)`` in a worker, its progress on
    :attr:`StudioModel.imagesLoading`, stopped after the file being read by :meth:`StudioModel.cancel_loading`."""
    model._load_cancel = cancel = threading.Event()

    def progress(done, total, path):  # worker thread: only a queued signal and the flag cross
        model._reading.emit(done, total, path)
        return not cancel.is_set()

    model.loader = create_worker(read, *args, progress=progress, **kwargs, _start_thread=False,
                                 _connect={"returned": returned, "errored": errored})
    model.loader.start()


class EngineError(Exception):
    """A RuntimeError of the engine, renamed for the worker (see :func:`_reraising`)."""


def _reraising(generator_function, *args):
    """Yield from ``generator_function(*args)``, re-raising a RuntimeError as :class:`EngineError`.

    superqt's generator worker takes a RuntimeError for "the worker was deleted" and only warns; an
    engine failure of that type (CUDA errors are RuntimeErrors) would then vanish instead of reaching
    the error dialog.
    """
    try:
        return (yield from generator_function(*args))
    except RuntimeError as exc:
        raise EngineError(str(exc) or type(exc).__name__) from exc


def _frame_progress(model: StudioModel, snap) -> None:
    """The Run panel's bar and stage for a frame of the run ``snap`` (its snapshot)."""
    if snap.stage == "done":
        # the engine is done; its worker still makes the final frame (the class averages, those before
        # denoising, the final read-out): seconds on a large set, not "100 % · ~0 s left"
        model.session.on_progress(FINISHING, "finishing: the class averages and the final read-out", -1.0)
    else:
        model._on_progress(snap.progress, _stage_text(snap))


def _stage_text(snap) -> str:
    if snap.stage == "means":
        return f"invariant means, step {snap.step}/{snap.n_steps}"
    if snap.stage == "similarity":
        return f"iteration {snap.iteration}: similarity done"
    if snap.stage == "iteration":
        return f"iteration {snap.iteration} done"
    return "done"


def _warm_imports() -> None:
    """Import what the engine imports lazily, here on the GUI thread, before the worker needs it.

    A first import of scikit-learn inside the worker thread was seen to stall (its joblib and psutil
    imports) in one environment; imported once on the GUI thread, the worker finds it loaded.
    """
    import sklearn.cluster  # noqa: F401
    import sklearn.metrics  # noqa: F401
