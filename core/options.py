"""The run options, declared once: name, type, default, limits, help and the layer that checks them.

The command line (:func:`iastudio.core.cli.build_parser`), the desktop app's Run panel, the engine's
:class:`~iastudio.core.attention.Settings` and the option table of the documentation are all made
from :data:`OPTIONS`, so changing a default or a limit is one edit here.

Checks are plain functions on values: :func:`problem` says what is wrong with a value in words (or
``None``), :func:`check` raises ``ValueError`` with that message, and :func:`parse` reads the text of a
command-line argument.  ``checked_by`` names the layer that refuses a bad value for callers that do not
come through the command line: ``"engine"`` (:meth:`Settings.validate
<iastudio.core.attention.Settings.validate>`), ``"session"`` (:class:`~iastudio.core.session.Session`) or
``"cli"`` (only ``ia-cluster``; :func:`parse` checks every option it reads).

This module is a leaf: it imports nothing from the package.

Examples
--------
>>> from iastudio.core.options import option, problem
>>> option("size").default, option("size").maximum
(64, 512)
>>> problem("size", 1000)
'size must be at most 512, got 1000'
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = ["OPTIONS", "Option", "alignment_options", "check", "markdown_table", "option", "parse", "problem",
           "update_markdown"]


@dataclass(frozen=True)
class Option:
    """One run option.

    Attributes
    ----------
    name : str
        The keyword (``Settings`` field, ``AttentionRun`` argument); the command-line flag is
        ``--`` and the name with ``-`` for ``_``.
    kind : {int, float, str}
        The type of a value that is not one of ``words``.
    default : object
        The default everywhere (``None``: see ``none_means``).
    help : str
        One line for ``--help`` and the documentation's table.
    minimum, maximum : float or None
        Limits of a number, inclusive (``minimum`` excluded when ``open_minimum``); ``None``: none.
    open_minimum : bool
        The value must be above ``minimum`` (e.g. β > 0).
    choices : tuple of str
        The accepted values of a ``str`` option (empty: any text).
    words : tuple of str
        Words accepted besides numbers (e.g. ``("auto",)``).
    metavar : str
        The placeholder in ``--help`` (empty: the choices).
    unit : str
        Unit of a number, for the app's fields and the table (``"px"``, ``"°"``).
    none_means : str
        What a ``None`` default means, in words.
    typical : object
        The number the app's field shows while one of ``words`` is chosen (e.g. β while "auto").
    decimals : int
        Decimals the app's field shows for a ``float`` option.
    checked_by : {"engine", "session", "cli"}
        The layer that refuses a bad value outside the command line.
    in_panel : bool
        Whether the app's Run panel has a field for it.
    """

    name: str
    kind: type
    default: object
    help: str
    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False
    choices: tuple = ()
    words: tuple = ()
    metavar: str = ""
    unit: str = ""
    none_means: str = ""
    typical: object = None
    decimals: int = 2
    checked_by: str = "engine"
    in_panel: bool = True

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--angle-step``."""
        return "--" + self.name.replace("_", "-")

    def range_text(self, *, unit: bool = False) -> str:
        """The accepted values in words, e.g. ``"8 to 512"`` (``unit``: ``"8 to 512 px"``) or ``"`ia`, `ka`"``."""
        if self.choices:
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.kind is str:
            return "text"
        lo, hi = _number(self.minimum), _number(self.maximum)
        if unit and self.unit:
            sep = "" if self.unit == "°" else " "
            lo, hi = (f"{x}{sep}{self.unit}" if x else x for x in (lo, hi))
        if self.minimum is None:
            text = "any" if self.maximum is None else f"at most {hi}"
        elif self.open_minimum:
            text = f"above {lo}" + ("" if self.maximum is None else f", at most {hi}")
        else:
            text = f"at least {lo}" if self.maximum is None else f"{lo} to {hi}"
        words = [text, *(f"`{w}`" for w in self.words)]
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]

    def default_text(self) -> str:
        """The default in words, for the documentation."""
        if self.default is None:
            return self.none_means or "none"
        if isinstance(self.default, str):
            return f"`{self.default}`"
        return _number(self.default)


def _number(v) -> str:
    return "" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


