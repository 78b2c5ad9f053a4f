"""Demo → Show me: one click from an empty window to the method at work.

It does what a user would do, through the same window and model methods: load the paper-mode demo
(:data:`iastudio.core.demos.PAPER_DEMO`: the three shapes, each redrawn six times with its own small
distortion and turned and shifted at random in the paper's ranges), set the working size and the
number of clusters it is shown with, tick paper mode (the ``paper`` preset with the demo's β: W's blocks
fill in over the iterations), press Start, and when the run is done open a large "KA vs IA" comparison.
Unsaved work is never lost silently: the window asks first, as for any action that replaces the images.

While it runs, a line above W says what the method is doing at that moment (:func:`narration`: the
similarity, each iteration's invariant means) and, at the end, what the comparison shows.  It follows
the latest frame on its own timer, stays after the run until the user closes it (×: also for the rest of
that run), loads other images or starts a run of their own, and goes when the run fails or is stopped.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMenu, QToolButton

from iastudio.core.demos import DEMO_NAMES, PAPER_DEMO
from iastudio.core.run_output import Stage

from .docks import is_presentation_mode, show_view
from .events import listen
from .layout import add_action, insert_menu

__all__ = ["SHOW_ME", "Narration", "add_demo_menu", "narration", "show_me"]

SHOW_ME = PAPER_DEMO  # the demo's inputs: the set paper mode is tuned for, its seed, size and cluster count
DEMO_TIPS = {"shapes": "The paper's Experiment 1: a horse, a 7 and a key, six copies each, turned and shifted.",
             "digits": "40 real handwritten digits (0, 1, 3, 4) from scikit-learn, turned ±45°.",
             "threes": "The paper's Experiment 2: ten handwritten 3s, turned 0–90° and shifted.",
             "sketches": "The three shapes, each redrawn six times a little differently, turned and shifted."}
TABS_SHARE = 0.7  # the share of the right-hand side the comparison gets at the end
PRESENTATION_TABS_SHARE = 0.5  # in presentation mode: W and the means keep their half (bigger text, bigger W)
# The Run panel's settings Show me runs with (besides paper mode and its cluster count): IA, the full
# circle, 5° steps, no mirrors; β (on the paper's intensity scale) and the iterations are the demo's.
DEMO_SETTINGS = {"method": "ia", "beta_auto": False, "beta": PAPER_DEMO["beta"], "iterations": PAPER_DEMO["iterations"],
                 "clusters_auto": False, "clusters": PAPER_DEMO["clusters"], "rotation_range": 180.0,
                 "angle_step": 5.0, "mirror": False, "paper_mode": True}

STARTING = "Show me: the images are being compared."


def narration(snapshot, *, iterations: int) -> str:
    """What Show me says while its run is at ``snapshot`` (None: not started), out of ``iterations``."""
    if snapshot is None:
        return STARTING
    it = max(1, int(snapshot.iteration))
    if snapshot.stage == Stage.DONE:
        return ("Show me, done. In KA vs IA, plain kernel attention (KA) averages each cluster's images as they lie: "
                "a blur. Invariant Attention (IA) turns and shifts them onto each other first: sharp. "
                "Drag the slider under W to replay the iterations.")
    if snapshot.stage == Stage.SIMILARITY and it == 1:
        return ("Show me, step 1: every image is compared with every other at every turn and shift. "
                "W shows how alike each pair is at its best match (bright: alike).")
    if snapshot.stage == Stage.SIMILARITY:
        return (f"Show me, iteration {it} of at most {iterations}: the new images are compared again. "
                "W's blocks grow brighter as the clusters emerge.")
    return (f"Show me, iteration {it} of at most {iterations}: each image is replaced by its invariant mean, "
            "the images its column of W weights, turned and shifted onto it and averaged. Watch the means sharpen.")


class Narration(QFrame):
    """The line above W that says what Show me's run is doing; × dismisses it.

    :meth:`follow` reads the text from a callable on a timer (at most every ``interval_ms``) until
    :meth:`stop`: the latest frame wins, and nothing is queued per frame.
    """

    def __init__(self, parent=None, *, interval_ms: int = 33):
        super().__init__(parent)
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self._source = None
        self.timer.timeout.connect(lambda: self._source is not None and self.say(self._source()))
        self.setObjectName("show_me_narration")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(self.palette().ColorRole.AlternateBase)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_btn = QToolButton()
        self.close_btn.setText("×")
        self.close_btn.setToolTip("Hide this line")
        self.close_btn.setAutoRaise(True)
        self.closed = False  # the user closed it (×): not shown again until the next Show me
        self.close_btn.clicked.connect(self._close)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.close_btn, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def _close(self) -> None:
        self.closed = True
        self.dismiss()

    def follow(self, source) -> None:
        """Show ``source()``'s text now and on every tick, until :meth:`stop` (it is back after ×)."""
        self.closed = False
        self._source = source
        self.say(source())
        self.timer.start()

    def stop(self) -> None:
        """No more ticks; the line keeps what it shows."""
        self.timer.stop()
        self._source = None

    def dismiss(self) -> None:
        """Stop following and hide (the × button, other images, a failed or stopped run)."""
        self.stop()
        self.hide()

    def say(self, text: str) -> None:
        """Show ``text`` (set only when it changed: the timer calls this up to 30 times a second)."""
        if self.label.text() != text:
            self.label.setText(text)
        self.show()


