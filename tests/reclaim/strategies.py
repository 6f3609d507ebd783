"""Hypothesis strategies for valid pool states: every share within its ceiling, non-borrowers
within quota, idle quota held by reserve shares and lending limits free, capacity respected (what a previous tick leaves)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings, strategies as st

from gpu_governance_runtime.planners.reclaim import PendingJob, PoolState, RunningJob, Share, Strategy

# A few hundred examples keep CI quick; PLANNER_EXAMPLES=5000 runs the thorough check.
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("PLANNER_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TYPES = ("p4", "p5")
NOW = 10_000.0


@st.composite
def pool_states(
    draw, max_shares: int = 5, max_jobs: int = 14, pending: tuple[int, int] = (0, 10), paused: bool = False
) -> PoolState:
    types = TYPES[: draw(st.integers(1, 2))]
    capacity = {t: draw(st.integers(1, 16)) for t in types}
    shares = []
    assigned = dict.fromkeys(types, 0)
    for index in range(draw(st.integers(1, max_shares))):
        strategy = draw(st.sampled_from(list(Strategy)))
        quota = {}
        for t in types:
            q = draw(st.integers(0, capacity[t] - assigned[t]))
            if q:
                quota[t] = q
                assigned[t] += q
        shares.append(
            Share(
                name=f"team{index}",
                quota=quota,
                strategy=strategy,
                borrow_limit=draw(st.none() | st.integers(0, 300)) if strategy is Strategy.LEND_AND_BORROW else None,
                in_share_preemption=draw(st.booleans()),
                fair_share_weight=draw(st.integers(1, 100)),
                lending_limit=None if strategy is Strategy.RESERVE else draw(st.none() | st.integers(0, 100)),
                paused=paused and draw(st.sampled_from((False, False, False, True))),
                # an absolute borrow limit (declared in GPUs) on some of a borrower's types
                borrow_limit_instances={t: draw(st.integers(0, 6)) for t in types if draw(st.booleans())}
                if strategy is Strategy.LEND_AND_BORROW
                else {},
            )
        )
    usage = {(s.name, t): 0 for s in shares for t in types}
    running = []
    for number in range(draw(st.integers(0, max_jobs))):
        share = draw(st.sampled_from(shares))
        t = draw(st.sampled_from(types))
        count = draw(st.integers(1, capacity[t]))
        usage[share.name, t] += count
        if _valid(shares, capacity, usage):
            running.append(
                RunningJob(
                    job_id=f"r{number}",
                    share=share.name,
                    instance_type=t,
                    count=count,
                    priority=draw(st.integers(0, 3)),
                    started_at=draw(st.floats(0, NOW)),
                    checkpointable=draw(st.booleans()),
                    times_preempted=draw(st.integers(0, 2)),
                    # an array job or one others depend on: reclaimable all the same (issue 38)
                    restartable=draw(st.sampled_from((True, True, True, False))),
                )
            )
        else:
            usage[share.name, t] -= count
    waiting = [
        PendingJob(
            job_id=f"p{number}",
            share=draw(st.sampled_from(shares)).name,
            instance_type=(t := draw(st.sampled_from(types))),
            count=draw(st.integers(1, capacity[t])),
            priority=draw(st.integers(0, 3)),
            submitted_at=draw(st.floats(0, NOW)),
            checkpointable=draw(st.booleans()),
        )
        for number in range(draw(st.integers(*pending)))
    ]
    return PoolState(capacity=capacity, shares=tuple(shares), running=tuple(running), pending=tuple(waiting), now=NOW)


def _valid(shares, capacity, usage) -> bool:
    for t, cap in capacity.items():
        reserved_idle = sum(s.held_idle(t, usage[s.name, t]) for s in shares)  # never lent (lending limits)
        if sum(usage[s.name, t] for s in shares) + reserved_idle > cap:
            return False
        if any(usage[s.name, t] > s.ceiling(t, cap) for s in shares):
            return False
    return True


def state_is_valid(state: PoolState) -> bool:
    usage = {(s.name, t): 0 for s in state.shares for t in state.capacity}
    for job in state.running:
        usage[job.share, job.instance_type] += job.count
    return _valid(state.shares, state.capacity, usage)
