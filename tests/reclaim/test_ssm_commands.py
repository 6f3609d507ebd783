"""SSM commands that cannot run late (issue 23, outcome 5): every command carries a delivery
deadline and an execution timeout; one the controller stops waiting for is cancelled and its
outcome read back by the next run, so a requeue the controller gave up on never runs an hour
later when the head node's agent finally takes it. SSM is the stateful model in tests/aws_model."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from moto import mock_aws  # noqa: E402

from gpu_governance_runtime.backends.hyperpod_slurm.adapter import SlurmAdapter  # noqa: E402
from gpu_governance_runtime.capacity import slurm_window  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from gpu_governance_runtime.slurm.ssm import HeadNode  # noqa: E402
from tests.aws_model.batch import Clock  # noqa: E402
from tests.aws_model.ssm import FakeSsm  # noqa: E402
from tests.capacity.stubbed_aws import create_ledger_table  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import POLICY, SETTINGS, SQUEUE_OUTPUT  # noqa: E402

HEAD = "i-0123456789abcdef0"


def head_node_shell(commands):
    script = "\n".join(commands)
    if "squeue --noheader --array --states=RUNNING,PENDING" in script:
        return SQUEUE_OUTPUT
    return "done\n"  # the guarded scontrol requeue / update ran


@pytest.fixture
def table():
    with reclaim_ledger_table() as table:
        yield table


def adapter(ssm, clock):
    return SlurmAdapter(
        ssm,
        instance_id=HEAD,
        instance_type="ml.p5.48xlarge",
        pool=POLICY.pool("slurm"),
        policy=POLICY,
        sleep=clock.sleep,
    )


def tick(ssm, clock, table, records):
    return controller.run_tick(
        "slurm",
        adapter(ssm, clock),
        Ledger(table),
        settings=SETTINGS,
        dry_run=False,
        namespace="Test",
        now=clock.now,
        emit=records.append,
    )


def test_every_command_has_a_delivery_deadline_and_an_execution_timeout():
    clock = Clock()
    ssm = FakeSsm(clock, instance_id=HEAD, run=head_node_shell)
    HeadNode(ssm, instance_id=HEAD, comment="c", sleep=clock.sleep).run(["true"])
    (invocation,) = ssm.invocations.values()
    assert invocation.delivery_timeout <= 60 and invocation.execution_timeout <= 300


def test_a_requeue_the_controller_gave_up_on_never_runs_late_and_its_outcome_is_read_back(table):
    clock = Clock()
    ssm = FakeSsm(clock, instance_id=HEAD, run=head_node_shell)
    records = []
    slow = {"delay": 1.0}
    original_send = ssm.send_command

    def send(**request):  # the read is delivered at once; the requeue only after 25 s, past the controller's 20 s wait
        ssm.delivery_delay = slow["delay"]
        slow["delay"] = 25.0
        return original_send(**request)

    ssm.send_command = send
    result = tick(ssm, clock, table, records)
    (preemption,) = [r for r in records if r.get("event") == "preemption"]
    assert preemption["outcome"] == "abandoned" and result.acted == 0
    ssm.advance(3600)  # an hour later the agent is back: the cancelled command does not run
    assert [c for c in ssm.executed if "scontrol requeue" in "\n".join(c)] == []
    # the next tick reads the outcome back: failed (it never ran), so the preemption may be claimed again
    slow["delay"] = 1.0
    records = []
    tick(ssm, clock, table, records)
    (resumed,) = [r for r in records if r.get("event") == "preemption_resumed"]
    assert (resumed["job_id"], resumed["outcome"]) == ("101", "failed")


def test_a_window_drain_given_up_on_is_cancelled_and_settled_by_the_next_run():
    clock = Clock()
    ssm = FakeSsm(clock, instance_id=HEAD, run=lambda commands: "ip-10-1-0-11 drained\n", delivery_delay=25.0)
    now = datetime(2026, 12, 11, 10, 55, tzinfo=UTC)
    with mock_aws():
        ledger = create_ledger_table()
        window = type("W", (), {"name": "w", "mode": "auto"})()
        head = HeadNode(ssm, instance_id=HEAD, comment=slurm_window.COMMENT, sleep=clock.sleep)
        outcome = slurm_window._act("slurm-nodes#c/g", "drain", {"ip-10-1-0-11": "drain it"}, window, head, ledger, now)
        assert "cancelled" in outcome["error"]
        ssm.advance(3600)
        assert ssm.executed == []
        [(_, status, details)] = ledger.actions("slurm-", ("abandoned",))
        slurm_window.read_back(ssm=ssm, ledger=ledger, now=now)
        assert ledger.actions("slurm-", ("abandoned",)) == []
        [(_, status, details)] = ledger.actions("slurm-", ("failed",))
        assert details["status"] == "Cancelled"


def test_a_command_whose_poll_is_throttled_is_cancelled_and_left_to_be_read_back_not_taken_as_failed():
    """Found while building the Slurm window scenario: a throttled GetCommandInvocation made the controller stop
    waiting without cancelling, and record the command ``failed`` while SSM still delivered and ran
    it. Stopping to wait for any reason is giving up on it: cancelled, and its outcome read back."""
    from gpu_governance_runtime.slurm.ssm import CommandAbandoned
    from tests.aws_model.batch import Faults

    clock = Clock()
    polls = []

    def throttle_the_first_poll(operation, phase):
        if operation == "GetCommandInvocation" and not polls:
            polls.append(phase)
            return "throttle"
        return None

    ssm = FakeSsm(
        clock, instance_id=HEAD, run=head_node_shell, delivery_delay=5.0, faults=Faults(throttle_the_first_poll)
    )
    with pytest.raises(CommandAbandoned) as abandoned:
        HeadNode(ssm, instance_id=HEAD, comment="c", sleep=clock.sleep).run(["scontrol requeue 101"])
    ssm.advance(60)
    assert ssm.executed == [] and ssm.invocations[abandoned.value.command_id].status == "Cancelled"
