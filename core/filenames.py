"""File names as the operating system gives them, and how they are shown.

On Linux a file name is bytes; names that are not valid UTF-8 reach Python as
``str`` with each undecodable byte mapped to U+DC80..U+DCFF
(``surrogateescape``, :func:`os.fsdecode`).  Everything the studio writes
keeps such a name exactly: JSON (summaries, project manifests) writes those
code points as ``\\udcXX`` escapes, CSV writes the original bytes, and
:func:`os.fsencode` turns the name read back into the same bytes.

Messages are another matter: a name may hold a newline, a carriage return or
a terminal escape, which would forge or garble a line.  :func:`printable`
makes a name safe to show on one line.
"""
from __future__ import annotations

import unicodedata

__all__ = ["printable"]


def printable(name) -> str:
    """``name`` with control characters and undecodable bytes escaped, for one-line messages.

    Parameters
    ----------
    name : str or path-like

    Returns
    -------
    str
        Control characters become ``\\n``, ``\\r``, ``\\t`` or ``\\xNN``;
        an undecodable byte (U+DC80..U+DCFF) becomes ``\\xNN`` of the byte;
        a backslash stays a backslash.  Other characters (accents, CJK, ...)
        are kept.

    Examples
    --------
    >>> printable("a\\nb\\udcff.png")
    'a\\\\nb\\\\xff.png'
    """
    out = []
    for ch in str(name):
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or (unicodedata.category(ch) == "Cf"
                                                                      and o in (0x202E, 0x202D, 0x2066,
                                                                                0x2067, 0x2068, 0x2069)):
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def display_name(path) -> str:
    """The file name of ``path`` for display, whichever separator it uses (``/`` or ``\\``)."""
    import ntpath

    return ntpath.basename(str(path))
