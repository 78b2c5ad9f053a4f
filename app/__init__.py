"""Invariant Attention Studio: the PySide6 desktop application (issue 4; not built yet)."""
