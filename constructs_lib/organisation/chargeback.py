"""Who used what, and what it cost: cost allocation tags, alert routing, AWS Budgets and the usage
dashboards (docs/chargeback.md).

Minimal use, in the capacity account's stack, after the reclaim controller::

    Chargeback(self, "Chargeback", model=model, reclaim=reclaim_controller, tenants=tenants)

Budgets exist only where the model declares them (``teams[].monthly_budget_usd``; capacity
windows for the purchases budget). Every metric drawn is named in the runtime contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from aws_cdk import Duration, Stack, aws_budgets as budgets, aws_cloudwatch as cloudwatch
from constructs import Construct

from constructs_lib.backends import backend_of
from constructs_lib.controllers.capacity_policy import polls_team_spend
from constructs_lib.core.chargeback import (
    alert_emails,
    organisation_dashboard_name,
    tag_for_cost_allocation,
    team_dashboard_name,
)
from constructs_lib.core.placement import team_scope
from constructs_lib.model import GovernanceModel, Team
from gpu_governance_runtime.contract import (
    BORROWED_HOURS,
    CAPACITY_NAMESPACE,
    GUARANTEE_KEPT_PERCENT,
    GUARANTEED_HOURS,
    LENT_HOURS,
    PURCHASE_FEE_DIMENSIONS,
    PURCHASE_FEES,
    PURCHASED_DIMENSIONS,
    PURCHASED_HOURS,
    PURCHASED_USED_HOURS,
    PURCHASED_UTILISATION,
    RECLAIM_NAMESPACE,
    SHARE_DIMENSIONS,
    TAG_MANAGED_BY,
    TAG_TEAM,
    TEAM_SPEND,
    TEAM_SPEND_DIMENSIONS,
    UNTAGGED_TEAM,
    USED_HOURS,
)

if TYPE_CHECKING:
    from constructs_lib.controllers.reclaim import ReclaimController
    from constructs_lib.tenancy import TeamTenancy

# Budget notifications: spend passed 80% of the month's amount, or is forecast to pass it.
BUDGET_THRESHOLDS = (("ACTUAL", 80), ("FORECASTED", 100))
MAX_BUDGET_SUBSCRIBERS = 10  # email subscribers per budget notification (AWS Budgets quota)
WEEKS_PER_MONTH = Decimal(52) / Decimal(12)
# Fees are drawn per 30 days (CloudWatch has no calendar month) over the last 90, against monthly budgets.
FEE_PERIOD, FEE_RANGE = Duration.days(30), "-P90D"
# The share of the time a team asked for its guarantee that it was kept (usage.kept_percent): the
# Average of the controller's per-tick GuaranteeKeptPercent, per 30 days as the fees.
KEPT_TITLE = "guarantee kept (% of the time asked, per 30 days)"
PERCENT_AXIS = cloudwatch.YAxisProps(min=0, max=100)
# The organisation's spend graph draws one line per distinct team budget amount, at most this many.
MAX_BUDGET_LINES = 10


def _budget_notifications(emails: Sequence[str]) -> list[budgets.CfnBudget.NotificationWithSubscribersProperty]:
    subscribers = [
        budgets.CfnBudget.SubscriberProperty(address=e, subscription_type="EMAIL") for e in dict.fromkeys(emails)
    ][:MAX_BUDGET_SUBSCRIBERS]
    if not subscribers:
        return []
    return [
        budgets.CfnBudget.NotificationWithSubscribersProperty(
            notification=budgets.CfnBudget.NotificationProperty(
                notification_type=kind,
                comparison_operator="GREATER_THAN",
                threshold=threshold,
                threshold_type="PERCENTAGE",
            ),
            subscribers=subscribers,
        )
        for kind, threshold in BUDGET_THRESHOLDS
    ]


def cost_budget(
    scope: Construct, id: str, *, name: str, amount: Decimal, tag_key: str, tag_value: str, emails: Sequence[str]
) -> budgets.CfnBudget:
    """A monthly COST budget of the spend carrying a cost allocation tag (``user:`` + key, as the
    Billing console and AWS Budgets name user-defined tags)."""
    return budgets.CfnBudget(
        scope,
        id,
        budget=budgets.CfnBudget.BudgetDataProperty(
            budget_name=name,
            budget_type="COST",
            time_unit="MONTHLY",
            budget_limit=budgets.CfnBudget.SpendProperty(amount=float(amount), unit="USD"),
            cost_filters={"TagKeyValue": [f"user:{tag_key}${tag_value}"]},
        ),
        notifications_with_subscribers=_budget_notifications(emails),
    )


def purchases_monthly_amount(model: GovernanceModel) -> Decimal:
    """What the capacity windows may spend in a month: each window's budget, weekly ones scaled."""
    return sum(
        (w.budget.amount * (WEEKS_PER_MONTH if w.budget.period == "week" else 1) for w in model.capacity_windows),
        Decimal(0),
    ).quantize(Decimal("0.01"))


