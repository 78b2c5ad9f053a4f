"""The app's garbage collection runs on the GUI thread only (app/collector.py)."""
from __future__ import annotations

import gc
import threading

import pytest

pytest.importorskip("pytestqt")


@pytest.fixture(autouse=True)
def _automatic_collection():
    """These tests start from Python's automatic collection (the suite turns it off once Qt is up, see conftest's
    ``collect_on_the_gui_thread``) and leave it as they found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


class _Cycle:
    """A reference cycle that records the thread it was destroyed on."""

    def __init__(self, died: list):
        self.me = self
        self.died = died

    def __del__(self):
        self.died.append(threading.current_thread().name)


def _collected_in(qtbot, collector) -> list:
    """Make a cycle here, allocate in a worker thread, then see where the cycle died."""
    died: list = []
    _Cycle(died)
    kept: list = []  # the worker's objects stay alive: the counts stay over the thresholds
    worker = threading.Thread(target=lambda: kept.extend([] for _ in range(100_000)), name="worker")
    worker.start()
    worker.join()
    seen_in_worker = list(died)
    if collector is not None:
        qtbot.waitUntil(lambda: bool(died), timeout=30000)
    else:
        gc.collect()
    return seen_in_worker + [f"then:{name}" for name in died[len(seen_in_worker):]]


def test_without_the_collector_a_worker_thread_collects_the_gui_threads_cycles(qtbot):
    # the hazard itself: Python collects in whatever thread allocates
    gc.collect()
    assert gc.isenabled()
    assert _collected_in(qtbot, None)[0] == "worker"


def test_the_collector_collects_on_the_gui_thread_only(qtbot):
    from iastudio.app.collector import GuiThreadCollector

    gc.collect()
    collector = GuiThreadCollector(interval_ms=20)
    try:
        assert not gc.isenabled()
        died = _collected_in(qtbot, collector)
    finally:
        collector.stop()
    assert died == [f"then:{threading.main_thread().name}"]
    assert gc.isenabled()  # given back


def test_the_collector_picks_the_oldest_full_generation(qtbot):
    from iastudio.app.collector import GuiThreadCollector

    gc.collect()
    collector = GuiThreadCollector(interval_ms=60_000)
    try:
        assert collector.check() is None  # just collected: nothing over its threshold
        junk = [[] for _ in range(gc.get_threshold()[0] + 10)]
        assert collector.check() == 0
        assert gc.get_count()[0] < gc.get_threshold()[0]
        del junk
    finally:
        collector.stop()


def test_stop_gives_collection_back_even_after_qt_deleted_the_timer(qtbot):
    import shiboken6
    from PySide6.QtCore import QObject

    from iastudio.app.collector import GuiThreadCollector

    owner = QObject()
    collector = GuiThreadCollector(owner, interval_ms=1000)
    shiboken6.delete(owner)  # the timer (a child) goes with it
    try:
        collector.stop()
    finally:
        gc.enable()
    assert gc.isenabled()