#: The run options that ``ia-cluster``, the Run panel and the engine share, in ``--help``'s order.
OPTIONS: tuple[Option, ...] = (
    Option("method", str, "ia", "ia: Invariant Attention; ka: plain kernel attention baseline",
           choices=("ia", "ka")),
    Option("clusters", int, "auto", "number of clusters (at most the number of images) or auto",
           minimum=1, maximum=10_000, words=("auto",), metavar="K|auto", typical=3),
    Option("beta", float, "auto", "RBF bandwidth on unit-norm images (auto: from near-neighbour distances)",
           minimum=0.0, open_minimum=True, maximum=1e4, words=("auto",), metavar="B|auto", typical=10.0),
    Option("iterations", int, 3, "IA iterations, at most (fewer when the clusters settle)",
           minimum=1, maximum=1000, metavar="N"),
    Option("rotation_range", float, None, "search relative rotations in [-DEG, DEG] only",
           minimum=0.0, open_minimum=True, maximum=180.0, metavar="DEG", unit="°", none_means="the whole circle"),
    # at least 0.1 degrees: at most 3,600 angles in the global search
    Option("angle_step", float, 5.0, "angle step of the global search, in degrees",
           minimum=0.1, maximum=45.0, metavar="DEG", unit="°"),
    # at most 512: beyond it one image's search grid needs gigabytes
    Option("size", int, 64, "working size: the side of the square canvas, in pixels",
           minimum=8, maximum=512, metavar="PX", unit="px", checked_by="session"),
    Option("group", str, "se2", "se2: rotations and shifts; e2: also mirror images (adds a 'mirrored' column "
           "to assignments.csv)", choices=("se2", "e2")),
    Option("scale", str, "content", "content: scale each image's object to the working size; frame: scale "
           "each file's longest side to it", choices=("content", "frame"), checked_by="cli", in_panel=False),
    Option("denoise", str, "auto", "denoise a stack of same-size gray images first (steerable PCA); auto: "
           "only when the images are noisy", choices=("auto", "on", "off"), checked_by="session"),
    Option("backend", str, "auto", "auto: a working CUDA GPU through CuPy, else NumPy",
           choices=("auto", "numpy", "cupy")),
    Option("threads", int, None, "CPU threads the engine runs on", minimum=1, metavar="N",
           none_means="one per core this process may use", in_panel=False),
    Option("neighbors", int, "auto", "align only each image's K candidate neighbours (auto: all pairs up to "
           "300 images, K=30 above)", minimum=1, words=("all", "auto"), metavar="K|all|auto", in_panel=False),
    Option("realign_rounds", int, "auto", "rounds of global re-alignment of each cluster's images onto its mean "
           "before the final class averages (auto: 3 where every pair is aligned, 1 on the pruned path; 0: each "
           "aligned onto the cluster's medoid only)",
           minimum=0, maximum=20, words=("auto",), metavar="N|auto", typical=3, in_panel=False),
    Option("readout", str, "auto", "how clusters are read out: spectral clustering, or collapse (images whose "
           "final features coincide; needs --clusters auto); auto: collapse with --paper and --clusters auto, "
           "spectral otherwise", choices=("auto", "spectral", "collapse"), in_panel=False),
    Option("dask", str, None, "run the heavy stages on a Dask cluster: local:N or tcp://host:8786 (needs the "
           "[dask] extra)", metavar="ADDRESS", none_means="this computer", checked_by="cli"),
)


def option(name: str) -> Option:
    """The declaration of the option ``name``.

    Parameters
    ----------
    name : str
        The option's keyword, e.g. ``"angle_step"``.

    Returns
    -------
    Option
        Its declaration in :data:`OPTIONS`.
    """
    for opt in OPTIONS:
        if opt.name == name:
            return opt
    raise KeyError(f"no run option {name!r}")


def problem(name: str, value, *, label: str | None = None) -> str | None:
    """What is wrong with ``value`` for the option ``name``, in words, or ``None``.

    Parameters
    ----------
    name : str
        The option's keyword.
    value : object
        The value to check (a number, one of the option's words or choices, or ``None``).
    label : str, optional
        How the message names the option (default: ``name``; the command line gives its flag).

    Returns
    -------
    str or None
        E.g. ``"size must be at most 512, got 1000"``; ``None`` when the value is accepted.
    """
    opt = option(name)
    label = label or name
    if value is None and opt.default is None:
        return None
    if isinstance(value, str) and value in opt.words:
        return None
    if opt.kind is str:
        if opt.choices and value not in opt.choices:
            return f"{label} must be one of {', '.join(map(repr, opt.choices))}, got {value!r}"
        return None
    if isinstance(value, bool) or (not isinstance(value, (int, float)) and not hasattr(value, "__float__")):
        return f"{label} must be {_expects(opt)}, got {value!r}"
    v = float(value)
    if not math.isfinite(v):
        return f"{label} must be a finite number, got {value}"
    if opt.kind is int and v != int(v):
        return f"{label} must be {_expects(opt)}, got {value}"
    got = _number(int(v) if opt.kind is int else v)
    if opt.minimum is not None and (v <= opt.minimum if opt.open_minimum else v < opt.minimum):
        edge = "above" if opt.open_minimum else "at least"
        return f"{label} must be {edge} {_number(opt.minimum)}, got {got}"
    if opt.maximum is not None and v > opt.maximum:
        return f"{label} must be at most {_number(opt.maximum)}, got {got}"
    return None