class Chargeback(Construct):
    """Budgets (per team with ``monthly_budget_usd``, and one for capacity purchases when windows
    exist), the organisation's usage dashboard and one dashboard per team the reclaim controller
    observes or whose capacity windows buy capacity, readable by that team's submission role.
    With capacity windows the dashboards also draw purchase fees against the budgets and the
    utilisation of each purchased block and plan. ``purchases_controller_id``: the capacity
    controller whose purchases the purchases budget covers; when a team declares a monthly budget,
    that controller also reads each team's spend once a day, and the dashboards draw it against
    the budgets (every team with a budget then gets a dashboard). Exposes ``budgets`` (per team),
    ``purchases_budget`` (or None), ``dashboard`` (None with nothing to draw) and ``team_dashboards``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: GovernanceModel,
        reclaim: ReclaimController | None = None,
        tenants: Mapping[str, TeamTenancy] | None = None,
        purchases_controller_id: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.model = model
        self.budgets: dict[str, budgets.CfnBudget] = {}
        self.purchases_budget: budgets.CfnBudget | None = None
        platform = alert_emails(model)
        for team in model.teams:
            if team.monthly_budget_usd is not None:
                self.budgets[team.name] = cost_budget(
                    team_scope(self, team.name),
                    f"Budget{team.name}",
                    name=f"{model.organisation}-gpu-team-{team.name}",
                    amount=team.monthly_budget_usd,
                    tag_key=TAG_TEAM,
                    tag_value=team.name,
                    emails=[*([team.owner] if team.owner else []), *platform],
                )
                tag_for_cost_allocation(self.budgets[team.name], team)
        if model.capacity_windows and purchases_controller_id is not None:
            # Purchases carry the buying controller's id (TAG_MANAGED_BY), not a team's tag.
            self.purchases_budget = cost_budget(
                self,
                "PurchasesBudget",
                name=f"{model.organisation}-gpu-purchases",
                amount=purchases_monthly_amount(model),
                tag_key=TAG_MANAGED_BY,
                tag_value=purchases_controller_id,
                emails=platform,
            )
        self.reclaim = reclaim  # a team's pools on its dashboard are the reclaim controller's: its metrics draw them
        self.schedule = reclaim.schedule if reclaim is not None else Duration.minutes(1)
        # The capacity controller publishes each team's spend (capacity/spend.py).
        self.draws_spend = (
            bool(model.capacity_windows) and purchases_controller_id is not None and polls_team_spend(model)
        )
        # Slurm pools observed for usage only have no queue metrics, but their instance-hours (Slurm accounting).
        pools = [t.pool for t in (*reclaim.targets, *reclaim.usage_targets)] if reclaim is not None else []
        self.dashboard = self._organisation_dashboard(pools) if pools or model.capacity_windows else None
        self.team_dashboards: dict[str, cloudwatch.Dashboard] = {}
        buyers = {w.team for w in model.capacity_windows}  # teams whose windows buy capacity for them
        for team in model.teams:
            team_pools = [p for p in pools if p in team.quotas]
            if team_pools or team.name in buyers or (self.draws_spend and team.monthly_budget_usd is not None):
                self.team_dashboards[team.name] = self._team_dashboard(
                    team, team_pools, (tenants or {}).get(team.name), buys=team.name in buyers
                )

    def _search(
        self,
        metric_name: str,
        statistic: str,
        period: Duration,
        namespace: str = RECLAIM_NAMESPACE,
        dimensions: Sequence[str] = SHARE_DIMENSIONS,
        label: str = "",
        team: str | None = None,
        total: bool = False,
        not_team: str | None = None,
    ) -> cloudwatch.MathExpression:
        # One search draws every team: the dashboard's size does not grow with the organisation.
        # ``team``: only that team's series (a quoted value matches exactly); ``total``: their sum.
        keys = ",".join((namespace, *dimensions))
        only = f' Team="{team}"' if team is not None else ""
        excluding = f' NOT Team="{not_team}"' if not_team is not None else ""
        search = f"SEARCH('{{{keys}}} MetricName=\"{metric_name}\"{only}{excluding}', '{statistic}', {int(period.to_seconds())})"
        return cloudwatch.MathExpression(
            expression=f"SUM({search})" if total else search, using_metrics={}, label=label, period=period
        )

    def _purchases_widgets(self, team: Team | None = None) -> list[cloudwatch.GraphWidget]:
        """Spend vs budget and the utilisation of what was bought: for the organisation (every
        team's fees, their total against the purchases budget) or for ``team`` (its fees against
        its own monthly budget; its blocks and plans)."""
        hour, day = Duration.hours(1), Duration.days(1)
        of_team = team.name if team is not None else None
        search = lambda metric, statistic, period, **kw: self._search(  # noqa: E731
            metric, statistic, period, namespace=CAPACITY_NAMESPACE, dimensions=PURCHASED_DIMENSIONS, team=of_team, **kw
        )
        if team is None:
            fees = [
                self._search(
                    PURCHASE_FEES, "Sum", FEE_PERIOD, namespace=CAPACITY_NAMESPACE, dimensions=PURCHASE_FEE_DIMENSIONS
                ),
                self._search(
                    PURCHASE_FEES,
                    "Sum",
                    FEE_PERIOD,
                    namespace=CAPACITY_NAMESPACE,
                    dimensions=PURCHASE_FEE_DIMENSIONS,
                    label="all teams",
                    total=True,
                ),
            ]
            budget, budget_label, whose = purchases_monthly_amount(self.model), "purchases budget per month", "per team"
        else:
            fees = [
                cloudwatch.Metric(
                    namespace=CAPACITY_NAMESPACE,
                    metric_name=PURCHASE_FEES,
                    dimensions_map=dict(zip(PURCHASE_FEE_DIMENSIONS, (team.name,), strict=True)),
                    statistic="Sum",
                    period=FEE_PERIOD,
                    label=f"fees of team {team.name}",
                )
            ]
            budget, budget_label, whose = (
                team.monthly_budget_usd,
                f"monthly budget of team {team.name}",
                f"of team {team.name}",
            )
        annotations = [cloudwatch.HorizontalAnnotation(value=float(budget), label=budget_label)] if budget else []
        return [
            cloudwatch.GraphWidget(
                title=f"purchase fees {whose} (USD per 30 days) vs budget",
                width=8,
                left=fees,
                left_annotations=annotations,
                start=FEE_RANGE,
            ),
            cloudwatch.GraphWidget(
                title="utilisation of each purchased block and plan (%)",
                width=8,
                left=[search(PURCHASED_UTILISATION, "Average", hour)],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
            ),
            cloudwatch.GraphWidget(
                title="purchased vs used instance-hours per day",
                width=8,
                left=[
                    search(PURCHASED_HOURS, "Sum", day, label="purchased", total=True),
                    search(PURCHASED_USED_HOURS, "Sum", day, label="used", total=True),
                ],
            ),
        ]

    def _spend_widgets(self, team: Team | None = None) -> list[cloudwatch.GraphWidget]:
        """Month-to-date spend (Cost Explorer, a day or two behind) against the monthly budgets: every
        team's, with a line per budget amount, and what carries no team tag; or ``team``'s own."""
        day = Duration.days(1)
        spend = lambda team_name, label: cloudwatch.Metric(  # noqa: E731
            namespace=CAPACITY_NAMESPACE,
            metric_name=TEAM_SPEND,
            dimensions_map=dict(zip(TEAM_SPEND_DIMENSIONS, (team_name,), strict=True)),
            statistic="Maximum",
            period=day,
            label=label,
        )
        title = "spend this month (USD, Cost Explorer, a day or two behind)"
        if team is not None:
            budget = team.monthly_budget_usd
            annotations = (
                [cloudwatch.HorizontalAnnotation(value=float(budget), label=f"monthly budget of team {team.name}")]
                if budget
                else []
            )
            return [
                cloudwatch.GraphWidget(
                    title=f"{title} vs budget",
                    width=12,
                    left=[spend(team.name, f"spend of team {team.name}")],
                    left_annotations=annotations,
                    start=FEE_RANGE,
                )
            ]
        by_amount: dict[Decimal, list[str]] = {}
        for budgeted in self.model.teams:
            if budgeted.monthly_budget_usd is not None:
                by_amount.setdefault(budgeted.monthly_budget_usd, []).append(budgeted.name)
        annotations = [
            cloudwatch.HorizontalAnnotation(value=float(amount), label=_budget_label(names))
            for amount, names in sorted(by_amount.items())[:MAX_BUDGET_LINES]
        ]
        return [
            cloudwatch.GraphWidget(
                title=f"{title} per team vs monthly budgets",
                width=12,
                left_annotations=annotations,
                start=FEE_RANGE,
                left=[
                    self._search(
                        TEAM_SPEND,
                        "Maximum",
                        day,
                        namespace=CAPACITY_NAMESPACE,
                        dimensions=TEAM_SPEND_DIMENSIONS,
                        not_team=UNTAGGED_TEAM,
                    )
                ],
            ),
            cloudwatch.GraphWidget(
                title=f"{title} without a team tag (shared pools, everything else)",
                width=12,
                start=FEE_RANGE,
                left=[spend(UNTAGGED_TEAM, "without a team tag")],
            ),
        ]

    def _organisation_dashboard(self, pools: Sequence[str]) -> cloudwatch.Dashboard:
        """Every team at once, drawn by search expressions (its size does not grow with the teams)."""
        day = Duration.days(1)
        dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=organisation_dashboard_name(self.model.organisation)
        )
        if pools:
            dashboard.add_widgets(
                *(
                    cloudwatch.GraphWidget(
                        title=f"{title} (instance-hours per day, per pool and team)",
                        width=12,
                        left=[self._search(metric, "Sum", day)],
                    )
                    for title, metric in (
                        ("used", USED_HOURS),
                        ("guaranteed", GUARANTEED_HOURS),
                        ("borrowed", BORROWED_HOURS),
                        ("lent", LENT_HOURS),
                    )
                )
            )
            dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="waiting work (instances; workloads on HyperPod EKS pools)",
                    width=8,
                    left=[self._search("Pending", "Maximum", self.schedule)],
                ),
                cloudwatch.GraphWidget(
                    title="teams starved below their guarantee",
                    width=8,
                    left=[self._search("StarvedBelowGuarantee", "Maximum", self.schedule)],
                ),
                cloudwatch.GraphWidget(
                    title="reclaims and preemptions",
                    width=8,
                    left=[self._search("Preemptions", "Sum", Duration.hours(1))],
                ),
            )
            dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title=KEPT_TITLE + ", per pool and team",
                    width=24,
                    left=[self._search(GUARANTEE_KEPT_PERCENT, "Average", FEE_PERIOD)],
                    left_y_axis=PERCENT_AXIS,
                    start=FEE_RANGE,
                )
            )
        if self.model.capacity_windows:
            dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="capacity purchases",
                    width=12,
                    left=[
                        cloudwatch.Metric(namespace=CAPACITY_NAMESPACE, metric_name=name, statistic="Sum", period=day)
                        for name in ("Purchases", "PurchaseFailures")
                    ],
                ),
                cloudwatch.GraphWidget(
                    title="spend per capacity window (USD)",
                    width=12,
                    left=[self._search("Spend", "Maximum", day, namespace=CAPACITY_NAMESPACE, dimensions=("Window",))],
                ),
            )
            dashboard.add_widgets(*self._purchases_widgets())
        if self.draws_spend:
            dashboard.add_widgets(*self._spend_widgets())
        return dashboard

    def _team_dashboard(
        self, team: Team, pools: Sequence[str], tenancy: TeamTenancy | None, *, buys: bool = False
    ) -> cloudwatch.Dashboard:
        scope = team_scope(self, team.name)
        name = team_dashboard_name(self.model.organisation, team.name)
        dashboard = cloudwatch.Dashboard(scope, f"TeamDashboard{team.name}", dashboard_name=name)
        for pool in pools:
            dashboard.add_widgets(
                cloudwatch.TextWidget(markdown=f"## Team {team.name} in pool {pool}", width=24, height=1)
            )
            dashboard.add_widgets(*self._pool_widgets(team, pool))
        if buys:
            dashboard.add_widgets(
                cloudwatch.TextWidget(markdown=f"## Capacity bought for team {team.name}", width=24, height=1)
            )
            dashboard.add_widgets(*self._purchases_widgets(team))
        if self.draws_spend:
            dashboard.add_widgets(*self._spend_widgets(team))
        if tenancy is not None:
            tenancy.allow_dashboard(
                Stack.of(dashboard).format_arn(
                    service="cloudwatch", region="", resource="dashboard", resource_name=name
                )
            )
        return dashboard

    def _pool_widgets(self, team: Team, pool: str) -> list[cloudwatch.IWidget]:
        """One row of the team's dashboard per pool: its share, its instance-hours, its wait; the
        guarantee kept and the preemptions where the pool's backend records them."""
        backend = backend_of(self.model.pool(pool))  # Kueue: waiting workloads, not instances, and preemptions unseen
        widgets = [
            cloudwatch.GraphWidget(
                title="guarantee vs use vs borrowed vs lent (instances)",
                width=12,
                left=[
                    self.reclaim.metric_share(pool, team.name, m) for m in ("Guaranteed", "InUse", "Borrowed", "Lent")
                ],
            ),
            cloudwatch.GraphWidget(
                title="instance-hours per day",
                width=12,
                left=[
                    self.reclaim.metric_share(pool, team.name, m, statistic="Sum", period=Duration.days(1))
                    for m in (USED_HOURS, GUARANTEED_HOURS, BORROWED_HOURS, LENT_HOURS)
                ],
            ),
            cloudwatch.GraphWidget(
                title=f"waiting ({backend.pending_unit}) and starved below guarantee",
                width=12,
                left=[self.reclaim.metric_share(pool, team.name, "Pending")],
                right=[self.reclaim.metric_share(pool, team.name, "StarvedBelowGuarantee")],
            ),
        ]
        if backend.guarantee_recorded:
            widgets.append(
                cloudwatch.GraphWidget(
                    title=KEPT_TITLE,
                    width=12,
                    left=[
                        self.reclaim.metric_share(
                            pool, team.name, GUARANTEE_KEPT_PERCENT, statistic="Average", period=FEE_PERIOD
                        )
                    ],
                    left_y_axis=PERCENT_AXIS,
                    start=FEE_RANGE,
                )
            )
        if backend.preemptions_seen:
            widgets.append(
                cloudwatch.GraphWidget(
                    title="reclaims and preemptions",
                    width=12,
                    left=[
                        self.reclaim.metric_share(pool, team.name, m, statistic="Sum", period=Duration.hours(1))
                        for m in ("Preemptions", "LostCapacitySeconds")
                    ],
                )
            )
        return widgets


def _budget_label(teams: Sequence[str]) -> str:
    """The label of one budget line: its teams, the first three named."""
    named = ", ".join(teams[:3]) + (f" and {len(teams) - 3} more" if len(teams) > 3 else "")
    return f"monthly budget of team{'s' if len(teams) > 1 else ''} {named}"
