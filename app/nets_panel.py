"""The Networks panel: train an equivariant attention network and watch its attention turn with the input.

Training runs in a superqt function worker (on Qt's thread pool, as the studio's runs do); its epochs and
batches reach the panel through queued signals, its end through the worker's ``returned``/``errored``. The
state (data, trained model, history) is the Qt-free :class:`NetsState`; the widgets only draw it.
Without PyTorch the panel says how to add it and nothing else is affected.
"""
from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from superqt.utils import create_worker

from . import theme
from .edition import nets_hint
from .panels import scrolling
from .tooltips import apply_tooltips

log = logging.getLogger(__name__)

CURRENT_SET = "Current image set (labelled)"
ROT_DIGITS = "rot-digits (offline demo)"


def torch_available() -> bool:
    """PyTorch and the networks package are importable (a bundle built without --nets has no torch)."""
    try:
        from iastudio.core.nets import torch_available as avail
    except ImportError:
        return False
    return avail()


@dataclass
class NetsState:
    """Qt-free state of the panel: the data, the trained model and its learning curve."""

    data: object = None  # iastudio.core.nets.data.Dataset
    model: object = None
    model_name: str = ""
    history: list = field(default_factory=list)
    result: object = None  # iastudio.core.nets.train.TrainResult


def train_in_background(name, data, epochs, *, on_epoch, on_batch, should_stop):
    """Train ``name`` on ``data`` (what the panel's worker thread runs); ``(model, TrainResult)``."""
    from iastudio.core.nets.train import train_model

    return train_model(name, data, epochs=epochs, batch=64, device="auto", on_epoch=on_epoch, on_batch=on_batch,
                       should_stop=should_stop, eval_subset=200)


