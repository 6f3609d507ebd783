"""A request joins its declared window's own occurrence (issue 24, outcome 1): an on-demand or
alarm request overlapping an occurrence of the declared window it draws on (recurring or not,
pending or active) buys nothing for the hours that occurrence covers, and only the uncovered hours
are bought, by extending the occurrence's block where the window prefers extensions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from moto import mock_aws

from constructs_lib.cli import main
from constructs_lib.model.loader import default_config_text, load_model
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.capacity import requests
from gpu_governance_runtime.planners.capacity import plan
from gpu_governance_runtime.policy import parse_policy

from .builders import at, block, reservation, window
from .stubbed_aws import TABLE, create_ledger_table
from .test_usable_covers import BATCH

# The declared window: 10 Dec 11:30 for a day (to the 11:30 UTC end of Capacity Blocks), 4 instances.
DECLARED = window(
    name="train-p5", team="research", consumer=BATCH, start=at(10), duration_hours=24, prefer_extension=True
)
ACTIVE_NOW = at(10, 12, 0)  # inside the occurrence


def requested(token, *, start, hours, count=4, base=DECLARED):
    """The window a recorded request becomes (``requests.requested_windows``)."""
    request = requests.Request(
        token=token,
        team=base.team,
        instance_type=base.instance_type,
        count=count,
        hours=hours,
        start=start,
        window=base.name,
    )
    return requests.requested_windows(_Recorded(request), {base.name: base})[request.name]


class _Recorded:
    """A ledger holding one open request: what ``requested_windows`` reads."""

    def __init__(self, request):
        self.request = request

    def actions(self, prefix, statuses):
        return [(requests.ACTION_PREFIX + self.request.token, requests.OPEN, self.request.details())]


@pytest.fixture
def ledger():
    with mock_aws():
        yield create_ledger_table()


def submit(ledger, token, *, start, hours, count=4, now=ACTIVE_NOW, windows=(DECLARED,)):
    return requests.submit(
        ledger,
        windows,
        token=token,
        team="research",
        instance_type="p5.48xlarge",
        count=count,
        hours=hours,
        start=start,
        now=now,
        requested_by="alarm:queue-depth",
    )


def test_a_request_inside_the_declared_windows_active_occurrence_joins_it_and_buys_nothing(ledger):
    joined, new = submit(ledger, "alarm:queue-depth@1", start=at(10, 14, 0), hours=6, count=2)
    assert not new and joined.occurrence == "train-p5@20261210T1130Z" and joined.name == "train-p5"
    assert requests.requested_windows(ledger, {DECLARED.name: DECLARED}) == {}  # no window of its own: nothing to buy
    assert requests.listed(ledger) == []
    # The same token again is the same answer, and still nothing is open.
    again, new = submit(
        ledger, "alarm:queue-depth@1", start=at(10, 14, 0), hours=6, count=2, now=ACTIVE_NOW + timedelta(minutes=5)
    )
    assert (again, new) == (joined, False)
    # More instances than the occurrence declares: a window of its own (the planner decides what the consumer can use).
    bigger, new = submit(ledger, "alarm:queue-depth@2", start=at(10, 14, 0), hours=6, count=6)
    assert new and not bigger.occurrence and bigger.name != "train-p5"


def test_a_pending_occurrence_of_a_recurring_window_is_joined_too(ledger):
    weekly = replace(DECLARED, repeat_every_days=7, buy_ahead_days=7)
    joined, new = submit(
        ledger, "page-7", start=at(17, 13, 0), hours=2, windows=(weekly,)
    )  # next week's occurrence, not bought yet
    assert not new and joined.occurrence == "train-p5@20261217T1130Z"
    # Outside every occurrence: a window of its own.
    outside, new = submit(ledger, "page-8", start=at(13, 13, 0), hours=2, windows=(weekly,))
    assert new and not outside.occurrence


def test_a_request_overlapping_the_active_occurrence_buys_nothing_for_the_hours_its_block_holds():
    held = reservation("cr-held", at(10), 1, state="active", window_name=DECLARED.name)  # 10 Dec 11:30 to 11 Dec 11:30
    request = requested("page-1", start=at(10, 20, 0), hours=12)  # 10 Dec 20:00 to 11 Dec 08:00: inside the block
    result = plan(
        windows=[DECLARED, request],
        reservations=[held],
        offerings=[block("cbo-again", at(10, 20, 0), 1)],
        spent={},
        now=ACTIVE_NOW,
    )
    assert result.purchases == () and result.uncovered == ()
    assert {o.window for o in result.covered} == {DECLARED.name, request.name}


def test_a_request_partly_overlapping_extends_the_occurrences_block_only_for_the_uncovered_hours():
    held = reservation("cr-held", at(10), 1, state="active", window_name=DECLARED.name)
    request = requested("page-2", start=at(11, 9, 30), hours=5)  # 11 Dec 09:30 to 14:30: two hours inside, three after
    extension = block("cbe-held", at(11), 1, kind="extension", reservation_id="cr-held", per_hour="30")
    whole_again = block(
        "cbo-whole", at(11, 9, 30), 1, per_hour="25", end=at(12)
    )  # cheaper, but for hours already held too
    result = plan(
        windows=[DECLARED, request], reservations=[held], offerings=[extension, whole_again], spent={}, now=ACTIVE_NOW
    )
    (bought,) = result.purchases
    assert (bought.window, bought.offering.id) == (request.name, "cbe-held")  # the window prefers extending its block
    # Without that preference the cheapest cover of the uncovered hours is bought, beside nothing the consumer holds then.
    plain = plan(
        windows=[replace(DECLARED, prefer_extension=False), replace(request, prefer_extension=False)],
        reservations=[held],
        offerings=[extension, block("cbo-after", at(11), 1, per_hour="20")],
        spent={},
        now=ACTIVE_NOW,
    )
    assert [(p.window, p.offering.id) for p in plain.purchases] == [(request.name, "cbo-after")]


def test_a_request_overlapping_a_pending_occurrence_counts_the_block_planned_for_it_in_the_same_run():
    # Nothing bought yet: the declared window's block is planned first, and covers the request too
    # (which, ending earlier, would otherwise be planned first and buy a block of its own).
    request = requested("page-3", start=at(10, 11, 30), hours=4, count=4)
    offers = [block("cbo-1", at(10), 1), block("cbo-2", at(10), 1)]
    result = plan(windows=[request, DECLARED], reservations=[], offerings=offers, spent={}, now=at(9, 9, 0))
    assert [(p.window, p.offering.id) for p in result.purchases] == [(DECLARED.name, "cbo-1")]
    assert request.name in {o.window for o in result.covered}


def test_the_request_command_says_the_declared_occurrence_serves_it(tmp_path, capsys):
    config = tmp_path / "governance.yaml"
    config.write_text(default_config_text())
    (weekly,) = parse_policy(
        compile_policy(load_model(config))
    ).capacity_windows  # Mondays 09:00-17:00, 2 x ml.p5.48xlarge
    now = datetime.now(UTC)
    occurrence = next(o for o in replace(weekly, buy_ahead_days=56).occurrences(now) if o.start > now)
    argv = [
        "capacity",
        "request",
        "--config",
        str(config),
        "--team",
        weekly.team,
        "--instance-type",
        weekly.instance_type,
        "--count",
        "2",
        "--hours",
        "3",
        "--start",
        f"{occurrence.start + timedelta(hours=1):%Y-%m-%dT%H:%MZ}",
        "--table",
        TABLE,
        "--region",
        "us-east-1",
    ]
    with mock_aws():
        ledger = create_ledger_table()
        assert main(argv) == 0
        assert capsys.readouterr().out.startswith(
            f"joined window weekly-validation's occurrence {occurrence.key} (token "
        )
        assert requests.requested_windows(ledger, {weekly.name: weekly}) == {}
