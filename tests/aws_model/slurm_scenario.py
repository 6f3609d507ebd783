"""Drive the capacity controller's Slurm window (``capacity/slurm_window.apply``, over
``slurm/ssm.HeadNode``) over simulated days: a training plan a day brings three nodes to the
owner's partition and takes them 30 minutes before its end (tests/aws_model/hyperpod_slurm.py),
the team's jobs run on them, and the controller runs on its schedule (every
``market.SCHEDULE_LIMIT``). SSM delivers each command after a drawn delay (most in a second or two,
some past the controller's wait, some past the delivery deadline), a ``CancelCommand`` leaves its
command to run with ``cancel_fails_rate`` [aws: ssm.cancel-command-may-not-stop], and faults are
injected at every SSM, SageMaker and DynamoDB call. Checked after every step:

- no command runs late: every command the head node ran, ran within the deadline the controller
  gives it (``slurm.ssm.DELIVERY_SECONDS`` plus ``EXECUTION_SECONDS``, the later reading of SSM's
  delivery deadline [aws: ssm.delivery-deadline]) of being sent, so nothing the controller gave up
  on runs later, whether or not its cancel stopped it;
- a job is requeued only as read: while RUNNING on a plan's node in that plan's last
  ``requeue.STOP_LEAD`` (plus the delivery deadline), never on a later plan's node;
- an admin's drain is never resumed;
- nothing changed in dry run;
- once the faults stop, no command is left ``abandoned`` (its outcome is read back).

Jobs killed with their node (the controller did not requeue them in time: every run in the last
minutes failed) are counted; slurmctld requeues those itself (``JobRequeue=1``), so none is lost,
and without faults there are none.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpu_governance_runtime.capacity import slurm_window
from gpu_governance_runtime.capacity.ledger import Ledger
from gpu_governance_runtime.capacity.requeue import STOP_LEAD
from gpu_governance_runtime.planners import market
from gpu_governance_runtime.planners.capacity import Reservation
from gpu_governance_runtime.slurm.ssm import DELIVERY_SECONDS, EXECUTION_SECONDS
from tests.capacity.builders import window

from .batch import Clock, Crash, Faults
from .dynamodb import FakeDynamoDB
from .ec2 import TERMINATION_LEAD
from .hyperpod_slurm import FakeSageMakerNodes, HeadNode, Node
from .scenario import FAULT_RATES, InvariantBroken, fault
from .ssm import FakeSsm

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
HEAD = "i-0123456789abcdef0"
GROUP, POOL, TEAM = "critical-window", "research-slurm", "critical"
ADMIN_REASON = "bad GPU 3, ticket 4711"
SCHEDULE = market.SCHEDULE_LIMIT.total_seconds()
PLAN_HOURS, GAP_HOURS, NODES = 22, 2, 3


def _delivery(rng: random.Random, slow_rate: float) -> float:
    """Seconds until SSM delivers a command: mostly at once; with ``slow_rate`` late, past the
    controller's wait (it cancels) or past the delivery deadline (SSM never runs it)."""
    roll = rng.random()
    return (
        rng.uniform(0.5, 3)
        if roll >= slow_rate
        else rng.uniform(15, 29)
        if roll < slow_rate / 2
        else rng.uniform(31, 600)
    )


@dataclass
class Report:
    runs: int = 0
    submitted: int = 0
    commands: int = 0
    cancelled: int = 0
    cancels_ignored: int = 0
    delivery_timed_out: int = 0
    requeues: int = 0
    drains: int = 0
    killed_with_node: int = 0
    failed_runs: int = 0
    faults: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        return (
            f"{self.runs} controller runs, {self.submitted} jobs submitted, {self.commands} SSM commands ({self.cancelled} cancelled, {self.cancels_ignored} cancels that did not stop theirs, "
            f"{self.delivery_timed_out} past their delivery deadline), {self.drains} node drains, {self.requeues} jobs requeued, "
            f"{self.killed_with_node} jobs requeued by Slurm after their node went, {self.failed_runs} failed runs"
        )


