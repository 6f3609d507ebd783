"""The models of AWS play the rows of docs/aws-behaviour.md, and the controllers hold under them
(issue 37, items 4 and 5): scheduling priority within one share identifier, ``evaluateOnExit``,
a DISABLED quota share that still starts the jobs submitted to it (and the reclaim controller
terminating a held team's queued jobs because of it), and an SSM cancel that may not stop its
command. Each test fails on the model (or controller) as it was before its row."""

from __future__ import annotations

import contextlib
import json
import os

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from datetime import UTC, datetime  # noqa: E402
from decimal import Decimal  # noqa: E402

import pytest  # noqa: E402

from gpu_governance_runtime.backends.batch_quota_share.gpu_hours import QuotaShareQueue, QuotaShareSwitch  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import SharingStrategy  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Share  # noqa: E402
from gpu_governance_runtime.policy import PoolPolicy  # noqa: E402
from gpu_governance_runtime.reclaim import gpu_hours  # noqa: E402
from tests.aws_model.batch import Clock, FakeBatch  # noqa: E402
from tests.aws_model.dynamodb import FakeDynamoDB  # noqa: E402
from tests.aws_model.ssm import FakeSsm  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
TRAINING = "arn:aws:batch:us-east-1:111122223333:job-queue/training"
TYPE = "ml.p5.48xlarge"  # 8 GPUs
MORNING = datetime(2025, 12, 2, 10, tzinfo=UTC).timestamp()


def _job(batch: FakeBatch, share: str, priority: int, name: str, **extra) -> str:
    return batch.add_job(
        jobName=name,
        jobQueue=QUEUE,
        jobDefinition="train:1",
        shareIdentifier=share,
        schedulingPriorityOverride=priority,
        **extra,
    )


def test_priority_orders_jobs_within_their_share_only():
    """[aws: batch.priority-within-share]: a high priority in one share does not pass an older job of another share."""
    batch = FakeBatch(Clock(), capacity={QUEUE: 1})
    old = _job(batch, "research", 0, "old-research")
    batch.clock.sleep(10)
    urgent = _job(batch, "training", 9999, "urgent-training")
    batch.advance(60)
    assert (batch.jobs[old]["status"], batch.jobs[urgent]["status"]) == ("STARTING", "RUNNABLE")

    within = FakeBatch(Clock(), capacity={QUEUE: 1})
    low = _job(within, "research", 0, "low")
    within.clock.sleep(10)
    high = _job(within, "research", 50, "high")
    within.advance(60)
    assert (within.jobs[high]["status"], within.jobs[low]["status"]) == ("STARTING", "RUNNABLE")


