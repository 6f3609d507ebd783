"""The props every pool construct takes, as aws-cdk-lib shapes them: a base class with the fields
all share (``pool``, ``teams``) and one class per construct adding its own fields, each a frozen,
keyword-only dataclass like the structs jsii generates. A construct's keyword arguments are its
props' fields, in the same order, so props passed around reach it as
``HyperPodEksGovernance(scope, id, **vars(props))``.

The base lives here, below the construct packages, so that every backend's props extend it
without importing a sibling; the per-backend classes live beside their constructs (they name
CDK types the model must not import)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from constructs_lib.backends import Backend
from constructs_lib.core.errors import GovernanceError, Problem

from .organisation import Team, check_pool_teams


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
        if isinstance(self.teams, list | tuple):  # anything else is a problem() naming it, not a TypeError here
            object.__setattr__(self, "teams", tuple(self.teams))

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
        if not isinstance(self.teams, tuple):
            return [
                Problem(
                    path="teams",
                    wrong="not a list of teams",
                    value=type(self.teams).__name__,
                    allowed="a list or tuple of Team",
                )
            ]
        not_teams = [
            Problem(path=f"teams[{i}]", wrong="not a Team", value=type(t).__name__, allowed="a Team of the model")
            for i, t in enumerate(self.teams)
            if not isinstance(t, Team)
        ]
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
