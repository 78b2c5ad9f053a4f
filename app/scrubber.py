"""The iteration scrubber: a slider over the run's recorded frames, with "Live" at its right end.

At "Live" the views follow the run (the latest frame).  Anywhere else they show that recorded frame,
with W's colour scale fixed over the whole run so frames can be compared by eye.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QWidget
from superqt import QElidingLabel

from iastudio.core.wording import count_of

__all__ = ["IterationScrubber"]

LABEL_MAX = 220  # px: the most the label takes from the slider (more with bigger text: LABEL_CHARS)
LABEL_CHARS = 32  # average characters: the most the label takes with the font it has (presentation mode)
NO_RUN_HINT = "Run to step through iterations"  # whole beside the slider at 1024 px (it is not a command)
NO_RUN_TIP = "Run to step through W, the means and the map iteration by iteration."


class IterationScrubber(QWidget):
    """Pick a recorded frame of the run, or "Live" (the right end).

    ``positionChanged`` is emitted when the user moves it; :meth:`chosen` is the frame index picked,
    or None at "Live".
    """

    positionChanged = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        self.title = QLabel("Iteration:")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 0)
        self.slider.setPageStep(1)
        self.label = QElidingLabel(NO_RUN_HINT)
        self.label.setMinimumWidth(40)  # see _fit_label: elided only past half the scrubber's width
        self.live_btn = QPushButton("Live")
        lay.addWidget(self.title)
        lay.addWidget(self.slider, 1)
        lay.addWidget(self.label)
        lay.addWidget(self.live_btn)
        self.count = -1  # set_count(0) below lays out the no-run state
        self._describe = None
        self.slider.setToolTip("Drag to step back through the run: W, the means and the map show that moment. "
                               "The colour scale of W stays the same for every step, so they can be compared. "
                               "The right end (Live) follows the run again.")
        self.live_btn.setToolTip("Go back to the live view: the views follow the run as it goes.")
        self.slider.valueChanged.connect(self._moved)
        self.live_btn.clicked.connect(self.go_live)
        self.set_count(0)

    def chosen(self) -> int | None:
        """The recorded frame picked, or None at "Live"."""
        v = self.slider.value()
        return None if self.count == 0 or v >= self.count else v

    def set_count(self, count: int, describe=None) -> None:
        """The run now has ``count`` recorded frames; "Live" stays live, a picked frame stays picked."""
        if count == self.count:
            return
        was = self.chosen()
        self.count = count
        self.slider.blockSignals(True)
        self.slider.setRange(0, count)  # the last position (== count) is "Live"
        self.slider.setValue(count if was is None or was >= count else was)
        self.slider.blockSignals(False)
        on = count > 0
        self.slider.setEnabled(on)
        self.live_btn.setEnabled(on)
        self.setToolTip("" if on else NO_RUN_TIP)
        self._describe = describe
        self._update_label()

    def set_position(self, index: int | None) -> None:
        """Pick frame ``index`` (None: "Live"), as the user would."""
        self.slider.setValue(self.count if index is None else max(0, min(index, self.count)))

    def go_live(self) -> None:
        self.set_position(None)

    def _moved(self, _value) -> None:
        self._update_label()
        self.positionChanged.emit()

    def _update_label(self) -> None:
        i = self.chosen()
        if self.count == 0:
            text = NO_RUN_HINT
        elif i is None:
            text = f"Live · {count_of(self.count, 'step')}"
        else:
            what = self._describe(i) if self._describe else ""
            text = f"step {i + 1} of {self.count}" + (f" · {what}" if what else "")
        self.label.setText(text)
        self.label.setToolTip(NO_RUN_TIP if self.count == 0 else text)
        self._fit_label()

    def _fit_label(self) -> None:
        """Room for the whole label (the hint before a run, "Live · 3 steps", "step 2 of 7 · it. 1, means"), up to
        LABEL_MAX px (LABEL_CHARS characters with bigger text) and half the scrubber: the slider takes the rest,
        and the window must still fit an 800-px screen.  A longer text is elided, and read in full in its tooltip.

        The width is the label's minimum, not only its wish: a relayout (a menu opened, the window resized)
        shrinking the slider's neighbours leaves it whole."""
        fm = self.label.fontMetrics()
        full = fm.horizontalAdvance(self.label.text()) + 6
        most = max(LABEL_MAX, LABEL_CHARS * fm.averageCharWidth())
        self.label.setMinimumWidth(max(40, min(full, most, self.width() // 2)))

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._fit_label()

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # presentation mode: the text is wider now
            self._fit_label()
