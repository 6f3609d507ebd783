"""Work sized to the capacity month's windows (issue 40): each window's own work in its hours, each request's in its
hours, and background work on the Batch queue at a chosen share of the on-demand pool, drawn from a seed.

Every job declares its run time (Batch's ``timeout.attemptDurationSeconds``), a little more than the work it does,
and some checkpoint (``gpu-governance:checkpointable``): what the controller needs to place work well near a block's
end. The windows' own jobs (load tests, evaluations) are short and do not checkpoint; background jobs are training
runs of 1 to 12 hours, half of which checkpoint.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpu_governance_runtime.planners.capacity import Window

HOUR = timedelta(hours=1)
BACKGROUND_HOURS = (1, 2, 3, 4, 6, 8, 12)
OWN_JOB_HOURS = (2, 3, 4, 5, 6)
CHECKPOINTING_SHARE = 0.5


@dataclass(frozen=True)
class Job:
    name: str
    consumer: str  # "batch" (the Batch queue) or "eks" (the node group's pods)
    share: str
    submit_at: datetime
    hours: float  # the work it does
    declared_hours: float  # the run time it declares
    checkpoints: bool
    window: str | None  # whose own work; None: background


def _declared(rng: random.Random, hours: float) -> float:
    """A little more than the work, to the next 5 minutes: what a team declares so Batch does not stop the job."""
    return math.ceil(hours * rng.uniform(1.05, 1.3) * 12) / 12


def own_work(
    rng: random.Random, name: str, consumer: str, share: str, at: datetime, count: int, hours: float
) -> list[Job]:
    """``count`` streams of short jobs filling ``hours`` each, submitted when the window (or request) starts."""
    jobs = []
    for stream in range(count):
        left = hours
        while left > 0:
            size = min(left, rng.choice(OWN_JOB_HOURS))
            jobs.append(
                Job(
                    name=f"{name}-{stream}-{len(jobs)}",
                    consumer=consumer,
                    share=share,
                    submit_at=at,
                    hours=size,
                    declared_hours=_declared(rng, size),
                    checkpoints=False,
                    window=name,
                )
            )
            left -= size
    return jobs


def background(rng: random.Random, start: datetime, end: datetime, load: float, on_demand: int) -> list[Job]:
    """Training jobs arriving at random (Poisson) at ``load`` times what ``on_demand`` instances run."""
    rate = load * on_demand / (sum(BACKGROUND_HOURS) / len(BACKGROUND_HOURS))  # jobs an hour
    jobs, moment = [], start
    while True:
        moment += timedelta(hours=rng.expovariate(rate))
        if moment >= end:
            return jobs
        hours = rng.choice(BACKGROUND_HOURS)
        jobs.append(
            Job(
                name=f"train-{len(jobs)}",
                consumer="batch",
                share="background",
                submit_at=moment,
                hours=hours,
                declared_hours=_declared(rng, hours),
                checkpoints=rng.random() < CHECKPOINTING_SHARE,
                window=None,
            )
        )


def starts(window: Window, start: datetime, end: datetime) -> list[datetime]:
    """The window's occurrences that start in [start, end)."""
    step = timedelta(days=window.repeat_every_days) if window.repeat_every_days else None
    moments = (
        [window.start]
        if step is None
        else [window.start + k * step for k in range(int((end - window.start) / step) + 1)]
    )
    return [m for m in moments if start <= m < end]


def merged(asks: list[tuple[datetime, str, str, int, int]]) -> list[tuple[datetime, str, str, int, float]]:
    """Asks of one declared window that overlap are one request (the controller joins or extends them), and one piece of
    work: (first asked, its token, the window, the most instances, hours to the last one's end)."""
    out: list[tuple[datetime, str, str, int, float]] = []
    for when, token, base, count, hours in sorted(asks):
        last = next((i for i, o in enumerate(out) if o[2] == base and when < o[0] + o[4] * HOUR), None)
        if last is None:
            out.append((when, token, base, count, hours))
        else:
            first, name, _, most, length = out[last]
            out[last] = (first, name, base, max(most, count), max(length, (when + hours * HOUR - first) / HOUR))
    return out


def demand(
    *,
    seed: int,
    start: datetime,
    end: datetime,
    load: float,
    on_demand: int,
    windows: list[Window],
    asks: list[tuple[datetime, str, str, int, int]],
) -> list[Job]:
    """Every job of the month, by submission time: each declared window's occurrences' own work, each request's, and
    background work on the Batch queue."""
    rng = random.Random(seed)
    consumer = {w.name: "batch" if w.consumer["kind"] == "batch_compute_environment" else "eks" for w in windows}
    jobs = background(rng, start, end, load, on_demand)
    for w in windows:
        for at in starts(w, start, end):
            jobs += own_work(rng, w.name, consumer[w.name], w.team or "launch", at, w.instance_count, w.duration_hours)
    for when, token, base, count, hours in merged(asks):
        name = "".join(c if c.isalnum() else "-" for c in token)
        jobs += own_work(rng, name, consumer[base], f"{base}-request", when, count, hours)
    return sorted(jobs, key=lambda j: (j.submit_at, j.name))
