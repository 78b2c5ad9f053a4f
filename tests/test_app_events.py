"""The window's connections to the session's typed events (app/events.py): arguments, errors, threads."""
import os
import sys
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from iastudio.app.events import listen  # noqa: E402
from iastudio.core.session import Session  # noqa: E402


def test_a_callback_gets_as_many_of_the_arguments_as_it_takes(qapp):
    s = Session(size=16)
    got = []
    listen(s.events.progress, lambda fraction: got.append(("one", fraction)))
    listen(s.events.progress, lambda fraction, text, eta: got.append(("all", fraction, text, eta)))
    listen(s.events.progress, lambda *args: got.append(("any", *args)))
    listen(s.events.progress, lambda: got.append(("none",)))
    s.on_progress(0.5, "iteration 1", 3.0)
    assert got == [("one", 0.5), ("all", 0.5, "iteration 1", 3.0), ("any", 0.5, "iteration 1", 3.0), ("none",)]


def test_a_broken_view_goes_to_the_excepthook_and_the_session_and_other_views_go_on(qapp, monkeypatch):
    hooked = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, exc, tb: hooked.append(kind))
    s = Session(size=16)
    s.load_demo("shapes")
    later = []

    def broken(_sel):
        raise ZeroDivisionError("a bug in a view")

    listen(s.events.selection, broken)
    listen(s.events.selection, later.append)
    s.select([2, 5])
    assert hooked == [ZeroDivisionError]
    assert s.selection == [2, 5]
    assert later == [[2, 5]]


def test_an_event_emitted_off_the_gui_thread_reaches_the_callback_on_the_gui_thread(qapp, qtbot):
    s = Session(size=16)
    threads = []
    listen(s.events.message, lambda text: threads.append((text, threading.current_thread())))
    worker = threading.Thread(target=s.message, args=("from a worker",))
    worker.start()
    worker.join()
    assert threads == []  # not called on the worker thread: queued to the GUI thread
    qtbot.waitUntil(lambda: len(threads) == 1, timeout=5000)
    assert threads == [("from a worker", threading.main_thread())]


def test_the_model_drives_the_session_but_is_no_proxy_of_it(qapp):
    from iastudio.app.model import StudioModel

    model = StudioModel()
    for name in ("n", "data", "load_demo", "imagesChanged", "runFinished"):  # what the proxy and mirror gave
        assert not hasattr(model, name), name
    model.session.load_demo("shapes")
    assert model.session.n == 18
    assert model.shutdown(5000)


def test_a_run_that_fails_before_its_worker_starts_ends_failed_not_running(qapp, monkeypatch):
    """A module the installed edition lacks, found while launching, must not leave the run 'running'."""
    from iastudio.app import model as model_module

    def missing():
        raise ImportError("No module named 'sklearn.cluster'")

    monkeypatch.setattr(model_module, "_warm_imports", missing)
    model = model_module.StudioModel()
    model.session.load_demo("shapes")
    failed = []
    listen(model.session.events.failed, lambda message, tb: failed.append((message, tb)))
    model.start(backend="numpy")
    assert model.session.state == "failed"
    assert failed[0][0] == "No module named 'sklearn.cluster'"
    assert "ImportError" in failed[0][1]
    assert model.shutdown(5000)
