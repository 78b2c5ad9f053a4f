"""What this edition of the studio can do, in words for its user: the pip install or the packaged app.

The packaged app (PyInstaller) cannot install anything, so it never tells its user to ``pip install``:
it says what it does without the optional parts and where the edition with them comes from.
"""
from __future__ import annotations

from iastudio.core.extras import is_packaged

__all__ = ["can_draw_figures", "edition_text", "figures_hint", "gpu_note_text", "is_packaged", "nets_hint"]

_PREFIX = "the GPU backend is not available: "


def edition_text() -> str:
    """*Help → About*'s line on what this edition does and where the one with more comes from."""
    if is_packaged():
        return ("Edition: the installed app. It clusters, edits and exports (CSV, cluster folders, the animation) "
                "on the CPU. Networks (PyTorch), an NVIDIA GPU (CuPy), STAR files, Dask clusters and exported "
                "figures come with the studio installed with Python and its extras "
                "(see the documentation, page “Install”).")
    return "Edition: installed with Python (the optional extras add networks, the GPU, STAR files and Dask)."


def gpu_note_text(reason: str) -> str:
    """The Run panel's one line on why the GPU is not used (``reason`` from the backend probe)."""
    if is_packaged():
        return ("Runs on the CPU: this installed edition has no GPU support. For an NVIDIA GPU, install the "
                "studio with Python and its GPU extra (see the documentation, page “GPU”: docs/gpu.md).")
    reason = reason[len(_PREFIX):] if reason.startswith(_PREFIX) else reason
    return f"GPU unavailable: {reason}"


def nets_hint() -> str:
    """How to get the Networks panel's PyTorch, as rich text."""
    if is_packaged():
        return ("<b>Networks need PyTorch</b>, which this installed edition leaves out (it would add about "
                "1 GB). Install the studio with Python and its networks extra to train them (see the "
                "documentation, page “Equivariant attention networks”: docs/networks-reference.md). "
                "Everything else in the studio works without it.")
    return ("<b>Networks need PyTorch</b>, which is not installed here.<br>"
            'Add it with <code>pip install "invariant-attention-studio[nets]"</code> and restart the studio. '
            "Everything else in the studio works without it.")


def can_draw_figures() -> bool:
    """True where matplotlib, which draws the exported figures, is installed (the installer leaves it out)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def figures_hint() -> str:
    """Why *Export → Panels* cannot draw its figures here, and where the edition that can comes from."""
    if is_packaged():
        return ("This installed edition leaves out matplotlib, which draws the exported figures (PNG at 300 dpi, "
                "PDF, SVG). The CSV, the cluster folders and the animation export as usual. The studio installed "
                "with Python draws them (see the README).")
    return 'Exported figures are drawn with matplotlib: add it with <code>pip install matplotlib</code>.'
