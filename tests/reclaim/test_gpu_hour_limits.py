"""GPU-hour limits on Batch quota-share and HyperPod EKS pools, enforced by the reclaim controller
(issue 28, item 5): the count is added once per tick whatever the retries, the 80 % notice is
sent once, the team's share is disabled at 100 % and enabled again next period (not for a paused
team), dry run changes nothing, and a throttled or timed-out update is put right by the next tick
without a second change. The ledger is moto's DynamoDB; Batch, SageMaker and EventBridge are
botocore Stubbers (moto lacks quota shares and compute quotas)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

import boto3  # noqa: E402
import pytest  # noqa: E402
from botocore.exceptions import ClientError, ReadTimeoutError  # noqa: E402
from botocore.stub import Stubber  # noqa: E402

from constructs_lib.core.errors import GovernanceError  # noqa: E402
from constructs_lib.model import GovernanceModel  # noqa: E402
from gpu_governance_runtime.backends.batch_quota_share.gpu_hours import QuotaShareSwitch  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_eks.gpu_hours import ComputeQuotaSwitch  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import GPU_HOUR_LIMIT_EVENT_TYPE, RECLAIM_EVENT_SOURCE, SharingStrategy  # noqa: E402
from gpu_governance_runtime.limits import next_reset, period_start  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Share  # noqa: E402
from gpu_governance_runtime.policy import PolicyError, PoolPolicy, parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim import gpu_hours  # noqa: E402
from tests.foundation.org import default_data  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/training"
SHARE_ARN = f"{QUEUE}/quota-share/research"
TYPE = "ml.p5.48xlarge"  # 8 GPUs
CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
QUOTA_ID = "cq-0123456789ab"
# 2025-12-02 10:00 UTC, a Tuesday; the day's limit of 16 GPU hours is 2 hours of one p5 instance
MORNING = datetime(2025, 12, 2, 10, tzinfo=UTC).timestamp()
NEXT_DAY = datetime(2025, 12, 3, 0, 1, tzinfo=UTC).timestamp()


def pool(*, paused: bool = False, backend: str = "batch_quota_share") -> PoolPolicy:
    return PoolPolicy(
        name="training",
        backend=backend,
        capacity={TYPE: 4},
        shares=(
            Share(
                name="research",
                quota={TYPE: 2},
                strategy=SharingStrategy.LEND_AND_BORROW,
                paused=paused,
                gpu_hour_limit=(16, "day"),
            ),
            Share(name="inference", quota={TYPE: 2}, strategy=SharingStrategy.RESERVE),
        ),
    )


@pytest.fixture
def aws():
    with reclaim_ledger_table() as table:
        batch, events = boto3.client("batch"), boto3.client("events")
        with Stubber(batch) as batch_stub, Stubber(events) as events_stub:
            yield Ledger(table), batch, batch_stub, events, events_stub


def shows(stub: Stubber, state: str) -> None:
    stub.add_response(
        "list_quota_shares",
        {
            "quotaShares": [
                {
                    "quotaShareName": "research",
                    "quotaShareArn": SHARE_ARN,
                    "jobQueueArn": QUEUE,
                    "capacityLimits": [{"maxCapacity": 2, "capacityUnit": TYPE}],
                    "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1},
                    "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
                    "state": state,
                    "status": "VALID",
                }
            ]
        },
        {"jobQueue": QUEUE},
    )
    stub.add_response(
        "describe_quota_share",
        {
            "quotaShareName": "research",
            "quotaShareArn": SHARE_ARN,
            "jobQueueArn": QUEUE,
            "capacityLimits": [{"maxCapacity": 2, "capacityUnit": TYPE}],
            "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
            "state": state,
            "status": "VALID",
            "tags": {},
        },
        {"quotaShareArn": SHARE_ARN},
    )


def updated(stub: Stubber, state: str, *, error: str | None = None) -> None:
    expected = {"quotaShareArn": SHARE_ARN, "state": state}
    if error:
        stub.add_client_error(
            "update_quota_share", service_error_code=error, http_status_code=429, expected_params=expected
        )
    else:
        stub.add_response("update_quota_share", {"quotaShareName": "research", "quotaShareArn": SHARE_ARN}, expected)


def noticed(stub: Stubber) -> None:
    stub.add_response("put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]})


def tick(
    aws,
    now: float,
    instances: int,
    *,
    policy: PoolPolicy | None = None,
    dry_run: bool = False,
    tick_seconds: float = 3600.0,
):
    """One tick of ``policy`` seeing ``instances`` of research's p5 running (an hour per tick keeps the figures round)."""
    ledger, batch, _, events, _ = aws
    (record,) = gpu_hours.enforce(
        policy or pool(),
        [("research", TYPE, instances), ("inference", TYPE, 2)],
        ledger=ledger,
        switch=lambda team: QuotaShareSwitch(batch, QUEUE, team),
        notify=gpu_hours.event_sender(events),
        now=now,
        tick_seconds=tick_seconds,
        dry_run=dry_run,
    )
    return record


