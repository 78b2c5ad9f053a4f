"""Counted words for messages and captions: "1 cluster", "3 clusters"."""
from __future__ import annotations

__all__ = ["count_of", "plural"]


def plural(n: int, word: str, many: str | None = None) -> str:
    """``word`` for exactly one, else ``many`` (default ``word + "s"``)."""
    return word if int(n) == 1 else (many or word + "s")


def count_of(n: int, word: str, many: str | None = None) -> str:
    """``"1 cluster"``, ``"3 clusters"``, ``"0 clusters"``."""
    return f"{int(n)} {plural(n, word, many)}"
