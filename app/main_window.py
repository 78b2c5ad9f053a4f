"""The main window: panels on the left, live views on the right, menus on top."""
from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QProgressDialog,
    QPushButton,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from iastudio.core import __version__
from iastudio.core.clusterbook import UNASSIGNED
from iastudio.core.logs import log_dir
from iastudio.core.project import ProjectError

from .model import StudioModel, gpu_status
from .panels import ClustersPanel, ImageSetPanel, RunPanel, TransformPanel
from .views import CompareView, ConvergenceView, InspectView, MeansView, WeightsView

log = logging.getLogger(__name__)
REDRAW_MS = 33  # at most ~30 redraws a second; the latest frame wins
AUTOSAVE_MS = 3 * 60 * 1000
APP_NAME = "Invariant Attention Studio"
MAX_RECENT = 8


def app_home() -> Path:
    """Settings, autosave, the recovery lock and logs (``$IA_STUDIO_HOME``; see :mod:`iastudio.app.home`)."""
    from .home import app_home as home

    return home()


def settings() -> QSettings:
    return QSettings(str(app_home() / "settings.ini"), QSettings.Format.IniFormat)


def about_text(model: StudioModel) -> str:
    import numpy
    import PySide6
    from PySide6.QtCore import qVersion

    try:
        import cupy

        cupy_v = cupy.__version__
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        cupy_v = "not installed"
    ok, reason = gpu_status()
    backend = model.run.backend.describe() if model.run is not None else ("cupy" if ok else "numpy (CPU)")
    lines = [
        f"{APP_NAME} {__version__}",
        f"Python {platform.python_version()} ({sys.platform})",
        f"Qt {qVersion()}, PySide6 {PySide6.__version__}",
        f"NumPy {numpy.__version__}",
        f"CuPy {cupy_v}",
        f"Backend: {backend}",
        f"GPU: {reason if ok else 'none — running on the CPU (' + reason + ')'}",
        f"Logs: {log_dir()}",
        "Nothing is downloaded or sent anywhere.",
    ]
    return "\n".join(lines)


