"""The control panels: image set, transforms and run settings."""
from __future__ import annotations

import logging
import math

import numpy as np
from PySide6.QtCore import QAbstractListModel, QMimeData, QPoint, QSignalBlocker, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPalette, QPen, QPixmap, QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from iastudio.core import options
from iastudio.core.clusterbook import UNASSIGNED
from iastudio.core.demos import DEMO_NAMES, PAPER_MODE
from iastudio.core.filenames import display_name
from iastudio.core.imageset import skipped_lines
from iastudio.core.options import option
from iastudio.core.outliers import poor_fit_line, poor_fits
from iastudio.core.particle_ctf import NO_CTF
from iastudio.core.pose import canonical_pose
from iastudio.core.presets import PRESETS
from iastudio.core.wording import count_of

from .edition import gpu_note_text
from .tooltips import apply_tooltips

log = logging.getLogger(__name__)

MIME_IMAGES = "application/x-ia-images"

THUMB = 56
THUMB_MIN, THUMB_MAX = 32, 192
NO_IMAGE = "Select a thumbnail to transform one image."
PREVIEW = 104  # the per-image preview (small enough for a 768-px-high screen)


def _duration(seconds: float) -> str:
    """"45 s", "3 min" (a progress bar's estimate needs no more precision)."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def muted(label: QLabel) -> QLabel:
    """A secondary note, drawn in the palette's placeholder colour (readable on light and dark)."""
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label


def to_qimage(img: np.ndarray) -> QImage:
    """Gray float image -> 8-bit QImage (scaled to its max)."""
    a = np.asarray(img, dtype=np.float32)
    if a.ndim == 3:
        a = a.mean(axis=-1)
    top = float(a.max()) or 1.0
    u8 = np.ascontiguousarray((np.clip(a / top, 0, 1) * 255).astype(np.uint8))
    q = QImage(u8.data, u8.shape[1], u8.shape[0], u8.strides[0], QImage.Format.Format_Grayscale8)
    return q.copy()


def _row(*widgets) -> QHBoxLayout:
    row = QHBoxLayout()
    for w in widgets:
        row.addWidget(w)
    return row


def cluster_qcolor(k: int) -> QColor:
    from .views import colour

    return QColor(*colour(k)) if k != UNASSIGNED else QColor(150, 150, 150)


