"""The planner's safety properties (issue 29), checked on every Kueue conformance case
(test_kueue_conformance.py) and on generated pool states (test_planner_properties.py).

Each check takes the state, the settings and the plan, and fails with the job it is about:

1. no preemption for a job that fits the free capacity and its share's ceiling;
2. in-share victims only where the share enables it, only of strictly lower priority, and only
   jobs that come back;
3. no reclaim for a borrowing job: when a job that reclaims starts, its share is inside its quota;
4. a reclaim never reaches into the victim team's guarantee (nor takes a reserve share's job);
5. the applied plan fits the pool and every share's ceiling, and moves each job at most once;
6. the victim set is minimal: keeping any one victim leaves its job no room;
7. a guarantee job (``is_guarantee_job``) always starts, unless the plan names an anti-thrash
   limit as the reason it waits, ``min_run_time_s`` only behind a job the controller preempted;
8. no team lends beyond its lending limit, and a paused team starts nothing.

Checks 1 and 6 compare against the state before the plan, so they apply where the job is the only
pending job of its instance type (every conformance case; ``pool_states(pending=(1, 1))``).
"""

from __future__ import annotations

from gpu_governance_runtime.planners.reclaim import (
    ANTI_THRASH,
    IN_SHARE,
    MIN_RUN_TIME,
    RECLAIM,
    Plan,
    PoolState,
    Settings,
    Strategy,
    apply_plan,
    may_borrow,
    pending_guarantee_jobs,
    runs_on,
)

from .strategies import state_is_valid


def check_safety(state: PoolState, settings: Settings, plan: Plan) -> None:
    for check in (
        fits_free_capacity_without_preemption,
        in_share_victims_of_lower_priority,
        no_reclaim_for_borrowing,
        reclaim_only_borrowed_capacity,
        plan_fits_the_pool,
        victims_are_minimal,
        guarantee_jobs_start,
        lends_within_lending_limits,
    ):
        if check is no_reclaim_for_borrowing and state.groups:
            continue  # a group's quota is guaranteed to its members too (tests/hierarchy/test_planner_trees.py)
        check(state, settings, plan)


def _use(jobs, share: str, instance_type: str) -> int:
    return sum(j.count for j in jobs if j.share == share and j.instance_type == instance_type)


def _pool_room(state: PoolState, running, share: str, instance_type: str) -> int:
    """Free instances of the type for ``share``: the pool less what runs and less the idle
    quota the other shares never lend (reserve shares', and beyond a lending limit)."""
    reserved_idle = sum(
        s.held_idle(instance_type, _use(running, s.name, instance_type)) for s in state.shares if s.name != share
    )
    return (
        state.capacity[instance_type]
        - sum(j.count for j in running if j.instance_type == instance_type)
        - reserved_idle
    )


def _alone(state: PoolState, job_id: str) -> bool:
    """The job is the only pending job of its instance type (checks 1 and 6 apply)."""
    mine = [j for j in state.pending if j.job_id == job_id]
    return bool(mine) and sum(j.instance_type == mine[0].instance_type for j in state.pending) == 1


def _limit(state: PoolState, settings: Settings, job, reclaims: bool) -> int:
    """Most instances the job's share may hold once it starts: its ceiling (its quota for a job
    that may not borrow), and its quota when the start reclaims."""
    share = next(s for s in state.shares if s.name == job.share)
    quota = share.quota.get(job.instance_type, 0)
    ceiling = share.ceiling(job.instance_type, state.capacity[job.instance_type])
    ceiling = ceiling if may_borrow(job, state.now, settings) else min(ceiling, quota)
    return min(ceiling, quota) if reclaims else ceiling


