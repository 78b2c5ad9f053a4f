"""A reopened project whose run denoised its images reads its original files again at the first input change:
in a worker thread behind the loading dialog, never on the GUI thread (pytest-qt).

The project embeds the denoised images; a new working size, a run without the denoiser, ... want the
originals.  The decoder is replaced by one that records its threads and blocks on one file until the test
releases it (at most 10 s, so that a reading on the GUI thread fails instead of hanging).
"""
import os
import threading
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402
from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QPushButton  # noqa: E402
from test_session_denoise import RUN, _as_files, _noisy_set  # noqa: E402

import iastudio.app.main_window  # noqa: E402,F401  (imported first: conftest answers the app's questions)
import iastudio.core.imageset as imageset_module  # noqa: E402
import iastudio.core.session_inputs as inputs_module  # noqa: E402
from iastudio.core.imageset import load_images  # noqa: E402
from iastudio.core.preprocess import preprocess  # noqa: E402
from iastudio.core.session import Session  # noqa: E402

WAIT_MS = 30000
SLOW = "p03.png"


@pytest.fixture
def window(shared_window):
    return shared_window


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """``(path, folder, previews)``: a saved project whose run denoised its 12 images (it embeds them),
    the folder of its original files, and their previews at 32 px."""
    tmp = tmp_path_factory.mktemp("denoised")
    data, _ = _noisy_set(n=12, seed=10)
    folder = _as_files(data, tmp / "originals")
    live = Session(size=32)
    live.add_paths([str(folder)])
    previews = live.base.copy()
    assert live.run_here(backend="numpy", denoise="on", **RUN) is not None
    path = tmp / "denoised.iaproj"
    live.save_project(path)
    return path, folder, previews


class Decoder:
    """Replaces the decoder of image files: records the threads it runs in; ``SLOW`` blocks until released,
    a file named in ``gone`` cannot be read."""

    def __init__(self, monkeypatch, gone=()):
        self.entered, self.release = threading.Event(), threading.Event()
        self.threads = set()
        real = imageset_module.load_image

        def decode(path):
            self.threads.add(threading.get_ident())
            if Path(path).name == SLOW:
                self.entered.set()
                self.release.wait(10)
            if Path(path).name in gone:
                raise OSError("gone")
            return real(path)

        monkeypatch.setattr(imageset_module, "load_image", decode)  # where load_images reads
        monkeypatch.setattr(inputs_module, "load_image", decode)  # where read_images reads


def _reopen(window, project):
    path, _, previews = project
    assert window.projects.open_project(str(path), ask=False)
    s = window.model.session
    assert s.opened_denoised
    assert s.final is not None
    denoised = s.base.copy()
    assert not np.allclose(denoised, previews, atol=1e-3)  # the thumbnails show the denoised images
    return s, denoised


def _blocked_dialog(window, qtbot, decoder):
    qtbot.waitUntil(decoder.entered.is_set, timeout=WAIT_MS)
    dlg = window.loading_dialog
    assert dlg is not None
    qtbot.waitUntil(dlg.isVisible, timeout=WAIT_MS)  # shown (after its delay) while the worker is stuck
    assert window.model.loading
    return dlg


def test_a_new_working_size_reads_the_originals_in_a_worker_behind_the_dialog(window, qtbot, project, monkeypatch):
    s, denoised = _reopen(window, project)
    gui = threading.get_ident()
    decoder = Decoder(monkeypatch)
    ticks = [0]
    timer = QTimer(window)
    timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    timer.start(10)

    window.run_panel.size.setValue(40)  # the user types a new working size
    dlg = _blocked_dialog(window, qtbot, decoder)
    assert "Reading p03.png (4 of 12)" in dlg.labelText()
    start = ticks[0]
    qtbot.waitUntil(lambda: ticks[0] >= start + 20, timeout=WAIT_MS)  # the window goes on while a file is read
    assert s.size == 32
    assert s.final is not None
    assert_allclose(window.images_panel.thumbs.images, denoised)
    with qtbot.waitSignal(window.model.originalsRead, timeout=WAIT_MS) as read:
        decoder.release.set()
    timer.stop()

    assert read.args == [True]
    assert decoder.threads
    assert gui not in decoder.threads
    assert window.loading_dialog is None
    assert not window.model.loading
    assert s.size == 40
    assert s.final is None
    assert not s.opened_denoised
    expected = preprocess(load_images(s.data.paths).images, size=40).images  # the originals, at the new size
    assert_allclose(s.base, expected, atol=1e-6)
    assert_allclose(window.images_panel.thumbs.images, expected, atol=1e-6)  # what the thumbnails draw
    assert window.run_panel.size.value() == 40


