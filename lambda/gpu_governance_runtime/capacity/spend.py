"""Each team's spend this month, from Cost Explorer, once a day (docs/chargeback.md).

AWS Budgets publishes no CloudWatch metric for the dashboards to draw a team's spend against
its monthly budget with. Once a day a scheduled capacity run asks Cost Explorer
(``GetCostAndUsage``) for the month-to-date ``UnblendedCost`` grouped by the team tag, the cost
a ``COST`` budget tracks by default, and publishes ``TeamSpendUsd`` per ``Team``: costs
without the tag under ``UNTAGGED_TEAM``, a declared team with no cost yet as 0, a tag value
CloudWatch cannot take as a dimension value under ``chargeback.UNKNOWN``.

Once a day, because every Cost Explorer request costs USD 0.01 (one per page) and its data
is refreshed about once a day anyway: the run claims ``action#team-spend#<UTC day>`` in the
ledger first, a conditional write, so of all the runs of a day (repeated events, overlapping
runs) exactly one calls Cost Explorer. A read that fails (access denied, data unavailable,
throttled three times) is recorded on the claim, returned as an error (``ConsumerErrors``) and
tried again the next day, never the same day: a month-to-date figure loses nothing by a missed
day, and a denied call repeated every run would cost money every run. A run killed between
the claim and the figures loses that day's figures the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..common import log, metrics
from ..contract import CAPACITY_NAMESPACE, TAG_TEAM, TEAM_SPEND, TEAM_SPEND_DIMENSIONS, UNTAGGED_TEAM
from ..policy import Policy
from .chargeback import UNKNOWN
from .ledger import Ledger

COST_METRIC = "UnblendedCost"
CURRENCY = "USD"
# The longest one Cost Explorer request can take with common.clients.COST_EXPLORER (3 attempts of
# 5 s to connect and 20 s to answer, with backoff): a page is asked for only with this much left.
CALL_SECONDS = 90
MAX_DIMENSION_VALUE = 1024  # characters of a CloudWatch dimension value

Write = Callable[[Mapping[str, Any]], None]


class SpendUnreadable(Exception):
    """Cost Explorer answered with something that is not a month-to-date cost in USD."""


def publish_daily(
    *,
    ce: Any,
    ledger: Ledger,
    policy: Policy,
    now: datetime,
    time_left: Callable[[], float],
    write: Write | None = None,
) -> list[dict[str, Any]]:
    """Publish each team's month-to-date spend if no run did today; [] when one did."""
    day = now.date().isoformat()
    action = f"team-spend#{day}"
    if time_left() < CALL_SECONDS:  # before the claim: a later run of the day still reads it
        return [{"spend": day, "deferred": "too little of the invocation left; a later run today reads it"}]
    if not ledger.claim_action(action, status="reading", details={}, now=now):
        return []
    try:
        spend, estimated = month_to_date(ce, now, time_left)
    except (ClientError, BotoCoreError, SpendUnreadable) as error:
        reason = (
            f"{error.response['Error'].get('Code')}: {error}"
            if isinstance(error, ClientError)
            else f"{type(error).__name__}: {error}"
        )
        ledger.record_action(action, status="failed", details={"error": reason}, now=now)
        return [{"spend": day, "error": reason}]
    figures = {**{team: Decimal(0) for team in declared_teams(policy)}, **spend}
    for team, usd in sorted(figures.items()):
        metrics.publish(
            CAPACITY_NAMESPACE,
            dict(zip(TEAM_SPEND_DIMENSIONS, (team,), strict=True)),
            {TEAM_SPEND: (float(usd), "None")},
            timestamp=now.timestamp(),
            write=write or log.write,
        )
    ledger.close_action(action, expected="reading", status="published", now=now)
    return [{"spend": day, "teams": {team: str(usd) for team, usd in sorted(figures.items())}, "estimated": estimated}]


def month_to_date(ce: Any, now: datetime, time_left: Callable[[], float]) -> tuple[dict[str, Decimal], bool]:
    """Cost so far this month (UTC) per team tag value, and whether Cost Explorer marks it
    estimated (it does until the month's bill is final), reading every page."""
    today = now.date()
    # End is exclusive: tomorrow includes today's costs so far, and is never past the first of
    # next month (refused) nor equal to Start on the first of the month (refused too).
    period = {"Start": today.replace(day=1).isoformat(), "End": (today + timedelta(days=1)).isoformat()}
    spend: dict[str, Decimal] = {}
    estimated, token = False, None
    while True:
        page = ce.get_cost_and_usage(
            TimePeriod=period,
            Granularity="MONTHLY",
            Metrics=[COST_METRIC],
            GroupBy=[{"Type": "TAG", "Key": TAG_TEAM}],
            **({"NextPageToken": token} if token else {}),
        )
        for result in page.get("ResultsByTime") or []:
            estimated = estimated or bool(result.get("Estimated"))
            for group in result.get("Groups") or []:
                team = team_of(group.get("Keys") or [])
                spend[team] = spend.get(team, Decimal(0)) + _usd(group.get("Metrics", {}).get(COST_METRIC), team)
        token = page.get("NextPageToken")
        if not token:
            return spend, estimated
        if time_left() < CALL_SECONDS:
            raise SpendUnreadable(f"too little of the invocation left for the next page after {len(spend)} team values")


def team_of(keys: list[str]) -> str:
    """The team of a group keyed ``gpu-governance:team$<value>`` (``...$`` alone: untagged)."""
    prefix = f"{TAG_TEAM}$"
    if len(keys) != 1 or not keys[0].startswith(prefix):
        return UNKNOWN
    value = keys[0].removeprefix(prefix)
    if not value:
        return UNTAGGED_TEAM
    # CloudWatch takes ASCII dimension values with a non-blank character; the two markers stay ours.
    if (
        not value.isascii()
        or not value.strip()
        or len(value) > MAX_DIMENSION_VALUE
        or value in (UNTAGGED_TEAM, UNKNOWN)
    ):
        return UNKNOWN
    return value


def declared_teams(policy: Policy) -> set[str]:
    """The teams the policy names (a share in a pool, or a capacity window's owner): published
    as 0 while Cost Explorer has no cost of theirs, so their graphs start at 0, not at nothing."""
    return {share.name for pool in policy.pools for share in pool.shares} | {
        window.team for window in policy.capacity_windows
    }


def _usd(cost: Any, team: str) -> Decimal:
    if not isinstance(cost, dict) or cost.get("Unit") != CURRENCY:
        raise SpendUnreadable(f"{COST_METRIC} of team {team!r}: {cost!r} is not an amount in {CURRENCY}")
    try:
        amount = Decimal(cost.get("Amount"))
    except (InvalidOperation, TypeError):
        amount = Decimal("NaN")
    if not amount.is_finite():
        raise SpendUnreadable(f"{COST_METRIC} of team {team!r}: amount {cost.get('Amount')!r} is not a number")
    return amount
