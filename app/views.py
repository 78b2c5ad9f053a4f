"""Thin pyqtgraph views: each is created once and only updates its items.

Every ``show_frame`` runs in the GUI thread, called by the main window's
redraw timer with the latest frame (at most ~30 per second).
"""
from __future__ import annotations

import re

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QRectF, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from iastudio.core.attention import Stage
from iastudio.core.display import colour_top, mosaic, tile_levels, upright_tiles
from iastudio.core.filenames import display_name
from iastudio.core.frames import cluster_tiles, frame_tiles, frame_weights
from iastudio.core.wording import count_of

from . import theme

pg.setConfigOptions(imageAxisOrder="row-major", antialias=True, background="w", foreground="k")

CLUSTER_COLOURS = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]


UNASSIGNED_COLOUR = (190, 190, 190)
COLORBAR_WIDTH = 18  # px: the colour bar's thickness beside or below W
W_MARGIN = 0.02  # the share of n left around W in its view (the range is -0.02 n .. 1.02 n)


def colour(k: int):
    """The colour of cluster ``k``; grey for unassigned images (``k < 0``)."""
    return UNASSIGNED_COLOUR if int(k) < 0 else CLUSTER_COLOURS[int(k) % len(CLUSTER_COLOURS)]


def _names_text(frame) -> str:
    """" · Name, Name, …" for a frame showing edited clusters (empty otherwise)."""
    return " · " + ", ".join(frame.cluster_names) if frame.cluster_names else ""


def tile(images: np.ndarray, cols: int | None = None, pad: int = 2) -> np.ndarray:
    """A mosaic of images (each scaled to its own max), rows from the top, 8-bit grey (draw with levels 0..255)."""
    return mosaic(tile_levels(images), cols, pad=pad)


def _caption(text: str = "") -> QLabel:
    """A caption under a plot that wraps onto a second line rather than hiding its end."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the window
    return label


def _body(*widgets, stretch_index=0):
    """A plain container stacking ``widgets`` vertically (the one at ``stretch_index`` takes the room)."""
    w = QWidget()
    lay = QVBoxLayout(w)
    lay.setContentsMargins(0, 0, 0, 0)
    for k, child in enumerate(widgets):
        if isinstance(child, QHBoxLayout):
            lay.addLayout(child, 1 if k == stretch_index else 0)
        else:
            lay.addWidget(child, 1 if k == stretch_index else 0)
    return w


HOVER_HINT = "Hover over W for W_ij; click it for the two images."  # shown in Inspect


class _Titled(QWidget):
    """A titled view that shows a short hint ("Run to see …") until it has something to draw.

    Its plots follow the widget's palette (light or dark) and font (presentation mode).
    """

    def __init__(self, title: str, hint: str = "", parent=None):
        super().__init__(parent)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(4, 4, 4, 4)
        self.title = QElidingLabel(title)  # elides rather than widening the window
        bold = self.title.font()
        bold.setBold(True)
        self.title.setFont(bold)
        self.title.setToolTip(title)
        self.layout_.addWidget(self.title)
        self.idle_hint = hint  # what the view says before any run ("Run to see …")
        self.hint = QLabel(hint)
        self.hint.setWordWrap(True)
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setMargin(12)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.hint)
        self.layout_.addWidget(self.stack, 1)

    def set_body(self, widget: QWidget) -> None:
        """The view's content, shown once it has data (the hint until then)."""
        self.stack.addWidget(widget)
        self.stack.setCurrentIndex(0)
        self.restyle()

    @property
    def empty(self) -> bool:
        """True while the view shows its hint instead of a plot."""
        return self.stack.currentIndex() == 0

    def set_empty(self, on: bool) -> None:
        self.stack.setCurrentIndex(0 if on else min(1, self.stack.count() - 1))

    def clear(self) -> None:
        """Back to the hint (new images, nothing run yet)."""
        self.hint.setText(self.idle_hint)
        self.set_empty(True)

    def show_waiting(self, text: str) -> None:
        """The hint replaced by ``text`` while a run computes what the view will draw."""
        self.set_empty(True)
        self.hint.setText(text)

    def plot_widgets(self) -> list:
        """The pg.PlotWidgets to style from the palette."""
        return []

    def readable_height(self) -> int:
        """The least height at which the view's plot and its labels are whole (its title included)."""
        m = self.layout_.contentsMargins()
        return m.top() + m.bottom() + self.title.sizeHint().height() + self.layout_.spacing() + self._body_height()

    def _body_height(self) -> int:
        return self.hint.minimumSizeHint().height()

    def overlay_items(self) -> list:
        """Interactive decorations (selection tints, handles) to hide while exporting a picture."""
        return []

    def restyle(self) -> None:
        for plot in self.plot_widgets():
            theme.style_plot(plot, self.palette(), self.font())

    def changeEvent(self, event):
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange,
                            QEvent.Type.FontChange, QEvent.Type.ApplicationFontChange):
            self.restyle()
        super().changeEvent(event)


_CLEAR = np.zeros((1, 1, 4), np.uint8)  # the overlay when nothing is tinted (not a picture the size of the plot)


def _overlay_rgba(shape, rows=(), cols=()):
    """A transparent RGBA image with the given rows and columns tinted (1 x 1 when none is)."""
    if not len(rows) and not len(cols):
        return _CLEAR
    over = np.zeros((*shape, 4), np.uint8)
    for r in rows:
        over[r, :] = (255, 60, 60, 90)
    for c in cols:
        over[:, c] = (255, 60, 60, 90)
    return over