def test_a_duplicated_or_retried_tick_adds_its_gpu_hours_once(aws):
    ledger = aws[0]
    first = tick(aws, MORNING, 1)
    again = tick(aws, MORNING + 30, 1)  # Lambda's retry of the same tick, or a concurrent run: the same hour-long tick
    assert (first["used_gpu_hours"], again["used_gpu_hours"]) == (8, 8)
    earlier = ledger.add_gpu_hours(
        "training", "research", first["period_start"], 8, tick=int(MORNING // 3600) - 1, now=MORNING
    )
    assert earlier == 8  # a retry of an older tick arriving late adds nothing either
    assert tick(aws, MORNING + 3600, 0)["used_gpu_hours"] == 8  # nothing running: nothing added


def test_the_80_percent_notice_is_sent_once_per_team_and_period(aws):
    _, _, _, _, events_stub = aws
    tick(aws, MORNING, 1)  # 8 of 16: no notice
    events_stub.add_response(
        "put_events",
        {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]},
        {
            "Entries": [
                {
                    "Source": RECLAIM_EVENT_SOURCE,
                    "DetailType": GPU_HOUR_LIMIT_EVENT_TYPE,
                    "Detail": '{"limit": 16, "period": "day", "period_start": "2025-12-02T00:00:00+00:00", "pool": "training", '
                    '"resets": "2025-12-03T00:00:00+00:00", "team": "research", "used_gpu_hours": 14.0}',
                }
            ]
        },
    )
    tick_seconds = 0.75 * 3600  # 6 GPU hours: 14 of 16
    assert tick(aws, MORNING + 3600, 1, tick_seconds=tick_seconds)["notice"] == "sent"
    assert tick(aws, MORNING + 3600 + tick_seconds, 0, tick_seconds=tick_seconds)["notice"] == "sent_before"
    events_stub.assert_no_pending_responses()


def test_a_notice_eventbridge_refused_is_sent_by_the_next_tick(aws):
    _, _, _, _, events_stub = aws
    events_stub.add_response(
        "put_events", {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure", "ErrorMessage": "x"}]}
    )
    with pytest.raises(ClientError):
        tick(aws, MORNING, 2)  # 16 of 16 would also disable: the notice comes first
    noticed(events_stub)
    shows(aws[2], "ENABLED")
    updated(aws[2], "DISABLED")
    assert tick(aws, MORNING + 3600, 0)["notice"] == "sent"


def test_the_share_is_disabled_at_the_limit_and_enabled_again_next_period(aws):
    ledger, _, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED")
    at_limit = tick(aws, MORNING, 2)  # 16 of 16
    assert (at_limit["switch"], at_limit["used_gpu_hours"]) == ("disabled", 16)
    shows(batch_stub, "DISABLED")
    assert tick(aws, MORNING + 3600, 2)["switch"] == "off"  # still over, still off: read, not changed
    batch_stub.assert_no_pending_responses()
    assert ledger.get("hour-limit#training#research")["status"] == "disabled"
    shows(batch_stub, "DISABLED")
    updated(batch_stub, "ENABLED")
    next_day = tick(aws, NEXT_DAY, 0)
    assert (next_day["switch"], next_day["used_gpu_hours"], next_day["period_start"]) == (
        "enabled",
        0,
        "2025-12-03T00:00:00+00:00",
    )
    assert tick(aws, NEXT_DAY + 3600, 0)["switch"] == "as_deployed"
    batch_stub.assert_no_pending_responses()


def test_a_share_a_deploy_turned_on_again_within_the_period_is_turned_off_again(aws):
    # A deploy of the team's stack sets the share as the template declares it (ENABLED); the team
    # is still over its limit for the period, so the next tick turns it off again, recorded.
    ledger, _, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED")
    assert tick(aws, MORNING, 2)["switch"] == "disabled"
    shows(batch_stub, "ENABLED")  # the deploy
    updated(batch_stub, "DISABLED")
    assert tick(aws, MORNING + 3600, 2)["switch"] == "disabled_again"
    assert ledger.get("hour-limit#training#research")["status"] == "disabled"
    batch_stub.assert_no_pending_responses()


def test_a_paused_team_is_not_enabled_next_period(aws):
    ledger, _, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED")
    tick(aws, MORNING, 2)
    paused = tick(aws, NEXT_DAY, 0, policy=pool(paused=True))  # paused in the governance file meanwhile
    assert paused["switch"] == "left_off"
    assert ledger.get("hour-limit#training#research")["status"] == "left_off"
    assert (
        tick(aws, NEXT_DAY + 3600, 0, policy=pool(paused=False))["switch"] == "as_deployed"
    )  # resumed: the deploy turns it on
    batch_stub.assert_no_pending_responses()


def test_a_share_someone_else_disabled_is_not_enabled_by_the_controller(aws):
    _, _, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "DISABLED")  # off before the limit (a platform admin): no update
    assert tick(aws, MORNING, 2)["switch"] == "off"
    assert tick(aws, NEXT_DAY, 0)["switch"] == "left_off"
    batch_stub.assert_no_pending_responses()


