"""The main window: panels on the left, live views on the right."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFileDialog, QHBoxLayout, QMainWindow, QMessageBox, QSplitter, QTabWidget, QWidget,
)

from core import __version__
from core.logs import log_dir

from .model import StudioModel, gpu_status
from .panels import ImageSetPanel, RunPanel, TransformPanel
from .views import CompareView, ConvergenceView, MeansView, WeightsView

log = logging.getLogger(__name__)
REDRAW_MS = 33  # at most ~30 redraws a second; the latest frame wins

APP_NAME = "Invariant Attention Studio"


class MainWindow(QMainWindow):
    def __init__(self, model: StudioModel | None = None):
        super().__init__()
        self.setWindowTitle(f"{APP_NAME} {__version__}")
        self.resize(1280, 800)
        self.setAcceptDrops(True)
        self.model = model or StudioModel(self)
        gpu_ok, gpu_reason = gpu_status()
        self.images_panel = ImageSetPanel()
        self.transform_panel = TransformPanel()
        self.run_panel = RunPanel(gpu_ok, gpu_reason)
        self.weights_view = WeightsView()
        self.means_view = MeansView()
        self.convergence_view = ConvergenceView()
        self.compare_view = CompareView()
        self.last_dialog: QMessageBox | None = None
        self.redraws = 0
        self._drawn = None

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.images_panel)
        controls = QTabWidget()
        controls.addTab(self.run_panel, "Run")
        controls.addTab(self.transform_panel, "Transforms")
        self.controls = controls
        left.addWidget(controls)
        left.setSizes([330, 470])
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.weights_view)
        top.addWidget(self.means_view)
        bottom = QTabWidget()
        bottom.addTab(self.convergence_view, "Manifold convergence")
        bottom.addTab(self.compare_view, "KA vs IA")
        self.bottom_tabs = bottom
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(top)
        right.addWidget(bottom)
        right.setSizes([420, 380])
        central = QWidget()
        lay = QHBoxLayout(central)
        lay.setContentsMargins(4, 4, 4, 4)
        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setSizes([370, 910])
        lay.addWidget(main)
        self.setCentralWidget(central)
        self.statusBar().showMessage("Ready. Open a folder, drop images here, or pick a demo.")

        m = self.model
        self.images_panel.openFolder.connect(self.open_folder)
        self.images_panel.addFiles.connect(self.add_files)
        self.images_panel.demoChosen.connect(lambda name: m.load_demo(name))
        self.images_panel.detailsRequested.connect(self.show_skipped)
        self.images_panel.view.selectionModel().currentChanged.connect(lambda cur, _: m.select(cur.row()))
        self.transform_panel.applyRandom.connect(
            lambda r, s, seed: m.apply_random_transforms(rotation_deg=r, shift_percent=s, seed=seed))
        self.transform_panel.reset.connect(m.reset_transforms)
        self.transform_panel.imageTransformChanged.connect(self._set_image_transform)
        self.transform_panel.show_original.toggled.connect(lambda _: self._update_preview())
        self.run_panel.startRequested.connect(self.start_run)
        self.run_panel.stopRequested.connect(m.stop)
        self.run_panel.resumeRequested.connect(m.resume)
        self.run_panel.size.valueChanged.connect(m.set_size)
        self.convergence_view.pointClicked.connect(m.select)
        m.imagesChanged.connect(self._images_changed)
        m.transformsChanged.connect(self._transforms_changed)
        m.selectionChanged.connect(self._selection_changed)
        m.message.connect(lambda text: self.statusBar().showMessage(text, 15000))
        m.runStateChanged.connect(self.run_panel.set_state)
        m.progressChanged.connect(self.run_panel.set_progress)
        m.runFinished.connect(self._finished)
        m.runFailed.connect(self._failed)
        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()

    # ------------------------------------------------------------ images
    def open_folder(self):
        folder = QFileDialog.getExistingDirectory(self, "Open a folder of images")
        if folder:
            self.model.clear()
            self.model.add_paths([folder])

    def add_files(self):
        files, _ = QFileDialog.getOpenFileNames(
            self, "Add images", "", "Images (*.png *.jpg *.jpeg *.tif *.tiff *.bmp);;All files (*)")
        if files:
            self.model.add_paths(files)

    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event):
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.model.add_paths(paths)
            event.acceptProposedAction()

    def show_skipped(self):
        skipped = self.model.data.skipped
        text = "\n".join(f"{s['path']}: {s['reason']}" for s in skipped) or "Nothing was skipped."
        self._dialog(QMessageBox.Icon.Information, "Skipped files", f"{len(skipped)} file(s) were skipped.", text)

    def _images_changed(self):
        m = self.model
        self.images_panel.thumbs.set_images(m.working, m.data.paths)
        self.images_panel.set_summary(m.data.summary() if m.n else "No images.", len(m.data.skipped))
        self.weights_view.set_names(m.data.paths)
        self.transform_panel.set_enabled_image(False)
        self.run_panel.clusters.setMaximum(max(1, m.n))

    def _transforms_changed(self):
        self.images_panel.thumbs.update_images(self.model.working)
        self._update_preview()

    def _selection_changed(self, i: int):
        m = self.model
        self.convergence_view.select(i)
        if 0 <= i < m.n:
            idx = self.images_panel.thumbs.index(i)
            if self.images_panel.view.currentIndex() != idx:
                self.images_panel.view.setCurrentIndex(idx)
            t = m.transforms[i]
            self.transform_panel.load_image(Path(m.data.paths[i]).name, float(np.rad2deg(t[0])),
                                            float(t[1]), float(t[2]))
            self._update_preview()

    def _set_image_transform(self, theta, tx, ty):
        if 0 <= self.model.selected < self.model.n:
            self.model.set_transform(self.model.selected, theta, tx, ty)

    def _update_preview(self):
        m = self.model
        if 0 <= m.selected < m.n:
            src = m.base if self.transform_panel.show_original.isChecked() else m.working
            self.transform_panel.set_preview(src[m.selected])

    # ------------------------------------------------------------ run
    def start_run(self):
        opts = self.run_panel.options()
        backend = self.run_panel.backend.currentData()
        if self.model.n < 2:
            self._dialog(QMessageBox.Icon.Warning, "Cannot start", "Add at least 2 images before starting a run.")
            return False
        self.compare_view.caption.setText("Running…")
        return self.model.start(backend=backend, **opts)

    def redraw(self):
        frame = self.model.latest
        if frame is None or frame is self._drawn:
            return
        self._drawn = frame
        self.weights_view.show_frame(frame)
        self.means_view.show_frame(frame)
        self.convergence_view.show_frame(frame)
        self.convergence_view.select(self.model.selected)
        self.redraws += 1

    def _finished(self, frame):
        self.redraw()
        labels = self.model.data.labels if self.model.data.has_labels else None
        self.compare_view.show_final(frame, labels)

    def _failed(self, message, tb):
        log.error("run failed: %s\n%s", message, tb)
        self._dialog(QMessageBox.Icon.Critical, "The run failed", message,
                     f"{tb}\n\nThe log is in {log_dir()}")

    def _dialog(self, icon, title, text, details=""):
        box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, self)
        if details:
            box.setDetailedText(details)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()  # not blocking: the run and the views go on
        self.last_dialog = box
        return box

    def closeEvent(self, event):
        self.timer.stop()
        self.model.shutdown()
        super().closeEvent(event)
