"""`gpu-governance usage report`: who used what, and what the organisation paid for it.

Per team and pool: GPU instance-hours used, guaranteed, borrowed and lent (the reclaim
controller's usage metrics in CloudWatch, read with GetMetricData), the guaranteed hours nobody
used, per month the share of the time the team asked for its guarantee that it was kept (the
controller's ``GuaranteeAskedHours`` and ``GuaranteeBreachedHours``), the capacity purchases of the
period with their fees (the capacity controller's ledger in DynamoDB), and per window its Capacity
Blocks by the jobs on them (issue 40): hours paid (the ledger), with a job on a block instance, idle
while work waited or ran on demand, idle with no work (the capacity controller's samples of each
block's jobs, GetMetricData), and work cut at a block's end (the ledger's requeue records)::

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
    BLOCK_USE_DIMENSIONS,
    BLOCK_USE_METRICS,
    BORROWED_HOURS,
    CAPACITY_NAMESPACE,
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
    tick and the pool's grace while another team borrowed its type: planners.reclaim.breached_shares)."""

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


@dataclass(frozen=True)
class BlockLine:
    """A window's Capacity Blocks in the period, instance-hours: ``paid`` = ``with_job`` + ``idle_waited`` +
    ``idle_no_work`` + ``not_measured`` (hours no scheduled run sampled: a consumer whose jobs AWS does not show, an
    EKS node group or a training plan, or runs missed); ``cut`` is work done on them and lost at a block's end."""

    window: str
    blocks: int
    paid: float
    with_job: float
    cut: float
    idle_waited: float
    idle_no_work: float
    not_measured: float


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
    cloudwatch = boto3.client("cloudwatch", region_name=region)
    series = read_usage(cloudwatch, model, teams, start, end)
    purchases, blocks = [], []
    if args.ledger_table:
        from gpu_governance_runtime.capacity.ledger import Ledger

        ledger = Ledger(client=boto3.client("dynamodb", region_name=region), table_name=args.ledger_table)
        bought = ledger.intents("purchased")
        purchases = purchase_lines(bought, start, end)
        blocks = block_lines(cloudwatch, ledger, bought, start, end)
    rows = usage_rows(series)
    unrecorded = sorted({p for t in model.teams for p in t.quotas if not backend_of(model.pool(p)).guarantee_recorded})
    print(
        render(
            rows,
            purchases,
            args.format,
            start,
            end,
            kept=guarantee_rows(series, unrecorded),
            unrecorded=unrecorded,
            blocks=blocks,
        )
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
    wanted = {
        query_id: (RECLAIM_NAMESPACE, metric, dict(zip(SHARE_DIMENSIONS, key, strict=False)))
        for query_id, (*key, metric) in by_id.items()
    }
    found = metric_sums(cloudwatch, wanted, start, end)
    return {by_id[query_id]: points for query_id, points in found.items()}


def metric_sums(
    cloudwatch: Any, wanted: dict[str, tuple[str, str, dict[str, str]]], start: datetime, end: datetime
) -> dict[str, dict[datetime, float]]:
    """Daily sums per query id of (namespace, metric, dimensions), every page of every batch of
    GetMetricData queries (at most ``MAX_QUERIES_PER_CALL`` a call)."""
    series: dict[str, dict[datetime, float]] = {query_id: {} for query_id in wanted}
    ids = list(wanted)
    for offset in range(0, len(ids), MAX_QUERIES_PER_CALL):
        batch = [
            {
                "Id": query_id,
                "ReturnData": True,
                "MetricStat": {
                    "Metric": {
                        "Namespace": wanted[query_id][0],
                        "MetricName": wanted[query_id][1],
                        "Dimensions": [{"Name": n, "Value": v} for n, v in wanted[query_id][2].items()],
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
                points = series[result["Id"]]
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


def purchase_lines(bought: Iterable[Any], start: datetime, end: datetime) -> list[PurchaseLine]:
    """Purchased blocks and plans whose capacity starts in the period (the ledger's intents)."""
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


def _overlap_hours(a: datetime, b: datetime, start: datetime, end: datetime) -> float:
    return max(0.0, (min(b, end) - max(a, start)).total_seconds() / 3600)


def block_lines(cloudwatch: Any, ledger: Any, bought: Iterable[Any], start: datetime, end: datetime) -> list[BlockLine]:
    """Per window, its Capacity Blocks' instance-hours in the period: paid from the ledger's intents (a block's or an
    extension's instances times its hours in the period; an extension keeps its block's id and window), the samples of
    the jobs on them (the capacity controller's BLOCK_USE_METRICS per window and block, GetMetricData), and the work cut
    at their end (the requeue's ledger records: the hours a job that does not checkpoint had run when the controller
    stopped it)."""
    from gpu_governance_runtime.capacity.requeue import OPEN_STATUSES
    from gpu_governance_runtime.planners.kinds import kind_of_offering

    bought = [i for i in bought if i.reservation_id and kind_of_offering(i.offering).ec2_capacity_reservation]
    # Each block's window: the one that bought it (its extensions are bought for the window whose block they extend).
    window_of = {i.reservation_id: i.window for i in bought if i.offering.extends}
    window_of |= {i.reservation_id: i.window for i in bought if not i.offering.extends}
    paid: dict[str, float] = {}
    for i in bought:
        paid[i.reservation_id] = paid.get(i.reservation_id, 0.0) + i.offering.count * _overlap_hours(
            i.offering.start, i.offering.end, start, end
        )
    blocks = sorted(r for r, hours in paid.items() if hours)
    if not blocks:
        return []
    wanted = {
        f"b{n}m{m}": (CAPACITY_NAMESPACE, metric, dict(zip(BLOCK_USE_DIMENSIONS, (window_of[r], r), strict=True)))
        for n, r in enumerate(blocks)
        for m, metric in enumerate(BLOCK_USE_METRICS)
    }
    sums = {query_id: sum(points.values()) for query_id, points in metric_sums(cloudwatch, wanted, start, end).items()}
    cut: dict[str, float] = {}
    for _, _, details in ledger.actions("requeue#", (*OPEN_STATUSES, "requeued")):
        stopped = datetime.fromisoformat(details.get("stop_at", start.isoformat()))
        if details.get("reservation") in blocks and start <= stopped < end:
            window = window_of[details["reservation"]]
            cut[window] = cut.get(window, 0.0) + float(details.get("cut_hours", 0.0))
    lines = []
    for window in sorted({window_of[r] for r in blocks}):
        mine = [n for n, r in enumerate(blocks) if window_of[r] == window]
        hours = sum(paid[blocks[n]] for n in mine)
        job, waited, idle = (sum(sums[f"b{n}m{m}"] for n in mine) for m in range(len(BLOCK_USE_METRICS)))
        lines.append(
            BlockLine(
                window=window,
                blocks=len(mine),
                paid=round(hours, 2),
                with_job=round(job, 2),
                cut=round(cut.get(window, 0.0), 2),
                idle_waited=round(waited, 2),
                idle_no_work=round(idle, 2),
                not_measured=round(max(hours - job - waited - idle, 0.0), 2),
            )
        )
    return lines


def render(
    rows: Sequence[TeamUsage],
    purchases: Sequence[PurchaseLine],
    fmt: str,
    start: datetime,
    end: datetime,
    *,
    kept: Sequence[GuaranteeKept] = (),
    unrecorded: Sequence[str] = (),
    blocks: Sequence[BlockLine] = (),
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
                "blocks": [asdict(b) for b in blocks],
            },
            indent=2,
        )
    if fmt == "csv":
        return _csv(rows, purchases, kept, blocks)
    return "\n".join(
        [
            *_usage_table(rows, start, end),
            *_guarantees_table(kept, unrecorded),
            *_purchases_table(purchases),
            *(_blocks_table(blocks) if blocks else []),
        ]
    )


def _csv(
    rows: Sequence[TeamUsage],
    purchases: Sequence[PurchaseLine],
    kept: Sequence[GuaranteeKept],
    blocks: Sequence[BlockLine],
) -> str:
    # one header for every record: a guarantee row fills team and pool, then its own columns
    usage_fields, purchase_fields = list(TeamUsage.__dataclass_fields__), list(PurchaseLine.__dataclass_fields__)
    kept_fields = [f for f in GuaranteeKept.__dataclass_fields__ if f not in ("team", "pool")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["record", *usage_fields, *purchase_fields, *kept_fields])
    blanks_usage, blanks_purchase, blanks_kept = ([""] * len(f) for f in (usage_fields, purchase_fields, kept_fields))
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
    if blocks:  # a section of its own: its own header row
        writer.writerow(["record", *BlockLine.__dataclass_fields__])
        writer.writerows(["block", *asdict(b).values()] for b in blocks)
    return out.getvalue().rstrip("\n")


def _usage_table(rows: Sequence[TeamUsage], start: datetime, end: datetime) -> list[str]:
    lines = [
        f"# GPU usage {start.date()} to {end.date()} (exclusive), instance-hours",
        "",
        "| team | pool | used | guaranteed | borrowed | lent | idle guaranteed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    return lines + [
        f"| {r.team} | {r.pool} | {r.used:.2f} | {r.guaranteed:.2f} | {r.borrowed:.2f} | {r.lent:.2f} | {r.idle_guaranteed:.2f} |"
        for r in rows
    ]


def _guarantees_table(kept: Sequence[GuaranteeKept], unrecorded: Sequence[str]) -> list[str]:
    lines = [
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
    return lines


def _purchases_table(purchases: Sequence[PurchaseLine]) -> list[str]:
    lines = ["", "## Purchases", ""]
    if not purchases:
        return [*lines, "none in the period (or no --ledger-table)"]
    lines += ["| intent | window | instances | start | end | fee |", "| --- | --- | --- | --- | --- | ---: |"]
    lines += [
        f"| {p.intent} | {p.window} | {p.count} x {p.instance_type} | {p.start} | {p.end} | {p.fee} {p.currency} |"
        for p in purchases
    ]
    return [*lines, "", "Total fees: " + ", ".join(f"{t} {c}" for c, t in _fees(purchases).items())]


def _blocks_table(blocks: Sequence[BlockLine]) -> list[str]:
    lines = [
        "",
        "## Capacity Blocks, by the jobs on them",
        "",
        "| window | blocks | paid | with a job | cut at the end | idle, work waited or on demand | idle, no work | not measured |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    return lines + [
        f"| {b.window} | {b.blocks} | {b.paid:.2f} | {b.with_job:.2f} | {b.cut:.2f} | {b.idle_waited:.2f} | "
        f"{b.idle_no_work:.2f} | {b.not_measured:.2f} |"
        for b in blocks
    ]


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