class ThumbnailModel(QAbstractListModel):
    """Thumbnails made lazily, when a view first asks for them, and cached.

    Each thumbnail has a border in its cluster's colour once clusters exist;
    thumbnails can be dragged onto a cluster in the clusters panel.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.images = np.zeros((0, 1, 1), np.float32)
        self.names: list[str] = []
        self.labels = None
        self.size = THUMB
        self._cache: dict[int, QPixmap] = {}

    def set_thumb_size(self, px: int):
        """Render the thumbnails at ``px`` pixels (the cache is rebuilt lazily)."""
        self.size, self._cache = int(px), {}
        if len(self.names):
            self.dataChanged.emit(self.index(0), self.index(len(self.names) - 1), [Qt.ItemDataRole.DecorationRole])

    def set_images(self, images, names):
        self.beginResetModel()
        self.images, self.names, self._cache, self.labels = images, list(names), {}, None
        self.endResetModel()

    def set_labels(self, labels):
        self.labels = None if labels is None else list(labels)
        self._cache = {}
        if len(self.names):
            self.dataChanged.emit(self.index(0), self.index(len(self.names) - 1), [Qt.ItemDataRole.DecorationRole])

    def flags(self, index):
        base = super().flags(index)
        return base | Qt.ItemFlag.ItemIsDragEnabled if index.isValid() else base

    def mimeTypes(self):
        return [MIME_IMAGES]

    def mimeData(self, indexes):
        mime = QMimeData()
        rows = sorted({i.row() for i in indexes})
        mime.setData(MIME_IMAGES, ",".join(map(str, rows)).encode())
        return mime

    def _pixmap(self, i):
        pm = QPixmap.fromImage(to_qimage(self.images[i])).scaled(
            self.size, self.size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
        if self.labels is not None:
            p = QPainter(pm)
            p.setPen(QPen(cluster_qcolor(self.labels[i]), max(3, self.size // 14)))
            p.drawRect(1, 1, pm.width() - 3, pm.height() - 3)
            p.end()
        return pm

    def update_images(self, images):
        self.images, self._cache = images, {}
        if len(images):
            self.dataChanged.emit(self.index(0), self.index(len(images) - 1), [Qt.ItemDataRole.DecorationRole])

    def rowCount(self, parent=None):
        return 0 if parent is not None and parent.isValid() else len(self.names)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        i = index.row()
        if role == Qt.ItemDataRole.DecorationRole:
            if i not in self._cache:
                self._cache[i] = self._pixmap(i)
            return self._cache[i]
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.names[i]
        return None


class ImageSetPanel(QGroupBox):
    """Thumbnails (with a size slider), open/add buttons, demos, a one-line summary and the skipped files."""

    openFolder = Signal()
    addFiles = Signal()
    demoChosen = Signal(str)
    detailsRequested = Signal()
    imageActivated = Signal(int)  # a thumbnail double-clicked
    thumbMenuRequested = Signal(list, QPoint)  # selected rows, global position (right-click)

    def __init__(self, parent=None):
        super().__init__("Image set", parent)
        lay = QVBoxLayout(self)
        buttons = QHBoxLayout()
        self.open_btn = QPushButton("Open folder…")
        self.add_btn = QPushButton("Add files…")
        self.demo_box = QComboBox()
        self.demo_box.addItem("Demo…")
        self.demo_box.addItems(DEMO_NAMES)
        buttons.addWidget(self.open_btn)
        buttons.addWidget(self.add_btn)
        buttons.addWidget(self.demo_box)
        lay.addLayout(buttons)
        self.summary = QLabel("No images yet: open a folder, add files, drop them here, or pick a demo.")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.linkActivated.connect(lambda _: self.detailsRequested.emit())
        lay.addWidget(self.summary)
        self.skipped_list = QListWidget()
        self.skipped_list.setMaximumHeight(4 * self.fontMetrics().height() + 8)
        self.skipped_list.setWordWrap(True)  # the reason wraps to the panel's width, never cut off at its edge
        self.skipped_list.setResizeMode(QListView.ResizeMode.Adjust)
        self.skipped_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.skipped_list.hide()
        lay.addWidget(self.skipped_list)
        self.thumbs = ThumbnailModel(self)
        self.view = QListView()
        self._build_view()
        lay.addWidget(self.view, 1)
        size_row = QHBoxLayout()
        self.thumb_size = QSlider(Qt.Orientation.Horizontal, minimum=THUMB_MIN, maximum=THUMB_MAX, value=THUMB)
        size_row.addWidget(QLabel("Thumbnail size"))
        size_row.addWidget(self.thumb_size, 1)
        lay.addLayout(size_row)
        self.open_btn.clicked.connect(self.openFolder)
        self.add_btn.clicked.connect(self.addFiles)
        self.demo_box.activated.connect(self._demo)
        self.thumb_size.valueChanged.connect(self.set_thumb_size)
        self.view.doubleClicked.connect(lambda index: self.imageActivated.emit(index.row()))
        self.view.customContextMenuRequested.connect(self._context_menu)
        apply_tooltips(self)

    def _build_view(self):
        v = self.view
        v.setViewMode(QListView.ViewMode.IconMode)
        v.setUniformItemSizes(True)
        v.setResizeMode(QListView.ResizeMode.Adjust)
        v.setMovement(QListView.Movement.Static)
        v.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        v.setDragEnabled(True)
        v.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        v.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        v.setModel(self.thumbs)
        self.set_thumb_size(THUMB)

    def set_thumb_size(self, px: int):
        self.view.setIconSize(QSize(px, px))
        self.view.setGridSize(QSize(px + 8, px + 8))
        self.thumbs.set_thumb_size(px)

    def _context_menu(self, pos):
        index = self.view.indexAt(pos)
        if not index.isValid():
            return
        sel = self.view.selectionModel()
        if not sel.isSelected(index):  # right-click on an unselected thumbnail selects it alone
            self.view.setCurrentIndex(index)
        rows = sorted(i.row() for i in sel.selectedIndexes())
        self.thumbMenuRequested.emit(rows, self.view.viewport().mapToGlobal(pos))

    def _demo(self, index):
        if index > 0:
            self.demoChosen.emit(self.demo_box.itemText(index))
            self.demo_box.setCurrentIndex(0)

    def set_summary(self, text: str, n_skipped: int):
        link = ' — <a href="details">details</a>' if n_skipped else ""
        self.summary.setText(text + link)

    def set_skipped(self, skipped) -> None:
        """List the files that were skipped (name and reason; the full path in the tooltip)."""
        self.skipped_list.clear()
        # a missing stack's images in one line, not one line per particle
        for short, full in zip(skipped_lines(skipped, display_name), skipped_lines(skipped), strict=True):
            item = QListWidgetItem(f"Skipped {short}")
            item.setToolTip(full)
            self.skipped_list.addItem(item)
        self.skipped_list.setVisible(bool(skipped))


def scrolling(content: QWidget, *, min_height: int) -> QScrollArea:
    """``content`` in a frameless scroll area that scrolls up and down only (its width follows the panel's)."""
    area = QScrollArea()
    area.setWidget(content)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setMinimumHeight(min_height)
    return area


class TransformPanel(QGroupBox):
    """Random SE(2) transforms for the whole set, and per-image controls with a preview."""

    applyRandom = Signal(float, float, int)  # rotation deg, shift %, seed
    reset = Signal()
    imageTransformChanged = Signal(float, float, float)  # theta deg, tx, ty
    refused = Signal(str)  # "θ: 400.0 ° is more than 180.0 °, ...": a typed number that cannot be taken
    taken = Signal(str)  # "θ": that field took a number typed after a refusal (what was said is old news)

    def __init__(self, parent=None):
        super().__init__("Transforms (SE(2))", parent)
        # The fields scroll in a short window (1024 x 700 with an image chosen), as the Run panel's do:
        # none is cut off, and the panel does not hold the window taller than the screen.
        self.content = QWidget()
        lay = QVBoxLayout(self.content)
        lay.setContentsMargins(0, 0, 4, 0)
        self.scroll_area = scrolling(self.content, min_height=80)
        outer = QVBoxLayout(self)
        outer.addWidget(self.scroll_area)
        form = QFormLayout()
        self.rotation = refusing_field(OptionDoubleSpinBox(), 0, 180, 180, suffix=" °", decimals=2)
        self.shift = refusing_field(OptionDoubleSpinBox(), 0, 40, 10, suffix=" %", decimals=2)
        self.seed = refusing_field(OptionSpinBox(), 0, 10**6, 0)
        form.addRow("Rotation range ±", self.rotation)
        form.addRow("Translation range ±", self.shift)
        form.addRow("Seed", self.seed)
        lay.addLayout(form)
        row = QHBoxLayout()
        self.apply_btn = QPushButton("Apply")
        self.reset_btn = QPushButton("Reset to originals")
        row.addWidget(self.apply_btn)
        row.addWidget(self.reset_btn)
        lay.addLayout(row)
        self.image_label = QElidingLabel(NO_IMAGE)
        lay.addWidget(self.image_label)
        per = QFormLayout()
        # taken once typing is finished: "30" is never 3 first
        self.theta = refusing_field(OptionDoubleSpinBox(), -180, 180, 0, suffix=" °", decimals=1, step=5)
        self.theta_slider = QSlider(Qt.Orientation.Horizontal, minimum=-180, maximum=180)
        self.tx = refusing_field(OptionDoubleSpinBox(), -64, 64, 0, suffix=" px", decimals=1)
        self.ty = refusing_field(OptionDoubleSpinBox(), -64, 64, 0, suffix=" px", decimals=1)
        per.addRow("θ", self.theta)
        per.addRow("", self.theta_slider)
        per.addRow("tx", self.tx)
        per.addRow("ty", self.ty)
        lay.addLayout(per)
        self.show_original = QCheckBox("show original")
        lay.addWidget(self.show_original)
        self.preview = QLabel()
        self.preview.setFixedSize(PREVIEW, PREVIEW)
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview.setStyleSheet("background: #222;")
        lay.addWidget(self.preview, 0, Qt.AlignmentFlag.AlignHCenter)
        self.apply_btn.clicked.connect(
            lambda: self.applyRandom.emit(self.rotation.value(), self.shift.value(), self.seed.value()))
        self.reset_btn.clicked.connect(self.reset)
        self.theta_slider.valueChanged.connect(lambda v: self.theta.setValue(float(v)))
        self.theta.valueChanged.connect(lambda v: self._sync_slider(v))
        for box in (self.theta, self.tx, self.ty):
            box.valueChanged.connect(self._emit)
        for box, label in ((self.rotation, "Rotation range"), (self.shift, "Translation range"), (self.seed, "Seed"),
                           (self.theta, "\u03b8"), (self.tx, "tx"), (self.ty, "ty")):
            box.refused.connect(lambda why, label=label: self.refused.emit(f"{label}: {why}"))
            box.taken.connect(lambda label=label: self.taken.emit(label))
        self._loading = False
        self.set_enabled_image(False)
        apply_tooltips(self)

    def _sync_slider(self, v):
        self.theta_slider.blockSignals(True)
        self.theta_slider.setValue(int(round(v)))
        self.theta_slider.blockSignals(False)

    def _emit(self, *_):
        if not self._loading:
            self.imageTransformChanged.emit(self.theta.value(), self.tx.value(), self.ty.value())

    def clear_image(self) -> None:
        """No image chosen (a new set): no name, no preview of an image of another set."""
        self.image_label.setText(NO_IMAGE)
        self.image_label.setToolTip("")
        self.preview.clear()
        self.set_enabled_image(False)

    def set_enabled_image(self, on: bool):
        for w in (self.theta, self.theta_slider, self.tx, self.ty, self.show_original):
            w.setEnabled(on)

    def load_image(self, name: str, theta_deg: float, tx: float, ty: float):
        self._loading = True
        self.image_label.setText(f"Image: {name}")
        self.image_label.setToolTip(name)
        self.theta.setValue(theta_deg)
        self._sync_slider(theta_deg)
        self.tx.setValue(tx)
        self.ty.setValue(ty)
        self._loading = False
        self.set_enabled_image(True)

    def set_preview(self, img: np.ndarray):
        pm = QPixmap.fromImage(to_qimage(img)).scaled(
            PREVIEW, PREVIEW, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
        self.preview.setPixmap(pm)


# paper mode: the "paper" preset (iastudio.core.presets, the same as ia-cluster --paper); the form shows its β and
# its bound on the iterations
PAPER_BETA = float(PRESETS[PAPER_MODE["preset"]]["beta"])
PAPER_ITERATIONS = int(PRESETS[PAPER_MODE["preset"]]["iterations"])


def _bare(box: QSpinBox | QDoubleSpinBox, text: str) -> str:
    """``text`` without the box's prefix and suffix, and without the unit typed after the number.

    Ctrl+A selects the number only, so "32 px" (or "32px", "32 PX") typed into a field that shows " px"
    reads "32 px px": the unit typed is the field's own, and the number is 32.
    """
    t = text.strip()
    for affix, cut in ((box.prefix().strip(), str.removeprefix), (box.suffix().strip(), str.removesuffix)):
        t = cut(t, affix).strip() if affix else t
    unit = box.suffix().strip()
    if unit and t.casefold().endswith(unit.casefold()):
        t = t[:len(t) - len(unit)].strip()
    return t


def _typed_number(box: QSpinBox | QDoubleSpinBox, text: str) -> float | None:
    """The number typed into ``box`` (its prefix and suffix removed; rounded to the decimals a real-number
    box shows), or None when ``text`` is not one."""
    value, ok = box.locale().toDouble(_bare(box, text))
    if not (ok and math.isfinite(value)):
        return None
    return round(value, box.decimals()) if isinstance(box, QDoubleSpinBox) else value


def _shown(box: QSpinBox | QDoubleSpinBox, value) -> str:
    """``value`` written as ``box`` writes it (a whole number past what Qt's int holds, too)."""
    return box.textFromValue(float(value)) if isinstance(box, QDoubleSpinBox) else str(int(value))


def refusal(box: QSpinBox | QDoubleSpinBox, text: str) -> str | None:
    """What to say when ``text`` typed into ``box`` cannot be taken (None: it can, or nothing was typed).

    A number outside the box's range, a fraction in a whole-number box ("2.5", "0,5"), or no number
    at all ("abc"; "1e3" where 1000 is out of range says so).
    """
    typed = _bare(box, text)
    if not typed:
        return None  # an emptied field: the value in use comes back
    value, whole = _typed_number(box, text), not isinstance(box, QDoubleSpinBox)
    if value is None:
        return f"\u201c{typed}\u201d is not {'a whole number' if whole else 'a number'}"
    suffix = box.suffix()
    if whole and value != int(value):
        return f"{typed} is not a whole number"
    if whole:
        value = int(value)
    if value > box.maximum():
        return f"{_shown(box, value)}{suffix} is more than {_shown(box, box.maximum())}{suffix}, the most it can be"
    if value < box.minimum():
        return f"{_shown(box, value)}{suffix} is less than {_shown(box, box.minimum())}{suffix}, the least it can be"
    return None


class _Refusing:
    """Say so when a typed number cannot be taken; the value in use stays, and the field shows it again.

    Qt alone drops a keystroke it cannot take, silently: "90" into a field of at most 45 leaves 9, which
    Enter then applies; "1e3" becomes 13 and "-5" becomes 5; and it puts the old value back under the
    minimum.  Here whatever is typed is kept as typed until Enter or leaving the field (``validate``),
    when, if it is not a number in range, the old value comes back and :attr:`refused` says why
    (``fixup``).  A comma or a point is the decimal point in a real-number field ("0,5" is 0.5, not 5).
    :attr:`entered` is emitted when Enter is pressed on a number that was taken (not after a refusal).
    :attr:`taken` is emitted when, after a refusal, a number typed next was taken: what was said about
    the refused one no longer holds.
    """

    _refused_now = False  # a refusal in the key press being handled (its line edit's fixup comes first)
    _said = False  # a refusal was said, and no number typed since was taken
    _typed = False  # typed into since the last refusal

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lineEdit().textEdited.connect(self._typing)  # typing again: a new number
        self.editingFinished.connect(self._finished)

    def _typing(self) -> None:
        self._refusal_handled()
        self._typed = True

    def _finished(self) -> None:
        """Enter or leaving the field: a number typed after a refusal was taken (the refusal is old news)."""
        if self._said and self._typed and not self._refused_now:
            self._said = self._typed = False
            self.taken.emit()

    def keyPressEvent(self, event):
        super().keyPressEvent(event)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not self._refused_now:
            self.entered.emit()

    def _refusal_handled(self) -> None:
        self._refused_now = False

    def _not_taken(self) -> None:
        """What was typed was not taken (refused, or emptied): Enter in this key press does nothing."""
        if not self._refused_now:
            self._refused_now = True
            QTimer.singleShot(0, self._refusal_handled)

    def _with_point(self, text: str) -> str:
        """A real-number field reads a comma and a point alike, as its decimal point ("0,5" is not 5)."""
        if not isinstance(self, QDoubleSpinBox):
            return text
        point = self.locale().decimalPoint()
        return text.replace("," if point == "." else ".", point)

    def validate(self, text, pos):
        try:
            text = self._with_point(text)
            got = super().validate(text, pos)
            state = got[0] if isinstance(got, tuple) else got
            why = refusal(self, text)
            if _typed_number(self, text) is not None and why is None:
                return QValidator.State.Acceptable, text, pos  # any number in range ("1e3" too)
            if state == QValidator.State.Invalid or why is not None:
                return QValidator.State.Intermediate, text, pos  # kept as typed; said why at Enter or Tab
            return got
        except Exception:  # noqa: BLE001 - called by Qt: an exception here would end the app
            log.exception("validating %r", text)
            return QValidator.State.Intermediate, text, pos

    def valueFromText(self, text):
        value = _typed_number(self, self._with_point(text))
        if value is None:
            return super().valueFromText(text)
        return value if isinstance(self, QDoubleSpinBox) else int(value)

    def fixup(self, text):
        try:
            why = refusal(self, self._with_point(text))
        except Exception:  # noqa: BLE001 - as in validate
            log.exception("checking %r", text)
            why = "it cannot be read"
        if why is None:
            if not _bare(self, text):
                self._not_taken()  # emptied: the value in use comes back, and Enter does not act on it
            return super().fixup(text)
        self._not_taken()
        self._said, self._typed = True, False
        in_use = f"{self.textFromValue(self.value())}{self.suffix()}"
        self.refused.emit(f"{why}; it stays {in_use}")
        return f"{self.prefix()}{in_use}"  # shown again at once (Qt would ask again)


class OptionSpinBox(_Refusing, QSpinBox):
    """A whole-number field that says why it refuses a number out of range (see :class:`_Refusing`)."""

    refused = Signal(str)
    entered = Signal()
    taken = Signal()


class OptionDoubleSpinBox(_Refusing, QDoubleSpinBox):
    """A real-number field that says why it refuses a number out of range (see :class:`_Refusing`)."""

    refused = Signal(str)
    entered = Signal()
    taken = Signal()


def refusing_field(box: OptionSpinBox | OptionDoubleSpinBox, low, high, value, *, prefix: str = "", suffix: str = "",
                   decimals: int = 0, step: float | None = None) -> OptionSpinBox | OptionDoubleSpinBox:
    """``box`` with its range, value, prefix and suffix set; its value is taken once typing is finished."""
    if isinstance(box, QDoubleSpinBox):
        box.setDecimals(decimals)  # before the range, which it rounds
    if step is not None:
        box.setSingleStep(step)
    box.setRange(low, high)
    box.setValue(value)
    box.setPrefix(prefix)
    box.setSuffix(suffix)
    box.setKeyboardTracking(False)  # "90" is never 9 first
    return box


def option_field(name: str) -> QSpinBox | QDoubleSpinBox:
    """A spin box for the run option ``name``: range, default, unit and decimals from its declaration.

    The box's object name is the option's name.  An open minimum (β > 0) becomes the smallest value the
    box shows above it; an option whose default is a word ("auto") or None shows its ``typical`` value,
    or its maximum (the rotation range's whole circle).
    """
    opt = option(name)
    least = 10.0 ** -opt.decimals if opt.kind is not int else 1
    plain = isinstance(opt.default, (int, float)) and not isinstance(opt.default, bool)
    box = refusing_field(OptionSpinBox() if opt.kind is int else OptionDoubleSpinBox(),
                         opt.minimum + (least if opt.open_minimum else 0), opt.maximum,
                         opt.default if plain else opt.typical if opt.typical is not None else opt.maximum,
                         suffix=f" {opt.unit}" if opt.unit else "", decimals=opt.decimals)
    box.setObjectName(name)
    return box


def stage_line(layout) -> QLabel:
    """The run's stage ("invariant means, step 7/10") under the progress bar, added to ``layout``.

    It wraps, and the bar's own text stays short ("run 45 % · at most ~3 min left"): a long stage
    ("re-running Cluster 3: invariant means, step 10/10") is read whole at 1024 x 700 as at 1280 x 800.
    """
    label = QLabel()
    label.setObjectName("run_stage")
    label.setWordWrap(True)
    label.setVisible(False)
    layout.addWidget(label)
    return label


def show_stage(label: QLabel, text: str) -> None:
    """``text`` as the stage; none (the line hidden) while no run is going."""
    label.setText(text)
    label.setVisible(bool(text))


def choice_value(box: QComboBox) -> str:
    """What a combo box's current choice is remembered by: its item's data when that is text (a value
    that stays the same when a later version reorders the items or adds one), else the item's text."""
    data = box.currentData()
    return data if isinstance(data, str) else box.currentText()


def choose(box: QComboBox, value, name: str = "") -> bool:
    """Show the choice ``value`` (:func:`choice_value`'s, or an index as versions before it remembered:
    taken when in range); an unknown value is left out, logged, and the box keeps its choice."""
    if isinstance(value, str):
        index = box.findData(value)
        index = index if index >= 0 else box.findText(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        index = value if 0 <= value < box.count() else -1
    else:
        index = -1
    if index < 0:
        log.info("ignoring the unknown choice %r of %s", value, name or box.objectName() or "a list")
        return False
    box.setCurrentIndex(index)
    return True


def _show_setting(box, name: str, value, *, partial: bool) -> None:
    """One of :meth:`RunPanel.restore_settings`'s fields, its signals blocked: a list's choice by
    :func:`choose`, a tick, or a number clamped to the field's range (a number past Qt's int too);
    ``partial``: a value of the wrong type is left out."""
    with QSignalBlocker(box):
        if isinstance(box, QComboBox):
            choose(box, value, name)
            return
        kind = int if isinstance(box, QSpinBox) else bool if isinstance(box, QCheckBox) else float
        if partial and (isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float))
                        or not math.isfinite(value)):
            return
        if isinstance(box, QCheckBox):
            box.setChecked(bool(value))
        else:
            box.setValue(kind(min(max(value, box.minimum()), box.maximum())))


class RunPanel(QGroupBox):
    """Settings, Start / Stop / Resume and the progress bar.

    The settings are locked while a run goes (they only apply to the next run).
    """

    startRequested = Signal()
    stopRequested = Signal()
    resumeRequested = Signal()
    refused = Signal(str)  # "Working size: 4 px is less than 8 px, ...": a typed number out of range
    taken = Signal(str)  # "Working size": that field took a number typed after a refusal

    def __init__(self, gpu_ok: bool, gpu_reason: str, parent=None):
        super().__init__("Run", parent)
        lay = QVBoxLayout(self)
        self.settings = QWidget()  # everything a run reads when it starts
        self.settings.setLayout(self._build_form(gpu_ok, gpu_reason))
        self.settings.layout().setContentsMargins(0, 0, 4, 0)
        # The settings scroll in a short window; Start, Stop, Resume and the progress bar stay in view.
        self.settings_area = scrolling(self.settings, min_height=80)
        lay.addWidget(self.settings_area, 1)
        self.gpu_note = muted(QLabel("" if gpu_ok else gpu_note_text(gpu_reason)))
        self.gpu_note.setWordWrap(True)
        self.gpu_note.setVisible(not gpu_ok)
        lay.addWidget(self.gpu_note)
        row = QHBoxLayout()
        self.start_btn = QPushButton("Start")
        self.stop_btn = QPushButton("Stop")
        self.resume_btn = QPushButton("Resume")
        for b in (self.start_btn, self.stop_btn, self.resume_btn):
            row.addWidget(b)
        lay.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("idle")
        self.progress.setTextVisible(True)
        lay.addWidget(self.progress)
        self.stage_label = stage_line(lay)  # the stage under the bar, wrapped: the bar's own text stays short
        self.beta_auto.toggled.connect(lambda on: self.beta.setEnabled(not on))
        self.clusters_auto.toggled.connect(lambda on: self.clusters.setEnabled(not on))
        self.start_btn.clicked.connect(self.startRequested)
        self.stop_btn.clicked.connect(self.stopRequested)
        self.resume_btn.clicked.connect(self.resumeRequested)
        apply_tooltips(self)
        for box in (self.beta, self.iterations, self.clusters, self.rotation_range, self.angle_step, self.size):
            box.refused.connect(lambda why, b=box: self._refused(b, why))
            box.taken.connect(lambda b=box: self.taken.emit(self._label_of(b)))
            opt = option(box.objectName())
            values = opt.range_text(unit=True).replace("`", "")
            box.setToolTip(f"{box.toolTip()}\n\n{values}; default {opt.default_text().replace('`', '')}.")
        self.backend.setToolTip(self.backend.toolTip() + "\n\nGPU here: " + gpu_reason)
        opt = option("denoise")  # its tooltip from the option's declaration, as ia-cluster --help says it
        self.denoise.setToolTip(f"{opt.help[0].upper()}{opt.help[1:]}.\n\nAuto steps aside on clean images, "
                                f"on fewer than a dozen and on mixed sizes or colour; what it did is shown "
                                f"after the run.\n\n{opt.range_text().replace('`', '')}; default "
                                f"{opt.default_text().replace('`', '')}.")
        self.set_state("idle")

    def _refused(self, box, why: str) -> None:
        """Tell :attr:`refused`'s listeners (the status bar) why a number typed into ``box`` was not taken."""
        self.refused.emit(f"{self._label_of(box)}: {why}")

    def _label_of(self, box) -> str:
        """The form's label of a settings field (beta and clusters sit in a row with their "auto" box)."""
        form = self.settings.layout()
        for i in range(form.rowCount()):
            field, label = (form.itemAt(i, role) for role in (QFormLayout.ItemRole.FieldRole,
                                                               QFormLayout.ItemRole.LabelRole))
            if field is not None and label is not None and (
                    field.widget() is box or (field.layout() is not None and field.layout().indexOf(box) >= 0)):
                return label.widget().text()
        return box.objectName()

    def _build_form(self, gpu_ok: bool, gpu_reason: str) -> QFormLayout:
        form = QFormLayout()
        self.method = QComboBox()
        self.method.addItem("Invariant Attention (IA)", "ia")
        self.method.addItem("Kernel attention (KA)", "ka")
        self.method.setCurrentIndex(self.method.findData(option("method").default))
        self.beta_auto = QCheckBox("auto")
        self.beta = option_field("beta")
        self.iterations = option_field("iterations")
        self.clusters_auto = QCheckBox("auto")
        self.clusters = option_field("clusters")
        for auto, box in ((self.beta_auto, self.beta), (self.clusters_auto, self.clusters)):
            auto.setChecked(option(box.objectName()).default == "auto")
            box.setEnabled(not auto.isChecked())
        self.rotation_range = option_field("rotation_range")  # its maximum, the whole circle, is None
        self.angle_step = option_field("angle_step")
        self.size = option_field("size")  # applied once typing is finished (Enter, leaving the field, the arrows)
        self.mirror = QCheckBox("mirror images match")
        self.mirror.setChecked(option("group").default == "e2")
        self.paper_mode = QCheckBox("as in the paper")
        self.paper_mode.toggled.connect(self._paper_mode_toggled)
        self.beta_auto.toggled.connect(self._beta_auto_toggled)
        self.backend = QComboBox()
        self.backend.addItem("Auto", "auto")
        self.backend.addItem("CPU", "numpy")
        self.backend.addItem("GPU", "cupy")
        self.backend.setCurrentIndex(self.backend.findData(option("backend").default))
        if not gpu_ok:
            item = self.backend.model().item(2)
            item.setEnabled(False)
            item.setToolTip(gpu_reason)
            self.backend.setItemText(2, "GPU (unavailable)")
        form.addRow("Method", self.method)
        form.addRow("β", _row(self.beta_auto, self.beta))
        form.addRow("Iterations", self.iterations)
        form.addRow("Clusters", _row(self.clusters_auto, self.clusters))
        form.addRow("Rotation range ±", self.rotation_range)
        form.addRow("Mirrors", self.mirror)
        form.addRow("Paper mode", self.paper_mode)
        form.addRow("Angle step", self.angle_step)
        form.addRow("Working size", self.size)
        self.denoise = QComboBox()
        self.denoise.setObjectName("denoise")
        for value in option("denoise").choices:
            self.denoise.addItem(value.capitalize(), value)
        self.denoise.setCurrentIndex(self.denoise.findData(option("denoise").default))
        form.addRow("Denoise", self.denoise)
        self.phase_flip = QCheckBox("each image with its own CTF")
        self.phase_flip.setObjectName("phase_flip")
        self.phase_flip.setChecked(False)
        form.addRow("Phase flip (CTF)", self.phase_flip)
        self.set_phase_flip_problem(NO_CTF)  # no images yet
        form.addRow("Backend", self.backend)
        self.dask = QLineEdit()
        self.dask.setPlaceholderText("this computer (or local:4, tcp://host:8786)")
        form.addRow("Dask cluster", self.dask)
        return form

    def dask_address(self) -> str | None:
        """The Dask scheduler to run on (``local:N`` or an address), or None for this computer."""
        return self.dask.text().strip() or None

    def _paper_mode_toggled(self, on: bool) -> None:
        """Paper mode shows its settings in the form: β fixed at PAPER_BETA, at least PAPER_ITERATIONS."""
        self.beta_auto.setChecked(not on)
        if on:
            self.beta.setValue(PAPER_BETA)
            self.iterations.setValue(max(self.iterations.value(), PAPER_ITERATIONS))

    def _beta_auto_toggled(self, on: bool) -> None:
        """An automatic β is not the paper's iteration: paper mode is never shown next to "β auto"."""
        if on and self.paper_mode.isChecked():
            self.paper_mode.blockSignals(True)
            self.paper_mode.setChecked(False)
            self.paper_mode.blockSignals(False)

    def set_paper_mode(self, on: bool) -> None:
        """Tick or untick paper mode, putting its settings in the form even when it was ticked already."""
        self.paper_mode.blockSignals(True)
        self.paper_mode.setChecked(on)
        self.paper_mode.blockSignals(False)
        self._paper_mode_toggled(on)

    # the fields a run reads, by name (what :meth:`settings_state` saves and :meth:`restore_settings` puts back)
    _FIELDS = ("method", "beta_auto", "beta", "iterations", "clusters_auto", "clusters", "rotation_range",
               "angle_step", "mirror", "paper_mode", "denoise", "phase_flip")

    def settings_state(self) -> dict:
        """The Run panel's settings as they are shown (the working size and backend excepted); a list's
        choice by its value ("ka", "off": :func:`choice_value`), not by its place in the list."""
        state = {}
        for name in self._FIELDS:
            box = getattr(self, name)
            state[name] = (choice_value(box) if isinstance(box, QComboBox)
                           else box.isChecked() if isinstance(box, QCheckBox) else box.value())
        return state

    def restore_settings(self, state: dict, *, partial: bool = False) -> None:
        """Show the settings :meth:`settings_state` returned (paper mode's own choices do not interfere).

        ``partial`` (a state read from a file): entries missing or of the wrong type are left as they are.
        A list's choice is taken by its value, or by its index as earlier versions saved it (when in
        range); an unknown one is left as it is (:func:`choose`).
        """
        for name in self._FIELDS:
            if state.get(name) is not None:  # None: saved before the field existed (e.g. denoise), left as it is
                _show_setting(getattr(self, name), name, state[name], partial=partial)
        self.beta.setEnabled(not self.beta_auto.isChecked())
        self.clusters.setEnabled(not self.clusters_auto.isChecked())

    def options(self) -> dict:
        """The run options the fields show (keywords of :class:`~iastudio.core.attention.AttentionRun`)."""
        rr = self.rotation_range.value()
        paper = dict(PAPER_MODE) if self.paper_mode.isChecked() else {}
        return paper | {
            "method": self.method.currentData(),
            "beta": "auto" if self.beta_auto.isChecked() else self.beta.value(),
            "iterations": self.iterations.value(),
            "clusters": "auto" if self.clusters_auto.isChecked() else self.clusters.value(),
            "rotation_range": None if rr >= self.rotation_range.maximum() else rr,
            "angle_step": self.angle_step.value(),
            "group": "e2" if self.mirror.isChecked() else "se2",
        }

    def denoise_choice(self) -> str:
        """Whether the run denoises its images first: ``"auto"``, ``"on"`` or ``"off"`` (the session's
        ``start(denoise=)``; not an engine option, so not in :meth:`options`)."""
        return self.denoise.currentData()

    def set_phase_flip_problem(self, problem: str | None) -> None:
        """Offer phase flipping only when every loaded image carries CTF parameters; ``problem`` says why not
        (:func:`~iastudio.core.particle_ctf.flip_problem`; None: they all do).  The tick is kept either way."""
        self.phase_flip.setEnabled(problem is None)
        if problem is None:
            self.phase_flip.setToolTip(
                "Phase-flip each image with its own CTF before the preprocessing and the denoiser, as "
                "ia-cluster --phase-flip: the defocus (mean of rlnDefocusU and rlnDefocusV), voltage, Cs, "
                "amplitude contrast and pixel size of its row of the RELION STAR file, with RELION's sign "
                "(particles stay white on dark).\n\nDefault off.")
        else:
            self.phase_flip.setToolTip(f"Not available: {problem}.\n\nPhase flipping needs each image's "
                                       "defocus and microscope, read from a RELION particle STAR file.")

    def phase_flip_choice(self) -> bool:
        """Whether the run phase-flips its images first (ticked, and every image carries CTF parameters);
        the session's ``start(phase_flip=)``, not an engine option."""
        return self.phase_flip.isChecked() and self.phase_flip.isEnabled()

    def set_options(self, params: dict) -> None:
        """Show a run's saved settings (a project's ``parameters``); keys missing or not usable are left as they are.

        The backend is not changed: it depends on the machine, not on the run.
        """
        def number(key):
            v = params.get(key)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and options.problem(key, v) is None
            return v if ok else None

        # paper mode first (it fills β and the iterations), then the saved values over it
        self.set_paper_mode(params.get("beta") != "auto" and (params.get("preset") == PAPER_MODE["preset"]
                                                              or params.get("init") == "identity"))  # or older
        method = params.get("method")
        idx = self.method.findData(method) if isinstance(method, str) else -1
        if idx >= 0:
            self.method.setCurrentIndex(idx)
        for key, auto, box in (("beta", self.beta_auto, self.beta), ("clusters", self.clusters_auto, self.clusters)):
            if params.get(key) == "auto":
                auto.setChecked(True)
            elif (v := number(key)) is not None:
                auto.setChecked(False)
                box.setValue(v)
        if (v := number("iterations")) is not None:
            self.iterations.setValue(int(v))
        if "rotation_range" in params:
            rr = number("rotation_range")
            self.rotation_range.setValue(self.rotation_range.maximum() if rr is None else rr)
        if (v := number("angle_step")) is not None:
            self.angle_step.setValue(v)
        if params.get("group") in ("se2", "e2"):
            self.mirror.setChecked(params["group"] == "e2")
        # a project made before the app denoised ran without it; its next run denoises as ia-cluster does
        denoise = params.get("denoise", option("denoise").default)
        if isinstance(denoise, str) and (idx := self.denoise.findData(denoise)) >= 0:
            self.denoise.setCurrentIndex(idx)
        self.phase_flip.setChecked(params.get("phase_flip") is True)  # older projects: off

    @staticmethod
    def can_act(state: str) -> dict[str, bool]:
        """Which of start / stop / resume can do something in this run state."""
        running = state in ("running", "stopping", "splitting")
        return {"start": not running, "stop": state == "running", "resume": state == "stopped"}

    def set_state(self, state: str):
        can = self.can_act(state)
        self.start_btn.setEnabled(can["start"])
        self.stop_btn.setEnabled(can["stop"])
        self.resume_btn.setEnabled(can["resume"])
        self.settings.setEnabled(can["start"])  # a run reads its settings once, when it starts
        if state in ("idle", "stopped", "failed", "finished"):
            self.progress.setFormat({"idle": "idle — press Start", "stopped": "stopped — Resume continues",
                                     "failed": "failed", "finished": "done"}[state])
            show_stage(self.stage_label, "")  # no stage of a run that is not going
        if state == "idle":
            self.progress.setValue(0)  # an empty bar: nothing is done (a full one read as "complete")
        if state == "finished":
            self.progress.setValue(1000)

    def show_size(self, size: int) -> None:
        """Show the working size in use (not a new choice: nothing is emitted)."""
        with QSignalBlocker(self.size):
            self.size.setValue(int(size))

    def set_progress(self, fraction: float, text: str, eta: float):
        """How far the whole run is (the bar) and the stage's own text under it ("invariant similarity 60 %")."""
        self.progress.setValue(int(1000 * fraction))
        # the guard may end a run early, so the time left is an upper estimate
        eta_text = f" · at most ~{_duration(eta)} left" if eta >= 0 else ""
        self.progress.setFormat(f"run {100 * fraction:.0f} %{eta_text}")
        show_stage(self.stage_label, text)


class ClusterList(QListWidget):
    """The clusters as bins: accepts thumbnails dropped onto a cluster."""

    imagesDropped = Signal(list, int)  # image indices, cluster id
    menuRequested = Signal(int, QPoint)  # cluster id, global position (right-click)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context_menu)
        self.setAcceptDrops(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DropOnly)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setIconSize(QSize(40, 40))

    def dragEnterEvent(self, event):
        if event.mimeData().hasFormat(MIME_IMAGES):
            event.acceptProposedAction()

    def _context_menu(self, pos):
        item = self.itemAt(pos)
        if item is None:
            return
        if not item.isSelected():  # right-click on an unselected cluster selects it alone
            self.setCurrentItem(item)
        self.menuRequested.emit(int(item.data(Qt.ItemDataRole.UserRole)), self.viewport().mapToGlobal(pos))

    def dragMoveEvent(self, event):
        if event.mimeData().hasFormat(MIME_IMAGES) and self.itemAt(event.position().toPoint()) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event):
        item = self.itemAt(event.position().toPoint())
        data = bytes(event.mimeData().data(MIME_IMAGES)).decode()
        if item is None or not data:
            event.ignore()
            return
        self.imagesDropped.emit([int(x) for x in data.split(",")], int(item.data(Qt.ItemDataRole.UserRole)))
        event.acceptProposedAction()


