"""The props every pool construct takes, as aws-cdk-lib shapes them: a base class with the fields
all share (``pool``, ``teams``) and one class per construct adding its own fields, each a frozen,
keyword-only dataclass like the structs jsii generates. A construct's keyword arguments are its
props' fields, in the same order, so props passed around reach it as
``HyperPodEksGovernance(scope, id, **vars(props))``.

The base lives here, below the construct packages, so that every backend's props extend it
without importing a sibling; the per-backend classes live beside their constructs (they name
CDK types the model must not import)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from constructs_lib.backends import Backend
from constructs_lib.core.errors import GovernanceError, Problem

from .pool_checks import check_pool_teams
from .teams import Team


@dataclass(frozen=True, kw_only=True)
class PoolGovernanceProps:
    """What every construct that governs one pool takes.

    ``pool``: the pool (of the construct's backend). ``teams``: the teams governed in it, each
    with a quota in the pool (``GovernanceModel.teams_in(pool.name)`` in a governance file)."""

    BACKEND: ClassVar[Backend]
    """The backend whose pools the construct governs (its descriptor in ``constructs_lib.backends``)."""

    pool: Any
    teams: Sequence[Team]

    def __post_init__(self) -> None:
        self._keep_as_tuple("teams")

    def _keep_as_tuple(self, *fields: str) -> None:
        """Lists become tuples (the props are frozen); anything else stays, for problems() to name
        rather than a TypeError here."""
        for field in fields:
            value = getattr(self, field)
            if isinstance(value, list | tuple):
                object.__setattr__(self, field, tuple(value))

    def problems(self) -> list[Problem]:
        """Everything wrong with these props, each naming its field; a subclass adds its own."""
        backend = getattr(self.pool, "backend", None)
        if backend != self.BACKEND.name:
            # The checks below read the pool's fields, which only a pool of this backend has.
            return [
                Problem(
                    path="pool",
                    wrong=f"not a {self.BACKEND.name} pool",
                    value=f"{getattr(self.pool, 'name', self.pool)} ({backend or type(self.pool).__name__})",
                    allowed=f"a pool with backend {self.BACKEND.name}",
                )
            ]
        not_teams = list_problems(
            "teams", self.teams, accepts=lambda t: isinstance(t, Team), item="Team", items="teams"
        )
        if not_teams:
            return not_teams
        # A team's resources are named after it: a second one of the same name would collide.
        first = {}
        repeated = [
            Problem(
                path=f"teams[{i}]",
                wrong=f"a second team of this name (teams[{first[t.name]}])",
                value=t.name,
                allowed="each team once",
            )
            for i, t in enumerate(self.teams)
            if first.setdefault(t.name, i) != i
        ]
        return repeated + check_pool_teams(self.pool, [(f"teams[{i}]", t) for i, t in enumerate(self.teams)], "pool")

    def check(self) -> None:
        """Raise every problem at once; constructs call it before creating any resource."""
        if problems := self.problems():
            raise GovernanceError(problems)


def list_problems(
    path: str,
    value: Any,
    *,
    accepts: Callable[[Any], bool],
    item: str,
    items: str,
    allowed_item: str | None = None,
    least: int = 0,
    most: int | None = None,
) -> list[Problem]:
    """What is wrong with a props field that holds a list (already a tuple, see
    ``_keep_as_tuple``): not a list at all, an entry ``accepts`` refuses, or more than ``most``
    entries or fewer than ``least``. ``item`` names one entry's kind, ``items`` the list's."""
    if not isinstance(value, tuple):
        return [
            Problem(
                path=path,
                wrong=f"not a list of {items}",
                value=type(value).__name__,
                allowed=f"a list or tuple of {item}",
            )
        ]
    problems = [
        Problem(
            path=f"{path}[{i}]",
            wrong=f"not {'an' if item[0] in 'AEIOU' else 'a'} {item}",
            value=entry if isinstance(entry, str) else type(entry).__name__,
            allowed=allowed_item or f"a {item} of the model",
        )
        for i, entry in enumerate(value)
        if not accepts(entry)
    ]
    if len(value) < least:
        problems.append(
            Problem(path=path, wrong=f"fewer than {least} {items}", value=len(value), allowed=f"at least {least}")
        )
    if most is not None and len(value) > most:
        problems.append(
            Problem(path=path, wrong=f"more than {most} {items}", value=len(value), allowed=f"at most {most}")
        )
    return problems
