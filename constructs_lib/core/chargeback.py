"""What every construct does for chargeback: the cost allocation tags of a team's resources,
alert routing (the organisation's alert emails and topics, a team owner's topic) and the names
of the usage dashboards. The ``Chargeback`` construct (budgets, dashboards) composes these in
``constructs_lib.organisation.chargeback``; docs/chargeback.md says what each tag covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aws_cdk import (
    Tags,
    aws_cloudwatch as cloudwatch,
    aws_cloudwatch_actions as actions,
    aws_kms as kms,
    aws_sns as sns,
)
from constructs import Construct

from gpu_governance_runtime.contract import TAG_COST_CENTRE, TAG_POOL, TAG_TEAM

from .acknowledgements import acknowledge
from .placement import team_scope


# What these helpers read of the governance model, which sits above core: a model ``Team`` is a ``ChargedTeam``
# and a ``GovernanceModel`` is ``Alerted``, structurally, so core imports nothing from the model.
class ChargedTeam(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def cost_centre(self) -> str | None: ...
    @property
    def owner(self) -> str | None: ...


class Alerted(Protocol):
    @property
    def alerts(self) -> Sequence[str]: ...


def cost_allocation_tags(team: ChargedTeam, pool: str | None = None) -> dict[str, str]:
    """The cost allocation tags of a resource of ``team`` (and of ``pool`` when it has one)."""
    tags = {TAG_TEAM: team.name}
    if pool is not None:
        tags[TAG_POOL] = pool
    if team.cost_centre is not None:
        tags[TAG_COST_CENTRE] = team.cost_centre
    return tags


def tag_for_cost_allocation(scope: Construct, team: ChargedTeam, pool: str | None = None) -> None:
    """Tag every taggable resource under ``scope`` for ``team``'s cost allocation."""
    tags = Tags.of(scope)  # one round trip through jsii, not one per tag
    for key, value in cost_allocation_tags(team, pool).items():
        tags.add(key, value)


def alert_emails(model: Alerted) -> list[str]:
    return list(dict.fromkeys(target for target in model.alerts if not target.startswith("arn:")))


def alert_topic_arns(model: Alerted) -> list[str]:
    return list(dict.fromkeys(target for target in model.alerts if target.startswith("arn:")))


def subscribe_email(topic: sns.Topic, id: str, email: str) -> sns.Subscription:
    subscription = sns.Subscription(topic, id, topic=topic, endpoint=email, protocol=sns.SubscriptionProtocol.EMAIL)
    acknowledge(
        subscription,
        "An email address that cannot be reached is a contact to correct, not a message to replay: "
        "the alarm stays in ALARM, in its history and on the dashboards.",
        "Serverless-SNSRedrivePolicy",
    )
    return subscription


def subscribe_alerts(topic: sns.Topic, model: Alerted) -> None:
    """Platform alert emails receive everything published to ``topic`` (it stays encrypted)."""
    for email in alert_emails(model):
        subscribe_email(topic, f"Alert{email}", email)


def route_alarm(alarm: cloudwatch.Alarm, model: Alerted) -> None:
    """Also publish ``alarm`` to the organisation's existing alert topics (e.g. AWS Chatbot)."""
    for index, arn in enumerate(alert_topic_arns(model)):  # imported: the id names no resource
        alarm.add_alarm_action(actions.SnsAction(sns.Topic.from_topic_arn(alarm, f"AlertTopic{index}", arn)))


def team_alert_topic(
    owner: Construct, team: ChargedTeam, key: kms.IKey, *, topic_name: str | None = None
) -> sns.Topic | None:
    """A topic (encrypted with ``key``) that the team's owner is subscribed to, in the team's
    scope; None when the team names no owner. ``topic_name`` fixes its name, so that ``owner``'s
    stack can name its ARN without referring to the team's stack."""
    if team.owner is None:
        return None
    scope = team_scope(owner, team.name)
    topic = sns.Topic(
        scope,
        f"TeamAlerts{team.name}",
        topic_name=topic_name,
        display_name=f"GPU alerts of team {team.name}",
        master_key=key,
        enforce_ssl=True,
    )
    subscribe_email(topic, "Owner", team.owner)
    tag_for_cost_allocation(topic, team)
    return topic


def team_dashboard_name(organisation: str, team_name: str) -> str:
    return f"{organisation}-gpu-team-{team_name}"


def organisation_dashboard_name(organisation: str) -> str:
    return f"{organisation}-gpu-usage"


def reclaim_dashboard_name(organisation: str, pool: str) -> str:
    return f"{organisation}-gpu-reclaim-{pool}"
