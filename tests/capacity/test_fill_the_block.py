"""Filling a Batch window's block (issue 40, item 3): near its end only jobs whose declared run time fits before its
instances end, or that checkpoint, stay on it; waiting work goes first; jobs that checkpoint move onto free instances
from on demand. Each run here is what the handler does for a Batch window: ``fill.fill``, the rotation (closing the
block while a job that would be cut waits), then ``requeue.resume`` (stops and copies what was claimed). Batch is the
shared model (tests/aws_model/batch.py), launch templates and the ledger moto's (the World of test_batch_block_queue)."""

import json
from dataclasses import replace
from datetime import datetime

import pytest
from moto import mock_aws

from gpu_governance_runtime.capacity import fill, requeue
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM
from tests.aws_model.batch import BlockInstances, ClusterInstances

from .builders import at, window
from .test_batch_block_queue import BLOCK, BLOCK_CE, CONSUMER, ON_DEMAND, World

WINDOW = window(consumer=CONSUMER, mode="auto", instance_count=4)
INSTANCES_END = at(11, 11, 0)  # BLOCK ends 11 Dec 11:30; its instances 30 minutes before


class Events:
    def __init__(self):
        self.sent: list[dict] = []

    def put_events(self, *, Entries):
        self.sent += [{"type": e["DetailType"], **json.loads(e["Detail"])} for e in Entries]
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e"} for _ in Entries]}


class Filled(World):
    def __init__(self):
        super().__init__()
        self.events, self.fills = Events(), []

    def fill(self, *, dry_run: bool = False, block=BLOCK) -> dict:
        return fill.fill(
            window=WINDOW,
            block=block,
            dry_run=dry_run,
            ledger=self.ledger,
            ec2=BlockInstances(self.batch),
            ecs=ClusterInstances(self.batch),
            batch=self.batch,
            events=self.events,
            now=self.now,
        )

    def tick(self, moment: datetime) -> None:
        """Batch moves on to ``moment``, then one controller run (fill, rotation, requeue), then Batch places."""
        self.batch.advance(moment.timestamp() - self.clock.now)
        self.fills.append(self.fill())
        self.run(closing=self.fills[-1]["closing"])
        requeue.resume(ledger=self.ledger, batch=self.batch, submit=self.batch, now=self.now)
        self.batch.advance(0)

    def every_5_minutes(self, start: datetime, end: datetime) -> None:
        moment = start
        while moment <= end:
            self.tick(moment)
            moment = datetime.fromtimestamp(moment.timestamp() + 300, moment.tzinfo)

    def copy_of(self, job_id: str) -> dict:
        (copy,) = [j for j in self.batch.jobs.values() if j["tags"].get(TAG_REQUEUED_FROM) == job_id]
        return copy


@pytest.fixture
def world():
    with mock_aws():
        yield Filled()


def test_near_the_end_a_job_that_would_be_cut_is_taken_off_at_once_and_the_block_closes_while_it_waits(world):
    """5 hours before the instances end, an 8-hour job that does not checkpoint lands on a free block instance: the
    next run takes it off (it ran one schedule, STARTING) and closes the block, so neither its copy nor it is cut; a
    2-hour job that fits goes on the block once the copy has left the queue. Fails before issue 40: the 8-hour job
    ran on the block until its instances ended."""
    for n in range(2):  # on demand (2 instances) busy for long, from before the block
        world.submit(f"long-{n}", hours=40, declared=48, checkpoints=False)
    world.batch.advance(0)
    world.every_5_minutes(at(10, 11, 30), at(10, 12, 0))  # the block active, first, enabled
    world.every_5_minutes(at(11, 5, 55), at(11, 6, 0))
    late = world.submit("late", hours=8, declared=8)
    world.batch.advance(0)  # Batch places it on a free block instance before the controller looks
    assert world.batch.jobs[late]["_environment"] == BLOCK_CE
    world.tick(at(11, 6, 5))
    assert world.fills[-1]["taken_off"] == [late] and world.fills[-1]["closing"]
    assert world.batch.jobs[late]["status"] == "FAILED" and world.batch.work[late] == 8 * 3600  # no work lost
    copy = world.copy_of(late)
    assert copy["status"] == "RUNNABLE" and world.batch.compute_environments[BLOCK_CE]["state"] == "DISABLED"
    fitting = world.submit("fits", hours=2, declared=2.5)
    world.every_5_minutes(at(11, 6, 10), at(11, 7, 0))
    assert copy["status"] == "RUNNABLE" and world.batch.jobs[fitting]["status"] == "RUNNABLE"  # waits with the copy
    world.batch.terminate_job(jobId=world.batch.by_name["long-0"][0], reason="done elsewhere")  # on demand frees up
    world.every_5_minutes(at(11, 7, 5), at(11, 7, 15))
    assert copy.get("_environment") == ON_DEMAND
    assert world.batch.jobs[fitting].get("_environment") == BLOCK_CE and not world.fills[-1]["closing"]


def test_jobs_that_checkpoint_move_from_on_demand_onto_free_block_instances_after_being_told(world):
    """With instances free and nothing waiting, a job on demand that checkpoints is told (Capacity Jobs Moving), then
    stopped CHECKPOINT_TIME later and its copy runs on the block; one that does not checkpoint stays. Fails before
    issue 40 (nothing moved: the block idled while on-demand instances ran)."""
    keeps = world.submit("keeps", hours=20, declared=24)
    moves = world.submit("moves", hours=20, declared=24, checkpoints=True)
    world.batch.advance(0)
    assert {world.batch.jobs[j]["_environment"] for j in (keeps, moves)} == {ON_DEMAND}
    world.every_5_minutes(at(10, 11, 30), at(10, 11, 50))
    (told,) = world.events.sent
    assert told["type"] == fill.MOVE_EVENT_TYPE and told["jobs"] == [moves]
    assert told["stop_at"] == at(10, 11, 35).isoformat()  # the first run with the block open, plus 5 minutes
    assert world.batch.jobs[keeps]["status"] == "RUNNING" and world.batch.jobs[moves]["status"] == "FAILED"
    assert world.copy_of(moves)["_environment"] == BLOCK_CE
    assert [len(e["jobs"]) for e in world.events.sent] == [1]  # told once, moved once


def test_in_dry_run_nothing_is_stopped_and_the_result_says_what_would_be(world):
    world.submit("moves", hours=20, declared=24, checkpoints=True)
    world.batch.advance(0)
    world.until(at(10, 11, 35), step=300.0)  # the rotation alone: the block open
    world.batch.advance(at(10, 11, 36).timestamp() - world.clock.now)
    found = world.fill(dry_run=True)
    assert found["dry_run"] and found["would_move"] == [world.batch.by_name["moves"][0]]
    assert world.ledger.actions("requeue#", requeue.OPEN_STATUSES) == [] and world.events.sent == []


def test_a_requests_block_is_read_for_the_consumers_window_and_measured_for_the_request(world):
    """A request's block feeds its declared window's consumer: the fill (and closing) is the consumer window's, the
    block's hours are published under the request that bought it (the window its ledger intent names)."""
    world.until(at(10, 11, 35), step=300.0)
    found = world.fill(dry_run=True, block=replace(BLOCK, window=f"{WINDOW.name}-r0eb236"))
    assert (found["window"], found["block_window"]) == (WINDOW.name, f"{WINDOW.name}-r0eb236")
