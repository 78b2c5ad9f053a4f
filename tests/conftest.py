import gc
import os
import sys

# GUI tests run without a screen unless the caller chose a platform
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from iastudio.core.demos import base_shapes  # noqa: E402


@pytest.fixture(scope="session")
def shape_images():
    """The three demo base shapes on a 64-px canvas, unit norm, float64."""
    bases, _ = base_shapes()
    return bases / np.linalg.norm(bases.reshape(3, -1), axis=1)[:, None, None]


def smooth_blob(size=32, seed=0):
    """A smooth random test image (float64), zero near the border."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    img = gaussian_filter(rng.random((size, size)), 2.0)
    yy, xx = np.mgrid[:size, :size] - (size - 1) / 2
    img *= np.exp(-(yy**2 + xx**2) / (2 * (size / 6) ** 2))
    return img / img.max()


HOME_VARS = ("IA_STUDIO_HOME", "IA_STUDIO_LOG_DIR")


def _point_home_at(mp, folder):
    mp.setenv("IA_STUDIO_HOME", str(folder))
    mp.setenv("IA_STUDIO_LOG_DIR", str(folder / "logs"))


@pytest.fixture(scope="session", autouse=True)
def _session_home(tmp_path_factory):
    """Nothing in the test session touches the user's real app home (settings, autosave, lock, logs)."""
    with pytest.MonkeyPatch.context() as mp:
        _point_home_at(mp, tmp_path_factory.mktemp("session-home"))
        yield


@pytest.fixture(autouse=True)
def _test_home(request, tmp_path_factory):
    """Each test gets a fresh app home, unless it shares its module's ``home``."""
    if "home" in request.fixturenames:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        _point_home_at(mp, tmp_path_factory.mktemp("home"))
        yield


@pytest.fixture(autouse=True)
def _default_run_settings(_test_home):
    """Each test's windows start with the default Run settings, as on a fresh install (a window remembers
    the last ones, :mod:`iastudio.app.remember`; windows of one module share its ``home``)."""
    remember = sys.modules.get("iastudio.app.remember")  # only where the app is under test
    if remember is not None:
        from iastudio.app.projects import settings

        settings().remove(remember.RUN_SETTINGS_KEY)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A private home for the app's logs, settings and autosave (one per test module)."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        _point_home_at(mp, home)
        yield home


class _Asked(list):
    """The app's questions asked during a test, and the answer the "user" gives."""

    answer = "discard"


_ASKED = _Asked()


def _ask(parent, title, text, **_):
    _ASKED.append((title, text))
    return _ASKED.answer


def _answer_the_apps_questions(mp) -> None:
    """Patch the app's question once its module is imported (only where the app is under test)."""
    projects = sys.modules.get("iastudio.app.projects")
    if projects is not None and projects.ProjectController.ask is not _ask:
        mp.setattr(projects.ProjectController, "ask", staticmethod(_ask))


_SESSION_PATCH = pytest.MonkeyPatch()


@pytest.fixture(scope="session", autouse=True)
def _answer_for_the_user():
    """The app's "Discard your work?" / "Save changes?" never block a test (windows that module fixtures
    close after a test's own patches are undone included): they are answered from ``_ASKED.answer``.

    Patched here when a test module imported the app at collection, else by :func:`asked` before the first
    test that has the app imported (a module fixture may import it first: a file run alone once hung at
    the end, its module window asking "Save changes?" with no one to answer).
    """
    _answer_the_apps_questions(_SESSION_PATCH)
    yield
    _SESSION_PATCH.undo()


@pytest.fixture(autouse=True)
def asked():
    """The questions asked during this test; set ``asked.answer`` to "save", "discard" or "cancel"."""
    _answer_the_apps_questions(_SESSION_PATCH)
    _ASKED.clear()
    _ASKED.answer = "discard"
    yield _ASKED
    _ASKED.answer = "discard"


def _qt_app():
    """The QApplication where the app is under test, else None (Qt is never imported here)."""
    widgets = sys.modules.get("PySide6.QtWidgets")
    return None if widgets is None else widgets.QApplication.instance()


def free_deleted_widgets() -> None:
    """Delete now what ``deleteLater`` left for an event loop, then collect Python's cycles, on the GUI thread.

    pytest-qt closes the widgets a test gave ``qtbot.addWidget`` and calls ``deleteLater``, but outside an
    event loop ``processEvents`` does not run deferred deletes: left alone, every closed main window (about
    1,200 widgets) stays alive to the end of the session, and Qt's work over all widgets (building a window,
    its palette and style) gets dearer with each one.
    """
    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()  # on the GUI thread (see ``window``)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def dispose(window) -> None:
    """Close a main window a fixture made and delete it now (its model's threads stopped first)."""
    window.model.shutdown(5000)
    window.close()
    window.deleteLater()
    free_deleted_widgets()


