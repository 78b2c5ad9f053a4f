"""Plain-language tooltips for every control: what it does, and when to change it.

Kept in one place so they can be read (and translated) together. Each panel calls
:func:`apply_tooltips` at the end of its ``__init__``; the keys are the panel's attribute names.

Every tooltip in the window wraps (:func:`install_tooltip_wrapping`): Qt shows a plain-text tooltip on one
line as wide as its text (the β tooltip was 1,500 px wide), and word-wraps only rich text.
"""
from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication, QMenu, QToolTip, QWidget

__all__ = ["TIP_WIDTH", "TOOLTIPS", "apply_tooltips", "install_tooltip_wrapping", "wrapped"]

TOOLTIPS: dict[str, dict[str, str]] = {
    "ImageSetPanel": {
        "open_btn": "Open a folder of images (PNG, JPEG, TIFF, BMP) and start over with them. "
                    "Images in sub-folders are read too; a sub-folder's name becomes the image's label.",
        "add_btn": "Add more image files to the ones already open: images, stacks (.mrcs/.mrc, multi-page TIFF, "
                   ".npy; each image of a stack is one image, named stack.mrcs#N) or a RELION STAR file.",
        "demo_box": "Try the studio without your own images: pick a ready-made set (shapes, digits…). "
                    "Nothing is downloaded.",
        "thumb_size": "Make the thumbnails bigger or smaller. Only the display changes, not the images.",
        "view": "Your images. Click to select (Ctrl/Shift for more), double-click to see one large, "
                "right-click for more. Drag them onto a cluster to move them.",
        "skipped_list": "Files that could not be read as images, and why. They are left out of the run.",
    },
    "TransformPanel": {
        "rotation": "How far each image may be turned at random, either way. Use it to test that the "
                    "grouping ignores rotation; 180° means any angle.",
        "shift": "How far each image may be moved at random, as a share of its size. "
                 "Use it to test that the grouping ignores position.",
        "seed": "Picks which random turns and shifts are drawn. The same number gives the same result "
                "again; change it to try another draw.",
        "apply_btn": "Turn and shift every image at random within the ranges above.",
        "reset_btn": "Undo all turns and shifts: back to the images as they were loaded.",
        "theta": "Turn the selected image by this angle (degrees).",
        "theta_slider": "Drag to turn the selected image and watch the preview.",
        "tx": "Move the selected image left (−) or right (+), in pixels.",
        "ty": "Move the selected image up (−) or down (+), in pixels.",
        "show_original": "Show the selected image as loaded, before any turn or shift.",
    },
    "RunPanel": {
        "method": "Invariant Attention groups images that match after turning and shifting them. "
                  "Kernel attention is the plain method it improves on: pick it to compare.",
        "beta_auto": "auto (recommended): the studio picks how picky the matching is for each image, undoes "
                     "an iteration that would mix the groups and stops once an iteration leaves the groups as "
                     "they were. Untick to set β yourself and run the paper's plain iteration.",
        "beta": "How picky the matching is (the paper's β in exp(−β d²)): larger means only very close "
                "look-alikes count. Used when 'auto' is off.",
        "iterations": "At most how many times the images are averaged with their look-alikes. More makes "
                      "groups tighter but takes longer; 2–4 is usually enough. With β on auto the run stops "
                      "early once the groups stop changing.",
        "clusters_auto": "auto: the studio decides how many groups there are. Untick if you know the number.",
        "clusters": "The number of groups to make, when 'auto' is off.",
        "rotation_range": "Largest turn to try when matching two images. 180° allows any angle; lower it when "
                          "your images are only slightly tilted (faster, and avoids matching a 6 with a 9).",
        "mirror": "Also match each image flipped left-right: for cells, particles, leaves… Off: a shape and "
                  "its mirror image stay apart. Doubles the matching time.",
        "paper_mode": "Run the paper's algorithm as written (the same as ia-cluster --paper): every image "
                      "starts unturned, the means move by plain fixed-size gradient steps with the smoothing "
                      "that helps most, β is one fixed number on the paper's 0–1 intensity scale (2, the "
                      "paper's; no automatic choice, no undoing an iteration), and the iterations go on until "
                      "W stops moving. Step through them with the slider under W. Demo → Show me runs it with "
                      "β = 0.3, where the blocks of its three redrawn shapes fill in iteration by iteration; "
                      "β = 2 suits exact copies. Untick for the studio's own, more careful settings.",
        "angle_step": "How finely the turns are tried. Smaller is more precise and slower; 5° suits most images.",
        "size": "Images are shrunk to this size before matching. Smaller is much faster; raise it when fine "
                "detail tells your images apart.",
        "backend": "Where the computing runs. Auto uses the graphics card (GPU) when one works here, "
                   "else the processor (CPU).",
        "dask": "Leave empty to compute on this computer. To share the work with a Dask cluster, give its "
                "scheduler's address (tcp://host:8786, started with `dask scheduler` and `dask worker`), or "
                "local:4 for four worker processes here. Needs the optional Dask package.",
        "start_btn": "Start grouping the images with the settings above (Ctrl+R).",
        "stop_btn": "Pause the run after the current step. Resume continues from there.",
        "resume_btn": "Continue a stopped run where it stopped.",
        "progress": "How far the run is, and an estimate of the time left.",
        "stage_label": "What the run is doing now, and how far that step is.",
    },
    "ClustersPanel": {
        "list": "The groups found, with how many images each holds. Click one to select its images; "
                "drop thumbnails on it to move them; right-click for more.",
        "rename_btn": "Give the selected group a name of your own (used in exports).",
        "merge_btn": "Join the selected groups into one (select two or more with Ctrl).",
        "split_btn": "Cut the selected group into k smaller groups by how alike its images are.",
        "split_k": "Into how many groups 'Split' cuts the selected one.",
        "rerun_btn": "Run Invariant Attention again on the selected group's images only, to split "
                     "it more carefully (takes a little time).",
        "new_btn": "Put the selected thumbnails into a new group of their own.",
        "unassign_btn": "Take the selected thumbnails out of their groups (they show in grey).",
        "k": "How many groups 'Re-read' reads the result as (nothing changes until you press Re-read).",
        "k_auto": "Let 'Re-read' choose the number of groups itself.",
        "k_apply": "Read the groups again with the number on the left, without re-running "
                   "(replaces your edits; Ctrl+Z undoes it).",
        "threshold": "The distance 'Re-read' groups by: images closer than this end up together; lower gives "
                     "more, smaller groups (nothing changes until you press Re-read).",
        "t_apply": "Read the groups again with the distance on the left, without re-running "
                   "(replaces your edits; Ctrl+Z undoes it).",
    },
    "NetsPanel": {
        "data_box": "What to train on: a built-in set of rotated digits, or your own images (one sub-folder "
                    "per label).",
        "model_box": "Which network to train. The 'a' models use attention; aF-p4cnn is quick on a CPU.",
        "epochs": "How many passes over the training images. More learns better but takes longer.",
        "train_button": "Train the chosen network in the background. The curves update after every pass.",
        "stop_button": "Stop training after the current batch; what was learnt so far is kept.",
        "image_index": "Which test image to show the network's answer and attention for.",
        "query_row": "Self-attention networks: the row of the pixel whose attention is shown (all: every pixel).",
        "query_col": "Self-attention networks: the column of the pixel whose attention is shown.",
        "angle": "Turn the test image and watch the attention turn with it: that is what 'equivariant' means.",
    },
}