def fits_free_capacity_without_preemption(state: PoolState, settings: Settings, plan: Plan) -> None:
    for job_id in {p.for_job for p in plan.preemptions}:
        if not _alone(state, job_id):
            continue
        job = next(j for j in state.pending if j.job_id == job_id)
        fits = job.count <= _pool_room(state, state.running, job.share, job.instance_type) and (
            _use(state.running, job.share, job.instance_type) + job.count
            <= _limit(state, settings, job, reclaims=False)
        )
        assert not fits, f"{job_id} fits the free capacity, yet preempts"


def in_share_victims_of_lower_priority(state: PoolState, settings: Settings, plan: Plan) -> None:
    shares = {s.name: s for s in state.shares}
    everyone = {j.job_id: j for j in (*state.running, *state.pending)}
    for p in plan.preemptions:
        if p.kind == IN_SHARE:
            beneficiary = everyone[p.for_job]
            assert shares[p.share].in_share_preemption, (
                f"{p.job_id}: in-share preemption in team {p.share}, which does not enable it"
            )
            assert beneficiary.share == p.share, f"{p.job_id}: an in-share preemption for another team's job"
            assert everyone[p.job_id].priority < beneficiary.priority, (
                f"{p.job_id}: in-share victim not of lower priority than {p.for_job}"
            )
            assert everyone[p.job_id].restartable, f"{p.job_id}: in-share victim its team cannot get back"


def no_reclaim_for_borrowing(state: PoolState, settings: Settings, plan: Plan) -> None:
    """When a job that reclaims starts, its share holds at most its quota: the jobs still running
    from before the plan plus those started up to and including it (later starts may borrow)."""
    after = {j.job_id for j in apply_plan(state, plan).running}
    before = {j.job_id for j in state.running}
    everyone = {j.job_id: j for j in (*state.running, *state.pending)}
    quotas = {s.name: s.quota for s in state.shares}
    for job_id in {p.for_job for p in plan.preemptions if p.kind == RECLAIM}:
        job = everyone[job_id]
        assert job.share not in {p.share for p in plan.preemptions if p.for_job == job_id and p.kind == RECLAIM}, (
            f"{job_id} reclaims from its own team"
        )
        starts = [s.job_id for s in plan.starts if s.instance_type == job.instance_type]
        so_far = set(starts[: starts.index(job_id) + 1]) | (before - set(starts))
        held = sum(
            everyone[j].count
            for j in after & so_far
            if everyone[j].share == job.share and everyone[j].instance_type == job.instance_type
        )
        assert held <= quotas[job.share].get(job.instance_type, 0), (
            f"{job_id} reclaims while its team borrows ({held} held)"
        )


def reclaim_only_borrowed_capacity(state: PoolState, settings: Settings, plan: Plan) -> None:
    """Every instance reclaimed from a team was above its quota: all its reclaimed jobs but the
    largest fit in its excess at its fullest in this tick (before the plan plus its starts)."""
    shares = {s.name: s for s in state.shares}
    everyone = {j.job_id: j for j in (*state.running, *state.pending)}
    reclaimed: dict[tuple[str, str], list[int]] = {}
    for p in plan.preemptions:
        if p.kind == RECLAIM:
            assert shares[p.share].strategy is not Strategy.RESERVE, (
                f"{p.job_id}: a reserve share lost capacity to another team"
            )
            reclaimed.setdefault((p.share, p.instance_type), []).append(p.count)
    for (share, instance_type), counts in reclaimed.items():
        fullest = _use(state.running, share, instance_type) + sum(
            everyone[s.job_id].count for s in plan.starts if s.share == share and s.instance_type == instance_type
        )
        excess = fullest - shares[share].quota.get(instance_type, 0)
        assert sum(counts) - max(counts) < excess, (
            f"a reclaim reaches into team {share}'s guarantee ({counts} taken, {excess} above quota)"
        )


