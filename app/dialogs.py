"""Small windows: one image shown large, with its name and full path."""
from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QVBoxLayout

from iastudio.core.filenames import display_name

__all__ = ["ImageDialog", "show_image"]

LARGE = 448
# a denoised run's images are what the gallery shows: the path under the picture is not what it holds
DENOISED_NOTE = "Shown denoised, as the run clustered it; the file itself is unchanged."


class ImageDialog(QDialog):
    """One image, large, with its file name, its full path (selectable) and its cluster."""

    def __init__(self, image: np.ndarray, path: str, cluster_name: str = "", parent=None, *, denoised: bool = False):
        from .panels import to_qimage

        super().__init__(parent)
        name = display_name(path)
        self.setWindowTitle(name + (" (denoised)" if denoised else ""))
        lay = QVBoxLayout(self)
        text = f"<b>{html.escape(name)}</b>" + (f" — {html.escape(cluster_name)}" if cluster_name else "")
        self.name_label = QLabel(text + (f"<br>{DENOISED_NOTE}" if denoised else ""))
        self.name_label.setTextFormat(Qt.TextFormat.RichText)
        self.name_label.setWordWrap(True)
        lay.addWidget(self.name_label)
        self.picture = QLabel()
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setMinimumSize(LARGE // 2, LARGE // 2)
        self.picture.setPixmap(QPixmap.fromImage(to_qimage(image)).scaled(
            LARGE, LARGE, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation))
        lay.addWidget(self.picture, 1)
        self.path = QLineEdit(str(path))  # the whole path, selectable and copyable however long it is
        self.path.setReadOnly(True)
        self.path.setCursorPosition(0)
        self.path.setToolTip(str(path))
        lay.addWidget(self.path)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)


def show_image(window, index: int) -> ImageDialog | None:
    """Open image ``index`` of the window's model large (double-click on a thumbnail)."""
    m = window.model
    if not 0 <= index < m.session.n:
        return None
    cluster = m.session.book.name_of(m.session.book.labels[index]) if m.session.book is not None else ""
    dlg = ImageDialog(m.session.working[index], m.session.data.paths[index], cluster, window,
                      denoised=m.session.shows_denoised)
    dlg.show()
    window.image_dialog = dlg
    return dlg