def run(
    *,
    days: float,
    seed: int = 1,
    dry_run: bool = False,
    fault_rates: dict[str, float] = FAULT_RATES,
    slow_rate: float = 0.05,
    cancel_fails_rate: float = 0.3,
) -> Report:
    rng = random.Random(seed)
    clock = Clock()
    faults = Faults(lambda operation, phase: fault(rng, fault_rates, phase))
    head = HeadNode(clock)
    ssm = FakeSsm(
        clock,
        instance_id=HEAD,
        run=head.run,
        delivery_delay=lambda: _delivery(rng, slow_rate),
        faults=faults,
        cancel_stops=lambda: rng.random() >= cancel_fails_rate,
    )
    sagemaker = FakeSageMakerNodes(head, group=GROUP, faults=faults)
    dynamodb = FakeDynamoDB(faults=faults)
    dynamodb.create_table("capacity", key="pk")
    ledger = Ledger(client=dynamodb.client(), table_name="capacity")
    the_window = window(
        name="release-warmup",
        team=TEAM,
        market="training_plan",
        instance_type="ml.g5.12xlarge",
        mode="dry_run" if dry_run else "auto",
        consumer={"kind": "hyperpod_instance_group", "pool": POOL, "instance_group": GROUP, "cluster_arn": CLUSTER},
    )
    day = 86400.0
    plans = [
        Reservation(
            id=f"arn:aws:sagemaker:us-east-1:111122223333:training-plan/p{n}",
            window=the_window.name,
            instance_type="ml.g5.12xlarge",
            count=NODES,
            availability_zone="us-east-1a",
            state="active",
            start=_at(clock.now + n * day + GAP_HOURS * 3600),
            end=_at(clock.now + n * day + (GAP_HOURS + PLAN_HOURS) * 3600),
        )
        for n in range(int(days) + 1)
    ]
    node_plan: dict[str, Reservation] = {}
    admin_drained: set[str] = set()
    report, end = Report(), clock.now + days * day
    checked_requeues = 0

    def controller_run() -> None:
        report.runs += 1
        try:
            slurm_window.apply(
                windows={the_window.name: the_window},
                owned=plans,
                slurm_pools={POOL: [TEAM, "research"]},
                head_nodes={POOL: HEAD},
                sagemaker=sagemaker,
                ssm=ssm,
                ledger=ledger,
                now=_at(clock.now),
                sleep=clock.sleep,
            )
        except Crash:
            report.failed_runs += 1
        except Exception:  # noqa: BLE001 - a faulted read fails the invocation; the schedule comes again
            report.failed_runs += 1

    next_run, joined, ended = clock.now, set(), set()
    while clock.now < end:
        clock.now += 60
        for n, plan in enumerate(plans):
            start, stop = plan.start.timestamp(), plan.end.timestamp() - TERMINATION_LEAD
            if (
                start <= clock.now and n not in joined
            ):  # the plan's nodes join Slurm; HyperPod may put them in no or a wrong partition
                joined.add(n)
                for k in range(NODES):
                    name = f"ip-10-1-{n % 250}-{k + 10}"
                    head.add_node(Node(name, f"i-{n:08x}{k:09x}", rng.choice([set(), {TEAM}, {TEAM}, {"borrow"}])))
                    node_plan[name] = plan
            if stop <= clock.now and n not in ended:  # the instances are terminated
                ended.add(n)
                for name in [m for m, p in node_plan.items() if p is plan and m in head.nodes]:
                    head.remove_node(name)
                    admin_drained.discard(name)
        if rng.random() < 60 / 1800:
            head.submit(str(1000 + report.submitted), TEAM, rng.uniform(1, 5) * 3600)
            report.submitted += 1
        if rng.random() < 1 / 1440 and head.nodes:  # about once a day an admin drains a node
            name = rng.choice(sorted(head.nodes))
            if head.nodes[name].reason == "none":
                head.nodes[name].reason = ADMIN_REASON
                admin_drained.add(name)
        ssm.advance(0)
        head.advance()
        if clock.now >= next_run:  # the schedule; a run's polling moves the clock on by up to its wait
            next_run += SCHEDULE
            controller_run()
        checked_requeues = _check(head, ssm, node_plan, admin_drained, dry_run, checked_requeues)
    faults.plan = lambda operation, phase: None
    ssm.delivery_delay = 1.0
    for _ in range(2):
        clock.now += SCHEDULE
        controller_run()
    left = [a for a, _, _ in ledger.actions("slurm-", ("abandoned",))]
    if left:
        raise InvariantBroken(f"commands never read back: {left}")
    report.faults = Counter(f for _, _, f in faults.injected)
    report.commands = len(ssm.invocations)
    report.cancelled = sum(1 for i in ssm.invocations.values() if i.status == "Cancelled")
    report.cancels_ignored = ssm.cancels_ignored
    report.delivery_timed_out = sum(1 for i in ssm.invocations.values() if i.details == "DeliveryTimedOut")
    report.requeues = len(head.requeued)
    report.drains = sum(1 for _, what in head.ran if what.startswith("drain"))
    report.killed_with_node = len(head.killed_with_node)
    return report


def _check(
    head: HeadNode, ssm: FakeSsm, node_plan: dict[str, Reservation], admin_drained: set[str], dry_run: bool, seen: int
) -> int:
    for invocation in ssm.invocations.values():
        if (
            invocation.ran_at is not None
            and invocation.ran_at - invocation.sent_at > DELIVERY_SECONDS + EXECUTION_SECONDS
        ):
            raise InvariantBroken(
                f"command {invocation.command_id} ran {invocation.ran_at - invocation.sent_at:.0f} s after it was sent"
            )
    if dry_run and head.ran:
        raise InvariantBroken(f"dry run changed Slurm: {head.ran[:3]}")
    for name in admin_drained:
        if name in head.nodes and head.nodes[name].reason != ADMIN_REASON:
            raise InvariantBroken(f"an admin's drain of {name} was undone: {head.nodes[name].reason!r}")
    for at, job_id in head.requeued[seen:]:
        plan = node_plan[head.jobs[job_id].nodes_run_on[-1]]
        window_opens = plan.end.timestamp() - STOP_LEAD.total_seconds()
        if not window_opens <= at < plan.end.timestamp() - TERMINATION_LEAD:
            raise InvariantBroken(
                f"job {job_id} requeued at {_at(at):%H:%M:%S}, outside its plan's last {STOP_LEAD} before the nodes go"
            )
    return len(head.requeued)


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