def test_evaluate_on_exit_exits_on_the_first_matching_condition_and_retries_when_none_matches():
    """[aws: batch.evaluate-on-exit]: a job whose retry strategy exits on a host failure is not retried; one whose
    conditions do not match the reason is (the model's attempts fail with their host, as the controllers meet them)."""
    batch = FakeBatch(Clock(), capacity={QUEUE: 2})
    exits = _job(
        batch,
        "research",
        0,
        "exits-on-host-failure",
        retryStrategy={"attempts": 3, "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "EXIT"}]},
    )
    retried = _job(
        batch,
        "research",
        0,
        "exits-on-its-own-errors-only",
        retryStrategy={
            "attempts": 3,
            "evaluateOnExit": [
                {"onExitCode": "1", "action": "EXIT"},
                {"onStatusReason": "Essential container*", "action": "EXIT"},
            ],
        },
    )
    batch.advance(60)
    batch.fail_on_its_own(exits)
    batch.fail_on_its_own(retried)
    assert batch.jobs[exits]["status"] == "FAILED"
    assert batch.jobs[retried]["status"] == "RUNNABLE"


def _service_job(batch: FakeBatch, share: str, name: str, *, instances: int = 1) -> str:
    payload = {
        "TrainingJobName": name,
        "ResourceConfig": {"InstanceType": TYPE, "InstanceCount": instances},
        "HyperParameters": {"work_seconds": "36000"},
    }
    return batch.submit_service_job(
        jobName=name,
        jobQueue=TRAINING,
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName=share,
        serviceRequestPayload=json.dumps(payload),
    )["jobId"]


def test_a_disabled_quota_share_still_starts_the_jobs_submitted_before():
    """[aws: batch.quota-share-disabled]: "new jobs won't be accepted but jobs already submitted can finish"."""
    batch = FakeBatch(Clock(), capacity={})
    share = batch.add_quota_share(TRAINING, "research", capacity={TYPE: 2})
    queued = _service_job(batch, "research", "queued-before")
    batch.update_quota_share(quotaShareArn=share, state="DISABLED")
    batch.advance(60)
    batch.advance(60)
    assert batch.service_jobs[queued]["status"] == "RUNNING"
    try:
        _service_job(batch, "research", "submitted-after")
    except Exception as error:  # noqa: BLE001 - the assertion names what is expected
        assert "DISABLED" in str(error)
    else:
        raise AssertionError("a DISABLED quota share accepted a new job")


def _pool(*, paused: bool = False, limit: tuple[int, str] | None = (16, "day")) -> PoolPolicy:
    return PoolPolicy(
        name="training",
        backend="batch_quota_share",
        capacity={TYPE: 3},
        shares=(
            Share(
                name="research",
                quota={TYPE: 1},
                strategy=SharingStrategy.LEND_AND_BORROW,
                paused=paused,
                gpu_hour_limit=limit,
            ),
            Share(name="inference", quota={TYPE: 2}, strategy=SharingStrategy.LEND_AND_BORROW),
        ),
    )


def _world():
    """Research runs one p5 job and has two more queued; the queue has room for all three."""
    batch = FakeBatch(Clock(now=MORNING), capacity={})
    batch.add_quota_share(TRAINING, "research", capacity={TYPE: 1})
    batch.add_quota_share(TRAINING, "inference", capacity={TYPE: 2})
    running = _service_job(batch, "research", "running")
    batch.advance(60)
    batch.advance(60)
    queued = [_service_job(batch, "research", f"queued-{n}") for n in range(2)]
    dynamodb = FakeDynamoDB()
    dynamodb.create_table("ledger", key="action_id")
    return batch, Ledger(dynamodb.table("ledger")), running, queued


def _enforce(batch: FakeBatch, ledger: Ledger, pool: PoolPolicy, *, dry_run: bool = False) -> list[dict]:
    return gpu_hours.enforce(
        pool,
        [("research", TYPE, 2.0)],  # 2 p5 for an hour: 16 GPU hours, the day's limit
        ledger=ledger,
        switch=lambda team: QuotaShareSwitch(batch, TRAINING, team),
        notify=lambda detail: None,
        now=batch.clock.now,
        tick_seconds=3600.0,
        dry_run=dry_run,
        queue=lambda team: QuotaShareQueue(batch, TRAINING, team),
    )


def _terminations(batch: FakeBatch) -> list[str]:
    return [request["jobId"] for operation, request in batch.requests if operation == "TerminateServiceJob"]


def test_a_team_over_its_limit_has_its_queued_jobs_terminated_once_and_none_starts():
    """Item 4: a disabled share would start the team's queued jobs [aws: batch.quota-share-disabled]; the
    controller terminates them [aws: batch.terminate-service-job], tells their owner why in each job's reason,
    records each before and after, and a retried tick terminates none twice. The running job goes on."""
    batch, ledger, running, queued = _world()
    (record,) = _enforce(batch, ledger, _pool())
    assert record["switch"] == "disabled" and record["held"] == {"terminated": queued, "skipped": []}
    for _ in range(5):
        batch.advance(60)
    assert [batch.service_jobs[j]["status"] for j in queued] == ["FAILED", "FAILED"]
    assert batch.service_jobs[running]["status"] == "RUNNING"
    reason = batch.service_jobs[queued[0]]["statusReason"]
    assert "team research reached its GPU-hour limit (16 GPU hours a day)" in reason
    assert "submit again from 2025-12-03T00:00:00+00:00" in reason
    assert [ledger.get(f"held#training#{j}")["status"] for j in queued] == ["terminated", "terminated"]
    _enforce(batch, ledger, _pool())  # a retried or duplicated tick
    assert sorted(_terminations(batch)) == sorted(queued)


def test_a_paused_team_without_a_limit_has_its_queued_jobs_terminated_and_dry_run_only_lists_them():
    batch, ledger, running, queued = _world()
    (record,) = _enforce(batch, ledger, _pool(paused=True, limit=None), dry_run=True)
    assert record["held"] == {"would_terminate": queued} and _terminations(batch) == []
    (record,) = _enforce(batch, ledger, _pool(paused=True, limit=None))
    assert record["event"] == "team_paused" and record["held"]["terminated"] == queued
    batch.advance(60)
    batch.advance(60)
    assert [batch.service_jobs[j]["status"] for j in queued] == ["FAILED", "FAILED"]
    assert "team research is paused" in batch.service_jobs[queued[0]]["statusReason"]
    assert batch.service_jobs[running]["status"] == "RUNNING"


def test_a_job_a_lagging_listing_shows_again_is_not_terminated_twice_and_one_left_terminating_is():
    dynamodb = FakeDynamoDB()
    dynamodb.create_table("ledger", key="action_id")
    ledger = Ledger(dynamodb.table("ledger"))
    ended: list[str] = []

    class Listing:
        def queued(self) -> list[str]:
            return ["sj-1", "sj-2"]

        def terminate(self, job_id: str, reason: str) -> None:
            ended.append(job_id)

    ledger.put("held#training#sj-2", status=gpu_hours.TERMINATING, team="research", why="", at=0)  # a crash between
    gpu_hours.hold("training", "research", Listing(), why="paused", ledger=ledger, now=MORNING, dry_run=False)
    result = gpu_hours.hold("training", "research", Listing(), why="paused", ledger=ledger, now=MORNING, dry_run=False)
    assert ended == ["sj-1", "sj-2"] and result == {"terminated": [], "skipped": ["sj-1", "sj-2"]}


def _ssm(**kwargs) -> tuple[FakeSsm, list[list[str]]]:
    ran: list[list[str]] = []
    ssm = FakeSsm(Clock(), instance_id="i-0123456789abcdef0", run=lambda c: ran.append(c) or "", **kwargs)
    return ssm, ran


def _send(ssm: FakeSsm, timeout: int = 30, execution: int = 60) -> str:
    return ssm.send_command(
        InstanceIds=["i-0123456789abcdef0"],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["true"], "executionTimeout": [str(execution)]},
        TimeoutSeconds=timeout,
    )["Command"]["CommandId"]