def _now(window) -> str:
    """Show me's line for the run's latest frame."""
    latest = window.model.session.latest
    return narration(latest and latest.snapshot, iterations=DEMO_SETTINGS["iterations"])


def _other_images(window) -> None:
    """Other images came in: the line and Show me's last result are about a set no longer there."""
    window.narration.dismiss()
    window.show_me_result = None


def add_demo_menu(window, before=None) -> QMenu:
    """A top-level Demo menu with "Show me", placed before the menu action ``before`` (e.g. Help)."""
    menu = QMenu("&Demo", window)
    act = add_action(window, menu, "Show me", lambda: show_me(window))
    act.setToolTip("Load the three shapes, each drawn six times a little differently and turned and shifted at "
                   "random, run as in the paper (paper mode: W's blocks fill in, iteration by iteration; "
                   "the slider under W replays them) and end on the comparison of plain kernel attention "
                   "with Invariant Attention.")
    menu.addSection("Image sets")
    window.demo_actions = {}
    for name in DEMO_NAMES:  # the same sets as the image panel's Demo… list
        demo = add_action(window, menu, name.capitalize(), lambda _=False, n=name: window.load_demo(n))
        demo.setToolTip(DEMO_TIPS.get(name, ""))
        window.demo_actions[name] = demo
    menu.setToolTipsVisible(True)
    window.show_me_action = act
    window.show_me_pending = False
    window.show_me_result = None  # the final frame of Show me's last run (showing it again does not ask about it)
    window.settings_before_demo = None  # the Run panel as the user left it, while Show me's run goes
    insert_menu(window, menu, before)
    window.demo_menu = menu
    window.narration = Narration()
    window.centralWidget().layout().insertWidget(0, window.narration)  # above W and the means
    listen(window.model.session.events.finished, lambda _frame: _finished(window))
    listen(window.model.session.events.state, lambda state: _state_changed(window, state))
    # other images: the line is about a run that is no longer there (Show me's own demo set comes in while it starts)
    listen(window.model.session.events.images, lambda: window.show_me_pending or _other_images(window))
    return menu


def show_me(window) -> bool:
    """Run the demo; False when refused (a run is going, or the user kept their unsaved work)."""
    m, rp = window.model, window.run_panel
    if m.refuse_while_loading():
        return False
    if m.session.busy:
        m.session.message("Stop the run first.")
        return False
    s = m.session
    own = s.final is not None and s.final is window.show_me_result and not s.edits and not s.project_path
    if not own and not window.projects.confirm_discard("Showing the demo", replaces=True):
        return False  # (Show me's own result, untouched and unsaved, is not the user's work: no question)
    user_size = window.size_after_demo or m.session.size  # a second Show me keeps the size from before the first
    # turned and shifted at random already; at the demo's own working size
    if not m.session.load_demo(SHOW_ME["demo"], seed=SHOW_ME["seed"], size=SHOW_ME["size"]):
        return False
    window.size_after_demo = user_size  # the user's next folder or demo is read at their own size again
    if window.settings_before_demo is None:
        window.settings_before_demo = rp.settings_state()  # put back when the demo's run ends
    # The same picture every time, whatever the panel showed before: every setting the run reads is set.
    rp.restore_settings(DEMO_SETTINGS)
    window.scrubber.go_live()
    show_view(window, window.convergence_view, reopen=True)  # the map gathers while it runs
    window.narration.say(STARTING)
    window.show_me_pending = window.start_run()
    if window.show_me_pending:
        window.narration.follow(lambda: _now(window))
    if not window.show_me_pending:
        window.narration.dismiss()
        _put_back_settings(window)
    return window.show_me_pending


def _put_back_settings(window) -> None:
    """The user's own Run settings again, as before Show me (the demo's run keeps its own, saved with it)."""
    if window.settings_before_demo is not None:
        window.run_panel.restore_settings(window.settings_before_demo)
        window.settings_before_demo = None


def _state_changed(window, state: str) -> None:
    if state == "running" and not window.show_me_pending:
        window.narration.dismiss()  # the user's own run: the line was about Show me's
    if state in ("failed", "stopped", "idle") and window.show_me_pending:
        window.show_me_pending = False
        window.narration.dismiss()
        _put_back_settings(window)


def _finished(window) -> None:
    if not window.show_me_pending:
        return
    window.show_me_pending = False
    window.show_me_result = window.model.session.final
    _put_back_settings(window)
    window.narration.stop()
    if not window.narration.closed:  # closed with × during the run: it stays closed
        window.narration.say(_now(window))
    show_comparison(window)


def show_comparison(window) -> None:
    """The "KA vs IA" panel, in front and large (the views above it made smaller, never below the height at
    which W and the means are whole); in presentation mode it keeps the half it has there."""
    share = PRESENTATION_TABS_SHARE if is_presentation_mode(window) else TABS_SHARE
    show_view(window, window.compare_view, reopen=True, share=share)