W_TITLE = "Weight matrix W (grouped by cluster)"
W_HINT = "Run to see W: how strongly each image attends to every other image.\n\n"
W_HINT_NO_IMAGES = W_HINT + "Open a folder or pick a demo, then press Start."
W_HINT_IMAGES = W_HINT + "Press Start (Run tab) to group the images."


class WeightsView(_Titled):
    """The weight matrix W as a heatmap with a colour bar, grouped by cluster.

    Clicking W_ij emits ``cellClicked(i, j)``; the selected images' rows and
    columns are tinted.
    """

    cellClicked = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(W_TITLE, W_HINT_NO_IMAGES, parent)
        self.plot = pg.PlotWidget()
        self.plot.setAspectLocked(True)
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "image j (column)")
        self.plot.setLabel("left", "image i (row)")
        self.image_item = pg.ImageItem(np.zeros((2, 2), np.float32))
        self.plot.addItem(self.image_item)
        self.colorbar = None
        self._place_colorbar("vertical")
        self.plot.installEventFilter(self)  # the bar's place follows the plot's size
        self._base_margins = self.plot.getPlotItem().getContentsMargins()
        self._side = 0  # the n of the W shown: the view's range is fitted to it
        self.plot.getPlotItem().vb.sigResized.connect(self._square_view)
        # the axes' own sizes change with their tick labels (no resize of the plot): decide again
        self.plot.getPlotItem().vb.sigResized.connect(lambda *_: self._place_colorbar(self._colorbar_orientation()))
        self.hover = QElidingLabel(HOVER_HINT)
        self.set_body(_body(self.plot, self.hover))
        self.weights = np.zeros((0, 0))
        self.order = np.zeros(0, int)
        self.names: list[str] = []
        self.groups = None
        self.image_item.hoverEvent = self._hover
        self.image_item.mouseClickEvent = self._click
        self.overlay = pg.ImageItem(np.zeros((2, 2, 4), np.uint8))
        self.overlay.setZValue(5)
        self.plot.addItem(self.overlay)
        self.selection: list[int] = []
        self.restyle()

    def plot_widgets(self):
        return [self.plot]

    def _body_height(self) -> int:
        """W's plot with its axis labels, ticks and colour bar whole (the vertical "image i (row)" sets the
        height of the square), and the hover line under it."""
        from PySide6.QtGui import QFontMetrics

        fm = QFontMetrics(self.font())
        square = fm.horizontalAdvance("image i (row)") + fm.height()  # the left axis label along its side
        axes = 4 * fm.height() + 12  # half a tick label above, tick labels and "image j (column)" below, margins
        return square + axes + 2 * self.layout_.spacing() + self.hover.sizeHint().height()

    def set_has_images(self, on: bool) -> None:
        """The hint's next step: "press Start" once there are images, "open a folder" while there are none."""
        hint = W_HINT_IMAGES if on else W_HINT_NO_IMAGES
        if self.hint.text() == self.idle_hint:  # not a "Computing …" shown while a run starts
            self.hint.setText(hint)
        self.idle_hint = hint

    def overlay_items(self):
        return [self.overlay] + ([self.colorbar.region] if self.colorbar.region is not None else [])

    def restyle(self):
        super().restyle()
        if getattr(self, "colorbar", None) is not None:
            theme.style_axis(self.colorbar.axis, self.palette(), self.font())
            self._place_colorbar(self._colorbar_orientation())

    def _colorbar_orientation(self) -> str:
        """Where the colour bar leaves the larger square for W: beside it ("vertical") or below it.

        Read from the plot's size, which does not depend on the bar's place (no flip-flop): a narrow
        panel (a small window, or W given little of the middle) puts the bar below W.
        """
        from PySide6.QtGui import QFontMetrics

        fm = QFontMetrics(self.font())
        item = self.plot.getPlotItem()
        width = self.plot.width() - item.getAxis("left").width()
        height = self.plot.height() - item.getAxis("bottom").height()
        beside = COLORBAR_WIDTH + fm.horizontalAdvance("0.000") + 2 * fm.height()  # bar, tick labels, title
        below = COLORBAR_WIDTH + 3 * fm.height()
        return "horizontal" if min(width, height - below) > min(width - beside, height) else "vertical"

    def _place_colorbar(self, orientation: str) -> None:
        """Put the colour bar beside W ("vertical") or below it, keeping its levels."""
        old = self.colorbar
        if old is not None and old.horizontal == (orientation == "horizontal"):
            return
        item = self.plot.getPlotItem()
        levels = (0.0, 1.0)
        if old is not None:
            levels = tuple(old.levels())
            item.layout.removeItem(old)
            old.scene().removeItem(old)
        # no ``label=``: pyqtgraph puts that one on the bar's far side, and the axis below has its own
        self.colorbar = pg.ColorBarItem(values=levels, width=COLORBAR_WIDTH, colorMap=pg.colormap.get("viridis"),
                                        orientation=orientation)
        self.colorbar.setImageItem(self.image_item, insert_in=item)
        axis = self.colorbar.axis
        axis.enableAutoSIPrefix(False)  # 0.05, never "50 (x0.001)": no prefix, and the scale it left reset
        axis.autoSIPrefixScale, axis.labelUnitPrefix = 1.0, ""
        axis.setLabel("W_ij")
        # pyqtgraph fixes a vertical bar's axis at 45 px: "0.005" then runs under the title; sized to its
        # tick labels and title instead (it grows to the widest tick label drawn)
        if orientation == "vertical":
            axis.setWidth(None)
        theme.style_axis(self.colorbar.axis, self.palette(), self.font())

    def eventFilter(self, watched, event):
        if watched is self.plot and event.type() == QEvent.Type.Resize:
            self._place_colorbar(self._colorbar_orientation())
        return super().eventFilter(watched, event)

    def _square_view(self, *_):
        """Keep W's box square: the room a wide (or tall) plot has to spare goes to margins around it.

        W's pixels are square (aspect locked), so a box wider than tall would show W in the middle of
        wide empty axes; the margins leave the box W's shape, and the range fitted to W fills it.
        """
        item = self.plot.getPlotItem()
        vb = item.vb
        rect = QRectF(self.plot.range)  # the whole plot: where the view puts the plot item
        left, top, right, bottom = item.getContentsMargins()
        b_left, b_top, b_right, b_bottom = self._base_margins
        geom = item.geometry()
        axes_w = geom.width() - vb.width() - left - right  # the axes and the colour bar
        axes_h = geom.height() - vb.height() - top - bottom
        width = rect.width() - axes_w - b_left - b_right  # the box's size with the base margins
        height = rect.height() - axes_h - b_top - b_bottom
        pad_x = max(0.0, (width - height) / 2)
        pad_y = max(0.0, (height - width) / 2)
        wanted = (b_left + pad_x, b_top + pad_y, b_right + pad_x, b_bottom + pad_y)
        if max(abs(a - b) for a, b in zip(wanted, (left, top, right, bottom))) >= 1.0:
            item.setContentsMargins(*wanted)
            item.setGeometry(rect)  # laid out again now, not held at the old margins' minimum size

    def fit_range(self) -> None:
        """Show all of W (0 .. n on both axes) with a small margin: also after a zoom by the user."""
        n = max(self._side, 1)
        pad = W_MARGIN * n
        self.plot.getPlotItem().vb.setRange(xRange=(-pad, n + pad), yRange=(-pad, n + pad), padding=0)

    def clear(self):
        self.weights, self.order = np.zeros((0, 0)), np.zeros(0, int)
        self.hover.setText(HOVER_HINT)  # not the last set's pair
        self._side = 0  # the next W is fitted again
        super().clear()

    def _cell(self, pos):
        r, c = int(np.floor(pos.y())), int(np.floor(pos.x()))
        n = len(self.order)
        if 0 <= r < n and 0 <= c < n:
            return int(self.order[r]), int(self.order[c])
        return None

    def _click(self, event):
        cell = self._cell(event.pos())
        if cell is not None:
            event.accept()
            self.cellClicked.emit(*cell)

    def set_selection(self, indices):
        self.selection = list(indices)
        self._draw_overlay()

    def _draw_overlay(self):
        n = len(self.order)
        if n == 0:
            return
        pos = {int(g): r for r, g in enumerate(self.order)}  # the order may be a sample of the images
        sel = [pos[i] for i in self.selection if i in pos]
        self.overlay.setImage(_overlay_rgba((n, n), sel, sel), autoLevels=False)

    def set_names(self, names):
        self.names = list(names)

    def show_frame(self, frame, levels=None):
        """Draw W grouped by cluster; a sparse W (K-neighbour graph) as the dense block of an even sample.

        ``levels``: a fixed colour scale ``(lo, hi)``; None scales to this frame's largest shown W_ij.
        """
        import scipy.sparse as sp

        w = frame.snapshot.weights
        order, shown = frame_weights(frame, keep=self.selection)  # prepared with the frame (the worker)
        if sp.issparse(w):
            w = w.tocsr()
            self.title.setText(f"<b>Weight matrix W of {order.size:,} of {w.shape[0]:,} images</b> (an even "
                               f"sample per cluster; W is the sparse K-neighbour graph, 0 off it)")
        else:
            self.title.setText(f"<b>{W_TITLE}</b>")
        self.title.setToolTip(self.title.text())
        self.weights, self.order = w, order
        self.groups = np.asarray(frame.snapshot.labels)[order] if getattr(frame.snapshot, "labels", None) is not None \
            else None  # the cluster of each row shown (for an exported figure's lines between clusters)
        self.image_item.setImage(shown, autoLevels=False)
        if shown.shape[0] != self._side:  # a new run, or another sample: fit the range to it
            self._side = int(shown.shape[0])
            self.fit_range()
        if levels is None:  # an image alone in its cluster does not set the scale (colour_top)
            levels = (0.0, colour_top(shown) if shown.size else 1.0)
        self.colorbar.setLevels(tuple(levels))
        self._draw_overlay()
        was_empty = self.empty
        self.set_empty(False)
        if was_empty:  # the plot was hidden behind the hint: place the bar for the size it has now
            self._place_colorbar(self._colorbar_orientation())

    def _hover(self, event):
        if event.isExit() or self.weights.size == 0:
            return
        cell = self._cell(event.pos())
        if cell is not None:
            i, j = cell
            ni = self.names[i] if i < len(self.names) else str(i)
            nj = self.names[j] if j < len(self.names) else str(j)
            # the value first: a narrow window elides the file names at the end, never the number hovered for
            text = f"W_ij = {self.weights[i, j]:.4f} · i = {i} ({display_name(ni)}), j = {j} ({display_name(nj)})"
            self.hover.setText(text)
            self.hover.setToolTip(text)


