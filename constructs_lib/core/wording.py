"""Counts in the CLI's sentences: "1 pool", "2 pools", never "1 pools"."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, the noun in the plural unless the number is one."""
    if number == 1:
        return f"1 {noun}"
    return f"{number} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"
