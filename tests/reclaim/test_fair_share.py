"""Usage-based fair share (reclaim/fair_share.py, docs/governance-file.md#fair-share): the one
decayed-usage computation, the planner's order by it, and the controller's history in the ledger."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from gpu_governance_runtime.common.action_ledger import Ledger
from gpu_governance_runtime.planners.reclaim import RECLAIM, Settings, Strategy, plan_tick
from gpu_governance_runtime.reclaim.fair_share import advance, decayed_usage

from .safety import check_safety
from .strategies import PROPERTY_SETTINGS, pool_states
from .tables import reclaim_ledger_table
from .test_planner import NOW, pending, pool, running, share

DAY = 86_400.0
BY_USAGE = Settings(usage_half_life_s=DAY)


# --- the decay --------------------------------------------------------------------------------


def test_an_hour_used_counts_half_one_half_life_later():
    one_hour = decayed_usage({}, {"a": 1}, elapsed_s=3600, half_life_s=DAY)
    assert one_hour["a"] == pytest.approx(1.0, rel=0.02)  # barely decayed within the hour
    later = decayed_usage(one_hour, {}, elapsed_s=DAY, half_life_s=DAY)
    assert later["a"] == pytest.approx(one_hour["a"] / 2)


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    previous=st.floats(0, 1e5),
    instances=st.integers(0, 64),
    cuts=st.lists(st.floats(1, 5 * DAY), min_size=1, max_size=8),
    half_life=st.floats(3600, 30 * DAY),
)
def test_an_interval_in_ticks_gives_what_it_gives_whole(previous, instances, cuts, half_life):
    """The controller (ticks) and the simulator (one step per change) compute the same figure."""
    whole = decayed_usage({"a": previous}, {"a": instances}, elapsed_s=sum(cuts), half_life_s=half_life)
    stepped = {"a": previous}
    for cut in cuts:
        stepped = decayed_usage(stepped, {"a": instances}, elapsed_s=cut, half_life_s=half_life)
    assert stepped["a"] == pytest.approx(whole["a"], rel=1e-9, abs=1e-9)


def test_a_gap_only_decays_beyond_the_counted_tick():
    counted = decayed_usage({"a": 100.0}, {"a": 10}, elapsed_s=DAY, half_life_s=DAY, counted_s=60)
    assert counted["a"] == pytest.approx(50.0 + 10 * 60 / 3600, rel=1e-4)


# --- the planner's order ----------------------------------------------------------------------

LENDER = share("lender", 4)


def borrowers():
    return [share(name, 2, Strategy.LEND_AND_BORROW, borrow_limit=None) for name in ("heavy", "light")]


def test_the_team_with_less_past_usage_borrows_first():
    """The last free instance goes to light, which used less, though heavy borrows less now."""
    state = pool(
        [*borrowers(), LENDER],
        running_jobs=[running("h1", "heavy", 2), running("l1", "light", 3)],
        pending_jobs=[pending("h2", "heavy", 1), pending("l2", "light", 1)],
        capacity=6,
    )
    by_borrowed = plan_tick(state)
    assert [s.job_id for s in by_borrowed.starts] == ["h2"]
    state = replace(state, past_usage={"heavy": 500.0, "light": 20.0})
    assert [s.job_id for s in plan_tick(state, BY_USAGE).starts] == ["l2"]
    assert [s.job_id for s in plan_tick(state).starts] == ["h2"]  # the figures are read only by usage


def test_past_usage_is_weighed_by_fair_share_weight():
    heavy, light = borrowers()
    state = pool(
        [replace(heavy, fair_share_weight=100), light, LENDER],
        running_jobs=[running("h1", "heavy", 3), running("l1", "light", 2)],
        pending_jobs=[pending("h2", "heavy", 1), pending("l2", "light", 1)],
        capacity=6,
    )
    # 150 / 100 < 20 / 10: heavy's weight makes its usage the smaller share
    state = replace(state, past_usage={"heavy": 150.0, "light": 20.0})
    assert [s.job_id for s in plan_tick(state, BY_USAGE).starts] == ["h2"]


def test_equal_usage_falls_back_to_what_each_borrows_now_then_the_name():
    state = pool(
        [*borrowers(), LENDER],
        running_jobs=[running("h1", "heavy", 2), running("l1", "light", 3)],
        pending_jobs=[pending("h2", "heavy", 1), pending("l2", "light", 1)],
        capacity=6,
    )
    tied = replace(state, past_usage={"heavy": 7.0, "light": 7.0})
    assert plan_tick(tied, BY_USAGE) == plan_tick(state)  # no history: today's order, exactly
    assert plan_tick(replace(state, past_usage={}), BY_USAGE) == plan_tick(state)


def test_a_reclaim_takes_from_the_team_with_the_most_past_usage_first():
    """Both borrowers run one borrowed instance; the lender needs one back. By borrowed now the
    least work lost goes first (light's job started later); by usage, heavy's goes."""
    state = pool(
        [*borrowers(), LENDER],
        running_jobs=[
            running("h1", "heavy", 3, started_at=NOW - 7200),
            running("l1", "light", 3, started_at=NOW - 600),
        ],
        pending_jobs=[pending("lend", "lender", 1)],
        capacity=6,
    )
    by_borrowed = plan_tick(state)
    assert [(p.job_id, p.kind) for p in by_borrowed.preemptions] == [("l1", RECLAIM)]
    by_usage = plan_tick(replace(state, past_usage={"heavy": 900.0, "light": 10.0}), BY_USAGE)
    assert [(p.job_id, p.kind) for p in by_usage.preemptions] == [("h1", RECLAIM)]
    assert [s.job_id for s in by_usage.starts] == ["lend"]


@PROPERTY_SETTINGS
@given(
    st.one_of(pool_states(paused=True), pool_states(pending=(1, 1), paused=True)),
    st.data(),
    st.sampled_from([Settings(), Settings(min_run_time_s=600, max_preemptions_per_tick=10_000)]),
)
def test_ordering_by_usage_never_leaves_a_lender_below_its_guarantee(state, data, base):
    """Whatever each team used before, every plan keeps the planner's safety properties
    (safety.py): above all, a guarantee job starts or waits only for an anti-thrash limit, and a
    reclaim takes only borrowed capacity."""
    hours = st.one_of(st.just(0.0), st.floats(0, 1e6, allow_nan=False))
    past = {s.name: data.draw(hours, label=f"past usage of {s.name}") for s in state.shares}
    settings = replace(base, usage_half_life_s=DAY)
    state = replace(state, past_usage=past)
    check_safety(state, settings, plan_tick(state, settings))


def test_bad_past_usage_is_refused_by_name():
    with pytest.raises(ValueError, match=r"past_usage.heavy: -1.0 - a finite number of instance-hours >= 0"):
        replace(pool(borrowers()), past_usage={"heavy": -1.0})


# --- the controller's history -----------------------------------------------------------------


@pytest.fixture
def ledger(monkeypatch):
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "x"),
        ("AWS_SECRET_ACCESS_KEY", "x"),
    ):
        monkeypatch.setenv(name, value)
    with reclaim_ledger_table() as table:
        yield Ledger(table)


def state_at(now, heavy=2, light=0):
    jobs = [running("h", "heavy", heavy)] + ([running("l", "light", light)] if light else [])
    return replace(pool([*borrowers(), LENDER], running_jobs=jobs, capacity=8), now=now)


def test_the_first_tick_counts_one_tick_and_later_ticks_decay_and_add(ledger):
    first = advance(ledger, "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    assert first == {"heavy": pytest.approx(2 * 60 / 3600, rel=1e-3)}
    second = advance(ledger, "p", state_at(NOW + 60, light=1), half_life_s=DAY, tick_seconds=60)
    expected = decayed_usage(first, {"heavy": 2, "light": 1}, elapsed_s=60, half_life_s=DAY)
    assert second == pytest.approx(expected, abs=1e-6)


def test_a_retried_or_older_tick_counts_nothing_and_reads_the_record(ledger):
    advance(ledger, "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    recorded = advance(ledger, "p", state_at(NOW + 60), half_life_s=DAY, tick_seconds=60)
    for again in (NOW + 60, NOW + 30):  # the same tick retried; a concurrent run that read earlier
        assert advance(ledger, "p", state_at(again, heavy=8), half_life_s=DAY, tick_seconds=60) == recorded


class ReadBeforeTheWinner(Ledger):
    """A tick that read the record before a concurrent tick wrote a later one."""

    def __init__(self, table, stale):
        super().__init__(table)
        self.stale = stale

    def get(self, key):
        stale, self.stale = self.stale, None
        return stale if stale is not None else super().get(key)


def test_a_tick_that_loses_the_race_plans_with_the_winners_figures(ledger):
    advance(ledger, "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    stale = ledger.get("fair-share#p")
    won = advance(ledger, "p", state_at(NOW + 60), half_life_s=DAY, tick_seconds=60)
    loser = ReadBeforeTheWinner(ledger.table, stale)
    assert advance(loser, "p", state_at(NOW + 60, heavy=8), half_life_s=DAY, tick_seconds=60) == won


def test_missed_ticks_decay_but_count_only_the_tick_read(ledger):
    first = advance(ledger, "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    after_a_day = advance(ledger, "p", state_at(NOW + DAY), half_life_s=DAY, tick_seconds=60)
    assert after_a_day["heavy"] == pytest.approx(first["heavy"] / 2 + 2 * 60 / 3600, rel=1e-3)


def test_a_team_gone_from_the_pool_leaves_the_record(ledger):
    ledger.put_if_later("fair-share#p", at=int(NOW), usage={"gone": 5, "heavy": 1})
    figures = advance(ledger, "p", state_at(NOW + 60), half_life_s=DAY, tick_seconds=60)
    assert set(figures) == {"heavy"} and set(ledger.get("fair-share#p")["usage"]) == {"heavy"}


def test_a_restarted_controller_plans_with_exactly_what_was_stored(ledger):
    figures = advance(ledger, "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    stored = advance(Ledger(ledger.table), "p", state_at(NOW), half_life_s=DAY, tick_seconds=60)
    assert figures == stored and all(round(v, 6) == v for v in figures.values())


def test_the_controller_plans_each_tick_with_the_pools_recorded_usage_dry_run_too(ledger):
    """run_tick reads the history, advances it by the tick it read and hands it to the planner."""
    from tests.reclaim.test_grace_ticks import contended, tick

    batch, _ = contended()
    start = batch.clock.now
    tick(batch, ledger.table, start, dry_run=True, settings=BY_USAGE)
    item = ledger.get("fair-share#ec2-gpu")
    assert item["at"] == int(start) and float(item["usage"]["research"]) == pytest.approx(8 * 60 / 3600, rel=1e-3)
    tick(batch, ledger.table, start + 60, dry_run=True, settings=BY_USAGE)
    assert float(ledger.get("fair-share#ec2-gpu")["usage"]["research"]) == pytest.approx(2 * 8 * 60 / 3600, rel=1e-3)
    tick(batch, ledger.table, start + 120, dry_run=True)  # a pool ordered by borrowing keeps no history
    assert ledger.get("fair-share#ec2-gpu")["at"] == int(start) + 60


TWO_BORROWERS = {
    "version": 1,
    "organisation": "acme",
    "capacity_windows": [],
    "priority_classes": [],
    "pools": [
        {
            "name": "ec2-gpu",
            "backend": "batch_fair_share",
            "capacity": {"g6e.12xlarge": 8},
            "shares": [
                {"name": "lender", "quota": {"g6e.12xlarge": 4}, "strategy": "lend"},
                *(
                    {"name": name, "quota": {"g6e.12xlarge": 2}, "strategy": "lend_and_borrow", "borrow_limit": None}
                    for name in ("heavy", "light")
                ),
            ],
            "reclaim": {"usage_half_life_s": DAY},
        }
    ],
}


def test_the_controller_reclaims_from_the_team_its_record_shows_used_most(ledger):
    """End to end on the model of Batch: heavy and light each borrow one instance, light's the
    more recent; the lender's job takes one back. By borrowed now light's goes (least work
    lost); with the ledger's record showing heavy used most, heavy's goes."""
    from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter
    from gpu_governance_runtime.policy import parse_policy
    from gpu_governance_runtime.reclaim import handler as controller
    from tests.aws_model.batch import Clock, FakeBatch

    queue = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
    pool = parse_policy(TWO_BORROWERS).pool("ec2-gpu")

    def victims(settings, record):
        batch = FakeBatch(Clock(NOW), capacity={queue: 8})
        jobs = {}
        for team, count in (("lender", 2), ("heavy", 3), ("light", 3)):
            for i in range(count):
                jobs[f"{team}{i}"] = batch.add_job(
                    jobName=f"{team}{i}",
                    jobQueue=queue,
                    jobDefinition="train:1",
                    shareIdentifier=team,
                    parameters={"work_seconds": "86400"},
                )
            batch.advance(60)  # light's jobs start last
        batch.advance(3600)
        batch.add_job(jobName="owed", jobQueue=queue, jobDefinition="train:1", shareIdentifier="lender")
        if record:
            ledger.put_if_later("fair-share#ec2-gpu", at=int(batch.clock.now) - 60, usage=record)
        records = []
        controller.run_tick(
            "ec2-gpu",
            BatchFairShareAdapter(batch, job_queue=queue, pool=pool, submit=batch),
            ledger,
            settings=settings,
            dry_run=True,
            namespace="Test",
            now=batch.clock.now,
            emit=records.append,
        )
        names = {job_id: name for name, job_id in jobs.items()}
        return [names[r["job_id"]][:-1] for r in records if r.get("event") == "preemption"]

    assert victims(Settings(), None) == ["light"]  # by borrowed now
    assert victims(pool.settings(), {"heavy": 900, "light": 10}) == ["heavy"]