class NetsPanel(QWidget):
    """Model and data choice, live curves, then prediction and attention maps under a rotation slider.

    Parameters
    ----------
    imageset_source : callable
        Returns the studio's current :class:`iastudio.core.imageset.ImageSet` (used when "Current image set" is chosen).
    """

    trainingEnded = Signal()  # a training finished, failed or was stopped (the panel shows which)
    _epoch = Signal(dict)  # emitted in the worker thread, queued to the GUI thread
    _batch = Signal(int, int)  # emitted in the worker thread, queued to the GUI thread

    def __init__(self, imageset_source=None, parent=None):
        super().__init__(parent)
        self.imageset_source = imageset_source or (lambda: None)
        self.state = NetsState()
        self.available = torch_available()
        self.worker = None  # the training worker, while it runs
        self._stop_flag = threading.Event()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        content = QWidget()
        lay = QVBoxLayout(content)
        # it scrolls in a short panel rather than hold every tab beside it (W, the means) at its height
        outer.addWidget(scrolling(content, min_height=80))
        self.status = QLabel()
        self.status.setWordWrap(True)
        if not self.available:
            self.status.setText(nets_hint())
            self.status.setTextFormat(Qt.TextFormat.RichText)
            lay.addWidget(self.status)
            lay.addStretch(1)
            return
        lay.addLayout(self._build_controls())
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m batches")
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addLayout(self._build_body(), 1)
        self._map_items: list = []
        self._epoch.connect(self._on_epoch, Qt.ConnectionType.QueuedConnection)
        self._batch.connect(self._on_batch, Qt.ConnectionType.QueuedConnection)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)
        self.train_button.clicked.connect(self.start_training)
        self.stop_button.clicked.connect(self.stop_training)
        for box in (self.angle, self.image_index, self.query_row, self.query_col):
            box.valueChanged.connect(self.update_inspection)
        apply_tooltips(self)
        self.restyle()
        self.status.setText("Pick a model and data, then Train. Training runs in the background.")

    def _build_controls(self) -> QGridLayout:
        """Data, model, epochs, Train and Stop (two rows, so the panel stays narrow)."""
        from iastudio.core.nets import MODEL_NAMES as MODELS

        self.data_box = QComboBox()
        self.data_box.addItems([ROT_DIGITS, CURRENT_SET])
        self.model_box = QComboBox()
        self.model_box.addItems(list(MODELS))
        self.model_box.setCurrentText("aF-p4cnn")  # fast on a CPU; a-p4cnn and GSA-Nets are slow there
        self.epochs = QSpinBox()
        self.epochs.setRange(1, 200)
        self.epochs.setValue(5)
        self.epochs.setPrefix("epochs ")
        self.train_button = QPushButton("Train")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        grid = QGridLayout()
        grid.addWidget(QLabel("Data"), 0, 0)
        grid.addWidget(self.data_box, 0, 1, 1, 2)
        grid.addWidget(QLabel("Model"), 1, 0)
        grid.addWidget(self.model_box, 1, 1)
        grid.addWidget(self.epochs, 1, 2)
        grid.addWidget(self.train_button, 0, 3)
        grid.addWidget(self.stop_button, 1, 3)
        grid.setColumnStretch(4, 1)
        return grid

    def _build_body(self) -> QHBoxLayout:
        """The learning curve beside the inspection (image, query pixel, rotation, attention maps)."""
        body = QHBoxLayout()
        self.curve_plot = pg.PlotWidget(title="Learning curve")
        self.curve_plot.addLegend(offset=(-5, 5))
        self.curve_plot.setLabel("bottom", "epoch")
        self.loss_curve = self.curve_plot.plot([], [], pen=pg.mkPen("#d62728", width=2), symbol="o", symbolSize=6,
                                               symbolBrush="#d62728", name="train loss")
        self.acc_curve = self.curve_plot.plot([], [], pen=pg.mkPen("#1f77b4", width=2), symbol="s", symbolSize=6,
                                              symbolBrush="#1f77b4", name="test accuracy")
        self.curve_plot.setMinimumWidth(160)
        body.addWidget(self.curve_plot, 2)
        inspect = QVBoxLayout()
        self.image_index = QSpinBox()
        self.image_index.setPrefix("test image ")
        self.angle = QSlider(Qt.Orientation.Horizontal)
        self.angle.setRange(0, 359)
        self.angle_label = QLabel("0°")
        # self-attention models: one query's weights (a pixel of the unrotated image), or all queries
        self.query_row, self.query_col = QSpinBox(), QSpinBox()
        for box, name in ((self.query_row, "query row "), (self.query_col, "col ")):
            box.setRange(-1, 27)
            box.setValue(-1)
            box.setPrefix(name)
            box.setSpecialValueText(name + "all")
        row = QHBoxLayout()
        for w in (self.image_index, QLabel("rotation"), self.angle, self.angle_label):
            row.addWidget(w, 1 if w is self.angle else 0)
        inspect.addLayout(row)
        row2 = QHBoxLayout()
        row2.addWidget(self.query_row)
        row2.addWidget(self.query_col)
        row2.addStretch(1)
        inspect.addLayout(row2)
        self.prediction = QLabel("Train a model to see its prediction and attention.")
        self.prediction.setWordWrap(True)
        inspect.addWidget(self.prediction)
        self.maps_widget = pg.GraphicsLayoutWidget()
        self.maps_widget.setMinimumHeight(160)
        inspect.addWidget(self.maps_widget, 1)
        body.addLayout(inspect, 3)
        return body

    def restyle(self) -> None:
        """The plots in the palette's colours and the widget's font (dark desktops, presentation mode)."""
        if self.available and hasattr(self, "curve_plot"):
            theme.style_plot(self.curve_plot, self.palette(), self.font())
            theme.style_glw(self.maps_widget, [t for _, _, t in getattr(self, "_map_items", [])],
                            self.palette(), self.font())

    def changeEvent(self, event):
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange,
                            QEvent.Type.FontChange, QEvent.Type.ApplicationFontChange):
            self.restyle()
        super().changeEvent(event)

    # ------------------------------------------------------------ training
    def load_data(self):
        """The chosen data as a Dataset (raises ValueError with a plain message)."""
        from iastudio.core.nets.data import from_imageset, rot_digits

        if self.data_box.currentText() == ROT_DIGITS:
            return rot_digits()
        iset = self.imageset_source()
        if iset is None or len(iset) == 0:
            raise ValueError("no images are loaded; open a folder with one subfolder per label, or use rot-digits")
        return from_imageset(iset, name="current image set")

    def start_training(self):
        if self.worker is not None:  # one training at a time
            return
        try:
            data = self.load_data()
        except ValueError as exc:
            self.status.setText(f"Cannot train: {exc}")
            return
        self.state = NetsState(data=data, model_name=self.model_box.currentText())
        self.loss_curve.setData([], [])
        self.acc_curve.setData([], [])
        self.progress.setValue(0)
        self.train_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status.setText(f"Training {self.state.model_name} on {data.name} ({len(data.x_train)} train / "
                            f"{len(data.x_test)} test images)…")
        self._stop_flag = stop = threading.Event()
        self.worker = create_worker(train_in_background, self.state.model_name, data, self.epochs.value(),
                                    on_epoch=self._epoch.emit, on_batch=self._batch.emit, should_stop=stop.is_set,
                                    _start_thread=False,
                                    _connect={"returned": self._on_returned, "errored": self._on_errored})
        self.worker.start()

    def stop_training(self):
        self._stop_flag.set()
        self.status.setText("Stopping after this batch…")

    @Slot(int, int)
    def _on_batch(self, done, total):
        self.progress.setMaximum(total)
        self.progress.setValue(done)

    @Slot(dict)
    def _on_epoch(self, rec):
        self.state.history.append(rec)
        ep = [r["epoch"] for r in self.state.history]
        self.loss_curve.setData(ep, [r["train_loss"] for r in self.state.history])
        self.acc_curve.setData(ep, [r["test_accuracy"] for r in self.state.history])
        self.status.setText(f"Epoch {rec['epoch']}: train loss {rec['train_loss']:.3f}, "
                            f"test accuracy {100 * rec['test_accuracy']:.1f}%")

    def _on_returned(self, trained):
        self.worker = None
        model, res = trained
        self.state.model, self.state.result = model, res
        self.train_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        extra = "" if res.invariance_error_group is None else f", 2π/N: {res.invariance_error_group:.1e}"
        self.status.setText(f"{res.model}: test accuracy {100 * res.test_accuracy:.1f}% after {res.epochs} epochs, "
                            f"{res.parameters} parameters, {res.train_seconds:.0f} s on {res.device}; "
                            f"invariance error (90°) {res.invariance_error_90:.1e}{extra}")
        self.image_index.setMaximum(max(0, len(self.state.data.x_test) - 1))
        self.update_inspection()
        self.trainingEnded.emit()

    def _on_errored(self, exc):
        self.worker = None
        log.error("network training failed\n%s", "".join(traceback.format_exception(exc)))
        self.train_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        self.status.setText(f"Training failed: {str(exc) or type(exc).__name__} (details in the log)")
        self.trainingEnded.emit()

    # ------------------------------------------------------------ inspection
    def update_inspection(self, *_):
        self.angle_label.setText(f"{self.angle.value()}°")
        if self.state.model is None:
            return
        from iastudio.core.nets.inspect import inspect_image

        data = self.state.data
        i = min(self.image_index.value(), len(data.x_test) - 1)
        query = None
        if self.query_row.value() >= 0 and self.query_col.value() >= 0:
            side = data.x_test.shape[-1]
            query = (min(self.query_row.value(), side - 1), min(self.query_col.value(), side - 1))
        ins = inspect_image(self.state.model, data.x_test[i], angle_deg=float(self.angle.value()), query=query)
        top = np.argsort(ins.probabilities)[::-1][:3]
        guess = ", ".join(f"{data.classes[k]} {100 * ins.probabilities[k]:.0f}%" for k in top)
        self.prediction.setText(f"True label: <b>{data.classes[data.y_test[i]]}</b> · prediction: {guess}<br>"
                                f"<i>{ins.kind}</i>")
        self._draw_maps(ins)

    def _draw_maps(self, ins):
        panels = [("input", ins.image)]
        if ins.maps is not None:
            group = self.state.model.group
            for h, m in enumerate(ins.maps):
                mirror, k = group.element(h) if len(ins.maps) == group.order else (0, 0)
                panels.append((f"{'mirror ' if mirror else ''}{k * 360 / group.n_rot:g}°", m))
        if len(self._map_items) != len(panels):
            self.maps_widget.clear()
            self._map_items = []
            for k, (title, _) in enumerate(panels):
                vb = self.maps_widget.addViewBox(row=0, col=k, lockAspect=True, invertY=True)
                vb.setMouseEnabled(False, False)
                item = pg.ImageItem(axisOrder="row-major")
                vb.addItem(item)
                text = self.maps_widget.addLabel(title, row=1, col=k)
                self._map_items.append((vb, item, text))
            self.restyle()
        for (vb, item, text), (title, img) in zip(self._map_items, panels):
            item.setImage(np.asarray(img, dtype=np.float32), autoLevels=True,
                          lut=None if title == "input" else pg.colormap.get("viridis").getLookupTable())
            text.setText(title)
            vb.autoRange(padding=0.02)

    # ------------------------------------------------------------ lifetime
    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Stop the training (after its batch) and wait for the worker; True if it ended in time."""
        self._stop_flag.set()
        if self.worker is None:
            return True
        return QThreadPool.globalInstance().waitForDone(timeout_ms)
