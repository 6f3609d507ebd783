from __future__ import annotations

from aws_cdk import Environment, Stack, aws_iam as iam
from constructs import Construct

from constructs_lib.model import GovernanceModel, account_of, submission_policy_name
from constructs_lib.tenancy import submission_role_arn


class ConsumerAccountStack(Stack):
    """One consumer account: lets each of its teams' members assume that team's submission
    role in the capacity account, and nothing else. The policy is attached to the member roles
    and users; IAM Identity Center roles cannot be changed from the account, so their permission
    set references the policy by its name (``submission_policy_name``, docs/team-guide.md)."""

    def __init__(self, scope: Construct, id: str, *, model: GovernanceModel, account_name: str) -> None:
        account = model.consumer_accounts[account_name]
        super().__init__(scope, id, env=Environment(account=account.account_id, region=account.region))
        self.policies: dict[str, iam.ManagedPolicy] = {}
        for team in model.teams_of_account(account_name):
            local = [arn for arn in team.members if account_of(arn) == account.account_id]
            roles = [
                iam.Role.from_role_arn(self, f"{team.name}Member{i}", arn)
                for i, arn in enumerate(local)
                if ":role/" in arn
            ]
            users = [
                iam.User.from_user_arn(self, f"{team.name}User{i}", arn)
                for i, arn in enumerate(local)
                if ":user/" in arn
            ]
            self.policies[team.name] = iam.ManagedPolicy(
                self,
                f"Team{team.name}Submit",
                managed_policy_name=submission_policy_name(model.organisation, team.name),
                description=f"Assume the GPU submission role of team {team.name} in the capacity account",
                statements=[
                    iam.PolicyStatement(
                        actions=["sts:AssumeRole"],
                        resources=[submission_role_arn(model.capacity_account.account_id, team.name)],
                    )
                ],
                roles=roles or None,
                users=users or None,
            )