def test_dry_run_counts_but_sends_and_changes_nothing(aws):
    ledger, _, batch_stub, _, events_stub = aws
    record = tick(aws, MORNING, 2, dry_run=True)
    assert (record["switch"], record["used_gpu_hours"], "notice" in record) == ("would_disable", 16, False)
    assert ledger.get("hour-limit#training#research") is None
    batch_stub.assert_no_pending_responses()  # no call was stubbed: any call would have raised
    events_stub.assert_no_pending_responses()


def test_a_throttled_update_is_retried_next_tick_with_one_change(aws):
    ledger, _, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED", error="TooManyRequestsException")
    throttled = tick(aws, MORNING, 2)
    assert throttled["switch"] == "retry_next_tick" and "TooManyRequestsException" in throttled["error"]
    assert ledger.get("hour-limit#training#research")["status"] == "disabling"  # recorded before the call
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED")
    assert tick(aws, MORNING + 3600, 2)["switch"] == "disabled"
    shows(batch_stub, "DISABLED")  # read again, and left as it is: one change in all
    assert tick(aws, MORNING + 7200, 2)["switch"] == "off"
    batch_stub.assert_no_pending_responses()


def test_an_update_whose_answer_was_lost_is_not_made_twice(aws):
    ledger, batch, batch_stub, _, events_stub = aws
    noticed(events_stub)
    shows(batch_stub, "ENABLED")

    def lost_answer(**_):  # the share was disabled; the answer timed out
        raise ReadTimeoutError(endpoint_url="https://batch.us-east-1.amazonaws.com")

    batch.meta.events.register_first("before-call.batch.UpdateQuotaShare", lost_answer)
    assert tick(aws, MORNING, 2)["switch"] == "retry_next_tick"
    batch.meta.events.unregister("before-call.batch.UpdateQuotaShare", lost_answer)
    shows(batch_stub, "DISABLED")  # the next read sees it done: no second update
    assert tick(aws, MORNING + 3600, 2)["switch"] == "off"
    item = ledger.get("hour-limit#training#research")
    assert (item["status"], item["was_on"]) == ("disabled", True)  # still the controller's to turn on next period
    shows(batch_stub, "DISABLED")
    updated(batch_stub, "ENABLED")
    assert tick(aws, NEXT_DAY, 0)["switch"] == "enabled"
    batch_stub.assert_no_pending_responses()