def test_cancel_keeps_the_embedded_images_and_the_run(window, qtbot, project, monkeypatch):
    s, denoised = _reopen(window, project)
    final = s.final
    decoder = Decoder(monkeypatch)
    messages = []
    s.events.message.connect(messages.append)

    window.run_panel.size.setValue(40)
    dlg = _blocked_dialog(window, qtbot, decoder)
    dlg.findChild(QPushButton).click()  # the user presses Cancel while a file is read
    with qtbot.waitSignal(window.model.originalsRead, timeout=WAIT_MS) as read:
        decoder.release.set()

    assert read.args == [False]
    assert messages[-1].startswith("Cancelled: nothing changed")
    assert window.statusBar().currentMessage() == messages[-1]
    assert window.loading_dialog is None
    assert not window.model.loading
    assert s.size == 32
    assert window.run_panel.size.value() == 32
    assert s.final is final
    assert s.embedded
    assert s.opened_denoised
    assert_allclose(s.base, denoised)
    assert_allclose(window.images_panel.thumbs.images, denoised)
    assert s.originals_to_read == list(s.data.paths)  # the next change reads them again


def test_a_run_without_the_denoiser_starts_on_the_originals_read_in_a_worker(window, qtbot, project, monkeypatch):
    s, _ = _reopen(window, project)
    previews = project[2]
    gui = threading.get_ident()
    decoder = Decoder(monkeypatch)
    decoder.release.set()
    rp = window.run_panel
    rp.denoise.setCurrentIndex(rp.denoise.findData("off"))
    rp.iterations.setValue(1)
    rp.clusters_auto.setChecked(False)
    rp.clusters.setValue(3)
    with qtbot.waitSignal(s.events.finished, timeout=60000):
        assert window.start_run()
    assert decoder.threads
    assert gui not in decoder.threads
    assert not s.opened_denoised
    assert not s.embedded
    assert_allclose(s.run._host_inputs, previews, atol=1e-6)  # it ran on the originals' previews


def test_originals_not_all_read_say_so_and_the_change_goes_on(window, qtbot, project, monkeypatch):
    s, _denoised = _reopen(window, project)
    gui = threading.get_ident()
    decoder = Decoder(monkeypatch, gone={"p05.png"})  # one original file cannot be read any more
    decoder.release.set()
    with qtbot.waitSignal(window.model.originalsRead, timeout=WAIT_MS):
        window.run_panel.size.setValue(40)
    assert decoder.threads
    assert gui not in decoder.threads
    assert s.size == 40
    assert s.final is None
    assert s.embedded
    assert not s.opened_denoised
    assert window.statusBar().currentMessage().startswith("The thumbnails still show the run's denoised images")


def test_images_added_are_read_then_the_originals_then_the_set_changes(window, qtbot, project, monkeypatch, tmp_path):
    from PIL import Image

    s, _ = _reopen(window, project)
    previews = project[2]
    gui = threading.get_ident()
    decoder = Decoder(monkeypatch)
    extra = tmp_path / "extra.png"
    Image.fromarray((np.random.default_rng(1).random((32, 32)) * 255).astype(np.uint8)).save(extra)

    assert window.load_paths([extra])
    dlg = _blocked_dialog(window, qtbot, decoder)  # the originals, read behind the same dialog
    assert "Reading p03.png (4 of 12)" in dlg.labelText()
    assert s.n == 12
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=WAIT_MS):
        decoder.release.set()
    assert gui not in decoder.threads
    assert window.loading_dialog is None
    assert s.n == 13
    assert not s.opened_denoised
    assert_allclose(s.base[:12], previews, atol=1e-6)  # the originals' previews, and the image added
    assert_allclose(window.images_panel.thumbs.images[:12], previews, atol=1e-6)
