"""How the window listens to the session's events (typed psygnal signals of the Qt-free core).

:class:`~iastudio.core.session.Session` emits its :class:`~iastudio.core.session.SessionEvents` on the
thread that owns it, and in the app that is always the GUI thread: the workers never touch the session,
their results reach it through superqt's queued Qt signals (``yielded``, ``returned``, ``errored``) and
the model's queued progress signal (see ``app/model.py``).  So the views connect to the session's signals
directly and their callbacks run synchronously, on the GUI thread, in the order the session changes.

:func:`listen` adds what a Qt connection gave and psygnal's plain ``connect`` does not:

* an exception raised by a view's callback goes to :func:`sys.excepthook` (logged, and the error window
  shows it) instead of breaking off the session's change half-way, and the other views still update;
* were a signal ever emitted on another thread, the callback is posted to the GUI thread (a queued call)
  instead of touching widgets from that thread.
"""
from __future__ import annotations

import inspect
import logging
import sys
import threading

from PySide6.QtCore import QCoreApplication, QThread, QTimer

log = logging.getLogger(__name__)

__all__ = ["listen"]


def listen(signal, callback):
    """Connect ``callback`` to the psygnal ``signal`` for the GUI (see the module's docstring).

    Parameters
    ----------
    signal : psygnal.SignalInstance
        A session event, e.g. ``session.events.images``.
    callback : callable
        Called with as many of the signal's arguments as it takes (as a Qt slot is).

    Returns
    -------
    callable
        What was connected: give it to ``signal.disconnect`` to disconnect.
    """
    n_args = _positional_count(callback)
    gui = _gui_thread_id()

    def call(*args):
        args = args if n_args is None else args[:n_args]
        app = QCoreApplication.instance() if threading.get_ident() != gui else None
        if app is not None:
            log.warning("session event %s emitted off the GUI thread; queued to it", signal.name)
            QTimer.singleShot(0, app, lambda: _guarded(callback, args))
            return
        _guarded(callback, args)

    signal.connect(call, check_nargs=False)
    return call


def _gui_thread_id() -> int:
    """The ``threading`` id of the GUI thread (the thread that connects, when it is the application's)."""
    app = QCoreApplication.instance()
    if app is None or QThread.currentThread() is app.thread():
        return threading.get_ident()
    return threading.main_thread().ident


def _guarded(callback, args) -> None:
    try:
        callback(*args)
    except Exception:  # noqa: BLE001 - a broken view must not stop the session or the other views
        sys.excepthook(*sys.exc_info())


def _positional_count(fn) -> int | None:
    """How many positional arguments ``fn`` takes (None: any number)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it everything
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
