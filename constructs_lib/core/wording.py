"""Counts and lists in the CLI's sentences: "1 pool", "2 pools", never "1 pools"; "a, b, c and 4 more"."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, the noun in the plural unless the number is one."""
    if number == 1:
        return f"1 {noun}"
    return f"{number} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


def listed(names: list[str], shown: int = 3) -> str:
    """``names`` as a sentence lists them: "a and b", "a, b and c", "a, b, c and 4 more"."""
    if len(names) <= shown:
        return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"
