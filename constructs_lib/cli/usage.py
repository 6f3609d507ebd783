"""`gpu-governance usage report`: who used what, and what the organisation paid for it.

Per team and pool: GPU instance-hours used, guaranteed, borrowed and lent (the reclaim
controller's usage metrics in CloudWatch, read with GetMetricData), the guaranteed hours nobody
used, per month the share of the time the team asked for its guarantee that it was kept (the
controller's ``GuaranteeAskedHours`` and ``GuaranteeBreachedHours``), and the capacity purchases of
the period with their fees (the capacity controller's ledger in DynamoDB)::

    gpu-governance usage report --from 2026-11-01 --to 2026-12-01 --config governance.yaml \\
        --ledger-table acme-ml-capacity-ledger --format md --plot usage.png

Dates are UTC days; ``--to`` is exclusive. No aws_cdk import.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.cli.capacity import LEDGER_TABLE_VARIABLE
from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import (
    BORROWED_HOURS,
    GUARANTEE_ASKED_HOURS,
    GUARANTEE_BREACHED_HOURS,
    GUARANTEED_HOURS,
    LENT_HOURS,
    RECLAIM_NAMESPACE,
    SHARE_DIMENSIONS,
    USAGE_METRICS,
    USED_HOURS,
)
from gpu_governance_runtime.usage import idle_guaranteed_hours, kept_percent

DAY = 86_400
MAX_QUERIES_PER_CALL = 500  # GetMetricData: metric data queries per request
MAX_DAYS = 455  # CloudWatch keeps one-hour data (and so daily sums) for 455 days
FORMATS = ("md", "csv", "json")
_FIELDS = {USED_HOURS: "used", GUARANTEED_HOURS: "guaranteed", BORROWED_HOURS: "borrowed", LENT_HOURS: "lent"}
READ_METRICS = (*USAGE_METRICS, GUARANTEE_ASKED_HOURS, GUARANTEE_BREACHED_HOURS)


@dataclass(frozen=True)
class TeamUsage:
    team: str
    pool: str
    used: float
    guaranteed: float
    borrowed: float
    lent: float
    idle_guaranteed: float


@dataclass(frozen=True)
class GuaranteeKept:
    """One team's guarantee in one pool and UTC month: the hours it asked for it (it ran within
    it, or a job it covers waited) and those it was breached (such a job waited longer than a
    tick and the pool's grace while another team borrowed its type: reclaim.planner.breached_shares)."""

    team: str
    pool: str
    month: str  # YYYY-MM
    asked_hours: float
    breached_hours: float
    kept_percent: float | None  # None: it never asked


@dataclass(frozen=True)
class PurchaseLine:
    intent: str
    window: str
    instance_type: str
    count: int
    start: str
    end: str
    fee: str
    currency: str


def register(subparsers: argparse._SubParsersAction) -> None:
    usage = subparsers.add_parser("usage", help="GPU usage per team: instance-hours and purchases")
    commands = usage.add_subparsers(dest="usage_command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report", help="per team used / guaranteed / borrowed / lent instance-hours, idle guarantees, purchases"
    )
    report.add_argument("--from", dest="start", required=True, metavar="DATE", help="first UTC day (YYYY-MM-DD)")
    report.add_argument(
        "--to", dest="end", required=True, metavar="DATE", help="UTC day after the last (YYYY-MM-DD, exclusive)"
    )
    report.add_argument("--team", help="only this team")
    report.add_argument(
        "--format", choices=FORMATS, default="md", help="markdown tables (default), CSV or one JSON object"
    )
    report.add_argument(
        "--plot", metavar="PNG", help="write a per-team chart of daily instance-hours (needs matplotlib)"
    )
    add_config_arguments(report)
    report.add_argument(
        "--ledger-table",
        default=os.environ.get(LEDGER_TABLE_VARIABLE),
        help=f"the capacity controller's ledger table, for purchases (default ${LEDGER_TABLE_VARIABLE}; none: no purchases)",
    )
    report.add_argument("--region", help="region of the capacity account (default: the governance file's)")
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    import boto3

    model = model_from(args)
    start, end = report_period(args.start, args.end)
    teams = _teams(model, args.team)
    region = args.region or model.capacity_account.region
    series = read_usage(boto3.client("cloudwatch", region_name=region), model, teams, start, end)
    purchases = (
        read_purchases(boto3.client("dynamodb", region_name=region), args.ledger_table, start, end)
        if args.ledger_table
        else []
    )
    rows = usage_rows(series)
    unrecorded = sorted({p for t in model.teams for p in t.quotas if not backend_of(model.pool(p)).guarantee_recorded})
    print(
        render(rows, purchases, args.format, start, end, kept=guarantee_rows(series, unrecorded), unrecorded=unrecorded)
    )
    if args.plot:
        write_plot(series, Path(args.plot))
    return 0


def report_period(first: str, after_last: str) -> tuple[datetime, datetime]:
    bounds = []
    for flag, text in (("--from", first), ("--to", after_last)):
        try:
            bounds.append(datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC))
        except (TypeError, ValueError):
            raise GovernanceError.single(flag, "not a date", text, "a UTC day as YYYY-MM-DD") from None
    start, end = bounds
    if not start < end or (end - start).days > MAX_DAYS:
        raise GovernanceError.single(
            "--to",
            f"must be 1 to {MAX_DAYS} days after --from {first}",
            after_last,
            "a later day within CloudWatch's retention of hourly data",
        )
    return start, end