def apply_tooltips(panel) -> None:
    """Set the tooltips of ``panel``'s controls from :data:`TOOLTIPS` (missing attributes are skipped)."""
    for name, text in TOOLTIPS.get(type(panel).__name__, {}).items():
        widget = getattr(panel, name, None)
        if widget is not None:
            widget.setToolTip(text)


TIP_WIDTH = 400  # px: a longer tooltip wraps at this width (some 60 characters a line)


def wrapped(text: str, width: int = TIP_WIDTH) -> str:
    """``text`` as rich text that Qt word-wraps at ``width`` pixels in a tooltip (rich text is returned unchanged).

    Line breaks are kept; ``<``, ``>`` and ``&`` are shown as they are.
    """
    if not text or Qt.mightBeRichText(text):
        return text
    body = html.escape(text, quote=False)
    return f"<table width={int(width)}><tr><td style='white-space:pre-wrap'>{body}</td></tr></table>"


def _too_wide(text: str, width: int = TIP_WIDTH) -> bool:
    from PySide6.QtGui import QFontMetrics

    fm = QFontMetrics(QToolTip.font())
    return any(fm.horizontalAdvance(line) > width for line in text.splitlines())


def _tooltip_of(obj, event) -> str:
    """The tooltip Qt would show for a ToolTip ``event`` on ``obj``: a widget's, a menu action's or an item's."""
    if isinstance(obj, QMenu):
        action = obj.actionAt(event.pos())
        if not obj.toolTipsVisible() or action is None or action.isSeparator():
            return ""
        text = action.toolTip()
        return "" if text == action.text().replace("&", "") else text  # Qt's tooltip is the text when none is set
    view = obj.parent()
    if isinstance(view, QAbstractItemView) and obj is view.viewport():
        index = view.indexAt(event.pos())
        value = index.data(Qt.ItemDataRole.ToolTipRole) if index.isValid() else None
        return value if isinstance(value, str) else ""
    return obj.toolTip()


class TooltipWrapper(QObject):
    """An application event filter that shows a plain-text tooltip wider than :data:`TIP_WIDTH` wrapped."""

    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.ToolTip and isinstance(obj, QWidget):
            text = _tooltip_of(obj, event)
            if text and not Qt.mightBeRichText(text) and _too_wide(text):
                QToolTip.showText(event.globalPos(), wrapped(text), obj)
                return True
        return False


def install_tooltip_wrapping(app=None) -> TooltipWrapper:
    """Make every tooltip of the application wrap (once per application; returns the filter)."""
    app = app or QApplication.instance()
    wrapper = getattr(app, "_ia_tooltip_wrapper", None)
    if wrapper is None:
        wrapper = TooltipWrapper(app)
        app.installEventFilter(wrapper)
        app._ia_tooltip_wrapper = wrapper
    return wrapper