@pytest.fixture(autouse=True)
def _free_closed_windows():
    """After each test (pytest-qt has closed its widgets by then), the widgets it deleted go, and Python's
    cycles are collected on the GUI thread (:func:`collect_on_the_gui_thread`)."""
    yield
    if _qt_app() is not None:
        from PySide6.QtCore import QCoreApplication, QEvent

        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        collect_on_the_gui_thread()


def collect_on_the_gui_thread() -> None:
    """Once Qt is up, Python's automatic collection is off for the rest of the session: cycles are collected
    here, between tests, on the GUI thread, with Python's thresholds (as the app's own
    :class:`iastudio.app.collector.GuiThreadCollector` does on a timer).

    Left automatic, a cycle holding an earlier test's Qt object could be collected in a later test's run
    worker, where PySide's destructor waits for the GIL: seen once, a run's worker stuck in ``~QObject``
    under ``gc_collect_main`` and the whole suite hung.
    """
    gc.disable()
    counts, limits = gc.get_count(), gc.get_threshold()
    for gen in (2, 1, 0):
        if counts[gen] > limits[gen]:
            gc.collect(gen)
            return


@pytest.fixture(scope="module", autouse=True)
def _no_window_outlives_its_module():
    """After each test module, no main window of it is left: those a test or a fixture only closed are deleted."""
    yield
    app = _qt_app()
    main_window = sys.modules.get("iastudio.app.main_window")
    if app is None or main_window is None:
        return
    free_deleted_widgets()
    left = [w for w in app.topLevelWidgets() if isinstance(w, main_window.MainWindow)]
    for w in left:  # closed already (a second close could touch what the first one shut down): deleted only
        w.model.shutdown(5000)
        w.deleteLater()
    if left:
        free_deleted_widgets()


@pytest.fixture
def window(qtbot):
    """A shown main window; its model's threads are stopped afterwards.

    Earlier tests' Qt objects are collected here, on the GUI thread: left to Python's automatic
    collection they could be destroyed in another thread (e.g. a Dask client's IO loop), where
    PySide's destructor and the GUI thread can deadlock on the GIL and a Qt mutex.
    """
    from iastudio.app.main_window import MainWindow

    gc.collect()
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    yield w
    w.model.shutdown(5000)


@pytest.fixture(scope="module")
def module_window(qapp, home):
    """One shown main window for a module's tests (a new one costs 1-2 s of CPU); take it as ``shared_window``.

    A module opts in by defining ``window`` as ``shared_window``; its tests then share this module's home.
    """
    from iastudio.app.main_window import MainWindow

    gc.collect()
    w = MainWindow()
    w.show()
    first = (w.run_panel.settings_state(), w.run_panel.size.value(), w.transform_panel.seed.value())
    yield w, first
    dispose(w)


@pytest.fixture
def shared_window(module_window, qtbot):
    """The module's window, put back as a new one shows itself: no images, no run, the first settings."""
    w, (state, size, seed) = module_window
    m, session = w.model, w.model.session
    m.stop()
    qtbot.waitUntil(lambda: not session.busy and not m.loading, timeout=30000)
    session.close()  # the Dask clients a test opened
    assert session.clear()
    w.run_panel.restore_settings(state)
    w.run_panel.size.setValue(size)
    w.run_panel.dask.setText("")
    w.transform_panel.seed.setValue(seed)
    if w.last_dialog is not None:
        w.last_dialog.close()
        w.last_dialog = None
    assert session.n == 0
    assert session.state == "idle"
    assert session.final is None
    return w


@pytest.fixture
def gpu():
    """The CuPy backend on a working CUDA device; the test is skipped (saying why) where there is none."""
    from iastudio.core.backend import BackendUnavailableError, get_backend

    try:
        return get_backend("cupy")
    except BackendUnavailableError as exc:
        pytest.skip(f"no GPU: {exc}")


@pytest.fixture(scope="module")
def run_win(qapp, home):
    """A window with a finished (quick) IA run on the demo shapes (24 px, one iteration)."""
    from _qt import wait_until

    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    w.resize(1280, 800)
    w.show()
    w.model.session.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.run_panel.iterations.setValue(1)
    w.start_run()
    wait_until(qapp, lambda: w.model.session.state in ("finished", "failed"))
    assert w.model.session.state == "finished"
    w.redraw()
    qapp.processEvents()
    yield w
    w.close()
