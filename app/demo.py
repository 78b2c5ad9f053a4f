"""Demo → Show me: one click from an empty window to the method at work.

It does what a user would do, through the same window and model methods: load the paper-mode demo
(:data:`iastudio.core.demos.PAPER_DEMO`: the three shapes, each redrawn six times with its own small
distortion and turned and shifted at random in the paper's ranges), set the working size and the
number of clusters it is shown with, tick paper mode (identity start, one fixed β: W's blocks fill in
over the iterations), press Start, and when the run is done open a large "KA vs IA" comparison.
Unsaved work is never lost silently: the window asks first, as for any action that replaces the images.
"""
from __future__ import annotations

from PySide6.QtWidgets import QMenu

from iastudio.core.demos import PAPER_DEMO

from .actions import add_action
from .docks import show_view
from .layout import insert_menu

__all__ = ["SHOW_ME", "add_demo_menu", "show_me"]

SHOW_ME = PAPER_DEMO  # the demo's inputs: the set paper mode is tuned for, its seed, size and cluster count
TABS_SHARE = 0.7  # the share of the right-hand side the comparison gets at the end


def add_demo_menu(window, before=None) -> QMenu:
    """A top-level Demo menu with "Show me", placed before the menu action ``before`` (e.g. Help)."""
    menu = QMenu("&Demo", window)
    act = add_action(window, menu, "Show me", lambda: show_me(window))
    act.setToolTip("Load the three shapes, each drawn six times a little differently and turned and shifted at "
                   "random, run as in the paper (paper mode: W's blocks fill in, iteration by iteration; "
                   "the slider under W replays them) and end on the comparison of plain kernel attention "
                   "with Invariant Attention.")
    menu.setToolTipsVisible(True)
    window.show_me_action = act
    window.show_me_pending = False
    insert_menu(window, menu, before)
    window.demo_menu = menu
    window.model.runFinished.connect(lambda _frame: _finished(window))
    window.model.runStateChanged.connect(lambda state: _state_changed(window, state))
    return menu


def show_me(window) -> bool:
    """Run the demo; False when refused (a run is going, or the user kept their unsaved work)."""
    m, rp = window.model, window.run_panel
    if m.refuse_while_loading():
        return False
    if m.busy:
        m.message.emit("Stop the run first.")
        return False
    if not window.projects.confirm_discard("Showing the demo"):
        return False
    if not m.load_demo(SHOW_ME["demo"], seed=SHOW_ME["seed"]):  # turned and shifted at random already
        return False
    rp.size.setValue(SHOW_ME["size"])  # the window's own handler resizes the set (nothing left to ask)
    rp.clusters_auto.setChecked(False)
    rp.clusters.setValue(SHOW_ME["clusters"])
    rp.paper_mode.setChecked(True)
    window.scrubber.go_live()
    show_view(window, window.convergence_view, reopen=True)  # the map gathers while it runs
    window.show_me_pending = window.start_run()
    return window.show_me_pending


def _state_changed(window, state: str) -> None:
    if state in ("failed", "stopped", "idle"):
        window.show_me_pending = False


def _finished(window) -> None:
    if not window.show_me_pending:
        return
    window.show_me_pending = False
    show_comparison(window)


def show_comparison(window) -> None:
    """The "KA vs IA" panel, in front and large (the views above it made smaller)."""
    show_view(window, window.compare_view, reopen=True, share=TABS_SHARE)