def test_a_cancel_may_not_stop_the_command():
    """[aws: ssm.cancel-command-may-not-stop]: "There is no guarantee that the command will be terminated"."""
    ssm, ran = _ssm(delivery_delay=20.0, cancel_stops=lambda: False)
    command = _send(ssm)
    ssm.advance(5)
    ssm.cancel_command(CommandId=command, InstanceIds=["i-0123456789abcdef0"])
    ssm.advance(30)
    assert ran == [["true"]] and ssm.invocations[command].status == "Success" and ssm.cancels_ignored == 1


def test_a_command_may_be_delivered_until_the_sum_of_both_timeouts():
    """[aws: ssm.delivery-deadline]: the user guide's deadline (TimeoutSeconds plus the execution timeout), the later."""
    late, ran = _ssm(delivery_delay=80.0)
    _send(late)
    late.advance(100)
    assert ran == [["true"]]
    too_late, never = _ssm(delivery_delay=95.0)
    command = _send(too_late)
    too_late.advance(100)
    assert never == [] and too_late.invocations[command].details == "DeliveryTimedOut"


def _notice_ledger(plan) -> Ledger:
    """A ledger on the DynamoDB model behind the reclaim handler's own client configuration (SDK retries)."""
    from gpu_governance_runtime.reclaim import handler
    from tests.aws_model.batch import Faults

    dynamodb = FakeDynamoDB(faults=Faults(plan))
    dynamodb.create_table("ledger", key="action_id")
    return Ledger(dynamodb.table("ledger", config=handler.dynamodb.meta.client.meta.config))


