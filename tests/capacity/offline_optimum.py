"""The offline optimum for a capacity month (issue 40): knowing the whole workload and every offering AWS would sell,
which blocks serve the same needs with the fewest idle block hours.

The needs are what the controller bought capacity for (each purchase's window occurrence or request: its instances
and hours), so both serve the same work. For each need the optimum may buy any shape AWS documents that a consumer of
one reservation at a time can use: a block of whole days from an 11:30 UTC at or before the need, or an instant block
searched 25 minutes before the need starts, ending at the first 11:30 UTC at least 30 minutes after it ends (the
instances end 30 minutes before the block) [aws: ec2-cb.instant-start]; half-size pieces side by side and offerings
of several segments are of no use to it, as to the controller. Each candidate is judged by an ideal schedule of the
month's jobs (``schedule``, with the month's on-demand pools): every job starts the moment an instance is free (no
rotation, no STARTING), the block's
instances take waiting work first and near the end only jobs whose declared run time fits or that checkpoint, and
jobs on demand that checkpoint move onto free block instances at once, losing nothing. Needs are decided in time
order, each with the choices made before it; the month's idle is what that ideal schedule leaves idle.

    python -m tests.capacity.bench_month   # prints it beside the controller's figures for each seed
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpu_governance_runtime.planners import market

from .workload import Job

STEP = timedelta(minutes=5)


@dataclass(frozen=True)
class Need:
    """Capacity the controller bought for: ``count`` instances for ``consumer`` ("batch" or "eks") over [start, end)."""

    name: str
    consumer: str
    count: int
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Block:
    need: str
    consumer: str
    count: int
    start: datetime
    end: datetime
    how: str

    @property
    def usable_until(self) -> datetime:
        return self.end - market.TERMINATION_LEAD

    @property
    def paid_hours(self) -> float:
        return self.count * (self.end - self.start).total_seconds() / 3600


def candidates(need: Need) -> list[Block]:
    """The shapes AWS sells that cover the need's hours while the instances run."""
    last = need.end + market.TERMINATION_LEAD
    before = market.next_block_end(need.start - timedelta(days=1) + timedelta(microseconds=1))  # 11:30 at or before
    days = math.ceil((market.next_block_end(last) - before) / timedelta(days=1))
    days = next(d for d in market.ALLOWED_DURATION_DAYS if d >= days)
    return [
        Block(
            need.name, need.consumer, need.count, before, before + timedelta(days=days), f"{days} day(s) from 11:30 UTC"
        ),
        Block(need.name, need.consumer, need.count, need.start, market.next_block_end(last), "instant, from the need"),
    ]


@dataclass
class _Running:
    job: Job
    left: float  # seconds
    on: str  # "on_demand" or the block's need


def schedule(
    jobs: list[Job], blocks: list[Block], *, on_demand: int, eks_on_demand: int, start: datetime, end: datetime
) -> dict[str, float]:
    """Idle instance-hours of each block (by need) under the ideal schedule."""
    idle = {b.need: 0.0 for b in blocks}
    pending: dict[str, list[tuple[Job, float]]] = {"batch": [], "eks": []}
    running: list[_Running] = []
    arriving = sorted(jobs, key=lambda j: j.submit_at)
    step = STEP.total_seconds()
    moment, next_job = start, 0
    while moment < end:
        while next_job < len(arriving) and arriving[next_job].submit_at <= moment:
            job = arriving[next_job]
            pending[job.consumer].append((job, job.hours * 3600))
            next_job += 1
        live = [b for b in blocks if b.start <= moment < b.usable_until]
        for r in running:  # a block's instances ended under a job: only one that fits or checkpoints was put there
            if r.on != "on_demand" and all(b.need != r.on for b in live):
                r.on = "gone"
        for r in [r for r in running if r.on == "gone"]:
            running.remove(r)
            pending[r.job.consumer].append((r.job, r.left if r.job.checkpoints else r.job.hours * 3600))
        for block in live:
            free = block.count - sum(r.on == block.need for r in running)
            left = (block.usable_until - moment).total_seconds()
            queue = pending[block.consumer]
            for item in [i for i in queue if i[0].checkpoints or i[0].declared_hours * 3600 <= left][:free]:
                queue.remove(item)
                running.append(_Running(item[0], item[1], block.need))
                free -= 1
            for r in [
                r for r in running if r.on == "on_demand" and r.job.checkpoints and r.job.consumer == block.consumer
            ][: max(free, 0)]:
                r.on = block.need  # moved at once, from its checkpoint
                free -= 1
        for consumer, pool in (("batch", on_demand), ("eks", eks_on_demand)):
            capacity = pool - sum(r.on == "on_demand" and r.job.consumer == consumer for r in running)
            for item in pending[consumer][: max(capacity, 0)]:
                pending[consumer].remove(item)
                running.append(_Running(item[0], item[1], "on_demand"))
        for block in blocks:
            paid = (min(moment + STEP, block.end) - max(moment, block.start)).total_seconds()
            if paid > 0:
                busy = sum(r.on == block.need for r in running)
                idle[block.need] += (block.count - busy) * paid / 3600
        for r in running:
            r.left -= step
        running = [r for r in running if r.left > 0]
        moment += STEP
    return idle


def optimum(
    jobs: list[Job], needs: list[Need], *, on_demand: int, eks_on_demand: int, start: datetime, end: datetime
) -> list[Block]:
    """For each need in time order, the candidate leaving the month least idle with the choices before it."""
    chosen: list[Block] = []
    for need in sorted(needs, key=lambda n: n.start):
        options = candidates(need)
        pools = {"on_demand": on_demand, "eks_on_demand": eks_on_demand}
        scores = [sum(schedule(jobs, chosen + [o], **pools, start=start, end=end).values()) for o in options]
        chosen.append(options[scores.index(min(scores))])
    return chosen