MEANS_TITLE = "Invariant means (shown upright and centred)"
#: More images than this: a finished run's means view opens on one mean per cluster (the class averages),
#: unless the user has chosen; a grid of one mean per image would have tiles of a few pixels (issue: 1,800
#: particles drew 1,024 tiles of 7 px in a 1280 x 800 window).
PER_IMAGE_READABLE = 256
UNDENOISED_TITLE = "Class averages before denoising (upright)"
UNDENOISED_TIP = ("Before denoising: each cluster's images as they were before the denoiser, turned and shifted "
                  "by the poses the run found on their denoised copies, then averaged (noisier, but with the "
                  "fine detail denoising removes).")
UNDENOISED_OFF_TIP = ("Only a run that denoised its images (Run panel: Denoise) has class averages of the "
                      "images before denoising.")


class MeansView(_Titled):
    """The current means as a grid: one per image, or one per cluster.

    Clicking a tile emits ``tileClicked`` with the image index (per image) or
    ``clusterClicked`` with the cluster (per cluster); selected images' tiles are outlined.
    After a run that denoised its images, :attr:`averages` switches the clusters' tiles to the
    class averages of the images before denoising (:attr:`~iastudio.core.frames.Frame.undenoised_means`).
    """

    tileClicked = Signal(int)
    clusterClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(MEANS_TITLE,
                         "Run to see the invariant means: each image's look-alikes, turned and shifted onto "
                         "it, then averaged. They sharpen as the run goes on.", parent)
        self.per_cluster = QCheckBox("one per cluster")
        self.per_cluster.setToolTip("Show one mean per cluster instead of one per image. Click a tile to "
                                    "select its images.")
        self.averages = QComboBox()
        self.averages.addItem("denoised", "denoised")
        self.averages.addItem("before denoising", "undenoised")
        self.averages.setItemData(1, UNDENOISED_TIP, Qt.ItemDataRole.ToolTipRole)
        self.averages.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.averages.setMinimumWidth(48)  # whole when there is room; narrower (elided) in a narrow window
        self.averages_label = QElidingLabel("Images:")
        self.averages_label.setMinimumWidth(8)
        self.averages_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self._set_averages_enabled(False)
        controls = QHBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        controls.addWidget(self.per_cluster)
        controls.addWidget(self.averages_label, 1)  # takes the room between; elided when there is none
        controls.addWidget(self.averages)
        self.plot = pg.PlotWidget()
        self.plot.setAspectLocked(True)
        self.plot.invertY(True)
        self.plot.hideAxis("bottom")
        self.plot.hideAxis("left")
        self.image_item = pg.ImageItem(np.zeros((2, 2), np.float32))
        self.plot.addItem(self.image_item)
        self.caption = _caption()
        self.set_body(_body(controls, self.plot, self.caption, stretch_index=1))
        self.n_tiles = 0
        self._frame = None
        self._tile_ids: list[int] = []
        self._geom = (1, 1, 1)  # cols, tile h, tile w
        self.selection: list[int] = []
        self.overlay = pg.ImageItem(np.zeros((2, 2, 4), np.uint8))
        self.overlay.setZValue(5)
        self.plot.addItem(self.overlay)
        self.image_item.mouseClickEvent = self._click
        self.per_cluster.toggled.connect(self._per_cluster_toggled)
        self.averages.currentIndexChanged.connect(self._averages_changed)
        self.per_cluster_chosen = False  # set once "one per cluster" is set by anyone but show_frame's default
        self._auto_per_cluster = False  # show_frame ticked it for a large set

    def _body_height(self) -> int:
        """The controls above the grid, a grid as tall as W's square and a caption of two lines."""
        from PySide6.QtGui import QFontMetrics

        fm = QFontMetrics(self.font())
        controls = max(self.per_cluster.sizeHint().height(), self.averages.sizeHint().height())
        grid = fm.horizontalAdvance("image i (row)") + fm.height()
        return controls + grid + 2 * fm.lineSpacing() + 2 * self.layout_.spacing()

    @property
    def shows_undenoised(self) -> bool:
        """True while the tiles are the class averages of the images before denoising."""
        return (self.per_cluster.isChecked() and self.averages.currentData() == "undenoised"
                and self._frame is not None and self._frame.undenoised_means is not None
                and self._frame.cluster_means is not None)

    def _set_averages_enabled(self, on: bool) -> None:
        self.averages.setItemText(0, "denoised" if on else "as clustered")  # no denoising: not "denoised"
        self.averages.setEnabled(on)
        self.averages_label.setEnabled(on)
        tip = ("Denoised: the invariant means of the denoised images the run clustered. " + UNDENOISED_TIP
               if on else UNDENOISED_OFF_TIP)
        self.averages.setToolTip(tip)
        self.averages_label.setToolTip(tip)

    def _per_cluster_toggled(self, on: bool) -> None:
        self.per_cluster_chosen, self._auto_per_cluster = True, False
        if not on and self.averages.currentData() == "undenoised":  # class averages are one per cluster
            self.averages.blockSignals(True)
            self.averages.setCurrentIndex(0)
            self.averages.blockSignals(False)
        if self._frame is not None:
            self.show_frame(self._frame)

    def _averages_changed(self, _index: int) -> None:
        if self.averages.currentData() == "undenoised" and not self.per_cluster.isChecked():
            self.per_cluster.setChecked(True)  # draws them (one per cluster)
        elif self._frame is not None:
            self.show_frame(self._frame)

    def plot_widgets(self):
        return [self.plot]

    def overlay_items(self):
        return [self.overlay]

    def clear(self):
        self._frame, self._tile_ids, self.n_tiles = None, [], 0
        self._untick_large_set_default()  # the next set chooses afresh
        self._set_averages_enabled(False)
        self.title.setText(MEANS_TITLE)
        super().clear()

    def _click(self, event):
        cols, h, w = self._geom
        r, c = int((event.pos().y() - 2) // (h + 2)), int((event.pos().x() - 2) // (w + 2))
        k = r * cols + c
        if 0 <= c < cols and 0 <= k < len(self._tile_ids):
            event.accept()
            (self.clusterClicked if self.per_cluster.isChecked() else self.tileClicked).emit(self._tile_ids[k])

    def set_selection(self, indices, labels=None):
        self.selection = list(indices)
        self._draw_overlay(labels)

    def _draw_overlay(self, labels=None):
        img = self.image_item.image
        if img is None or not self._tile_ids:
            return
        cols, h, w = self._geom
        if self.per_cluster.isChecked():
            lab = labels if labels is not None else (self._frame.snapshot.labels if self._frame else None)
            chosen = {int(lab[i]) for i in self.selection} if lab is not None else set()
        else:
            chosen = set(self.selection)
        if chosen.isdisjoint(self._tile_ids):
            self.overlay.setImage(_CLEAR, autoLevels=False)
            return
        over = np.zeros((*img.shape[:2], 4), np.uint8)
        for k, tid in enumerate(self._tile_ids):
            if tid in chosen:
                r, c = divmod(k, cols)
                y, x = 2 + r * (h + 2), 2 + c * (w + 2)
                over[y - 2:y + h + 2, x - 2:x + w + 2] = (255, 60, 60, 255)
                over[y:y + h, x:x + w] = 0
        self.overlay.setImage(over, autoLevels=False)

    def _untick_large_set_default(self) -> None:
        """Undo what :meth:`_large_set_default` ticked (not the user's choice), e.g. for a smaller set."""
        if self._auto_per_cluster:
            self.per_cluster.blockSignals(True)
            self.per_cluster.setChecked(False)
            self.per_cluster.blockSignals(False)
            self._auto_per_cluster = False

    def _large_set_default(self, frame) -> None:
        """Tick "one per cluster" for a finished large run the user has not chosen for (:data:`PER_IMAGE_READABLE`)."""
        if len(frame.order) <= PER_IMAGE_READABLE:
            self._untick_large_set_default()
        if (self.per_cluster_chosen or self.per_cluster.isChecked() or frame.cluster_means is None
                or len(frame.order) <= PER_IMAGE_READABLE):
            return
        self.per_cluster.blockSignals(True)  # not the user's choice: not remembered, and drawn below
        self.per_cluster.setChecked(True)
        self.per_cluster.blockSignals(False)
        self._auto_per_cluster = True

    def show_frame(self, frame):
        self._frame = frame
        snap = frame.snapshot
        self._large_set_default(frame)
        self._set_averages_enabled(frame.undenoised_means is not None and frame.cluster_means is not None)
        undenoised = self.shows_undenoised
        self.title.setText(UNDENOISED_TITLE if undenoised else MEANS_TITLE)
        self.title.setToolTip(UNDENOISED_TIP if undenoised else MEANS_TITLE)
        # upright 8-bit tiles, made with the frame in the run's worker (only selected extras are made here)
        if self.per_cluster.isChecked():
            ids, tiles = cluster_tiles(frame, undenoised=undenoised)
            what = "cluster"
        else:
            order, tiles = frame_tiles(frame, keep=self.selection)
            ids = [int(i) for i in order]
            what = "image (grouped by cluster)"
            if order.size < len(frame.order):
                what += f", an even sample of {len(frame.order):,} images"
        self.n_tiles = len(tiles)
        self._tile_ids = ids
        cols = int(np.ceil(np.sqrt(len(tiles)))) if len(tiles) else 1
        self._geom = (cols, tiles.shape[1], tiles.shape[2]) if len(tiles) else (1, 1, 1)
        prepared = frame.tile_mosaic if tiles is frame.tiles and frame.tile_mosaic is not None else None
        self.image_item.setImage(mosaic(tiles, cols) if prepared is None else prepared, levels=(0, 255))
        self._draw_overlay()
        text = (f"{count_of(self.n_tiles, 'mean')}, one per {what} · iteration {snap.iteration}, "
                f"{snap.stage}" + (f" step {snap.step}/{snap.n_steps}" if snap.stage == Stage.MEANS else "")
                + _names_text(frame))
        if undenoised:
            text = _undenoised_text(frame, self.n_tiles)
        if self._auto_per_cluster:
            text += (f" · one per cluster: {len(frame.order):,} images are too many for one mean each "
                     "(untick to see a sample)")
        self.caption.setText(text)
        self.caption.setToolTip(text)
        self.set_empty(False)


def _undenoised_text(frame, n: int) -> str:
    """The means view's caption while it shows the class averages of the images before denoising."""
    text = (f"{count_of(n, 'class average')} of the images before denoising, one per cluster, at the poses "
            f"the run found on the denoised images")
    missing = frame.undenoised_missing
    if missing:
        names = frame.cluster_names or []
        ids = list(frame.cluster_ids or [])
        shown = [names[ids.index(c)] if c in ids and ids.index(c) < len(names) else f"Cluster {c + 1}"
                 for c in missing]
        text += (f"; blank for {count_of(len(missing), 'edited cluster')} ({', '.join(shown[:4])}"
                 + ("…" if len(shown) > 4 else "") + "): averaged once their means are computed; in a reopened "
                 "project, which does not hold the images before denoising, re-run to average them")
    return text + _names_text(frame)


def log_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Readable ticks for a log axis: 1-2-5 steps (1..9 when the range is narrow), as (log10 v, label)."""
    lo, hi = max(lo, 1e-6), max(hi, 1e-6)
    for mults in ((1, 2, 5), tuple(range(1, 10))):
        vals = [m * 10.0**e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
                for m in mults]
        inside = [v for v in vals if lo / 1.5 <= v <= hi * 1.5]
        if len(inside) >= 3:
            break
    return [(float(np.log10(v)), f"{v:.3g}") for v in inside]


# each curve's name in the legend, and the shorter one used when the long ones do not fit in one column
LEGEND_NAMES = {"within_max": ("within-cluster max", "within max"),
                "between_min": ("between-cluster min", "between min"), "median": ("median", "median")}

CURVES_RUN = "Within-cluster max and between-cluster min: the run's clusters at this step."
CURVES_EDITED = ("Within-cluster max and between-cluster min: the clusters as listed, edits included "
                 "(unassigned images count in the median only).")


def short_run_note(result, n_points: int) -> str:
    """Why the convergence plot has only ``n_points`` (<= 2) points: the guard stopped the run ("" otherwise).

    ``result`` is a finished run's :class:`~iastudio.core.attention.RunResult` (None: a run going on).
    """
    if result is None or n_points > 2:
        return ""
    notes = " ".join(result.notes)
    settled = re.search(r"iteration (\d+) left the clusters as they were", notes)
    if settled:
        k = int(settled.group(1))
        what = ("The first iteration" if k == 1 else f"Iteration {k}") + (
            " left the clusters as they were, so the run stopped there.")
    elif "moved images between clusters without fitting the input images better" in notes:
        what = "The first iteration mixed the clusters, so the run went back to the ones it started from."
    else:
        return ""
    return what + " <a href='paper-mode'>Tick Paper mode</a> in the Run tab to watch the iteration."


class ConvergenceView(_Titled):
    """Manifold distances over iterations and a 2-D map of the manifolds.

    When the run stopped after its first iteration (the plot has one or two points), a note over the
    curves says so; its link emits ``paperModeRequested``.
    """

    pointClicked = Signal(int)
    paperModeRequested = Signal()

    def __init__(self, parent=None):
        super().__init__("How the groups draw together, step by step",  # the tab says "Manifold convergence"
                         "Run to watch the images converge: the distances between look-alikes shrink towards "
                         "zero while different shapes stay apart, and the map shows the groups forming.", parent)
        row = QHBoxLayout()
        self.curves_plot = pg.PlotWidget(title="d(S_i, S_j) per iteration")
        self.curves_plot.setLogMode(y=True)
        self.curves_plot.setLabel("bottom", "iteration (0 = inputs)")
        self.curves_plot.setLabel("left", "manifold distance")
        # the legend sits under the plot (its own row of the plot's layout), never over the curves
        self.legend = pg.LegendItem(colCount=3, horSpacing=8)
        self.legend.setMinimumWidth(0)  # never widens the plot: its columns adapt to the width instead
        self.legend.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        self.curves_plot.getPlotItem().layout.addItem(self.legend, 4, 1)
        self.curves_plot.getPlotItem().layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignHCenter)
        for p in ("bottom", "left"):
            self.curves_plot.getAxis(p).enableAutoSIPrefix(False)
        self.curves_plot.getAxis("bottom").setTickSpacing(1, 1)
        self.curves = {}
        for key, col in (("within_max", (214, 39, 40)), ("between_min", (31, 119, 180)), ("median", (90, 90, 90))):
            self.curves[key] = self.curves_plot.plot([], [], pen=pg.mkPen(col, width=2), symbol="o",
                                                     symbolBrush=col, symbolSize=6)
            self.legend.addItem(self.curves[key], LEGEND_NAMES[key][0])
        self.curves_plot.installEventFilter(self)  # the legend's columns follow the plot's width
        self.map_plot = pg.PlotWidget(title="Map of the images (classical MDS)")
        self.map_plot.setAspectLocked(True)
        self.map_plot.setLabel("bottom", "MDS 1")
        self.map_plot.setLabel("left", "MDS 2")
        for p in ("bottom", "left"):
            self.map_plot.getAxis(p).enableAutoSIPrefix(False)
        self._brushes = [pg.mkBrush(*c) for c in CLUSTER_COLOURS]
        self._grey = pg.mkBrush(*UNASSIGNED_COLOUR)
        # one scatter per colour (the cluster colours, then grey for unassigned images): no brush per point to
        # set, which at thousands of points is most of the cost of a new map
        self.points = []
        for brush in [*self._brushes, self._grey]:
            item = pg.ScatterPlotItem(size=11, pen=pg.mkPen("k", width=0.5), brush=brush)
            item.sigClicked.connect(self._clicked)
            self.map_plot.addItem(item)
            self.points.append(item)
        self.highlight = pg.ScatterPlotItem(size=20, pen=pg.mkPen((0, 0, 0), width=2), brush=None)
        self.map_plot.addItem(self.highlight)
        # why a run has only one or two points to show, over the curves (hidden otherwise)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.RichText)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.note.setMargin(4)
        self.note.setAutoFillBackground(True)
        self.note.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.note.linkActivated.connect(lambda _link: self.paperModeRequested.emit())
        self.note.hide()
        left = QVBoxLayout()
        left.setContentsMargins(0, 0, 0, 0)
        left.addWidget(self.note)
        left.addWidget(self.curves_plot, 1)
        row.addLayout(left, 1)
        row.addWidget(self.map_plot, 1)
        self.coords = np.zeros((0, 2))
        self.highlighted: list[int] = []
        self.caption = _caption()  # which clusters the within / between curves follow
        self.set_body(_body(row, self.caption))
        self._drawn = (None, None)  # (map, labels) the points show

    def plot_widgets(self):
        return [self.curves_plot, self.map_plot]

    @property
    def n_points(self) -> int:
        """How many images the map shows."""
        return sum(len(item.data) for item in self.points)

    def point_colours(self) -> list[str]:
        """The colour (``#rrggbb``) of each image's point on the map, by image index."""
        out = [""] * self.n_points
        for item in self.points:
            name = item.opts["brush"].color().name()
            for i in item.data["data"]:
                out[int(i)] = name
        return out

    def overlay_items(self):
        return [self.highlight]

    def restyle(self):
        super().restyle()
        if hasattr(self, "legend"):
            theme.style_legend(self.legend, self.palette(), self.font())
            _, fg = theme.plot_colours(self.palette())
            self.highlight.setPen(pg.mkPen(fg, width=2))
            self.fit_legend()
            text = self.note.text()  # a label lays its link out in the palette it had: again in this one
            self.note.clear()
            self.note.setText(text)

    def fit_legend(self) -> None:
        """As many legend columns (3, 2 or 1) as the width under the curves allows; shorter names before one column.

        The legend sits under the curves' box: it must fit the box's width, or its end would be cut off.
        """
        item = self.curves_plot.getPlotItem()
        room = self.curves_plot.width() - item.getAxis("left").width() - 12
        for short, cols in ((0, 3), (0, 2), (1, 3), (1, 2), (1, 1)):  # one row of short names before three long
            for (_, label), key in zip(self.legend.items, self.curves):
                if label.text != LEGEND_NAMES[key][short]:
                    label.setText(LEGEND_NAMES[key][short])
            self.legend.setColumnCount(cols)
            self.legend.updateSize()
            if self.legend.layout.preferredWidth() <= room:
                return

    def eventFilter(self, watched, event):
        if watched is getattr(self, "curves_plot", None) and event.type() == QEvent.Type.Resize:
            self.fit_legend()
        return super().eventFilter(watched, event)

    def clear(self):
        self.coords = np.zeros((0, 2))
        self.highlighted = []
        self.note.hide()
        self._drawn = (None, None)
        super().clear()

    def show_frame(self, frame):
        c = frame.curves
        x = np.arange(len(c["median"]))
        ys = []
        for key, item in self.curves.items():
            y = np.maximum(np.nan_to_num(np.asarray(c[key], float), nan=1e-6), 1e-6)
            item.setData(x, y)
            ys.append(y)
        if ys:
            self.curves_plot.getAxis("left").setTicks([log_ticks(float(np.min(ys)), float(np.max(ys)))])
        text = CURVES_EDITED if frame.cluster_ids is not None else CURVES_RUN
        self.caption.setText(text + _names_text(frame))
        note = short_run_note(getattr(frame, "result", None), len(x))
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.coords = frame.mds
        labels = np.asarray(frame.snapshot.labels)
        drawn_mds, drawn_labels = self._drawn
        if frame.mds is not drawn_mds or not np.array_equal(labels, drawn_labels):  # frames share an unchanged map
            import scipy.sparse as sp

            graph = sp.issparse(frame.snapshot.distances)
            self.map_plot.setTitle("Map of the images (spectral, K-neighbour graph)" if graph
                                   else "Map of the images (classical MDS)")
            slot = np.where(labels < 0, len(self._brushes), labels % len(self._brushes))
            by_slot = np.argsort(slot, kind="stable")
            bounds = np.searchsorted(slot[by_slot], np.arange(len(self.points) + 1))
            for k, item in enumerate(self.points):
                idx = by_slot[bounds[k]:bounds[k + 1]]
                item.setData(pos=frame.mds[idx], data=idx)
            self._drawn = (frame.mds, labels)
        self.set_empty(False)

    def select(self, indices):
        if isinstance(indices, (int, np.integer)):
            indices = [indices] if indices >= 0 else []
        idx = [i for i in indices if 0 <= i < len(self.coords)]
        self.highlighted = idx
        self.highlight.setData(pos=self.coords[idx] if idx else np.zeros((0, 2)))

    def _clicked(self, _item, points, *args):
        if len(points):
            self.pointClicked.emit(int(points[0].data()))


class CompareView(_Titled):
    """KA's plain averages next to IA's invariant means (the paper's Fig. 3b vs Fig. 4)."""

    def __init__(self, parent=None):
        super().__init__("Kernel attention vs Invariant Attention",
                         "Finish a run to compare: plain kernel attention (KA) averages look-alikes as they lie "
                         "and blurs them; Invariant Attention (IA) turns them into line first.", parent)
        row = QHBoxLayout()
        self.plots = []
        self.items = []
        for title in ("KA: plain average of each cluster", "IA: invariant mean of each cluster, upright"):
            p = pg.PlotWidget(title=title)
            p.setAspectLocked(True)
            p.invertY(True)
            p.hideAxis("bottom")
            p.hideAxis("left")
            it = pg.ImageItem(np.zeros((2, 2), np.float32))
            p.addItem(it)
            row.addWidget(p, 1)
            self.plots.append(p)
            self.items.append(it)
        self.caption = QLabel("Finish a run to compare.")
        self.caption.setWordWrap(True)
        self.set_body(_body(row, self.caption))
        self.n_tiles = 0

    def plot_widgets(self):
        return self.plots

    def clear(self):
        self.n_tiles = 0
        super().clear()

    def show_final(self, frame, true_labels=None):
        if frame.plain_means is None or frame.cluster_means is None:
            return
        k = len(frame.cluster_means)
        cols = min(k, 4)
        self.items[0].setImage(tile(frame.plain_means, cols), levels=(0, 255))
        self.items[1].setImage(mosaic(upright_tiles(frame.cluster_means), cols), levels=(0, 255))  # upright
        self.n_tiles = k
        edited = (frame.cluster_ids is not None and frame.result is not None
                  and not np.array_equal(frame.snapshot.labels, frame.result.labels))
        text = (f"{count_of(k, 'cluster')} " + ("as edited" if edited else "found by IA")
                + ". Left: what plain kernel attention averages to; right: the invariant means"
                + (" (an edited cluster's is the average of its images' means)" if edited else "") + "."
                + (" Clusters: " + ", ".join(frame.cluster_names) + "." if frame.cluster_names else ""))
        if true_labels is not None and frame.ka_labels is not None:
            from sklearn.metrics import adjusted_rand_score

            ia = frame.snapshot.labels if edited else frame.result.labels
            ari_ia = adjusted_rand_score(true_labels, ia)
            ari_ka = adjusted_rand_score(true_labels, frame.ka_labels)
            text += f" Against the true labels: IA ARI {ari_ia:.2f}, KA ARI {ari_ka:.2f}."
        self.caption.setText(text)
        self.set_empty(False)


class InspectView(_Titled):
    """Why two images were judged alike: v_i, v_j, v_i aligned onto v_j and their difference."""

    def __init__(self, parent=None):
        super().__init__("Inspect a decision",
                         "Click a square of W, or select exactly two thumbnails, to see why two images were judged "
                         "alike: one is turned and shifted onto the other, and what is left over is shown.", parent)
        self.glw = pg.GraphicsLayoutWidget()
        self.items = {}
        self.labels = []
        for col, (key, title) in enumerate((("vi", "v_i"), ("vj", "v_j"), ("aligned", "v_i aligned onto v_j"),
                                            ("difference", "|difference|"))):
            vb = self.glw.addViewBox(row=1, col=col, lockAspect=True, invertY=True, enableMouse=False)
            self.labels.append(self.glw.addLabel(title, row=0, col=col))
            it = pg.ImageItem(np.zeros((2, 2), np.float32))
            vb.addItem(it)
            self.items[key] = it
            self.glw.ci.layout.setColumnStretchFactor(col, 1)
        self._even_columns()
        self.caption = QLabel("Click W_ij in the heatmap, or select exactly two thumbnails.")
        self.caption.setWordWrap(True)
        self.set_body(_body(self.glw, self.caption))
        self.info = None

    def restyle(self):
        if hasattr(self, "glw"):
            theme.style_glw(self.glw, self.labels, self.palette(), self.font())
            self._even_columns()

    def _even_columns(self) -> None:
        """The four images as large as each other, whatever the length of their titles (a title's width
        would otherwise widen its column)."""
        for label in self.labels:
            label.updateMin()  # its own text's width, in the font it has now
        widest = max((label.preferredWidth() for label in self.labels), default=0.0)
        for label in self.labels:
            label.setPreferredWidth(widest)

    def clear(self):
        self.info = None
        super().clear()

    def show_pair(self, info: dict):
        self.info = info
        top = max(float(info["vi"].max()), float(info["vj"].max()), 1e-12)
        for key in ("vi", "vj", "aligned"):
            self.items[key].setImage(np.asarray(info[key]) / top, levels=(0, 1))
        self.items["difference"].setImage(np.asarray(info["difference"]) / top, levels=(0, 1))
        self.caption.setText(
            f"i = {info['i']} ({display_name(info['name_i'])}) onto j = {info['j']} "
            f"({display_name(info['name_j'])}):"
            f" θ = {info['theta_deg']:.2f}°, tx = {info['tx']:.2f} px, ty = {info['ty']:.2f} px; "
            f"distance {info['distance']:.4f}, score (cosine) {info['score']:.4f}")
        self.set_empty(False)