def test_a_hyperpod_compute_quota_is_deactivated_at_the_version_read():
    created = datetime(2025, 11, 1, tzinfo=UTC)
    with reclaim_ledger_table() as table:
        sagemaker, events = boto3.client("sagemaker"), boto3.client("events")
        with Stubber(sagemaker) as stub, Stubber(events) as events_stub:
            noticed(events_stub)
            summary = {
                "ComputeQuotaArn": f"arn:aws:sagemaker:us-east-1:111122223333:compute-quota/{QUOTA_ID}",
                "ComputeQuotaId": QUOTA_ID,
                "Name": "research",
                "ComputeQuotaVersion": 3,
                "Status": "Updated",
                "ClusterArn": CLUSTER,
                "ActivationState": "Enabled",
                "ComputeQuotaTarget": {"TeamName": "research", "FairShareWeight": 10},
                "CreationTime": created,
            }
            stub.add_response(
                "list_compute_quotas",
                {"ComputeQuotaSummaries": [summary]},
                {"ClusterArn": CLUSTER, "NameContains": "research"},
            )
            stub.add_response(
                "describe_compute_quota",
                {**summary, "ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": TYPE, "Count": 2}]}},
                {"ComputeQuotaId": QUOTA_ID},
            )
            stub.add_response(
                "update_compute_quota",
                {"ComputeQuotaArn": summary["ComputeQuotaArn"], "ComputeQuotaVersion": 4},
                {"ComputeQuotaId": QUOTA_ID, "TargetVersion": 3, "ActivationState": "Disabled"},
            )
            (record,) = gpu_hours.enforce(
                pool(backend="hyperpod_eks"),
                [("research", TYPE, 2)],
                ledger=Ledger(table),
                switch=lambda team: ComputeQuotaSwitch(sagemaker, CLUSTER, team),
                notify=gpu_hours.event_sender(events),
                now=MORNING,
                tick_seconds=3600,
                dry_run=False,
                pool_gpus={TYPE: 8},
            )
            assert record["switch"] == "disabled"
            stub.assert_no_pending_responses()


def test_an_instance_type_of_unknown_gpus_is_named():
    with pytest.raises(ValueError, match="ml.x9.huge"):
        gpu_hours.gpus_per_instance({}, "ml.x9.huge")


@pytest.mark.parametrize(
    "period, now, began",
    [
        ("day", "2026-12-01T18:40", "2026-12-01T00:00"),
        ("week", "2026-12-01T18:40", "2026-11-29T00:00"),  # a Tuesday: the Sunday before
        ("week", "2026-12-06T00:00", "2026-12-06T00:00"),  # at the reset itself: the period it starts
        ("week", "2026-12-05T23:59", "2026-11-29T00:00"),
        ("month", "2026-12-31T23:59", "2026-12-01T00:00"),
    ],
)
def test_a_period_begins_at_the_reset_before_it(period, now, began):
    at = datetime.fromisoformat(now).replace(tzinfo=UTC)
    start = period_start(period, at)
    assert start == datetime.fromisoformat(began).replace(tzinfo=UTC)
    assert start <= at < next_reset(period, at) == next_reset(period, start)  # one calendar with next_reset


@pytest.mark.parametrize(
    "limit, message",
    [
        ({"hours": 0, "period": "day"}, "shares[0].gpu_hour_limit.hours: 0 - a whole number >= 1"),
        ({"hours": 5, "period": "year"}, "shares[0].gpu_hour_limit.period: 'year' - one of day, week, month"),
        ("lots", "shares[0].gpu_hour_limit: 'lots' - {hours, period} or null"),
    ],
)
def test_a_bad_gpu_hour_limit_in_the_policy_document_is_named(limit, message):
    document = {
        "version": 1,
        "organisation": "o",
        "priority_classes": [],
        "capacity_windows": [],
        "pools": [
            {
                "name": "p",
                "backend": "batch_quota_share",
                "capacity": {TYPE: 8},
                "shares": [{"name": "a", "quota": {TYPE: 2}, "strategy": "reserve", "gpu_hour_limit": limit}],
            }
        ],
    }
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_policy(document)


def test_a_limit_on_a_hyperpod_eks_pool_needs_its_gpus_per_instance():
    data = default_data()
    eks = next(p for p in data["pools"] if p["name"] == "hyperpod-eks")
    eks["gpus_per_instance"].pop("ml.g6e.48xlarge")
    for team in data["teams"]:
        team.pop("gpu_hour_limit", None)
        if team["name"] == "training":
            team["gpu_hour_limit"] = {"hours": 100, "period": "month"}
    with pytest.raises(GovernanceError) as error:
        GovernanceModel.from_dict(data)
    assert (
        "gpu_hour_limit: counted in GPU hours, but the GPUs of one ml.g6e.48xlarge are not known (the pool declares no gpus_per_instance"
        in str(error.value)
    )
    assert "set gpus_per_instance.ml.g6e.48xlarge on pool hyperpod-eks" in str(error.value)