def plan_fits_the_pool(state: PoolState, settings: Settings, plan: Plan) -> None:
    preempted = [p.job_id for p in plan.preemptions]
    started = [s.job_id for s in plan.starts]
    assert len(set(preempted)) == len(preempted), "a job preempted twice"
    assert set(preempted) <= {j.job_id for j in state.running}, "a preemption outside the running jobs"
    assert len(set(started)) == len(started), "a job started twice"
    assert set(started) <= {j.job_id for j in state.pending} | set(preempted), "a start of a job nobody asked for"
    assert set(started) >= {p.for_job for p in plan.preemptions}, "a preemption for a job that does not start"
    assert state_is_valid(apply_plan(state, plan)), "the applied plan does not fit the pool or a share's ceiling"


def victims_are_minimal(state: PoolState, settings: Settings, plan: Plan) -> None:
    after = apply_plan(state, plan)
    for job_id in {p.for_job for p in plan.preemptions}:
        if not _alone(state, job_id):
            continue
        job = next(j for j in state.pending if j.job_id == job_id)
        victims = [p for p in plan.preemptions if p.for_job == job_id]
        limit = _limit(state, settings, job, reclaims=any(p.kind == RECLAIM for p in victims))
        assert not {p.job_id for p in victims} & {s.job_id for s in plan.starts}, (
            f"a victim of {job_id} starts again at once"
        )
        for victim in victims:
            kept = (*after.running, next(j for j in state.running if j.job_id == victim.job_id))
            room = (
                _pool_room(state, kept, job.share, job.instance_type) >= 0
                and _use(kept, job.share, job.instance_type) <= limit
            )
            assert not room, f"{job_id} would start with {victim.job_id} kept: the victim set is not minimal"


def guarantee_jobs_start(state: PoolState, settings: Settings, plan: Plan) -> None:
    """Every guarantee job that waits after the plan is named in ``plan.waits``, with an
    anti-thrash limit as the reason (a capped plan stops early: the next tick continues), and
    ``min_run_time_s`` only behind a job the controller itself preempted and restarted less than
    that long ago: nothing a borrower submits protects its job (issue 38)."""
    named = {w.job_id: w.reason for w in plan.waits}
    assert set(named.values()) <= set(ANTI_THRASH), f"a guarantee job waits without an anti-thrash limit: {named}"
    everyone = {j.job_id: j for j in state.pending}
    for wait in plan.waits:
        if wait.reason == MIN_RUN_TIME and wait.job_id in everyone:  # (else a victim requeued in this plan)
            job = everyone[wait.job_id]
            assert any(
                runs_on(j, wait.instance_type)
                and (j.share != job.share or j.priority < job.priority)
                and j.times_preempted
                and state.now - j.started_at < settings.min_run_time_s
                for j in state.running
            ), f"{wait.job_id} waits for {MIN_RUN_TIME}, yet no job it could take was preempted by the controller"
    if plan.capped:
        return
    after = apply_plan(state, plan)
    waiting = {j.job_id for j in pending_guarantee_jobs(after.shares, after.running, after.pending)}
    assert waiting <= set(named), f"guarantee jobs wait, no reason named: {sorted(waiting - set(named))}"


def lends_within_lending_limits(state: PoolState, settings: Settings, plan: Plan) -> None:
    """After the plan, what other shares use above their quotas leaves every lender the part of its
    idle quota it does not lend (its quota less its lending limit), and a paused share started nothing."""
    paused = {s.name for s in state.shares if s.paused}
    assert not [s.job_id for s in plan.starts if s.share in paused], "a paused team's job started"
    after = apply_plan(state, plan)
    for instance_type, capacity in state.capacity.items():
        if not any(s.instance_type == instance_type and s.borrowed for s in plan.starts):
            continue  # nothing borrowed in this plan: the state before it is not the plan's doing
        used = {s.name: _use(after.running, s.name, instance_type) for s in state.shares}
        for share in state.shares:
            held = share.held_idle(instance_type, used[share.name])
            others = sum(used.values()) - used[share.name]
            assert others <= capacity - used[share.name] - held, (
                f"team {share.name} lends beyond its lending limit {share.lending_limit}% of {instance_type}: {held} of its idle quota in use by others"
            )