def check(name: str, value, *, label: str | None = None):
    """``value`` if the option ``name`` accepts it, else ``ValueError`` with the reason.

    Parameters
    ----------
    name : str
        The option's keyword.
    value : object
        The value to check.
    label : str, optional
        How the message names the option (default: ``name``).

    Returns
    -------
    object
        ``value``, unchanged.
    """
    text = problem(name, value, label=label)
    if text:
        raise ValueError(text)
    return value


def alignment_options(params) -> dict:
    """The alignment search a run used (``angle_step``, ``rotation_range``) from its parameters.

    Parameters
    ----------
    params : dict
        A run's settings or a project's saved parameters; values outside the declared limits (or of
        the wrong type, bools included) are left out.

    Returns
    -------
    dict
        Keywords for :func:`~iastudio.core.cluster_means.cluster_invariant_means`; ``{}``: the defaults.
    """
    opts: dict = {}
    step, rr = params.get("angle_step"), params.get("rotation_range")
    if step is not None and problem("angle_step", step) is None:
        opts["angle_step"] = float(step)
    if problem("rotation_range", rr) is None:  # None: the whole circle
        opts["rotation_range"] = rr
    return opts


def parse(name: str, text: str):
    """The value of the command-line argument ``text`` for the option ``name``, checked.

    Parameters
    ----------
    name : str
        The option's keyword.
    text : str
        The argument as typed.

    Returns
    -------
    object
        One of the option's words or choices, or the number (``int`` or ``float``).
    """
    opt = option(name)
    if text in opt.words or opt.kind is str:
        return check(name, text, label=opt.flag)
    try:
        value = opt.kind(text)
    except ValueError:
        raise ValueError(f"{opt.flag} must be {_expects(opt)}, got {text!r}") from None
    return check(name, value, label=opt.flag)


def _expects(opt: Option) -> str:
    what = "a whole number" if opt.kind is int else "a number"
    words = [repr(w) for w in opt.words]
    if len(words) > 1:
        return f"{what}, {', '.join(words[:-1])} or {words[-1]}"
    return f"{what} or {words[0]}" if words else what


MARK_BEGIN = "<!-- options table: generated from iastudio.core.options (python -m iastudio.core.options FILE) -->"
MARK_END = "<!-- end of the generated options table -->"


def markdown_table() -> str:
    """The options as a Markdown table (option, meaning, accepted values, default).

    Returns
    -------
    str
        The table, one line per option, ending with a newline.
    """
    rows = ["| option | meaning | values | default |", "| --- | --- | --- | --- |"]
    for opt in OPTIONS:
        flag = f"`{opt.flag} {opt.metavar}`" if opt.metavar and "|" not in opt.metavar else f"`{opt.flag}`"
        rows.append(f"| {flag} | {opt.help} | {opt.range_text(unit=True)} | {opt.default_text()} |")
    return "\n".join(rows) + "\n"


def update_markdown(text: str) -> str:
    """``text`` with the part between the table's markers replaced by :func:`markdown_table`.

    Parameters
    ----------
    text : str
        A Markdown page holding :data:`MARK_BEGIN` and :data:`MARK_END` on lines of their own.

    Returns
    -------
    str
        The page with the table as generated now.
    """
    head, sep, rest = text.partition(MARK_BEGIN + "\n")
    _, sep2, tail = rest.partition(MARK_END)
    if not sep or not sep2:
        raise ValueError("the page has no generated options table (its markers are missing)")
    return head + MARK_BEGIN + "\n" + markdown_table() + MARK_END + tail


def replaced(name: str, **changes) -> tuple[Option, ...]:
    """:data:`OPTIONS` with the option ``name`` changed (``dataclasses.replace``), e.g. to try a default."""
    return tuple(dataclasses.replace(o, **changes) if o.name == name else o for o in OPTIONS)


if __name__ == "__main__":  # rewrite the table in the Markdown files named
    import sys
    from pathlib import Path

    for page in sys.argv[1:]:
        path = Path(page)
        path.write_text(update_markdown(path.read_text(encoding="utf-8")), encoding="utf-8")