def test_the_controller_counts_a_quota_share_pool_from_the_running_jobs_its_tick_read(aws, monkeypatch):
    from gpu_governance_runtime.planners.reclaim import PoolState, RunningJob
    from gpu_governance_runtime.reclaim import handler as controller

    ledger, batch, batch_stub, events, events_stub = aws
    monkeypatch.setattr(controller, "batch", batch)
    monkeypatch.setattr(controller, "events", events)
    policy = pool()
    hour_limits = controller.gpu_hour_limits(
        {"pool": "training", "job_queue": QUEUE}, policy, ledger, now=MORNING, tick_seconds=3600, dry_run=False
    )
    running = tuple(
        RunningJob(job_id=f"j{i}", share="research", instance_type=TYPE, count=1, priority=0, started_at=MORNING - 60)
        for i in range(2)
    )
    noticed(events_stub)
    shows(batch_stub, "ENABLED")
    updated(batch_stub, "DISABLED")
    (record,) = hour_limits(
        PoolState(capacity=policy.capacity, shares=policy.shares, running=running, pending=(), now=MORNING)
    )
    assert (record["used_gpu_hours"], record["switch"]) == (16, "disabled")  # 2 jobs x 1 p5 x 8 GPUs x 1 hour
    batch_stub.assert_no_pending_responses()
    assert (
        controller.gpu_hour_limits(
            {"pool": "training", "job_queue": QUEUE},
            pool(backend="batch_fair_share"),
            ledger,
            now=MORNING,
            tick_seconds=3600,
            dry_run=False,
        )
        is None
    )  # no per-share switch there


def test_the_controller_counts_a_hyperpod_eks_pool_from_the_gpus_kueue_shows_in_instances(aws, monkeypatch):
    from gpu_governance_runtime.backends.kueue_usage import EksShareUsage
    from gpu_governance_runtime.reclaim import handler as controller

    ledger, _, _, events, _ = aws
    monkeypatch.setattr(controller, "events", events)
    policy = pool(backend="hyperpod_eks")
    target = {"pool": "training", "eks_cluster": "acme", "cluster_arn": CLUSTER, "gpus_per_instance": {TYPE: 8}}
    hour_limits = controller.gpu_hour_limits(target, policy, ledger, now=MORNING, tick_seconds=3600, dry_run=True)
    rows = (
        EksShareUsage(share="research", instance_type=TYPE, guaranteed=2, in_use=1.5, borrowed=0, lent=0),
    )  # 12 GPUs
    (record,) = hour_limits(rows)
    assert (record["used_gpu_hours"], record["switch"]) == (12, "as_deployed")
    unlimited = PoolPolicy(
        name="training",
        backend="hyperpod_eks",
        capacity={TYPE: 4},
        shares=(Share(name="x", quota={}, strategy=SharingStrategy.RESERVE),),
    )
    assert (
        controller.gpu_hour_limits(target, unlimited, ledger, now=MORNING, tick_seconds=3600, dry_run=True) is None
    )  # nothing to count


def test_the_controller_names_each_limited_quota_share_until_there_are_too_many(monkeypatch):
    from constructs_lib.backends import base

    model = GovernanceModel.from_dict(default_data())  # research has a limit on sagemaker-training
    queue = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"
    assert base.limited_quota_shares({"sagemaker-training": queue}, model) == [f"{queue}/quota-share/research"]
    data = default_data()
    for team in data["teams"]:
        team["gpu_hour_limit"] = {"hours": 100, "period": "month"}
    everyone = GovernanceModel.from_dict(data)
    assert len(base.limited_quota_shares({"sagemaker-training": queue}, everyone)) == 3
    monkeypatch.setattr(base, "MAX_NAMED_QUOTA_SHARES", 2)  # more limited teams than named: the queue's quota shares
    assert base.limited_quota_shares({"sagemaker-training": queue}, everyone) == [f"{queue}/quota-share/*"]
