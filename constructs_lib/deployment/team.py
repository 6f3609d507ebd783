from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Environment, Stack
from constructs import Construct

from constructs_lib.model import GovernanceModel


class TeamStack(Stack):
    """One team's resources in the capacity account (``stack_layout: per_team``): its tenancy
    (key, bucket, roles, policies) and what each pool and controller makes for it (quota share,
    compute quota, access entries, pod identity, Kubernetes objects, alarms). Shared resources
    stay in the capacity stack, which this stack depends on."""

    def __init__(self, scope: Construct, id: str, *, model: GovernanceModel, team_name: str) -> None:
        account = model.capacity_account
        super().__init__(
            scope,
            id,
            env=Environment(account=account.account_id, region=account.region),
            description=f"GPU governance: the resources of team {team_name} in the capacity account",
        )
        self.team_name = team_name
        self._mirrors: dict[tuple[str, ...], Construct] = {}

    def mirror(self, owner_path: Sequence[str]) -> Construct:
        """The construct at ``owner_path`` (the owner's path inside the capacity stack) in this
        stack, made on first use: the team's resources keep the ids they have in one stack.
        Kept once found, since each lookup of a child is a round trip through jsii."""
        key = tuple(owner_path)
        if key not in self._mirrors:
            parent: Construct = self
            for part in key:
                parent = parent.node.try_find_child(part) or Construct(parent, part)
            self._mirrors[key] = parent
        return self._mirrors[key]
