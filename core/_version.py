"""The package's version, read once from its installed metadata (a leaf: imports nothing of the package)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

__all__ = ["__version__"]

try:  # the version is written once, in pyproject.toml; installs (and the bundle) carry it as metadata
    __version__ = _installed_version("invariant-attention-studio")
except PackageNotFoundError:  # a source tree used without installing
    __version__ = "0+unknown"
