"""What the window remembers between sessions besides its layout: the Run panel's settings.

A user who set a working size of 48 px and quit finds 48 px again at the next start; a project or a
recovered session opened later shows its own settings, as before.  While Show me's demo is loaded,
the user's own settings (kept aside by the demo) are remembered, not the demo's.
"""
from __future__ import annotations

import json
import logging

from iastudio.core import options

__all__ = ["RUN_SETTINGS_KEY", "remember_run_settings", "restore_run_settings"]

log = logging.getLogger(__name__)

RUN_SETTINGS_KEY = "run/settings"


def remember_run_settings(window, store) -> None:
    """Keep the Run panel's settings and the working size in ``store`` (a QSettings)."""
    state = dict(window.settings_before_demo or window.run_panel.settings_state())
    state["size"] = int(window.size_after_demo or window.model.session.size)
    store.setValue(RUN_SETTINGS_KEY, json.dumps(state))


def restore_run_settings(window, store) -> bool:
    """Show the settings :func:`remember_run_settings` kept (a damaged entry is ignored); True when used."""
    raw = store.value(RUN_SETTINGS_KEY)
    try:
        state = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        log.info("ignoring damaged run settings %r", raw)
        state = None
    if not isinstance(state, dict):
        return False
    window.run_panel.restore_settings(state, partial=True)
    size = state.get("size")
    if isinstance(size, int) and not isinstance(size, bool) and options.problem("size", size) is None \
            and window.model.session.set_size(size):
        window.run_panel.show_size(size)  # an empty set: no images event to show it
    return True