NOTICE = {
    "pool": "training",
    "team": "research",
    "used_gpu_hours": 14.0,
    "limit": 16,
    "period": "day",
    "period_start": "2025-12-02T00:00:00+00:00",
    "resets": "2025-12-03T00:00:00+00:00",
}


def test_a_notice_whose_claim_was_answered_too_late_is_still_sent():
    """Found by the GPU-hour scenario (issue 39): the claim's PutItem is carried out, its answer lost, and the
    SDK sends it again; the resend found the claim it had just made and took it for another tick's, so the
    80 % notice was never sent ("sent_before")."""
    from tests.aws_model import sdk
    from tests.aws_model.batch import LoseAnswer

    plan = LoseAnswer("PutItem")
    sent = []
    with sdk.no_backoff():
        ledger = _notice_ledger(plan)
        assert gpu_hours._notice(ledger, "training", "research", NOTICE, sent.append, MORNING) == "sent"
        assert gpu_hours._notice(ledger, "training", "research", NOTICE, sent.append, MORNING + 60) == "sent_before"
    assert plan.lost == 1 and len(sent) == 1


def test_a_notice_whose_sender_died_after_its_claim_is_sent_by_a_later_tick():
    """A tick killed between the claim and the send (a Lambda timeout) left the notice claimed for good."""
    from gpu_governance_runtime.common.action_ledger import FUNCTION_TIMEOUT_SECONDS
    from tests.aws_model.batch import Crash

    ledger = _notice_ledger(lambda operation, phase: None)

    def killed(detail):
        raise Crash("the invocation timed out while sending")

    with contextlib.suppress(Crash):
        gpu_hours._notice(ledger, "training", "research", NOTICE, killed, MORNING)
    sent = []
    assert gpu_hours._notice(ledger, "training", "research", NOTICE, sent.append, MORNING + 30) == "sent_before"
    later = MORNING + FUNCTION_TIMEOUT_SECONDS + 5  # no invocation that old is alive: the claim is its own again
    assert gpu_hours._notice(ledger, "training", "research", NOTICE, sent.append, later) == "sent"
    assert len(sent) == 1


def test_the_notice_goes_out_in_one_request_so_an_answer_lost_does_not_notify_twice():
    """[aws: events.put-events-each-entry]: EventBridge makes an event of every entry it receives, so the
    notice is sent through a client that does not resend (the handler's ``events``): a lost answer fails the
    send (the next tick sends it again), where the retrying client put the same notice on the bus twice."""
    from botocore.exceptions import ReadTimeoutError

    from gpu_governance_runtime.reclaim import handler
    from tests.aws_model import sdk
    from tests.aws_model.batch import Clock, Faults
    from tests.aws_model.sagemaker import FakeEventBridge

    bus = FakeEventBridge(Clock(), faults=Faults(lambda operation, phase: "timeout" if phase == "after" else None))
    with sdk.no_backoff():
        send = gpu_hours.event_sender(bus.client(config=handler.events.meta.config, by="reclaim"))
        try:
            send(NOTICE)
        except ReadTimeoutError:
            pass
        else:
            raise AssertionError("a send whose answer was lost must fail: the ledger releases it for the next tick")
    assert len(bus.accepted) == 1


