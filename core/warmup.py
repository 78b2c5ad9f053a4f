"""Setting a run's code up in the background, while the run starts on its images.

A process's first run pays for code it loads on first use: the compiled warp
loop (:func:`iastudio.core.warp.prepare`: Numba's cache, 0.3 to 1.5 s) and
scikit-learn, which the read-out uses (1 to 2 s to import on a cold disk).
Paid where first needed, each is time on one core while the other idles: on
a 1,000-image run about a fifth of its wall time.  :func:`start_warmup` does
both on a thread of their own: ``ia-cluster`` starts it before it reads the
images, and the invariant similarity
(:func:`iastudio.core.similarity.invariant_distances`) when it starts aligning,
so that they overlap the alignment.  Not from a run's very start: both hold
the GIL most of the time, and there they queued behind the candidate search,
whose loops need it too (1,000 particles: 0.4 to 0.8 s more wall time).
Anything that needs them before they are ready waits for them (Python's
import lock, the warp's own lock); nothing is done twice.
"""
from __future__ import annotations

import importlib
import logging
import threading

__all__ = ["READOUT_MODULES", "start_warmup"]

_log = logging.getLogger(__name__)

#: what the read-out imports (:mod:`iastudio.core.clustering`): loaded by the warm-up
READOUT_MODULES = ("sklearn.cluster", "sklearn.manifold", "sklearn.metrics")

_LOCK = threading.Lock()
_THREADS: dict[bool, threading.Thread] = {}


def _work(numpy_warp: bool) -> None:
    if numpy_warp:
        from .warp import prepare

        try:
            prepare()
        except Exception as exc:  # the first warp sets itself up instead (and logs why it cannot)
            _log.warning("warm-up: setting the warp up failed (%s: %s)", type(exc).__name__, exc)
    for name in READOUT_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the read-out's own import then says what is wrong
            _log.warning("warm-up: importing %s failed (%s: %s)", name, type(exc).__name__, exc)


def start_warmup(*, numpy_warp: bool = True) -> threading.Thread:
    """Start setting up the compiled warp and importing the read-out's modules, once per process.

    Parameters
    ----------
    numpy_warp : bool
        Also set up the warp of NumPy images (not needed where every warp
        runs on a GPU).

    Returns
    -------
    threading.Thread
        The thread doing it (the same one on every call with the same
        ``numpy_warp``); join it to wait.  It is not a daemon: a process that
        ends meanwhile waits for it (at most the seconds above), so that no
        import is cut off half-way.

    Examples
    --------
    >>> import sys
    >>> start_warmup(numpy_warp=False).join()
    >>> "sklearn.manifold" in sys.modules
    True
    """
    numpy_warp = bool(numpy_warp)
    with _LOCK:
        thread = _THREADS.get(numpy_warp)
        if thread is None:
            thread = threading.Thread(target=_work, args=(numpy_warp,), name="ia-warmup", daemon=False)
            _THREADS[numpy_warp] = thread
            thread.start()
        return thread
