"""Runtime hook of the installed app: PySide6's QtOpenGL bindings (8.9 MB) are left out of the bundle.

pyqtgraph imports ``PySide6.QtOpenGL`` when it starts, but uses it only to draw a plot through OpenGL
(``pyqtgraph.setConfigOptions(useOpenGL=True)`` or an OpenGL image widget), which the app never asks for.
A stand-in module takes the name, so that import succeeds; using anything in it raises an AttributeError
that says why.  (``QtOpenGLWidgets``, which pyqtgraph's widgets subclass, stays: it does not import
``QtOpenGL``.)
"""
import sys
import types

NAME = "PySide6.QtOpenGL"
REASON = "the installed Invariant Attention Studio draws its plots without OpenGL; PySide6.QtOpenGL is not in it"


def stand_in() -> types.ModuleType:
    module = types.ModuleType(NAME, __doc__)

    def __getattr__(attr):
        raise AttributeError(f"{NAME}.{attr}: {REASON}")

    module.__getattr__ = __getattr__
    return module


if NAME not in sys.modules:
    sys.modules[NAME] = stand_in()