def test_one_teams_failed_notice_does_not_keep_another_team_over_its_limit_switched_on():
    """Found by the GPU-hour scenario (issue 39): a throttled PutEvents for one team's 80 % notice raised out
    of the loop over the teams, so every team after it went uncounted and unswitched for as long as the
    notice kept failing. Now each team has its turn, and the failure is raised after them all."""
    from botocore.exceptions import ClientError

    batch, ledger, _, _ = _world()
    pool = PoolPolicy(
        name="training",
        backend="batch_quota_share",
        capacity={TYPE: 3},
        shares=tuple(
            Share(name=team, quota={TYPE: n}, strategy=SharingStrategy.LEND_AND_BORROW, gpu_hour_limit=(16, "day"))
            for team, n in (("inference", 2), ("research", 1))
        ),
    )

    def throttled(detail):
        if detail["team"] == "inference":
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "PutEvents")

    try:
        gpu_hours.enforce(
            pool,
            [("inference", TYPE, 1.75), ("research", TYPE, 2.0)],  # 14 of 16 (a notice), 16 of 16 (off)
            ledger=ledger,
            switch=lambda team: QuotaShareSwitch(batch, TRAINING, team),
            notify=throttled,
            now=batch.clock.now,
            tick_seconds=3600.0,
            dry_run=False,
        )
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ThrottlingException"
    else:
        raise AssertionError("the failed notice must still fail the pool's tick (PoolErrors)")
    shares = {q["quotaShareName"]: q["state"] for q in batch.quota_shares.values()}
    assert shares == {"research": "DISABLED", "inference": "ENABLED"}


def _purchase_ledger(plan):
    """The capacity ledger on the DynamoDB model behind the capacity handler's own client configuration
    (CAPACITY_READS: botocore's default retries)."""
    from gpu_governance_runtime.capacity.ledger import Ledger as PurchaseLedger
    from gpu_governance_runtime.common.clients import CAPACITY_READS
    from tests.aws_model.batch import Faults

    dynamodb = FakeDynamoDB(faults=Faults(plan))
    dynamodb.create_table("capacity", key="pk")
    return PurchaseLedger(client=dynamodb.client(config=CAPACITY_READS), table_name="capacity")


def test_an_action_whose_claim_was_answered_too_late_is_still_this_runs_and_never_another_runs():
    """The capacity ledger's claim_action (a requeue, the day's spend read, a declined notice): its PutItem
    carried out, its answer lost, the resend refused by that very write; the old ledger said "recorded
    before", so the day's spend was never read and the notice never sent. Another run is still refused."""
    from tests.aws_model import sdk
    from tests.aws_model.batch import LoseAnswer

    plan = LoseAnswer("PutItem")
    ledger = _purchase_ledger(plan)
    morning = datetime.fromtimestamp(MORNING, UTC)
    with sdk.no_backoff():
        assert ledger.claim_action("team-spend#2025-12-02", status="reading", details={}, now=morning)
        assert plan.lost == 1
        assert not ledger.claim_action("team-spend#2025-12-02", status="reading", details={}, now=morning)
    assert ledger.actions("team-spend#", ("reading",)) == [("team-spend#2025-12-02", "reading", {})]


def test_an_approved_purchase_whose_start_was_answered_too_late_is_still_bought_by_this_run_only():
    """start_purchase (approved -> purchasing) carried out, its answer lost, the resend refused by that very
    write: the old ledger raised ClaimRefused, so the run did not buy, and the next run found the intent
    purchasing without a call and settled it failed (an approved purchase never made). A second run that
    starts the same approval is still refused: one purchase."""
    from gpu_governance_runtime.capacity.ledger import ClaimRefused
    from gpu_governance_runtime.planners.capacity import Occurrence, Purchase
    from tests.aws_model import sdk
    from tests.aws_model.batch import LoseAnswer
    from tests.capacity.builders import NOW, at, block, window

    approval = window(mode="approval", budget=Decimal("5000"))
    offer = block("cbo-1111111111111111", at(10), 1, per_hour="29")
    occurrence = Occurrence(start=approval.start, end=offer.end, window=approval.name)
    plan = LoseAnswer("UpdateItem", armed=False)
    ledger = _purchase_ledger(plan)
    purchase = Purchase(window=approval.name, occurrence=occurrence, offering=offer, mode="approval")
    intent = ledger.claim(purchase, approval, status="awaiting_approval", now=NOW)
    approved = ledger.approve(intent.id, now=NOW)
    plan.armed = True
    with sdk.no_backoff():
        ledger.start_purchase(approved, now=NOW)
        assert plan.lost == 1
        with pytest.raises(ClaimRefused, match="is no longer approved"):
            ledger.start_purchase(approved, now=NOW)  # another run, the same approval
    assert ledger.intent(intent.id).status == "purchasing"
