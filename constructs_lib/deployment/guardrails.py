from __future__ import annotations

from aws_cdk import DefaultStackSynthesizer, Environment, Stack
from constructs import Construct

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.guardrails import OrganisationGuardrails, declared_guardrails


class OrganisationGuardrailsStack(Stack):
    """The organisation guardrails, in the management (or delegated administrator) account the
    model's ``guardrails`` section names. Refuses a ``cdk_bootstrap_qualifier`` other than the
    one this app deploys the capacity stack with: the SCP would then deny the quota changes of
    the app's own deployments."""

    def __init__(self, scope: Construct, id: str, *, model: GovernanceModel) -> None:
        guardrails = declared_guardrails(model)
        account = guardrails.management_account
        super().__init__(scope, id, env=Environment(account=account.account_id, region=account.region))
        # The stacks of one app share the synthesizer settings (context @aws-cdk/core:bootstrapQualifier).
        qualifier = (
            self.synthesizer.bootstrap_qualifier if isinstance(self.synthesizer, DefaultStackSynthesizer) else None
        )
        if qualifier is not None and qualifier != guardrails.cdk_bootstrap_qualifier:
            raise GovernanceError.single(
                "guardrails.cdk_bootstrap_qualifier",
                f"differs from this app's CDK bootstrap qualifier {qualifier!r}",
                guardrails.cdk_bootstrap_qualifier,
                f"{qualifier!r}, or deploy with that qualifier",
            )
        self.guardrails = OrganisationGuardrails(self, "Guardrails", model=model)
