"""On-demand windows: `gpu-governance capacity request` and `Capacity Request` events create a
window served within its declared window's price cap, budget and approval mode, exactly once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from botocore.stub import ANY
from moto import mock_aws

from constructs_lib.cli import main
from constructs_lib.model.loader import default_config_text
from gpu_governance_runtime import contract
from gpu_governance_runtime.capacity import controller, requests
from gpu_governance_runtime.capacity.handler import process

from .builders import NOW, at, window
from .stubbed_aws import CONTROLLER, TABLE, StubbedAws, block_offering, capacity_reservation, create_ledger_table, later
from .test_any_duration import short_block
from .test_handler import env  # noqa: F401 - the handler's fixture: policy file, clients, settings

# The team's declared window: nothing of its own in the horizon, so only the request is bought.
BASE = window(
    name="spike-pool",
    team="research",
    cost_centre="cc-1",
    mode="approval",
    start=at(30, 14, 0),
    buy_ahead_days=1,
    budget=Decimal("6000"),
)


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def submit(ledger, token="page-42", count=4, hours=4, start=None, now=NOW, windows=(BASE,)):
    return requests.submit(
        ledger,
        windows,
        token=token,
        team="research",
        instance_type="p5.48xlarge",
        count=count,
        hours=hours,
        requested_by="account:111111111111",
        start=start,
        now=now,
    )


def serve(stubbed, ledger, now, notes=None):
    windows = {BASE.name: BASE}
    windows.update(requests.requested_windows(ledger, windows))
    return controller.run(
        windows=windows.values(),
        ledger=ledger,
        capacity=stubbed.market,
        notify=lambda s, m: (notes if notes is not None else []).append((s, m)),
        now=now,
    )


def test_request_through_approval_is_bought_once_for_its_team(aws):
    stubbed, ledger = aws
    request, new = submit(ledger)
    assert new and request.name.startswith("spike-pool-r") and request.start == NOW
    # 09:00-13:00 today: covered from 09:30 on by a block starting at 09:20 and ending tomorrow 11:30.
    offer = short_block("cbo-now", at(1, 9, 20), at(2), per_hour=Decimal("30"))
    stubbed.owned()
    stubbed.offerings(offer)
    notes = []
    report = serve(stubbed, ledger, NOW, notes)
    (asked,) = report.awaiting_approval
    assert asked.window == request.name and notes[0][1]["team"] == "research"
    assert ledger.spent(BASE, NOW) == offer.upfront_fee  # the declared window's budget, not a new one
    # The same request again (a retry, a second person, the event delivered twice) is the same window.
    again, new = submit(ledger, now=later(NOW, 1))
    assert (again, new) == (request, False)
    ledger.approve(asked.id, now=later(NOW, 2))
    stubbed.owned()
    stubbed.ec2_stub.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [block_offering(offer)]},
        {
            "InstanceType": "p5.48xlarge",
            "InstanceCount": 4,
            "CapacityDurationHours": 24,  # searched again as found: a day, whose instant block ends tomorrow 11:30
            "StartDateRange": ANY,
            "EndDateRange": ANY,
        },
    )
    stubbed.ec2_stub.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": {"CapacityReservationId": "cr-0123456789abcdef0"}},
        {
            "CapacityBlockOfferingId": offer.id,
            "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": [
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": [
                        {"Key": contract.TAG_INTENT, "Value": asked.id},
                        {"Key": contract.TAG_WINDOW, "Value": request.name},
                        {"Key": contract.TAG_MANAGED_BY, "Value": CONTROLLER},
                        {"Key": contract.TAG_TEAM, "Value": "research"},
                        {"Key": contract.TAG_COST_CENTRE, "Value": "cc-1"},
                    ],
                }
            ],
        },
    )
    report = serve(stubbed, ledger, later(NOW, 5))
    assert [i.id for i in report.bought] == [asked.id]
    stubbed.owned(capacity_reservation(offer, intent_id=asked.id, window=request.name))
    report = serve(stubbed, ledger, later(NOW, 20))
    assert report.bought == () and report.awaiting_approval == () and len(stubbed.purchase_attempts) == 1
    assert ledger.spent(BASE, NOW) == offer.upfront_fee
    stubbed.done()


def test_a_token_used_for_a_different_request_is_refused(aws):
    _, ledger = aws
    submit(ledger)
    with pytest.raises(requests.RequestRefused, match="token: 'page-42' - already used for a different request"):
        submit(ledger, count=8)
    assert len(ledger.actions(requests.ACTION_PREFIX, (requests.OPEN,))) == 1


def test_request_over_budget_is_refused_and_a_request_never_adds_money(aws):
    stubbed, ledger = aws
    spent = window(name=BASE.name, team="research", budget=Decimal("6000"))
    ledger._db.put_item(
        TableName=TABLE, Item={"pk": {"S": f"spend#{BASE.name}#{BASE.period_key(NOW)}"}, "total": {"N": "6000"}}
    )
    with pytest.raises(requests.RequestRefused, match="budget: window spike-pool has spent 6000 of 6000 this month"):
        submit(ledger)
    assert ledger.actions(requests.ACTION_PREFIX, (requests.OPEN,)) == []
    # With 1000 left, a cover costing more is not bought: the request spends the declared window's budget.
    ledger._db.put_item(
        TableName=TABLE, Item={"pk": {"S": f"spend#{spent.name}#{BASE.period_key(NOW)}"}, "total": {"N": "5000"}}
    )
    submit(ledger)
    stubbed.owned()
    stubbed.offerings(short_block("cbo-now", at(1, 9, 20), at(2), per_hour=Decimal("30")))
    report = serve(stubbed, ledger, NOW)
    assert report.awaiting_approval == () and report.uncovered[0][1].startswith("budget: cheapest cover costs")
    stubbed.done()


def test_a_request_needs_a_declared_window_of_the_team(aws):
    _, ledger = aws
    with pytest.raises(requests.RequestRefused, match="team research: no declared window of g6e.12xlarge"):
        requests.submit(
            ledger,
            [BASE],
            token="t",
            team="research",
            instance_type="g6e.12xlarge",
            count=1,
            hours=4,
            start=None,
            now=NOW,
            requested_by="account:111111111111",
        )
    with pytest.raises(requests.RequestRefused, match="team training: no declared window"):
        requests.submit(
            ledger,
            [BASE],
            token="t",
            team="training",
            instance_type="p5.48xlarge",
            count=1,
            hours=4,
            start=None,
            now=NOW,
            requested_by="account:111111111111",
        )
    with pytest.raises(requests.RequestRefused, match="count: 65 - 1 to 64; hours: 0 - 1 to 4368"):
        submit(ledger, count=65, hours=0)


def test_capacity_request_command_is_idempotent(tmp_path, capsys):
    data = yaml.safe_load(default_config_text())
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    declared = data["capacity_windows"][0]

    def args(count="2", *token):
        return [
            "capacity",
            "request",
            "--config",
            str(config),
            "--team",
            declared["team"],
            "--instance-type",
            declared["instance_type"],
            "--count",
            count,
            "--hours",
            "6",
            "--start",
            "2026-12-20T08:00:00Z",
            "--table",
            TABLE,
            "--region",
            "us-east-1",
            *token,
        ]

    with mock_aws():
        ledger = create_ledger_table()
        assert main(args()) == 0
        assert capsys.readouterr().out.startswith("requested window weekly-validation-r")
        assert main(args()) == 0
        assert capsys.readouterr().out.startswith("already requested window weekly-validation-r")
        (recorded,) = ledger.actions(requests.ACTION_PREFIX, (requests.OPEN,))
        assert recorded[2]["team"] == declared["team"] and recorded[2]["start"] == "2026-12-20T08:00:00+00:00"
        assert main(args("3", "--token", recorded[0].removeprefix("request#"))) == 2
        err = capsys.readouterr().err
        assert "already used for a different request" in err and "Traceback" not in err


EVENT = {
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "source": contract.CAPACITY_EVENT_SOURCE,
    "account": "222222222222",
    "detail-type": contract.CAPACITY_REQUEST_DETAIL_TYPE,
    "time": "2026-12-01T09:00:00Z",
    "detail": {"team": "research", "instance_type": "p5.48xlarge", "count": 2, "hours": 4},
}


def test_capacity_request_event_is_served_once(env, capsys):  # noqa: F811 - the fixture
    stubbed, clients, settings, _ = env
    for new in (True, False):  # EventBridge delivers an event at least once: its id is the token
        stubbed.owned()
        stubbed.offerings()  # the declared window
        stubbed.offerings()  # the requested one
        result = process(EVENT, clients=clients, settings=settings, now=NOW + timedelta(minutes=0 if new else 3))
        assert result["request"]["new"] is new and result["request"]["team"] == "research"
        assert sorted(o for o, _ in result["run"]["uncovered"]) == sorted(
            ["launch-load-test@20261210T1400Z", f"{result['request']['window']}@20261201T0900Z"]
        )
    stubbed.owned()
    stubbed.offerings()
    stubbed.offerings()
    bad = process({**EVENT, "id": "other", "detail": {"team": "research"}}, clients=clients, settings=settings, now=NOW)
    assert bad["request"]["refused"] == (
        "detail.instance_type: missing - an instance type such as p5.48xlarge; "
        "detail.count: missing - a whole number of instances, 1 to 64; "
        "detail.hours: missing - a whole number of hours, 1 to 4368"
    )
    stubbed.done()


def test_a_request_past_its_end_is_closed_once_and_not_planned_again(env, capsys):  # noqa: F811 - the fixture
    stubbed, clients, settings, _ = env
    stubbed.owned()
    stubbed.offerings()
    stubbed.offerings()
    name = process(EVENT, clients=clients, settings=settings, now=NOW)["request"]["window"]  # 09:00-13:00 today
    over = NOW + timedelta(hours=4, minutes=5)
    stubbed.owned()
    stubbed.offerings()  # the declared window only: the request's occurrence is over
    assert process({"source": "aws.events"}, clients=clients, settings=settings, now=over)["closed_requests"] == [name]
    stubbed.owned()
    stubbed.offerings()
    again = process({"source": "aws.events"}, clients=clients, settings=settings, now=over + timedelta(minutes=15))
    assert again["closed_requests"] == [] and name not in str(again["run"])
    # EventBridge delivering the request once more is still the same (closed) window, not a new one.
    stubbed.owned()
    stubbed.offerings()
    late = process(EVENT, clients=clients, settings=settings, now=over + timedelta(minutes=20))
    assert (
        late["request"] == {"window": name, "team": "research", "token": EVENT["id"], "new": False}
        and late["closed_requests"] == []
    )
    stubbed.done()
    capsys.readouterr()  # the runs' log lines
    assert main(["capacity", "requests", "--table", TABLE, "--region", "us-east-1"]) == 0
    assert capsys.readouterr().out.startswith(
        f"CLOSED window {name} (token {EVENT['id']}) for team research: 2 x p5.48xlarge"
    )


def test_a_request_is_not_closed_while_its_capacity_is_held_bought_or_its_quota_not_back(aws):
    from .builders import reservation

    _, ledger = aws
    request, _ = submit(ledger, hours=4)  # 09:00-13:00
    requested = requests.requested_windows(ledger, {BASE.name: BASE})
    over = NOW + timedelta(hours=5)
    held = reservation("cr-1", NOW, 1, state="active", window_name=request.name)  # ends tomorrow 09:00
    assert requests.close_ended(ledger, requested, owned=[held], unsettled=set(), now=over) == []
    assert (
        requests.close_ended(ledger, requested, owned=[], unsettled={request.name}, now=over) == []
    )  # its quota step failed
    assert (
        requests.close_ended(ledger, requested, owned=[], unsettled=set(), now=NOW + timedelta(hours=3)) == []
    )  # not over yet
    assert requests.close_ended(ledger, requested, owned=[held], unsettled=set(), now=held.end) == [request.name]
    assert requests.close_ended(ledger, requested, owned=[], unsettled=set(), now=held.end) == []  # closed once
    assert [status for _, status in requests.listed(ledger)] == [requests.CLOSED]
    assert requests.requested_windows(ledger, {BASE.name: BASE}) == {}


def test_a_request_whose_quota_or_instance_group_step_failed_this_run_is_unsettled():
    from gpu_governance_runtime.capacity import shares
    from gpu_governance_runtime.capacity.handler import _unsettled

    from .test_shares import JOBS, POOL

    requested = {JOBS.name: JOBS}
    raising = {shares.TRAINING_JOBS: {POOL.name: POOL}, shares.INSTANCE_GROUP: {}}
    ok = {"hyperpod": [], "shares": [{**shares.label(shares.TRAINING_JOBS, POOL.name, "research"), "changed": True}]}
    assert _unsettled(requested, ok, raising, NOW) == set()
    # its team's quota share did not take the lowering: not closed until a run puts it back
    share_failed = {
        "hyperpod": [],
        "shares": [{**shares.label(shares.TRAINING_JOBS, POOL.name, "research"), "error": "Throttling"}],
    }
    assert _unsettled(requested, share_failed, raising, NOW) == {JOBS.name}
    # another team's failure at the same place is not this request's
    other = {
        "hyperpod": [],
        "shares": [{**shares.label(shares.TRAINING_JOBS, POOL.name, "training"), "error": "Throttling"}],
    }
    assert _unsettled(requested, other, raising, NOW) == set()
    deferred = {"hyperpod": [{"window": JOBS.name, "deferred": "too little time left"}], "shares": []}
    assert _unsettled(requested, deferred, raising, NOW) == {JOBS.name}


@pytest.mark.parametrize(
    ("detail", "refused"),
    [
        ({**EVENT["detail"], "count": True}, "detail.count: True - a whole number of instances"),
        ({**EVENT["detail"], "count": 2.9}, "detail.count: 2.9 - a whole number of instances"),
        ({**EVENT["detail"], "count": "2"}, "detail.count: '2' - a whole number of instances"),
        ({**EVENT["detail"], "hours": 4.99}, "detail.hours: 4.99 - a whole number of hours"),
        ({**EVENT["detail"], "token": {"a": 1}}, "detail.token: {'a': 1} - 1 to 128 characters"),
        ({**EVENT["detail"], "team": ["research"]}, "detail.team: ['research'] - a team name"),
        ({**EVENT["detail"], "start": "tomorrow"}, "detail.start: 'tomorrow' - \"now\" or an ISO 8601 time"),
        (
            {**EVENT["detail"], "requested_by": "someone-else"},
            "detail.requested_by: unknown field - one of team, instance_type",
        ),
        ("research p5 x2", "detail: 'research p5 x2' - an object with team, instance_type, count, hours"),
        (["research"], "detail: \"['research']\" - an object with team"),
        (None, "detail: 'None' - an object with team"),
    ],
)
def test_a_capacity_request_event_is_read_as_strictly_as_the_governance_file(detail, refused):
    with pytest.raises(requests.RequestRefused) as raised:
        requests.from_event({**EVENT, "detail": detail})
    assert str(raised.value).startswith(refused)


def test_a_bad_capacity_request_detail_is_refused_and_logged_never_raised_out_of_the_run(env):  # noqa: F811 - the fixture
    stubbed, clients, settings, _ = env
    for detail in (
        "a string",
        ["a", "list"],
        {"team": "research", "instance_type": "p5.48xlarge", "count": True, "hours": 4},
    ):
        stubbed.owned()
        stubbed.offerings()
        result = process(
            {**EVENT, "id": f"bad-{detail!s:.8}", "detail": detail}, clients=clients, settings=settings, now=NOW
        )
        assert result["request"]["refused"].startswith("detail")
        assert not any(
            w.startswith("launch-load-test-r") for w, _ in result["run"]["uncovered"]
        )  # nothing was requested
    stubbed.done()


def test_each_request_records_who_sent_it_and_a_repeat_by_someone_else_is_the_same_request(aws):
    _, ledger = aws
    asked = requests.from_event(EVENT)
    assert asked["requested_by"] == "account:222222222222" and asked["count"] == 2 and type(asked["count"]) is int
    request, new = requests.submit(ledger, [BASE], now=NOW, **asked)
    assert new and request.requested_by == "account:222222222222"
    again, new = requests.submit(
        ledger, [BASE], now=NOW, **{**asked, "requested_by": "arn:aws:iam::333333333333:role/oncall"}
    )
    assert not new and again.requested_by == "account:222222222222"  # the first requester stays recorded
    (recorded,) = ledger.actions(requests.ACTION_PREFIX, (requests.OPEN,))
    assert recorded[2]["requested_by"] == "account:222222222222"


def test_an_overlapping_request_joins_or_extends_the_open_one_and_its_token_stays_its_answer(aws):
    _, ledger = aws
    first, new = submit(ledger, token="page-1", count=4, hours=4, now=NOW)
    assert new
    # Inside the open request: joined, nothing recorded to buy.
    inside, new = submit(
        ledger, token="page-2", count=2, hours=2, start=NOW + timedelta(hours=1), now=NOW + timedelta(minutes=5)
    )
    assert (new, inside) == (False, first)
    # Past its end: the open request is extended (same name: what was bought for it counts).
    longer, new = submit(
        ledger, token="page-3", count=4, hours=4, start=NOW + timedelta(hours=2), now=NOW + timedelta(minutes=6)
    )
    assert not new and longer.name == first.name and longer.hours == 6
    # Each token again gives the same answer; only one window is open.
    again, new = submit(
        ledger, token="page-3", count=4, hours=4, start=NOW + timedelta(hours=2), now=NOW + timedelta(minutes=9)
    )
    assert (new, again) == (False, longer)
    assert [r.name for r, status in requests.listed(ledger) if status == requests.OPEN] == [first.name]
    assert list(requests.requested_windows(ledger, {BASE.name: BASE})) == [first.name]
