from __future__ import annotations

from aws_cdk import Environment, Stack
from constructs import Construct

from constructs_lib.guardrails import OrganisationGuardrails, declared_guardrails
from constructs_lib.model import GovernanceModel


class OrganisationGuardrailsStack(Stack):
    """The organisation guardrails, in the management (or delegated administrator) account the
    model's ``guardrails`` section names."""

    def __init__(self, scope: Construct, id: str, *, model: GovernanceModel) -> None:
        account = declared_guardrails(model).management_account
        super().__init__(scope, id, env=Environment(account=account.account_id, region=account.region))
        self.guardrails = OrganisationGuardrails(self, "Guardrails", model=model)
