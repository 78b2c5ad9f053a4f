"""File → Export: asks where, shows progress, and calls :mod:`iastudio.app.export`."""
from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QProgressDialog

from .edition import can_draw_figures, figures_hint
from .projects import export_folder


def progress_dialog(parent, title: str, total: int):
    """``(dialog, step)``: ``step(done, total)`` updates it and returns False once Cancel was pressed."""
    dlg = QProgressDialog(title, "Cancel", 0, total, parent)
    dlg.setWindowModality(Qt.WindowModality.WindowModal)
    dlg.setMinimumDuration(500)

    def step(done, tot):
        dlg.setMaximum(tot)
        dlg.setValue(done)
        QGuiApplication.processEvents()
        return not dlg.wasCanceled()

    return dlg, step


def _os_error_text(exc: OSError, where) -> str:
    """"<file>: <reason>." for an export's file error (``where``: when the error names no file)."""
    return f"{exc.filename or where}: {(exc.strerror or str(exc)).rstrip('.')}."


def _with_notes(text: str, notes) -> str:
    """The status line of an export: what was written, then what the person should know (``; ``-joined)."""
    return "; ".join([text, *notes])


class ExportActions:
    """The window's exports; each returns the path written to, or None."""

    def __init__(self, window):
        self.window, self.model = window, window.model

    def _need_result(self) -> bool:
        if self.model.session.book is None or self.model.session.final is None:
            self.window.dialog(QMessageBox.Icon.Information, "Nothing to export yet", "Run the clustering first.")
            return False
        return True

    def _beside(self, name: str = "") -> str:
        """Where an export dialog starts: the folder beside the images (or the project), ``name`` in it."""
        folder = export_folder(self.window.projects)
        return os.path.join(folder, name) if name else folder

    def csv(self, path=None):
        from .export import export_assignments

        if not self._need_result():
            return None
        path = path or QFileDialog.getSaveFileName(self.window, "Export assignments", self._beside("assignments.csv"),
                                                   "CSV (*.csv)")[0]
        if path:
            dlg, step = progress_dialog(self.window, "Aligning the edited clusters' images onto their means…", 1)
            notes: list = []
            try:
                export_assignments(self.model.session, path, progress=step, notes=notes)
            finally:
                dlg.close()
            self.model.session.message(_with_notes(f"Exported {path}", notes))
        return path

    def folders(self, aligned: bool, folder=None):
        from .export import export_cluster_folders

        if not self._need_result():
            return None
        folder = folder or QFileDialog.getExistingDirectory(
            self.window, "Export cluster folders: choose where (a new folder is made inside it)", self._beside())
        if not folder:
            return None
        dlg, step = progress_dialog(self.window, "Exporting cluster folders…", self.model.session.n)
        try:
            written = export_cluster_folders(self.model.session, folder, aligned=aligned, progress=step)
        except OSError as exc:
            dlg.close()
            self.window.dialog(QMessageBox.Icon.Warning, "Cluster folders not exported",
                               _os_error_text(exc, folder))
            return None
        dlg.close()
        self.model.session.message(f"Exported the cluster folders into {written}")
        return str(written)

    def relion(self, folder=None, pixel_size: float | None = None):
        """RELION's particles.star and class_averages.mrcs, for particles read from MRC files (a STAR file)."""
        from .export import export_relion, relion_pixel_size, relion_problem

        if not self._need_result():
            return None
        session = self.model.session
        if (why := relion_problem(session)) is not None:
            self.window.dialog(QMessageBox.Icon.Information, "Not exported for RELION", f"{why}.")
            return None
        pixel = pixel_size or relion_pixel_size(session)  # a STAR file's rows give it
        if pixel is None:
            pixel, ok = QInputDialog.getDouble(self.window, "Export for RELION",
                                               "The particles' pixel size, in Å per pixel:", 1.0, 0.01, 100.0, 3)
            if not ok:
                return None
        folder = folder or QFileDialog.getExistingDirectory(
            self.window, "Export for RELION: choose where (a new folder is made inside it)", self._beside())
        if not folder:
            return None
        dlg, step = progress_dialog(self.window, "Aligning the edited clusters' images onto their means…", 1)
        notes: list = []
        try:
            written = export_relion(session, folder, pixel_size=pixel, progress=step, notes=notes)
        except OSError as exc:
            self.window.dialog(QMessageBox.Icon.Warning, "Not exported for RELION",
                               _os_error_text(exc, folder))
            return None
        finally:
            dlg.close()
        if written is None:
            session.message("Cancelled: nothing was exported for RELION.")
            return None
        session.message(_with_notes(f"Exported particles.star and class_averages.mrcs into {written}", notes))
        return str(written)

    def panels(self, folder=None):
        from .export import export_panels

        if not can_draw_figures():
            self.window.dialog(QMessageBox.Icon.Information, "Figures need matplotlib", figures_hint())
            return None
        folder = folder or QFileDialog.getExistingDirectory(
            self.window, "Export panels as figures: choose where (a new folder is made inside it)", self._beside())
        if not folder:
            return None
        dlg, step = progress_dialog(self.window, "Drawing the figures (PNG, PDF, SVG)…", 6)
        notes: list = []
        try:
            try:
                files = export_panels(self.window, folder, progress=step, notes=notes)
            finally:
                dlg.close()
        except OSError as exc:
            self.window.dialog(QMessageBox.Icon.Warning, "Figures not exported",
                               _os_error_text(exc, folder))
            return None
        if not files:
            self.window.dialog(QMessageBox.Icon.Information, "Nothing to export yet",
                               "No panel shows anything yet: open images and run the clustering first.")
            return None
        written = files[0].parent
        self.model.session.message(_with_notes(f"Exported {len(files)} files into {written}", notes))
        return str(written)

    def gif(self, path=None):
        from .export import export_gif

        frames = self.model.session.frames
        if not frames:
            self.window.dialog(QMessageBox.Icon.Information, "Nothing to export yet", "Run the clustering first.")
            return None
        path = path or QFileDialog.getSaveFileName(self.window, "Export animation", self._beside("convergence.gif"),
                                                   "GIF (*.gif)")[0]
        if path:
            dlg, step = progress_dialog(self.window, "Rendering the animation…", len(frames))
            export_gif(self.model.session, path, progress=step)
            dlg.close()
            self.model.session.message(f"Exported {path}")
        return path