def _teams(model: GovernanceModel, name: str | None) -> list[str]:
    names = [t.name for t in model.teams]
    if name is None:
        return names
    if name not in names:
        raise GovernanceError.single("--team", "not a team of the governance file", name, f"one of {names}")
    return [name]


def queries(model: GovernanceModel, teams: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """GetMetricData queries by id: (pool, team, metric), one per metric read, team and pool the team has a quota in."""
    wanted = [
        (pool, team.name, metric)
        for team in model.teams
        if team.name in teams
        for pool in team.quotas
        for metric in READ_METRICS
    ]
    return {f"q{i}": key for i, key in enumerate(wanted)}


def read_usage(
    cloudwatch: Any, model: GovernanceModel, teams: Sequence[str], start: datetime, end: datetime
) -> dict[tuple[str, str, str], dict[datetime, float]]:
    """Daily sums per (pool, team, metric), every page of every batch of queries."""
    by_id = queries(model, teams)
    series: dict[tuple[str, str, str], dict[datetime, float]] = {key: {} for key in by_id.values()}
    ids = list(by_id)
    for offset in range(0, len(ids), MAX_QUERIES_PER_CALL):
        batch = [
            {
                "Id": query_id,
                "ReturnData": True,
                "MetricStat": {
                    "Metric": {
                        "Namespace": RECLAIM_NAMESPACE,
                        "MetricName": by_id[query_id][2],
                        "Dimensions": [
                            {"Name": n, "Value": v} for n, v in zip(SHARE_DIMENSIONS, by_id[query_id][:2], strict=False)
                        ],
                    },
                    "Period": DAY,
                    "Stat": "Sum",
                },
            }
            for query_id in ids[offset : offset + MAX_QUERIES_PER_CALL]
        ]
        token = None
        while True:
            page = cloudwatch.get_metric_data(
                MetricDataQueries=batch,
                StartTime=start,
                EndTime=end,
                ScanBy="TimestampAscending",
                **({"NextToken": token} if token else {}),
            )
            for result in page["MetricDataResults"]:
                points = series[by_id[result["Id"]]]
                for stamp, value in zip(result["Timestamps"], result["Values"], strict=True):
                    points[stamp] = points.get(stamp, 0.0) + value
            token = page.get("NextToken")
            if not token:
                break
    return series


def usage_rows(series: dict[tuple[str, str, str], dict[datetime, float]]) -> list[TeamUsage]:
    totals: dict[tuple[str, str], dict[str, float]] = {}
    for (pool, team, metric), points in series.items():
        totals.setdefault((team, pool), {})[metric] = sum(points.values())
    return [
        TeamUsage(
            team=team,
            pool=pool,
            **{_FIELDS[m]: round(values.get(m, 0.0), 2) for m in USAGE_METRICS},
            idle_guaranteed=round(idle_guaranteed_hours(values), 2),
        )
        for (team, pool), values in sorted(totals.items())
    ]


def guarantee_rows(
    series: dict[tuple[str, str, str], dict[datetime, float]], unrecorded: Sequence[str] = ()
) -> list[GuaranteeKept]:
    """Per team, pool and UTC month with data: the guarantee's hours asked and breached, and the
    share kept (``usage.kept_percent``). ``unrecorded``: pools whose controller records no promise."""
    hours: dict[tuple[str, str, str], dict[str, float]] = {}
    for (pool, team, metric), points in series.items():
        if metric in (GUARANTEE_ASKED_HOURS, GUARANTEE_BREACHED_HOURS) and pool not in unrecorded:
            for stamp, value in points.items():
                month = hours.setdefault(
                    (team, pool, f"{stamp:%Y-%m}"),
                    dict.fromkeys((GUARANTEE_ASKED_HOURS, GUARANTEE_BREACHED_HOURS), 0.0),
                )
                month[metric] += value
    return [
        GuaranteeKept(
            team=team,
            pool=pool,
            month=month,
            asked_hours=round(values[GUARANTEE_ASKED_HOURS], 2),
            breached_hours=round(values[GUARANTEE_BREACHED_HOURS], 2),
            kept_percent=_one_decimal(kept_percent(values[GUARANTEE_ASKED_HOURS], values[GUARANTEE_BREACHED_HOURS])),
        )
        for (team, pool, month), values in sorted(hours.items())
    ]


def _one_decimal(percent: float | None) -> float | None:
    return None if percent is None else round(percent, 1)


def read_purchases(dynamodb: Any, table: str, start: datetime, end: datetime) -> list[PurchaseLine]:
    """Purchased blocks and plans whose capacity starts in the period (the ledger's intents)."""
    from gpu_governance_runtime.capacity.ledger import Ledger

    bought = Ledger(client=dynamodb, table_name=table).intents("purchased")
    return [
        PurchaseLine(
            intent=i.id,
            window=i.window,
            instance_type=i.offering.instance_type,
            count=i.offering.count,
            start=i.offering.start.isoformat(),
            end=i.offering.end.isoformat(),
            fee=str(i.offering.upfront_fee),
            currency=i.offering.currency,
        )
        for i in bought
        if start <= i.offering.start < end
    ]


def render(
    rows: Sequence[TeamUsage],
    purchases: Sequence[PurchaseLine],
    fmt: str,
    start: datetime,
    end: datetime,
    *,
    kept: Sequence[GuaranteeKept] = (),
    unrecorded: Sequence[str] = (),
) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "from": start.date().isoformat(),
                "to": end.date().isoformat(),
                "unit": "instance-hours",
                "teams": [asdict(r) for r in rows],
                "guarantees_kept": [asdict(k) for k in kept],
                "guarantees_not_recorded_in_pools": list(unrecorded),
                "purchases": [asdict(p) for p in purchases],
                "purchase_fees": {c: str(t) for c, t in _fees(purchases).items()},
            },
            indent=2,
        )
    if fmt == "csv":
        # one header for every record: a guarantee row fills team and pool, then its own columns
        usage_fields, purchase_fields = list(TeamUsage.__dataclass_fields__), list(PurchaseLine.__dataclass_fields__)
        kept_fields = [f for f in GuaranteeKept.__dataclass_fields__ if f not in ("team", "pool")]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["record", *usage_fields, *purchase_fields, *kept_fields])
        blanks_usage, blanks_purchase, blanks_kept = (
            [""] * len(f) for f in (usage_fields, purchase_fields, kept_fields)
        )
        writer.writerows(["usage", *asdict(r).values(), *blanks_purchase, *blanks_kept] for r in rows)
        writer.writerows(["purchase", *blanks_usage, *asdict(p).values(), *blanks_kept] for p in purchases)
        writer.writerows(
            [
                "guarantee",
                k.team,
                k.pool,
                *blanks_usage[2:],
                *blanks_purchase,
                *(_cell(getattr(k, f)) for f in kept_fields),
            ]
            for k in kept
        )
        return out.getvalue().rstrip("\n")
    lines = [
        f"# GPU usage {start.date()} to {end.date()} (exclusive), instance-hours",
        "",
        "| team | pool | used | guaranteed | borrowed | lent | idle guaranteed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.team} | {r.pool} | {r.used:.2f} | {r.guaranteed:.2f} | {r.borrowed:.2f} | {r.lent:.2f} | {r.idle_guaranteed:.2f} |"
        for r in rows
    ]
    lines += [
        "",
        "## Guarantees kept",
        "",
        "Per UTC month, the hours each team asked for its guarantee (it ran within it, or a job it covers waited) "
        "and the share of them in which it was kept: not kept while such a job waited longer than a tick and the "
        "pool's grace with another team borrowing its type (docs/chargeback.md).",
        "",
    ]
    if kept:
        lines += ["| team | pool | month | asked | breached | kept |", "| --- | --- | --- | ---: | ---: | ---: |"]
        lines += [
            f"| {k.team} | {k.pool} | {k.month} | {k.asked_hours:.2f} | {k.breached_hours:.2f} | "
            + ("-" if k.kept_percent is None else f"{k.kept_percent:.1f} %")
            + " |"
            for k in kept
        ]
    else:
        lines.append("no team asked for its guarantee in the period (or nothing was recorded)")
    if unrecorded:
        lines += [
            "",
            f"Not recorded in pools {', '.join(unrecorded)}: their controller tick sees no job's size or age.",
        ]
    lines += ["", "## Purchases", ""]
    if purchases:
        lines += ["| intent | window | instances | start | end | fee |", "| --- | --- | --- | --- | --- | ---: |"]
        lines += [
            f"| {p.intent} | {p.window} | {p.count} x {p.instance_type} | {p.start} | {p.end} | {p.fee} {p.currency} |"
            for p in purchases
        ]
        lines += ["", "Total fees: " + ", ".join(f"{t} {c}" for c, t in _fees(purchases).items())]
    else:
        lines.append("none in the period (or no --ledger-table)")
    return "\n".join(lines)