class MainWindow(QMainWindow):
    def __init__(self, model: StudioModel | None = None, *, recover: bool = False):
        super().__init__()
        self.setWindowTitle(f"{APP_NAME} {__version__}")
        self.resize(1280, 800)
        self.setAcceptDrops(True)
        self.model = model or StudioModel(self)
        gpu_ok, gpu_reason = gpu_status()
        self.images_panel = ImageSetPanel()
        self.transform_panel = TransformPanel()
        self.run_panel = RunPanel(gpu_ok, gpu_reason)
        self.clusters_panel = ClustersPanel()
        self.weights_view = WeightsView()
        self.means_view = MeansView()
        self.convergence_view = ConvergenceView()
        self.compare_view = CompareView()
        self.inspect_view = InspectView()
        self.last_dialog: QMessageBox | None = None
        self.redraws = 0
        self._drawn = None
        self._build_layout()
        self._build_menus()
        self._connect()
        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()
        self.autosave_timer = QTimer(self)
        self.autosave_timer.setInterval(AUTOSAVE_MS)
        self.autosave_timer.timeout.connect(self.autosave)
        self.autosave_timer.start()
        self.statusBar().showMessage("Ready. Open a folder, drop images here, or pick a demo.")
        geom = settings().value("window/geometry")
        if geom is not None:
            self.restoreGeometry(geom)
        self.remove_stale_saves()
        self._lock = app_home() / "session.lock"
        crashed = self._lock.exists()
        self._lock.write_text(str(os.getpid()))
        if recover and crashed and self.autosave_path().exists():
            QTimer.singleShot(0, self.offer_recovery)
        self._update_title()
        from .wiring import install_ui_extras

        install_ui_extras(self)  # empty states, menus' enabled state, context menus, fit to the screen

    # ------------------------------------------------------------ layout
    def _build_layout(self):
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.images_panel)
        controls = QTabWidget()
        controls.addTab(self.run_panel, "Run")
        controls.addTab(self.transform_panel, "Transforms")
        controls.addTab(self.clusters_panel, "Clusters")
        self.controls = controls
        left.addWidget(controls)
        left.setSizes([330, 470])
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.weights_view)
        top.addWidget(self.means_view)
        bottom = QTabWidget()
        bottom.addTab(self.convergence_view, "Manifold convergence")
        bottom.addTab(self.compare_view, "KA vs IA")
        bottom.addTab(self.inspect_view, "Inspect")
        from .nets_panel import NetsPanel  # the Networks panel (PyTorch optional)

        self.nets_panel = NetsPanel(lambda: self.model.data)
        bottom.addTab(self.nets_panel, "Networks")
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

    def _action(self, menu, text, slot, shortcut=None):
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_menus(self):
        m = self.model
        bar = self.menuBar()
        f = bar.addMenu("&File")
        self._action(f, "Open folder…", self.open_folder, QKeySequence.StandardKey.Open)
        self._action(f, "Add files…", self.add_files, "Ctrl+Shift+A")
        f.addSeparator()
        self._action(f, "Open project…", self.open_project_dialog, "Ctrl+Shift+O")
        self.save_action = self._action(f, "Save project", self.save, QKeySequence.StandardKey.Save)
        self._action(f, "Save project as…", self.save_as, QKeySequence.StandardKey.SaveAs)
        self.recent_projects_menu = f.addMenu("Recent projects")
        self.recent_folders_menu = f.addMenu("Recent folders")
        f.addSeparator()
        ex = f.addMenu("Export")
        self._action(ex, "Assignments (CSV)…", self.export_csv, "Ctrl+E")
        self._action(ex, "Cluster folders (original images)…", lambda: self.export_folders(False))
        self._action(ex, "Cluster folders (aligned images)…", lambda: self.export_folders(True))
        self._action(ex, "Panels as PNG and SVG…", self.export_panels)
        self._action(ex, "Convergence animation (GIF)…", self.export_gif)
        f.addSeparator()
        self._action(f, "Quit", self.close, QKeySequence.StandardKey.Quit)
        e = bar.addMenu("&Edit")
        self.undo_action = self._action(e, "Undo", m.undo, "Ctrl+Z")
        self.redo_action = self._action(e, "Redo", m.redo, "Ctrl+Shift+Z")
        self.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        m.historyChanged.connect(self._history_changed)
        self._history_changed()
        r = bar.addMenu("&Run")
        self.start_action = self._action(r, "Start", self.start_run, "Ctrl+R")
        self.stop_action = self._action(r, "Stop", m.stop, "Ctrl+.")
        self.resume_action = self._action(r, "Resume", m.resume, "Ctrl+Shift+R")
        h = bar.addMenu("&Help")
        self._action(h, "About", self.show_about)
        self._action(h, "Open log folder", self.open_log_folder)
        from .help import add_help_actions
        from .layout import add_view_menu

        add_help_actions(self, h)  # F1: quick start; keyboard shortcuts
        add_view_menu(self, before=h.menuAction())  # View → Presentation mode
        self._refresh_recent()

    def _connect(self):
        m = self.model
        self.images_panel.openFolder.connect(self.open_folder)
        self.images_panel.addFiles.connect(self.add_files)
        self.images_panel.demoChosen.connect(lambda name: m.load_demo(name))
        self.images_panel.detailsRequested.connect(self.show_skipped)
        self.images_panel.view.selectionModel().selectionChanged.connect(self._thumb_selection)
        self.transform_panel.applyRandom.connect(
            lambda r, s, seed: m.apply_random_transforms(rotation_deg=r, shift_percent=s, seed=seed))
        self.transform_panel.reset.connect(m.reset_transforms)
        self.transform_panel.imageTransformChanged.connect(self._set_image_transform)
        self.transform_panel.show_original.toggled.connect(lambda _: self._update_preview())
        self.run_panel.startRequested.connect(self.start_run)
        self.run_panel.stopRequested.connect(m.stop)
        self.run_panel.resumeRequested.connect(m.resume)
        self.run_panel.size.valueChanged.connect(m.set_size)
        cp = self.clusters_panel
        cp.list.imagesDropped.connect(self.move_images)
        cp.renameRequested.connect(self.rename_cluster)
        cp.mergeRequested.connect(self.merge_clusters)
        cp.splitRequested.connect(self.split_cluster)
        cp.rerunRequested.connect(m.split_by_rerun)
        cp.newFromSelection.connect(self.new_cluster_from_selection)
        cp.unassignSelection.connect(lambda: self.move_images(m.selection, UNASSIGNED))
        cp.clusterSelected.connect(m.select_cluster)
        cp.rereadK.connect(lambda k: m.reread(k=k))
        cp.rereadThreshold.connect(lambda t: m.reread(threshold=t))
        self.convergence_view.pointClicked.connect(m.select)
        self.weights_view.cellClicked.connect(self.inspect_pair)
        self.means_view.tileClicked.connect(m.select)
        self.means_view.clusterClicked.connect(self._select_cluster_of_label)
        m.imagesChanged.connect(self._images_changed)
        m.transformsChanged.connect(self._transforms_changed)
        m.selectionChanged.connect(self._selection_changed)
        m.clustersChanged.connect(self._clusters_changed)
        m.inspectReady.connect(self._show_inspect)
        m.projectChanged.connect(self._update_title)
        m.message.connect(lambda text: self.statusBar().showMessage(text, 15000))
        m.runStateChanged.connect(self.run_panel.set_state)
        m.progressChanged.connect(self.run_panel.set_progress)
        m.runFinished.connect(self._finished)
        m.runFailed.connect(self._failed)

    def _update_title(self):
        m = self.model
        name = Path(m.project_path).name if m.project_path else "untitled"
        star = "*" if m.dirty and m.n else ""
        self.setWindowTitle(f"{APP_NAME} {__version__} — {name}{star}")

    # ------------------------------------------------------------ images
    def load_paths(self, paths):
        """Load files/folders with a progress dialog (Cancel keeps what was read)."""
        dlg, step = self._progress("Loading images…", 0)
        try:
            return self.model.add_paths(paths, progress=step)
        finally:
            dlg.close()

    def open_folder(self, folder=None):
        folder = folder or QFileDialog.getExistingDirectory(self, "Open a folder of images")
        if folder:
            self.model.clear()
            self.load_paths([folder])
            self._remember("recent/folders", folder)

    def add_files(self):
        files, _ = QFileDialog.getOpenFileNames(
            self, "Add images", "", "Images (*.png *.jpg *.jpeg *.tif *.tiff *.bmp);;All files (*)")
        if files:
            self.load_paths(files)

    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event):
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.load_paths(paths)
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
        if self.run_panel.size.value() != m.size:
            self.run_panel.size.blockSignals(True)
            self.run_panel.size.setValue(m.size)
            self.run_panel.size.blockSignals(False)

    def _transforms_changed(self):
        self.images_panel.thumbs.update_images(self.model.working)
        if self.model.book is not None:
            self.images_panel.thumbs.set_labels(self.model.book.labels)
        self._update_preview()

    def _thumb_selection(self, *_):
        rows = sorted(i.row() for i in self.images_panel.view.selectionModel().selectedIndexes())
        self.model.select(rows)
        if len(rows) == 2:
            self.inspect_pair(rows[0], rows[1])

    def _selection_changed(self, sel):
        m = self.model
        view = self.images_panel.view
        current = sorted(i.row() for i in view.selectionModel().selectedIndexes())
        if current != sorted(sel):
            from PySide6.QtCore import QItemSelection, QItemSelectionModel

            qs = QItemSelection()
            for i in sel:
                idx = self.images_panel.thumbs.index(i)
                qs.select(idx, idx)
            view.selectionModel().blockSignals(True)
            view.selectionModel().select(qs, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            view.selectionModel().blockSignals(False)
            view.viewport().update()
            if sel:
                view.scrollTo(self.images_panel.thumbs.index(sel[0]))
        self.convergence_view.select(sel)
        self.weights_view.set_selection(sel)
        self.means_view.set_selection(sel, None if m.book is None else np.asarray(m.book.labels))
        if len(sel) >= 1:
            i = sel[0]
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

    # ------------------------------------------------------------ clusters
    def _clusters_changed(self):
        m = self.model
        book = m.book
        self.images_panel.thumbs.set_labels(None if book is None else book.labels)
        means = {}
        if book is not None and m.final is not None:
            res = m.final.result
            for c in book.cluster_ids():
                members = book.members(c)
                if res is not None and c < len(res.cluster_means) and (res.labels[members] == c).all():
                    means[c] = res.cluster_means[c]
                else:
                    means[c] = m.working[members[0]]
        self.clusters_panel.set_book(book, means)
        self._update_title()

    def move_images(self, indices, cluster):
        self.model.move_images(indices, cluster)

    def rename_cluster(self, cluster, name=None):
        m = self.model
        if m.book is None:
            return
        if name is None:
            name, ok = QInputDialog.getText(self, "Rename cluster", "New name:", text=m.book.name_of(cluster))
            if not ok:
                return
        m.rename_cluster(cluster, name)

    def merge_clusters(self, clusters):
        self.model.merge_clusters(clusters)

    def split_cluster(self, cluster, k):
        self.model.split_cluster(cluster, k)

    def new_cluster_from_selection(self):
        self.model.new_cluster_from_selection()

    def _history_changed(self):
        h = self.model.history
        for act, can, text, verb in ((self.undo_action, h.can_undo, h.undo_text, "Undo"),
                                     (self.redo_action, h.can_redo, h.redo_text, "Redo")):
            act.setEnabled(can)
            act.setText(f"{verb} {text}" if can else verb)

    def _select_cluster_of_label(self, label):
        m = self.model
        lab = m.latest.snapshot.labels if m.latest is not None else None
        if lab is not None:
            m.select(np.flatnonzero(lab == label).tolist())

    def inspect_pair(self, i, j):
        self.model.select([i, j] if i != j else [i])
        self.model.inspect(i, j)

    def _show_inspect(self, info):
        self.inspect_view.show_pair(info)
        self.bottom_tabs.setCurrentWidget(self.inspect_view)

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
        self.convergence_view.select(self.model.selection)
        self.redraws += 1

    def _finished(self, frame):
        self.redraw()
        self.clusters_panel.show_evidence(frame.result, self.model.data.paths)
        labels = self.model.data.labels if self.model.data.has_labels else None
        self.compare_view.show_final(frame, labels)
        self.autosave()

    def _failed(self, message, tb):
        from .errors import show_error

        log.error("run failed: %s\n%s", message, tb)
        self.last_dialog = show_error("The run failed", message, tb, parent=self)

    def _dialog(self, icon, title, text, details=""):
        box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, self)
        if details:
            box.setDetailedText(details)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()  # not blocking: the run and the views go on
        self.last_dialog = box
        return box

    # ------------------------------------------------------------ projects
    def autosave_path(self) -> Path:
        return app_home() / "autosave" / "autosave.iaproj"

    def autosave(self):
        try:
            if self.model.autosave(self.autosave_path()):
                log.info("autosaved to %s", self.autosave_path())
        except Exception:  # noqa: BLE001 - autosave must never disturb the user
            log.exception("autosave failed")

    def remove_stale_saves(self) -> list:
        """Remove what killed saves left beside the autosave and the recent projects."""
        from iastudio.core.atomic import remove_stale_temporaries

        removed = []
        folders = {self.autosave_path().parent} | {Path(p).parent for p in self.recent("recent/projects")}
        for folder in folders:
            try:
                removed += remove_stale_temporaries(folder)
            except Exception:  # noqa: BLE001 - cleaning must never stop the start
                log.exception("cleaning %s failed", folder)
        if removed:
            log.info("removed %d temporary file(s) left by interrupted saves: %s", len(removed), removed)
        return removed

    def offer_recovery(self):
        box = QMessageBox(QMessageBox.Icon.Question, "Recover your work?",
                          "The last session did not close normally. Open the automatically saved copy?",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        self.last_dialog = box
        if box.exec() == QMessageBox.StandardButton.Yes and self.open_project(self.autosave_path(),
                                                                             remember=False):
            self.model.session.adopt_as_untitled()

    def open_project_dialog(self):
        path, _ = QFileDialog.getOpenFileName(self, "Open project", "", "Projects (*.iaproj)")
        if path:
            self.open_project(path)

    def open_project(self, path, *, remember=True) -> bool:
        try:
            proj = self.model.open_project(path)
        except ProjectError as exc:
            self._dialog(QMessageBox.Icon.Warning, "Cannot open the project", str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the session stays as it was; the log has the traceback
            log.exception("opening %s failed", path)
            self._dialog(QMessageBox.Icon.Warning, "Cannot open the project",
                         f"{path}: cannot be opened ({type(exc).__name__}); the log is in {log_dir()}")
            return False
        if remember:
            self._remember("recent/projects", str(path))
        if getattr(proj, "missing", None):
            self._dialog(QMessageBox.Icon.Information, "Originals moved",
                         f"{len(proj.missing)} original file(s) are missing; the project opened from its "
                         "embedded images.", "\n".join(proj.missing))
        return True

    def save(self):
        if self.model.project_path:
            return self._save_to(self.model.project_path)
        return self.save_as()

    def save_as(self):
        path, _ = QFileDialog.getSaveFileName(self, "Save project", "untitled.iaproj", "Projects (*.iaproj)")
        if not path:
            return False
        if not path.endswith(".iaproj"):
            path += ".iaproj"
        return self._save_to(path)

    def _save_to(self, path):
        try:
            self.model.save_project(path)
        except OSError as exc:
            self._dialog(QMessageBox.Icon.Warning, "Cannot save", f"{path}: {exc}")
            return False
        self._remember("recent/projects", str(path))
        return True

    def _remember(self, key, value):
        s = settings()
        items = [v for v in self.recent(key) if v != value]  # one stored entry comes back as a plain str
        s.setValue(key, [value] + items[:MAX_RECENT - 1])
        self._refresh_recent()

    def recent(self, key) -> list[str]:
        v = settings().value(key) or []
        return [v] if isinstance(v, str) else list(v)

    def _refresh_recent(self):
        for menu, key, fn in ((self.recent_projects_menu, "recent/projects", self.open_project),
                              (self.recent_folders_menu, "recent/folders", self.open_folder)):
            menu.clear()
            items = self.recent(key)
            for path in items:
                act = menu.addAction(path)
                act.triggered.connect(lambda _=False, p=path, f=fn: f(p))
            menu.setEnabled(bool(items))

    # ------------------------------------------------------------ exports
    def _need_result(self) -> bool:
        if self.model.book is None or self.model.final is None:
            self._dialog(QMessageBox.Icon.Information, "Nothing to export yet", "Run the clustering first.")
            return False
        return True

    def export_csv(self, path=None):
        from .export import export_assignments

        if not self._need_result():
            return None
        path = path or QFileDialog.getSaveFileName(self, "Export assignments", "assignments.csv", "CSV (*.csv)")[0]
        if path:
            export_assignments(self.model, path)
            self.model.message.emit(f"Exported {path}")
        return path

    def _progress(self, title, total):
        dlg = QProgressDialog(title, "Cancel", 0, total, self)
        dlg.setWindowModality(Qt.WindowModality.WindowModal)
        dlg.setMinimumDuration(500)

        def step(done, tot):
            dlg.setMaximum(tot)
            dlg.setValue(done)
            QGuiApplication.processEvents()
            return not dlg.wasCanceled()

        return dlg, step

    def export_folders(self, aligned, folder=None):
        from .export import export_cluster_folders

        if not self._need_result():
            return None
        folder = folder or QFileDialog.getExistingDirectory(self, "Export cluster folders into")
        if folder:
            dlg, step = self._progress("Exporting cluster folders…", self.model.n)
            export_cluster_folders(self.model, folder, aligned=aligned, progress=step)
            dlg.close()
            self.model.message.emit(f"Exported cluster folders to {folder}")
        return folder

    def export_panels(self, folder=None):
        from .export import export_panels

        folder = folder or QFileDialog.getExistingDirectory(self, "Export panels into")
        if folder:
            files = export_panels(self, folder)
            self.model.message.emit(f"Exported {len(files)} files to {folder}")
        return folder

    def export_gif(self, path=None):
        from .export import export_gif

        if not self.model.history_frames:
            self._dialog(QMessageBox.Icon.Information, "Nothing to export yet", "Run the clustering first.")
            return None
        path = path or QFileDialog.getSaveFileName(self, "Export animation", "convergence.gif", "GIF (*.gif)")[0]
        if path:
            dlg, step = self._progress("Rendering the animation…", len(self.model.history_frames))
            export_gif(self.model, path, progress=step)
            dlg.close()
            self.model.message.emit(f"Exported {path}")
        return path

    # ------------------------------------------------------------ help
    def show_about(self):
        dlg = QDialog(self)
        dlg.setWindowTitle(f"About {APP_NAME}")
        lay = QVBoxLayout(dlg)
        text = QTextBrowser()
        text.setPlainText(about_text(self.model))
        lay.addWidget(text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = QPushButton("Copy to clipboard")
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(text.toPlainText()))
        buttons.rejected.connect(dlg.close)
        lay.addWidget(buttons)
        dlg.resize(520, 320)
        dlg.open()
        self.about_dialog = dlg
        return dlg

    def open_log_folder(self):
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_dir())))

    def closeEvent(self, event):
        self.timer.stop()
        self.autosave_timer.stop()
        self.model.shutdown()
        self.nets_panel.shutdown()
        settings().setValue("window/geometry", self.saveGeometry())
        try:
            self._lock.unlink(missing_ok=True)
        except OSError:
            pass
        super().closeEvent(event)
