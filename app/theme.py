"""Plots that follow the system palette and the widget font (light or dark desktop, presentation mode).

pyqtgraph draws with its own colours (white background, black text by default). These functions
repaint a plot's background, axes, titles and legend from a ``QPalette`` and size its text from a
``QFont``; the views call them on creation and whenever their palette or font changes.
"""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette

__all__ = ["PALETTES", "apply_palette", "dark_palette", "is_dark", "light_palette", "plot_colours", "style_axis",
           "style_glw", "style_legend", "style_plot", "style_plot_item"]

PALETTES = {"system": "System", "light": "Light", "dark": "Dark"}  # View → Palette: setting value -> menu text


def plot_colours(palette: QPalette) -> tuple[QColor, QColor]:
    """(background, foreground) for plots: the palette's Base and Text colours."""
    return QColor(palette.color(QPalette.ColorRole.Base)), QColor(palette.color(QPalette.ColorRole.Text))


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightnessF() < 0.5


def _pt(font: QFont) -> float:
    pt = font.pointSizeF()
    return pt if pt > 0 else 9.0


def style_plot_item(item: pg.PlotItem, palette: QPalette, font: QFont) -> None:
    """Axes, tick labels, title and legend of one PlotItem in the palette's text colour, at the font's size."""
    _, fg = plot_colours(palette)
    pt = _pt(font)
    for name in ("left", "bottom", "right", "top"):
        style_axis(item.getAxis(name), palette, font)
    title = item.titleLabel
    if title.isVisible() and title.text:
        _narrow_title(title)
        title.setText(title.text, color=fg.name(), size=f"{pt * 1.1:.1f}pt")
        height = int(pt * 2.6) + 6
        title.setMaximumHeight(height)
        item.layout.setRowFixedHeight(0, height)
    legend = item.legend
    if legend is not None:
        style_legend(legend, palette, font)


def _narrow_title(label: pg.LabelItem) -> None:
    """Let a plot's title be cut at the plot's edges rather than hold the plot wider than its panel.

    pyqtgraph makes a LabelItem's text width its minimum width on every resize, so a long title would
    keep a plot in a narrow dock wider than the dock (the plot cut off instead of its title).
    """
    if getattr(label, "_narrow", False):
        return
    text_min = type(label).updateMin

    def update_min():
        text_min(label)
        label.setMinimumWidth(0)
        label._sizeHint[Qt.SizeHint.MinimumSize] = (0, label._sizeHint[Qt.SizeHint.MinimumSize][1])

    label.updateMin = update_min
    label._narrow = True


def style_axis(axis: pg.AxisItem, palette: QPalette, font: QFont) -> None:
    """One axis: line, ticks and label in the palette's text colour; tick labels a little smaller than the font."""
    _, fg = plot_colours(palette)
    pt = _pt(font)
    tick_font = QFont(font)
    tick_font.setPointSizeF(max(6.0, pt * 0.9))
    axis.setPen(fg)
    axis.setTextPen(fg)
    axis.setStyle(tickFont=tick_font)
    if axis.labelText or axis.labelUnits:
        axis.setLabel(axis.labelText, units=axis.labelUnits or None,
                      **{"color": fg.name(), "font-size": f"{pt:.1f}pt"})


def style_legend(legend: pg.LegendItem, palette: QPalette, font: QFont) -> None:
    bg, fg = plot_colours(palette)
    legend.setLabelTextColor(fg)
    legend.setLabelTextSize(f"{_pt(font):.1f}pt")
    for _, label in legend.items:  # setAttr alone does not redraw the text already there
        label.setText(label.text, color=fg.name(), size=f"{_pt(font):.1f}pt")
    legend.updateSize()
    legend.setBrush(QColor(bg.red(), bg.green(), bg.blue(), 220))
    legend.setPen(QColor(fg.red(), fg.green(), fg.blue(), 80))


def style_plot(widget: pg.PlotWidget, palette: QPalette, font: QFont) -> None:
    """A PlotWidget: background from the palette, then its PlotItem."""
    bg, _ = plot_colours(palette)
    widget.setBackground(bg)
    style_plot_item(widget.getPlotItem(), palette, font)


def style_glw(widget: pg.GraphicsLayoutWidget, labels, palette: QPalette, font: QFont) -> None:
    """A GraphicsLayoutWidget's background and its LabelItems."""
    bg, fg = plot_colours(palette)
    widget.setBackground(bg)
    for label in labels:
        label.setText(label.text, color=fg.name(), size=f"{_pt(font):.1f}pt")


def _palette(colours: dict, disabled: tuple) -> QPalette:
    """A palette of these ``{role: (r, g, b)}`` colours; texts of disabled widgets in ``disabled``."""
    p = QPalette()
    for role, rgb in colours.items():
        p.setColor(role, QColor(*rgb))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(*disabled))
    return p


def dark_palette() -> QPalette:
    """A plain dark palette (for tests, screenshots and users who want one)."""
    R = QPalette.ColorRole
    return _palette({
        R.Window: (45, 45, 48), R.WindowText: (230, 230, 230), R.Base: (30, 30, 32), R.AlternateBase: (45, 45, 48),
        R.Text: (230, 230, 230), R.Button: (55, 55, 58), R.ButtonText: (230, 230, 230), R.ToolTipBase: (60, 60, 64),
        R.ToolTipText: (235, 235, 235), R.Highlight: (42, 130, 218), R.HighlightedText: (255, 255, 255),
        R.Link: (100, 170, 255), R.PlaceholderText: (160, 160, 165), R.BrightText: (255, 80, 80),
        R.Light: (75, 75, 78), R.Midlight: (62, 62, 65), R.Mid: (40, 40, 42), R.Dark: (25, 25, 27), R.Shadow: (0, 0, 0),
    }, (127, 127, 127))


def light_palette() -> QPalette:
    """A plain light palette (dark text on white and light grey), whatever the desktop's colours."""
    R = QPalette.ColorRole
    return _palette({
        R.Window: (239, 239, 239), R.WindowText: (20, 20, 20), R.Base: (255, 255, 255),
        R.AlternateBase: (245, 245, 245), R.Text: (20, 20, 20), R.Button: (239, 239, 239),
        R.ButtonText: (20, 20, 20), R.ToolTipBase: (255, 255, 220), R.ToolTipText: (20, 20, 20),
        R.Highlight: (48, 140, 198), R.HighlightedText: (255, 255, 255), R.Link: (0, 90, 190),
        R.PlaceholderText: (110, 110, 110), R.BrightText: (200, 0, 0), R.Light: (255, 255, 255),
        R.Midlight: (227, 227, 227), R.Mid: (160, 160, 160), R.Dark: (160, 160, 160), R.Shadow: (105, 105, 105),
    }, (150, 150, 150))


def apply_palette(choice: str, app=None) -> str:
    """Give the whole application the palette ``choice`` ("system", "light" or "dark"); returns the one applied.

    "system" puts back the palette the application had before the first other choice (the desktop's).
    An unknown choice (a settings file edited by hand) counts as "system".
    """
    app = app or QGuiApplication.instance()
    choice = choice if choice in PALETTES else "system"
    if not hasattr(app, "_ia_system_palette"):
        if choice == "system":
            return choice  # nothing changed yet: the desktop's palette is the one shown
        app._ia_system_palette = QPalette(app.palette())
    app.setPalette({"system": app._ia_system_palette, "light": light_palette(), "dark": dark_palette()}[choice])
    return choice
