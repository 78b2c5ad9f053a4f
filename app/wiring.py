"""Connects the window's extras once its panels, views and menus exist.

``install_ui_extras(window)`` is the one call the main window makes: empty views go back to their
hints when the images change, Run menu actions follow the run state, skipped files are listed,
right-click menus and double-click work, tooltips wrap, the convergence note's link ticks Paper mode, and
the window is fitted to its screen.
"""
from __future__ import annotations

from .context_menus import install_context_menus
from .events import listen
from .layout import fit_to_screen
from .panels import RunPanel
from .tooltips import install_tooltip_wrapping

__all__ = ["install_ui_extras", "update_run_actions", "views_of"]


def views_of(window) -> list:
    return [window.weights_view, window.means_view, window.convergence_view, window.compare_view,
            window.inspect_view]


def update_run_actions(window, state: str) -> None:
    """Run → Start / Stop / Resume enabled only when they can do something."""
    can = RunPanel.can_act(state)
    for key in ("start", "stop", "resume"):
        act = getattr(window, f"{key}_action", None)
        if act is not None:
            act.setEnabled(can[key])


def _images_changed(window) -> None:
    m = window.model
    window.images_panel.set_skipped(m.session.data.skipped)
    window.weights_view.set_has_images(m.session.n > 0)  # W's hint: "press Start", or "open a folder" when none
    if m.session.latest is None:  # new images, nothing run on them yet: every view shows its hint again
        for view in views_of(window):
            view.clear()


def _run_state(window, state: str) -> None:
    update_run_actions(window, state)
    if state == "running" and window.model.session.final is None:
        window.compare_view.clear()  # the last comparison is about another run
        if window.model.session.latest is None:  # nothing drawn yet: say what is being computed, not "open a folder"
            window.sync.show_waiting()


def _paper_mode(window) -> None:
    """The convergence note's link: tick Paper mode and show the Run tab (the user presses Start)."""
    from .docks import show_view

    window.run_panel.paper_mode.setChecked(True)
    show_view(window, window.run_panel, reopen=True)
    window.model.session.message("Paper mode is on: press Start to run the paper's plain iteration.")


def install_ui_extras(window) -> None:
    m = window.model
    listen(m.session.events.images, lambda: _images_changed(window))
    window.weights_view.set_has_images(m.session.n > 0)  # a window made for a set already loaded
    listen(m.session.events.state, lambda state: _run_state(window, state))
    update_run_actions(window, m.session.state)
    install_context_menus(window)
    install_tooltip_wrapping()  # every tooltip wraps, not one line as wide as its text
    window.convergence_view.paperModeRequested.connect(lambda: _paper_mode(window))
    fit_to_screen(window)
