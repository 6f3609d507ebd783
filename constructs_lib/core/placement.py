"""Where a governance construct puts the resources of one team.

A construct that makes resources per team (a quota share, a compute quota, an access entry, an
alarm) asks :func:`team_scope` for their scope instead of using itself. By default the answer is
the construct itself, so nothing moves. A stack that defines ``team_scope(owner, team_name)``
(the reference app's ``per_team`` layout, docs/architecture.md) answers with a construct in that
team's own stack instead; construct ids stay the same, only the stack differs.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import Arn, ArnFormat, Stack, Token
from constructs import Construct

from .errors import Problem

Placer = Callable[[Construct, str], Construct]

# Each owner's placer by the owner's jsii object id (unique for the process's life; jsii keeps the
# objects themselves that long too): an owner asks for every team, and Stack.of is a round trip
# through jsii (docs/performance.md, round trips).
_placers: dict[str, Placer | None] = {}


def team_scope(owner: Construct, team_name: str) -> Construct:
    ref = owner.__jsii_ref__.ref
    if ref not in _placers:
        _placers[ref] = getattr(Stack.of(owner), "team_scope", None)
    placer = _placers[ref]
    return owner if placer is None else placer(owner, team_name)


def cluster_placement_problems(
    path: str, cluster_arn: str, stack: Stack, *, subject: str, deployer: str
) -> list[Problem]:
    """A cluster of another account or region than ``stack`` (where known): EKS access entries and
    pod identity associations are made in the cluster's own account and region."""
    cluster = Arn.split(cluster_arn, ArnFormat.SLASH_RESOURCE_NAME)
    return [
        Problem(
            path=path,
            wrong=f"{subject} is in another {field} than the stack",
            value=cluster_arn,
            allowed=f"a cluster in {field} {stack_value} (deploy {deployer} where the cluster is)",
        )
        for field, stack_value, cluster_value in (
            ("account", stack.account, cluster.account),
            ("region", stack.region, cluster.region),
        )
        if not Token.is_unresolved(stack_value) and stack_value != cluster_value
    ]