LIST_ROWS = 3  # clusters the Clusters list shows at least


CLUSTERS_HINT = "Drag images onto a cluster; right-click for more."


class ClustersPanel(QGroupBox):
    """Named clusters with counts and means; edits; re-reading k or a distance threshold."""

    renameRequested = Signal(int)
    mergeRequested = Signal(list)
    splitRequested = Signal(int, int)  # cluster, k
    rerunRequested = Signal(int)  # cluster
    newFromSelection = Signal()
    unassignSelection = Signal()
    clustersSelected = Signal(list)  # the cluster ids highlighted in the list (Unassigned too), [] for none
    rereadK = Signal(object)  # int or "auto"
    rereadThreshold = Signal(float)
    refused = Signal(str)  # "Clusters k: 500 is more than 120, ...": a typed number out of range
    taken = Signal(str)  # "Clusters k": that field took a number typed after a refusal

    def __init__(self, parent=None):
        super().__init__("Clusters", parent)
        lay = QVBoxLayout(self)
        self.list = ClusterList()
        lay.addWidget(self.list, 3)  # the clusters get most of the room the panel has to spare
        # at least LIST_ROWS clusters in view (Ctrl-click two to merge without scrolling), even at 1024 x 700
        self.list.setMinimumHeight(LIST_ROWS * (self.list.iconSize().height() + 2) + 2 * self.list.frameWidth() + 4)
        grid = QGridLayout()  # few rows, so the list keeps the room; narrow enough for the left column
        self.rename_btn = QPushButton("Rename…")
        self.merge_btn = QPushButton("Merge")
        self.split_btn = QPushButton("Split")
        self.split_k = refusing_field(OptionSpinBox(), 2, 50, 2, prefix="k=")
        self.rerun_btn = QPushButton("Split by re-running IA on the cluster")
        self.new_btn = QPushButton("New from selection")
        self.unassign_btn = QPushButton("Unassign selection")
        for k, w in enumerate((self.rename_btn, self.merge_btn, self.split_btn, self.split_k)):
            grid.addWidget(w, 0, k)  # one row: Rename… Merge Split k=2
        grid.addWidget(self.rerun_btn, 1, 0, 1, 4)
        grid.addWidget(self.new_btn, 2, 0, 1, 2)
        grid.addWidget(self.unassign_btn, 2, 2, 1, 2)
        lay.addLayout(grid)
        form = QFormLayout()
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: the field goes under its label
        k_row = QHBoxLayout()
        self.k_auto = QCheckBox("auto")
        self.k = refusing_field(OptionSpinBox(), 1, 1000, 2)  # at most the number of images, once there are some
        self.k_apply = QPushButton("Re-read")
        k_row.addWidget(self.k)
        k_row.addWidget(self.k_auto)
        k_row.addWidget(self.k_apply)
        form.addRow("Clusters k", k_row)
        t_row = QHBoxLayout()
        self.threshold = refusing_field(OptionDoubleSpinBox(), 0.0, 2.0, 0.3, decimals=3, step=0.01)
        self.t_apply = QPushButton("Re-read")
        t_row.addWidget(self.threshold)
        t_row.addWidget(self.t_apply)
        form.addRow("Distance threshold", t_row)
        lay.addLayout(form)
        self.evidence = QLabel("")
        self.evidence.setWordWrap(True)
        self.evidence.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.evidence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.evidence.setToolTip("How the number of clusters was chosen: when no clear gap was seen, the other "
                                 "counts worth a look are named: click one in the line below, or type a k "
                                 "and press Re-read.")
        # the run's lines can be long (the denoiser, the guard's notes): they scroll rather than being cut off
        # one line at least: in a short window it gives its room to the list first (it scrolls)
        self.evidence_area = scrolling(self.evidence, min_height=self.fontMetrics().lineSpacing() + 4)
        lay.addWidget(self.evidence_area, 1)
        self.hint = self._hint_line()
        self._other_counts: list[int] = []  # the run's count and the others it found plausible, when unsure
        lay.addWidget(self.hint)
        self.rename_btn.clicked.connect(lambda: self._one(self.renameRequested))
        self.merge_btn.clicked.connect(lambda: self.mergeRequested.emit(self.selected_clusters()))
        self.split_btn.clicked.connect(
            lambda: self.selected_clusters() and self.splitRequested.emit(self.selected_clusters()[0],
                                                                          self.split_k.value()))
        self.rerun_btn.clicked.connect(lambda: self._one(self.rerunRequested))
        self.new_btn.clicked.connect(self.newFromSelection)
        self.unassign_btn.clicked.connect(self.unassignSelection)
        # highlighting clusters selects their images; the list shows what the session says is selected
        self.list.itemSelectionChanged.connect(self._highlighted)
        # the fields only set values; only the Re-read buttons change the clusters (a wheel notch must not undo edits)
        self.k_auto.toggled.connect(lambda on: self.k.setEnabled(not on))
        # a k typed and left (Tab, a click elsewhere) is not read yet: say so, rather than show 5 beside 3 clusters
        self._shown_k: int | None = None
        self.k.valueChanged.connect(self._cue_pending_k)
        self.k_auto.toggled.connect(self._cue_pending_k)
        self.k_apply.clicked.connect(lambda: self.rereadK.emit("auto" if self.k_auto.isChecked() else self.k.value()))
        self.t_apply.clicked.connect(lambda: self.rereadThreshold.emit(float(self.threshold.value())))
        # Enter in a field does what its button does, once the number typed was taken
        self.k.entered.connect(self.k_apply.click)
        self.threshold.entered.connect(self.t_apply.click)
        self.split_k.entered.connect(self.split_btn.click)
        for box, label in ((self.k, "Clusters k"), (self.threshold, "Distance threshold"), (self.split_k, "Split k")):
            box.refused.connect(lambda why, label=label: self.refused.emit(f"{label}: {why}"))
            box.taken.connect(lambda label=label: self.taken.emit(label))
        self._updating = False
        apply_tooltips(self)

    def _hint_line(self) -> QLabel:
        """The line at the foot: how to edit; a typed k not read yet; an unsure run's other counts as links
        (one click re-reads with that k, undoable)."""
        hint = muted(QLabel(CLUSTERS_HINT))
        hint.setWordWrap(True)
        hint.setTextFormat(Qt.TextFormat.RichText)
        hint.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        hint.linkActivated.connect(lambda link: link.startswith("k:") and self.rereadK.emit(int(link[2:])))
        hint.setToolTip("Drag thumbnails onto a cluster to move them; right-click a cluster or a thumbnail "
                        "for more (or Edit: F2 renames, Ctrl+M merges, Ctrl+K splits). Ctrl+Z undoes any edit. "
                        "When the run was unsure of the count, the other plausible counts are links here: a "
                        "click re-reads the clusters with that count.")
        return hint

    def pending_k(self) -> int | None:
        """The k in the field when it is not the number of clusters shown and Re-read has not read it yet."""
        k = self.k.value()
        return k if self._shown_k is not None and not self.k_auto.isChecked() and k != self._shown_k else None

    def other_counts(self) -> list[int]:
        """The counts the hint offers as links: an unsure run's count and its plausible ones, but the one shown."""
        return [k for k in self._other_counts if k != self._shown_k]

    def _cue_pending_k(self, *_) -> None:
        k, others = self.pending_k(), self.other_counts()
        if k is not None:
            self.hint.setText(f"Press Re-read to show {count_of(k, 'cluster')} ({self._shown_k} shown now).")
        elif others and self._shown_k is not None:
            links = " · ".join(f'<a href="k:{c}">{count_of(c, "cluster")}</a>' for c in others)
            self.hint.setText(f"Unsure of the count? Show {links}")
        else:
            self.hint.setText(CLUSTERS_HINT)
        # its links are reached by Tab (Enter follows one) only while it has some
        self.hint.setFocusPolicy(Qt.FocusPolicy.TabFocus if "<a " in self.hint.text() else Qt.FocusPolicy.NoFocus)
        font = self.k_apply.font()
        font.setBold(k is not None)  # the button that would read it
        self.k_apply.setFont(font)

    def _one(self, signal):
        sel = self.selected_clusters()
        if sel:
            signal.emit(sel[0])

    def selected_clusters(self) -> list[int]:
        return [c for c in self.highlighted_clusters() if c != UNASSIGNED]

    def highlighted_clusters(self) -> list[int]:
        """The ids of the highlighted rows (Unassigned too), in list order."""
        return [int(self.list.item(r).data(Qt.ItemDataRole.UserRole)) for r in range(self.list.count())
                if self.list.item(r).isSelected()]

    def _highlighted(self) -> None:
        if not self._updating:
            self.clustersSelected.emit(self.highlighted_clusters())

    def show_selected(self, clusters) -> None:
        """Highlight exactly ``clusters`` (the session's :attr:`selected_clusters`), without asking to select."""
        chosen = {int(c) for c in clusters}
        if set(self.highlighted_clusters()) == chosen:
            return
        self._updating = True
        try:
            for r in range(self.list.count()):
                item = self.list.item(r)
                item.setSelected(int(item.data(Qt.ItemDataRole.UserRole)) in chosen)
        finally:
            self._updating = False

    def set_book(self, book, means: dict, selected=()):
        """Show the clusters, ``selected`` highlighted: ``means`` maps cluster id -> image for the icon, drawn
        upright and centred (:func:`~iastudio.core.pose.canonical_pose`, as in the means view)."""
        self._updating = True  # redrawing the list selects no images
        try:
            self._fill(book, means)
        finally:
            self._updating = False
        self.show_selected(selected)

    def _fill(self, book, means: dict) -> None:
        self.list.clear()
        self._shown_k = (len(book.cluster_ids()) or None) if book is not None else None  # None: nothing to cue
        if book is None:
            self._cue_pending_k()
            return
        counts = book.counts()
        ids = [c for c in [*book.cluster_ids(), UNASSIGNED] if c in means]
        posed = dict(zip(ids, canonical_pose(np.stack([means[c] for c in ids])))) if ids else {}
        for c in [*book.cluster_ids(), UNASSIGNED]:
            it = QListWidgetItem(f"{book.name_of(c)}  ({counts[c]})")
            it.setData(Qt.ItemDataRole.UserRole, c)
            if c in posed:
                it.setIcon(QIcon(QPixmap.fromImage(to_qimage(posed[c]))))
            it.setForeground(cluster_qcolor(c))
            self.list.addItem(it)
        self.k.blockSignals(True)
        self.k.setMaximum(max(1, book.n))  # a typed k above the number of images is refused, and said so
        self.k.setValue(max(1, len(book.cluster_ids())))
        self.k.blockSignals(False)
        self._cue_pending_k()

    def show_evidence(self, result, paths=()) -> None:
        """The run's k read-out ("4 clusters - unsure: 3 or 5 also plausible"), blank images and the guard's notes."""
        choice = None if result is None else result.k_choice
        self._other_counts = [] if choice is None or not choice.unsure else \
            sorted({int(result.n_clusters), *choice.plausible()})
        self._cue_pending_k()
        if choice is None:
            self.evidence.setText("")
            return
        lines = [f"Run: {result.k_choice.describe(result.n_clusters)}"]
        blank = np.flatnonzero(result.blank) if result.blank is not None else []
        if len(blank):
            names = ", ".join(display_name(paths[i]) for i in blank[:3]) if len(paths) else ""
            lines.append(f"{count_of(len(blank), 'blank image')} in a cluster of "
                         f"{'their' if len(blank) != 1 else 'its'} own" + (f": {names}" if names else ""))
        poor = poor_fits(result.labels, result.scores) if result.scores is not None else []
        if len(poor) and len(paths):
            lines.append(poor_fit_line([paths[i] for i in poor]))
        lines += result.notes
        self.evidence.setText("\n".join(lines))
