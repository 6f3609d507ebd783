"""One error type for every bad input, with every problem listed at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with the input: where, what, the offending value and what is allowed."""

    path: str
    wrong: str
    value: Any
    allowed: str

    def __str__(self) -> str:
        # A path can hold a mapping key from the input: escape what would break the one line.
        path = "".join(c if c.isprintable() else repr(c)[1:-1] for c in self.path)
        return f"{path or '<root>'}: {self.wrong} ({_short(self.value)}) - {self.allowed}"


class GovernanceError(ValueError):
    """Raised once with all problems found; ``str()`` gives one line per problem."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, path: str, wrong: str, value: Any, allowed: str) -> GovernanceError:
        return cls([Problem(path=path, wrong=wrong, value=value, allowed=allowed)])


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
