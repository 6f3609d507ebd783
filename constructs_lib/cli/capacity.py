"""`gpu-governance capacity plan|approve|request|requests`: try windows against offerings, approve a
purchase, ask for capacity on demand, list the requests (open or closed).

``plan`` runs the controller's own planner on offerings looked up with the AWS CLI, so a
platform team sees what would be bought and why before anything is deployed::

    aws ec2 describe-capacity-block-offerings --instance-type p5.48xlarge --instance-count 4 \\
        --capacity-duration-hours 24 > offerings.json
    gpu-governance capacity plan --config governance.yaml --offerings offerings.json
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError, Problem

LEDGER_TABLE_VARIABLE = "GPU_GOVERNANCE_CAPACITY_TABLE"
RESERVATION_LIST = "CapacityReservations"  # `aws ec2 describe-capacity-reservations`


def _listings() -> tuple[str, ...]:
    """The AWS CLI listings ``--offerings`` reads: each kind's offerings and extension offerings, then reservations."""
    from gpu_governance_runtime.planners.kinds import KINDS

    return (
        *(
            key
            for kind in KINDS.values()
            for key in (*kind.offering_lists, *([kind.extension_listing.key] if kind.extension_listing else []))
        ),
        RESERVATION_LIST,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    capacity = subparsers.add_parser("capacity", help="capacity windows: plan purchases, approve one, request one")
    commands = capacity.add_subparsers(dest="capacity_command", required=True, metavar="COMMAND")

    plan = commands.add_parser("plan", help="what the controller would buy for the windows, and why")
    add_config_arguments(plan)
    plan.add_argument(
        "--offerings",
        required=True,
        action="append",
        help="JSON from `aws ec2 describe-capacity-block-offerings`, `aws ec2 describe-capacity-block-extension-offerings`, "
        "`aws sagemaker search-training-plan-offerings` or `aws ec2 describe-capacity-reservations` (repeatable)",
    )
    plan.add_argument("--now", help="plan as of this UTC time (ISO 8601; default: now)")
    plan.add_argument(
        "--spent", action="append", default=[], metavar="WINDOW=AMOUNT", help="already spent this budget period"
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(handler=_plan)

    approve = commands.add_parser("approve", help="approve a purchase the controller proposed (approval mode)")
    approve.add_argument("intent_id", metavar="ID", help="the intent id from the approval notification")
    approve.add_argument(
        "--table",
        default=os.environ.get(LEDGER_TABLE_VARIABLE),
        help=f"the controller's ledger table (default ${LEDGER_TABLE_VARIABLE})",
    )
    approve.add_argument("--region", help="AWS region of the capacity account (default: from the AWS configuration)")
    approve.set_defaults(handler=_approve)

    request = commands.add_parser(
        "request", help="ask for capacity now or soon: an on-demand window within a declared window's limits"
    )
    add_config_arguments(request)
    request.add_argument("--team", required=True, help="the declared team the capacity serves")
    request.add_argument("--instance-type", required=True, help="instance type of one of the team's declared windows")
    request.add_argument("--count", required=True, type=int, help="instances (1-64)")
    request.add_argument("--hours", required=True, type=int, help="how long (hours)")
    request.add_argument("--start", default="now", help="now (default) or a UTC time (ISO 8601)")
    request.add_argument(
        "--window", help="the declared window to draw on, when the team has several of that instance type"
    )
    request.add_argument(
        "--token",
        help="idempotency token: the same token is the same window (default: from the arguments, "
        "with a start of now read to the minute)",
    )
    request.add_argument(
        "--table",
        default=os.environ.get(LEDGER_TABLE_VARIABLE),
        help=f"the controller's ledger table (default ${LEDGER_TABLE_VARIABLE})",
    )
    request.add_argument("--region", help="AWS region of the capacity account (default: the governance file's)")
    request.set_defaults(handler=_request)

    listing = commands.add_parser("requests", help="the on-demand windows recorded in the ledger, open or closed")
    listing.add_argument(
        "--table",
        default=os.environ.get(LEDGER_TABLE_VARIABLE),
        help=f"the controller's ledger table (default ${LEDGER_TABLE_VARIABLE})",
    )
    listing.add_argument("--region", help="AWS region of the capacity account (default: from the AWS configuration)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=_requests)


def _plan(args: argparse.Namespace) -> int:
    from constructs_lib.model.policy import compile_policy
    from gpu_governance_runtime.planners.capacity import plan
    from gpu_governance_runtime.policy import parse_policy

    model = model_from(args)
    if not model.capacity_windows:
        raise GovernanceError.single(
            "capacity_windows", "no capacity windows declared", [], "at least one window to plan"
        )
    now = _utc_time(args.now, "--now") if args.now else datetime.now(UTC)
    offerings, reservations, extensions = [], [], []
    for path in args.offerings:
        found_offerings, found_reservations, found_extensions = _read_market(path)
        offerings += found_offerings
        reservations += found_reservations
        extensions += [(path, listing, index, item) for listing, index, item in found_extensions]
    offerings += _extensions_of(extensions, reservations)
    windows = list(
        parse_policy(compile_policy(model)).capacity_windows
    )  # what the controller reads, through its reader
    result = plan(
        windows=windows, reservations=reservations, offerings=offerings, spent=_spent(args.spent, windows), now=now
    )
    print(json.dumps(_as_json(result, windows), indent=2) if args.json else _as_text(result, windows))
    return 0


def grid_notes(model) -> list[str]:
    """What AWS's grid makes each window pay, and the placement that wastes least (capacity/grid.py)."""
    from constructs_lib.model.policy import compile_policy
    from gpu_governance_runtime.capacity import grid
    from gpu_governance_runtime.policy import parse_policy

    return [grid.report(w) for w in parse_policy(compile_policy(model)).capacity_windows]


def _approve(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    from gpu_governance_runtime.capacity.ledger import ClaimRefused, Ledger

    if not args.table:
        raise GovernanceError.single(
            "--table", "missing", None, f"the ledger table name, or set ${LEDGER_TABLE_VARIABLE}"
        )
    ledger = Ledger(client=boto3.client("dynamodb", region_name=args.region), table_name=args.table)
    try:
        intent = ledger.approve(args.intent_id, now=datetime.now(UTC))
    except ClaimRefused as refusal:
        raise GovernanceError.single("ID", "cannot be approved", args.intent_id, str(refusal)) from None
    except (NoCredentialsError, NoRegionError):
        raise  # what the caller must set up: one line from main, exit 1
    except (BotoCoreError, ClientError) as error:
        raise GovernanceError.single(
            "--table", "ledger not reachable", args.table, f"a ledger table you may write to ({error})"
        ) from None
    offering = intent.offering
    print(
        f"approved {intent.id}: {offering.count} x {offering.instance_type} in {offering.availability_zone}, "
        f"{offering.start:%Y-%m-%d %H:%M} to {offering.end:%Y-%m-%d %H:%M} UTC, {offering.upfront_fee} {offering.currency}; "
        "the controller buys it on its next run if the offering is still for sale at that price"
    )
    return 0


def _request(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    from constructs_lib.model.policy import compile_policy
    from gpu_governance_runtime.capacity import requests
    from gpu_governance_runtime.capacity.ledger import Ledger
    from gpu_governance_runtime.policy import parse_policy

    if not args.table:
        raise GovernanceError.single(
            "--table", "missing", None, f"the ledger table name, or set ${LEDGER_TABLE_VARIABLE}"
        )
    model = model_from(args)
    windows = parse_policy(compile_policy(model)).capacity_windows
    now = datetime.now(UTC)
    start = None if args.start == "now" else _utc_time(args.start, "--start")
    token = args.token or "-".join(
        (args.team, args.instance_type, f"{args.count}x{args.hours}h", f"{start or now:%Y%m%dT%H%M}")
    )
    # the ledger lives in the capacity account's region, which the governance file names
    ledger = Ledger(
        client=boto3.client("dynamodb", region_name=args.region or model.capacity_account.region), table_name=args.table
    )
    try:
        requested_by = boto3.client("sts", region_name=args.region).get_caller_identity()[
            "Arn"
        ]  # recorded with the request
        request, new = requests.submit(
            ledger,
            windows,
            token=token,
            team=args.team,
            instance_type=args.instance_type,
            count=args.count,
            hours=args.hours,
            start=start,
            now=now,
            window=args.window,
            requested_by=requested_by,
        )
    except requests.RequestRefused as refusal:
        raise GovernanceError.single("request", "refused", token, str(refusal)) from None
    except (NoCredentialsError, NoRegionError):
        raise  # what the caller must set up: one line from main, exit 1
    except (BotoCoreError, ClientError) as error:
        raise GovernanceError.single(
            "--table", "ledger not reachable", args.table, f"a ledger table you may write to ({error})"
        ) from None
    if request.occurrence:
        print(
            f"joined window {request.window}'s occurrence {request.occurrence} (token {request.token}) for team {request.team}: "
            f"{request.count} x {request.instance_type}, {request.start:%Y-%m-%d %H:%M} UTC for {request.hours} h is inside it; "
            "nothing more is bought"
        )
        return 0
    print(
        f"{'requested' if new else 'already requested'} window {request.name} (token {request.token}) for team {request.team}: "
        f"{request.count} x {request.instance_type}, {request.start:%Y-%m-%d %H:%M} UTC for {request.hours} h, within window "
        f"{request.window}'s price cap, budget and mode; the controller serves it on its next run"
    )
    return 0


def _requests(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    from gpu_governance_runtime.capacity import requests
    from gpu_governance_runtime.capacity.ledger import Ledger

    if not args.table:
        raise GovernanceError.single(
            "--table", "missing", None, f"the ledger table name, or set ${LEDGER_TABLE_VARIABLE}"
        )
    try:
        found = requests.listed(Ledger(client=boto3.client("dynamodb", region_name=args.region), table_name=args.table))
    except (NoCredentialsError, NoRegionError):
        raise  # what the caller must set up: one line from main, exit 1
    except (BotoCoreError, ClientError) as error:
        raise GovernanceError.single(
            "--table", "ledger not reachable", args.table, f"a ledger table you may read ({error})"
        ) from None
    if args.json:
        print(
            json.dumps(
                {
                    "requests": [
                        {**request.details(), "name": request.name, "status": status} for request, status in found
                    ]
                },
                indent=2,
            )
        )
        return 0
    for request, status in found:
        print(
            f"{status.upper()} window {request.name} (token {request.token}) for team {request.team}: {request.count} x "
            f"{request.instance_type}, {request.start:%Y-%m-%d %H:%M} UTC for {request.hours} h, within window {request.window}"
            + (f", requested by {request.requested_by}" if request.requested_by else "")
        )
    return 0


def _read_market(path: str):
    from gpu_governance_runtime.planners.kinds import KINDS
    from gpu_governance_runtime.planners.offers import reservation_from_api

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise GovernanceError.single(
            path, "cannot read the file", type(error).__name__, f"a readable JSON file ({error})"
        ) from None
    except json.JSONDecodeError as error:
        raise GovernanceError.single(
            path, f"not valid JSON at line {error.lineno}, column {error.colno}", error.msg, "AWS CLI JSON output"
        ) from None
    listings = _listings()
    if not isinstance(data, dict) or not any(key in data for key in listings):
        raise GovernanceError.single(
            path,
            "no offerings or reservations found",
            type(data).__name__,
            f"a mapping with one of {list(listings)}",
        )
    extension_listings = [kind.extension_listing for kind in KINDS.values() if kind.extension_listing]
    parsers = {
        **{key: read for kind in KINDS.values() for key, read in kind.offering_lists.items()},
        RESERVATION_LIST: reservation_from_api,
        # Read whole here; which reservation each extends is known once every file's reservations are (_extensions_of).
        **{
            listing.key: (lambda item, listing=listing: (listing, item, listing.start(item)))
            for listing in extension_listings
        },
    }
    parsed: dict[str, list] = {key: [] for key in listings}
    problems = []
    for key, parse in parsers.items():
        items = data.get(key, [])
        if not isinstance(items, list):
            problems.append(
                Problem(
                    path=f"{path}: {key}",
                    wrong="not a list",
                    value=items,
                    allowed="a list of items as the AWS CLI prints it",
                )
            )
            continue
        for index, item in enumerate(items):
            try:
                parsed[key].append(parse(item))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, InvalidOperation) as error:
                problems.append(
                    Problem(
                        path=f"{path}: {key}[{index}]",
                        wrong=f"unreadable ({type(error).__name__}: {error})",
                        value=item,
                        allowed="an item as the AWS CLI prints it",
                    )
                )
    if problems:
        raise GovernanceError(problems)
    return (
        [o for kind in KINDS.values() for key in kind.offering_lists for o in parsed[key]],
        parsed[RESERVATION_LIST],
        [
            (listing, index, item)
            for listing in extension_listings
            for index, (_, item, _) in enumerate(parsed[listing.key])
        ],
    )


def _extensions_of(extensions, reservations):
    """Extension offerings with the reservation each extends: their listing (``ExtensionListing``)
    does not name it, so it is the listed reservation of the same type, zone and count that ends
    where the extension starts (an extension starts at its reservation's end)."""
    offerings, problems = [], []
    for path, listing, index, item in extensions:
        start = listing.start(item)
        extended = [
            r
            for r in reservations
            if r.end == start
            and r.instance_type == item.get("InstanceType")
            and r.availability_zone == item.get("AvailabilityZone")
            and r.count == item.get("InstanceCount")
        ]
        if len(extended) != 1:
            problems.append(
                Problem(
                    path=f"{path}: {listing.key}[{index}]",
                    wrong="extends no one listed block",
                    value=item.get(listing.id_key),
                    allowed=f"exactly one reservation (--offerings from `aws ec2 describe-capacity-reservations`) of the same type, "
                    f"zone and count ending {start:%Y-%m-%d %H:%M} UTC; found {len(extended)}",
                )
            )
            continue
        try:
            offerings.append(listing.offering(item, extended[0].id))
        except (KeyError, TypeError, ValueError, InvalidOperation) as error:
            problems.append(
                Problem(
                    path=f"{path}: {listing.key}[{index}]",
                    wrong=f"unreadable ({type(error).__name__}: {error})",
                    value=item,
                    allowed="an item as the AWS CLI prints it",
                )
            )
    if problems:
        raise GovernanceError(problems)
    return offerings


def _utc_time(text: str, path: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise GovernanceError.single(path, "not a UTC time", text, "ISO 8601 with a zone, e.g. 2026-12-01T09:00:00Z")
    return value.astimezone(UTC)


def _spent(items: list[str], windows) -> dict[str, Decimal]:
    names = sorted(w.name for w in windows)
    spent, problems = {}, []
    for item in items:
        name, _, amount = item.partition("=")
        try:
            value = Decimal(amount)
        except InvalidOperation:
            value = None
        if name not in names or value is None or value < 0:
            problems.append(
                Problem(
                    path="--spent",
                    wrong="invalid",
                    value=item,
                    allowed=f"WINDOW=AMOUNT with WINDOW one of {names} and AMOUNT >= 0",
                )
            )
        else:
            spent[name] = value
    if problems:
        raise GovernanceError(problems)
    return spent


def _as_text(result, windows) -> str:
    from gpu_governance_runtime.capacity import grid

    caps = {w.name: w for w in windows}
    covers: dict[str, list] = {}  # every purchase of one occurrence is one cover
    for p in result.purchases:
        covers.setdefault(p.occurrence.key, []).append(p)
    lines = []
    for key, pieces in covers.items():
        w = caps[pieces[0].window]
        verb = {"dry_run": "WOULD BUY (dry run)", "approval": "WOULD ASK APPROVAL FOR", "auto": "BUY"}[pieces[0].mode]
        bought = sum((p.offering.instance_hours for p in pieces), Decimal(0))
        unused = max(bought - w.instance_count * w.duration_hours, Decimal(0))
        why = f"cheapest cover, then least unused time ({_amount(unused)} instance-hours unused); serves {w.owner}"
        if pieces[0].expected_yield is not None:
            why += f"; its hours use {pieces[0].expected_yield * 100:.0f} % of it (min_yield {w.min_yield * 100:.0f} %)"
        if len(pieces) > 1:
            fee = sum((p.offering.upfront_fee for p in pieces), Decimal(0))
            lines.append(
                f"{verb} {len(pieces)} pieces for {key}, {fee} {pieces[0].offering.currency} in all, in this order "
                f"(a piece that fails stops the rest): {why}"
            )
        for number, p in enumerate(pieces, start=1):
            o = p.offering
            what = f"{o.kind.replace('_', ' ')} of {o.reservation_id}" if o.extends else o.kind.replace("_", " ")
            head = f"{verb} {what} {o.id} for {key}" if len(pieces) == 1 else f"  piece {number}: {what} {o.id}"
            lines.append(
                f"{head}: {o.count} x {o.instance_type} in {o.availability_zone or 'any zone'}, "
                f"{o.start:%Y-%m-%d %H:%M} to {o.end:%Y-%m-%d %H:%M} UTC, {o.upfront_fee} {o.currency} "
                f"({o.price_per_instance_hour:.2f}/instance-hour, cap {w.max_price_per_instance_hour})"
                + ("; " + why if len(pieces) == 1 else "")
            )
    lines += [f"COVERED {o.key} by blocks already held" for o in result.covered]
    lines += [f"NOT COVERED {u.occurrence.key} ({caps[u.window].owner}): {u.reason}" for u in result.uncovered]
    lines += [f"DECLINED {d.occurrence.key} ({caps[d.window].owner}): {d.reason}" for d in result.declined]
    lines += [f"IGNORED offering {offering_id}: {why}" for offering_id, why in result.ignored_offerings]
    for w in windows:
        if result.spend(w.name):
            lines.append(f"SPEND {w.name}: {result.spend(w.name)} of {w.budget} per {w.budget_period}")
    planned = "\n".join(lines) or "nothing to buy: no occurrence of any window is within its buying horizon"
    return "\n".join([planned, *(f"GRID {grid.report(w)}" for w in windows)])


def _amount(value: Decimal) -> str:
    """An amount to the cent, without trailing zeros (12.50 -> 12.5, 3.00 -> 3)."""
    return f"{Decimal(value).quantize(Decimal('0.01')).normalize():f}"


def _as_json(result, windows) -> dict[str, Any]:
    from gpu_governance_runtime.capacity import grid

    owners = {w.name: w.owner_fields for w in windows}
    return {
        "purchases": [
            {
                "window": p.window,
                **owners[p.window],
                "occurrence": p.occurrence.key,
                "mode": p.mode,
                "offering": p.offering.id,
                "kind": p.offering.kind,
                "upfront_fee": str(p.offering.upfront_fee),
                "start": p.offering.start.isoformat(),
                "end": p.offering.end.isoformat(),
                "availability_zone": p.offering.availability_zone,
                "expected_yield": None if p.expected_yield is None else str(p.expected_yield),
            }
            for p in result.purchases
        ],
        "covered": [o.key for o in result.covered],
        "uncovered": [{"occurrence": u.occurrence.key, "reason": u.reason} for u in result.uncovered],
        "declined": [
            {"occurrence": d.occurrence.key, "expected_yield": str(d.expected_yield), "reason": d.reason}
            for d in result.declined
        ],
        "grid": {w.name: grid.report(w) for w in windows},
        "ignored_offerings": [{"offering": i, "reason": r} for i, r in result.ignored_offerings],
    }
