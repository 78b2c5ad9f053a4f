"""A closed main window is freed: the app keeps no reference to it, and the tests' plumbing deletes it.

A window that outlives its test keeps its ~1,200 widgets; Qt's work over all widgets (a new window, its
palette and style) then gets dearer with every one left, and the GUI tests slow down as they go.
"""
import gc
import weakref

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QCoreApplication, QEvent  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402


def test_a_closed_and_deleted_main_window_is_freed(qapp, home):
    gc.collect()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    before = len(qapp.allWidgets())
    w = MainWindow()
    w.show()
    w.model.session.load_demo("shapes")
    qapp.processEvents()
    assert len(qapp.allWidgets()) > before + 100
    ref = weakref.ref(w)
    model = weakref.ref(w.model)
    w.model.shutdown(5000)
    w.close()
    w.deleteLater()
    del w
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    assert ref() is None  # nothing of the app (a signal, a cache, the error window) holds on to it
    assert model() is None
    assert len(qapp.allWidgets()) == before


_SEEN: list = []


def test_a_window_fixture_window_is_deleted_after_its_test_part_1(window):
    _SEEN.append(weakref.ref(window))


def test_a_window_fixture_window_is_deleted_after_its_test_part_2(qapp):
    assert len(_SEEN) == 1  # part 1 ran first (pytest keeps a file's order)
    gc.collect()
    assert _SEEN[0]() is None
    assert not [w for w in qapp.topLevelWidgets() if isinstance(w, MainWindow)]
