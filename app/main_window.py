"""The main window: W and the means in the middle, the other panels in docks around them, menus on top.

The window builds and wires; the state lives in the session (``model.session``, whose typed events the
views connect to) and :class:`~iastudio.app.model.StudioModel` drives its background work.
Its parts live beside it: :mod:`~iastudio.app.layout` (what goes where), :mod:`~iastudio.app.actions`
(menus), :mod:`~iastudio.app.projects` (open/save/autosave/recovery, asking before work is lost),
:mod:`~iastudio.app.export_actions` (File → Export) and :mod:`~iastudio.app.sync` (views follow the session's events).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMainWindow, QMessageBox

from iastudio.core import __version__
from iastudio.core.clusterbook import UNASSIGNED
from iastudio.core.filenames import display_name, printable
from iastudio.core.imageset import skipped_lines
from iastudio.core.logs import log_dir
from iastudio.core.wording import count_of

from .actions import build_menus
from .docks import restore_window, save_window
from .events import listen
from .export_actions import ExportActions, progress_dialog
from .help import APP_NAME, about_dialog
from .layout import build_central
from .model import StudioModel, gpu_status
from .panels import ClustersPanel, ImageSetPanel, RunPanel, TransformPanel
from .projects import CANCEL, ProjectController, settings, start_folder
from .remember import remember_run_settings, restore_run_settings
from .sync import ViewSync
from .views import CompareView, ConvergenceView, InspectView, MeansView, WeightsView

log = logging.getLogger(__name__)
REDRAW_MS = 33  # at most ~30 redraws a second; the latest frame wins


class MainWindow(QMainWindow):
    def __init__(self, model: StudioModel | None = None, *, recover: bool = False):
        super().__init__()
        self.setWindowTitle(f"{APP_NAME} {__version__}")
        self.resize(1280, 800)
        self.setAcceptDrops(True)
        self.model = model or StudioModel(self)
        self.last_dialog: QMessageBox | None = None
        self.loading_dialog = None  # the progress dialog while images load
        self.size_after_demo: int | None = None  # the user's working size, while Show me's demo set is loaded
        self._make_widgets()
        build_central(self)
        self.projects = ProjectController(self)
        self.model.confirm = self._confirm_loaded  # asked after reading, only when images come in
        self.exports = ExportActions(self)
        build_menus(self)
        self.sync = ViewSync(self)
        self._connect()
        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.sync.redraw)
        self.timer.start()
        self.statusBar().showMessage("Ready. Open a folder, drop images here, or pick a demo.")
        restore_window(self, settings())  # geometry and the docks' arrangement (a stale or damaged one ignored)
        restore_run_settings(self, settings())  # the Run panel as the user left it last time
        if recover and self.projects.crashed and self.projects.autosave_path().exists():
            QTimer.singleShot(0, self.projects.offer_recovery)
        self.update_title()
        from .wiring import install_ui_extras

        install_ui_extras(self)  # empty states, menus' enabled state, context menus, fit to the screen

    def _make_widgets(self) -> None:
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

    def _connect(self) -> None:
        m, ip, tp, rp, cp = self.model, self.images_panel, self.transform_panel, self.run_panel, self.clusters_panel
        ip.openFolder.connect(self.open_folder)
        ip.addFiles.connect(self.add_files)
        # Delete removes images only where thumbnails have the focus (not a cluster selected in its list)
        self.remove_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        ip.view.addAction(self.remove_action)
        ip.demoChosen.connect(self.load_demo)
        ip.detailsRequested.connect(self.show_skipped)
        tp.applyRandom.connect(lambda r, s, seed: self._changing_inputs(
            "Transforming the images",
            lambda: m.session.apply_random_transforms(rotation_deg=r, shift_percent=s, seed=seed)))
        tp.reset.connect(lambda: self._changing_inputs("Resetting the transforms", m.session.reset_transforms))
        tp.imageTransformChanged.connect(self._set_image_transform)
        rp.startRequested.connect(self.start_run)
        rp.stopRequested.connect(m.stop)
        rp.resumeRequested.connect(m.resume)
        for panel in (rp, cp, tp):  # a typed number that cannot be taken: why
            panel.refused.connect(lambda text: self.statusBar().showMessage(text, 15000))
            panel.taken.connect(lambda label: withdraw_refusal(self.statusBar(), label))
        rp.size.valueChanged.connect(self._set_size)  # once typing is finished (keyboard tracking is off)
        cp.list.imagesDropped.connect(m.session.move_images)
        cp.renameRequested.connect(self.rename_cluster)
        cp.mergeRequested.connect(m.session.merge_clusters)
        cp.splitRequested.connect(m.session.split_cluster)
        cp.rerunRequested.connect(m.split_by_rerun)
        cp.newFromSelection.connect(m.session.new_cluster_from_selection)
        cp.unassignSelection.connect(lambda: m.session.move_images(m.session.selection, UNASSIGNED))
        cp.clustersSelected.connect(m.session.select_clusters)
        cp.rereadK.connect(lambda k: m.session.reread(k=k))
        cp.rereadThreshold.connect(lambda t: m.session.reread(threshold=t))
        self.convergence_view.pointClicked.connect(m.session.select)
        self.weights_view.cellClicked.connect(self.inspect_pair)
        self.means_view.tileClicked.connect(m.session.select)
        self.means_view.clusterClicked.connect(self.sync.select_cluster_of_label)
        listen(m.session.events.project, self.update_title)
        listen(m.session.events.message, lambda text: self.statusBar().showMessage(text, 15000))
        listen(m.session.events.finished, lambda _f: self.projects.autosave())
        # a stopped run too (its frames and settings; a run resumes only in the session that stopped it)
        listen(m.session.events.state, lambda state: state == "stopped" and self.projects.autosave())
        listen(m.session.events.failed, self._failed)
        m.loadFailed.connect(lambda message, tb: self._failed(message, tb, "Loading the images failed"))
        # a reopened denoised project's originals, read before an input change (adding images: behind their dialog)
        m.originalsReading.connect(lambda: self.loading_dialog is None and show_loading(
            self, "Reading the project's original files…", m.originalsRead))

    @property
    def redraws(self) -> int:
        return self.sync.redraws

    def redraw(self) -> None:
        self.sync.redraw()

    def update_title(self) -> None:
        m = self.model
        name = Path(m.session.project_path).name if m.session.project_path else "untitled"
        star = "*" if m.session.dirty and m.session.n else ""
        self.setWindowTitle(f"{APP_NAME} {__version__} — {name}{star}")

    # ------------------------------------------------------------ what replaces the inputs asks first
    def _changing_inputs(self, action: str, change, *, replaces: bool = False, refused=None) -> bool:
        """Run ``change()`` if no unsaved result or edit would be lost, or the user agreed to lose them.

        ``replaces``: ``change`` replaces the whole set (unsaved changes to a project's images count too).
        A reopened project whose run denoised its images has its original files read first, behind a
        progress dialog (:meth:`StudioModel.after_originals`): True meanwhile, and ``change()`` runs once
        they are in.  ``refused()`` is called whenever the change does not happen (refused, cancelled).
        """
        if self.model.session.busy:
            self.model.session.message("Stop the run first.")
        elif not self.model.refuse_while_loading() and self.projects.confirm_discard(
                action, replaces=replaces, changes_inputs=not replaces):
            def go() -> bool:
                done = change() is not False
                if not done and refused is not None:
                    refused()
                return done

            return go() if replaces else self.model.after_originals(go, cancelled=refused)
        if refused is not None:
            refused()
        return False

    def load_demo(self, name: str) -> bool:
        return self._changing_inputs(
            "Loading the demo", lambda: self.model.session.load_demo(name, size=self.take_size_after_demo()),
            replaces=True)

    def remove_images(self, rows=None) -> bool:
        """Take the selected images (or ``rows``) out of the set, after asking (it cannot be undone)."""
        s = self.model.session
        rows = list(s.selection if rows is None else rows)
        if not rows:
            s.message("Select the images to remove first.")
            return False
        what = count_of(len(rows), "image")

        def remove():  # asks unless "Discard your work?" was just asked
            if not self.projects.asked and self.projects.ask(
                    self, "Remove images?", f"Remove {what} from the set?  Their files are not touched "
                    "(Add files… puts them back), but this cannot be undone.",
                    save_text="Remove", discard_text=None) == CANCEL:
                return False
            return s.remove_images(rows)

        return self._changing_inputs(f"Removing {what}", remove)

    def take_size_after_demo(self) -> int | None:
        """The working size the user had before *Show me* (its demo runs at its own size); once."""
        size, self.size_after_demo = self.size_after_demo, None
        return size

    def load_paths(self, paths, *, replace: bool = False, size: int | None = None) -> bool:
        """Load files/folders in a worker thread behind a progress dialog; False when refused.

        Returns at once; the images are in when ``model.imagesLoaded`` is emitted.  The window stays
        responsive meanwhile, and Cancel stops after the file being read, keeping what was read.
        """
        if not self.model.load_paths(paths, replace=replace, size=size):
            return False
        show_loading(self, "Loading images…", self.model.imagesLoaded)
        return True

    def _confirm_loaded(self, action: str, *, replaces: bool = False) -> bool:
        """The question once images were read: the loading dialog goes first (it would cover the question
        and, being modal, take its clicks)."""
        if self.loading_dialog is not None:
            self.loading_dialog.reset()  # hidden, and its own timer will not show it over the question
        return self.projects.confirm_discard(action, replaces=replaces, changes_inputs=not replaces)

    def open_folder(self, folder=None) -> None:
        folder = folder or QFileDialog.getExistingDirectory(self, "Open a folder of images",
                                                            start_folder(self.projects))
        # Read first: the question whether to discard a run comes only once images were found
        # (StudioModel.confirm); a folder without images changes nothing.
        if folder and self.load_paths([folder], replace=True, size=self.size_after_demo):
            self.size_after_demo = None
            self.projects.remember("recent/folders", folder)

    def add_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self, "Add images", start_folder(self.projects),
            "Images and stacks (*.png *.jpg *.jpeg *.tif *.tiff *.bmp *.mrcs *.mrc *.npy *.star);;All files (*)")
        if files:
            self.load_paths(files)

    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event):
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths and self.load_paths(paths):
            event.acceptProposedAction()

    def _set_size(self, size: int) -> None:
        self._changing_inputs("Changing the working size", lambda: self.model.session.set_size(size),
                              refused=lambda: self.run_panel.show_size(self.model.session.size))  # the size in use

    def _set_image_transform(self, theta, tx, ty) -> None:
        m = self.model
        i = m.session.selected

        def refused():  # the fields show the transform in use again
            if 0 <= i < m.session.n:
                t = m.session.transforms[i]
                self.transform_panel.load_image(display_name(m.session.data.paths[i]), math.degrees(t[0]),
                                                float(t[1]), float(t[2]))

        if 0 <= i < m.session.n:
            self._changing_inputs("Transforming an image", lambda: m.session.set_transform(i, theta, tx, ty),
                                  refused=refused)

    def start_run(self) -> bool:
        if self.model.refuse_while_loading():
            return False
        if self.model.session.n < 2:
            self.dialog(QMessageBox.Icon.Warning, "Cannot start", "Add at least 2 images before starting a run.")
            return False
        if not self.projects.confirm_discard("Starting again"):
            return False
        caption = self.compare_view.caption
        before = caption.text()
        caption.setText("Running…")
        return self.model.start(cancelled=lambda: caption.setText(before),  # the originals' reading cancelled
                                backend=self.run_panel.backend.currentData(), dask=self.run_panel.dask_address(),
                                denoise=self.run_panel.denoise_choice(),
                                phase_flip=self.run_panel.phase_flip_choice(), **self.run_panel.options())

    # ------------------------------------------------------------ clusters and inspect
    def rename_cluster(self, cluster, name=None) -> None:
        m = self.model
        if m.session.book is None:
            return
        if name is None:
            name, ok = QInputDialog.getText(self, "Rename cluster", "New name:", text=m.session.book.name_of(cluster))
            if not ok:
                return
        m.session.rename_cluster(cluster, name)

    def inspect_pair(self, i, j) -> None:
        self.model.session.select([i, j] if i != j else [i])
        self.model.session.inspect(i, j)

    # ------------------------------------------------------------ dialogs
    def show_skipped(self) -> None:
        skipped = self.model.session.data.skipped
        text = "\n".join(skipped_lines(skipped)) or "Nothing was skipped."  # a missing stack: one line
        self.dialog(QMessageBox.Icon.Information, "Skipped files", f"{len(skipped):,} skipped (files, or images "
                    "of a stack or STAR file).", text)

    def _failed(self, message, tb, title: str = "The run failed") -> None:
        from .errors import show_error

        log.error("%s: %s\n%s", title, message, tb)
        self.last_dialog = show_error(title, message, tb, parent=self)

    def dialog(self, icon, title, text, details="") -> QMessageBox:
        box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, self)
        if details:
            box.setDetailedText(details)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()  # not blocking: the run and the views go on
        self.last_dialog = box
        return box

    def show_about(self):
        self.about_dialog = about_dialog(self)
        return self.about_dialog

    def open_log_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_dir())))

    def closeEvent(self, event):
        if not self.projects.close_requested():
            event.ignore()
            return
        self.timer.stop()
        self.model.shutdown()
        self.nets_panel.shutdown()
        save_window(self, settings())
        remember_run_settings(self, settings())
        super().closeEvent(event)


def show_loading(window: MainWindow, title: str, ended) -> None:
    """The window's progress dialog for the model's reading of files (:attr:`StudioModel.imagesLoading`),
    until the signal ``ended``; its Cancel cancels the reading (:attr:`MainWindow.loading_dialog` meanwhile)."""
    m = window.model
    dlg, _ = progress_dialog(window, title, 0)
    dlg.canceled.connect(m.cancel_loading)
    window.loading_dialog = dlg

    def reading(done, total, path):
        dlg.setMaximum(total)
        dlg.setLabelText(f"Reading {printable(display_name(path))} ({done + 1} of {total})…")
        dlg.setValue(done)

    def loaded(*_args):
        m.imagesLoading.disconnect(reading)
        ended.disconnect(loaded)
        window.loading_dialog = None
        dlg.close()
        dlg.deleteLater()

    m.imagesLoading.connect(reading)
    ended.connect(loaded)


def withdraw_refusal(bar, label: str) -> None:
    """The field ``label`` took a number typed after refusing one: its refusal leaves the status bar ``bar``."""
    if bar.currentMessage().startswith(f"{label}: "):
        bar.clearMessage()