def _cell(value: object) -> object:
    return "" if value is None else value


def _fees(purchases: Iterable[PurchaseLine]) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    for p in purchases:
        totals[p.currency] = totals.get(p.currency, Decimal(0)) + Decimal(p.fee)
    return totals


def write_plot(series: dict[tuple[str, str, str], dict[datetime, float]], path: Path) -> None:
    """One panel per team and pool (a p5 instance-hour is not a g6e one, so pools are never summed):
    daily instance-hours used, guaranteed, borrowed and lent, on one y scale for every panel."""
    from constructs_lib.simulator.report import load_pyplot

    pyplot = load_pyplot()
    figure = usage_figure(pyplot, series)
    try:
        figure.savefig(path, format="png")
    except OSError as error:
        raise GovernanceError(
            [
                Problem(
                    path="--plot",
                    wrong=f"cannot write the chart ({error.strerror})",
                    value=str(path),
                    allowed="a writable PNG path",
                )
            ]
        ) from None
    finally:
        pyplot.close(figure)


def usage_figure(pyplot, series: dict[tuple[str, str, str], dict[datetime, float]]):
    """The chart :func:`write_plot` writes."""
    teams = sorted({team for _, team, _ in series}) or ["(no teams)"]
    pools = sorted({pool for pool, _, _ in series}) or ["(no pools)"]
    figure, axes = pyplot.subplots(
        len(teams),
        len(pools),
        figsize=(max(10, 4.5 * len(pools)), 2.8 * len(teams)),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    for row, team in enumerate(teams):
        for column, pool in enumerate(pools):
            axis = axes[row, column]
            for metric in USAGE_METRICS:
                points = sorted(series.get((pool, team, metric), {}).items())
                axis.plot(
                    [p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=_FIELDS[metric]
                )
            axis.set_title(f"team {team}, pool {pool}", fontsize="medium")
            axis.set_xlabel("UTC day")
            axis.set_ylabel("instance-hours per day")
            axis.tick_params(axis="x", labelrotation=30)
            if not any((pool, team, metric) in series for metric in USAGE_METRICS):
                axis.text(0.5, 0.5, "no quota here", transform=axis.transAxes, ha="center", va="center", color="grey")
    axes[0, -1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return figure
