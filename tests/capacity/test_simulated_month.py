"""The short versions of the simulated month (issues 24 and 40): declared, recurring, on-demand and flapping-alarm
windows on the simulated market, with faults at every purchase call, a lagging listing and throttled Batch updates,
and work sized to the windows on the Batch model and the node group; ``python -m tests.capacity.bench_month`` runs
the 30 days with several seeds beside the offline optimum (docs/performance.md)."""

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest

from gpu_governance_runtime.capacity import requests

from .simulated_month import BLOCK_CE, ON_DEMAND_CE, BlockHours, Month, in_memory_ledger, windows


def total(month: Month) -> BlockHours:
    hours = BlockHours()
    for row in month.figures().values():
        hours = hours.add(row)
    return hours


def test_a_short_month_keeps_every_invariant_and_measures_blocks_by_their_jobs():
    """Bought as before buying for yield (min_yield 0): every kind of purchase happens, through faults."""
    month = Month(
        ledger=in_memory_ledger(),
        days=3,
        seed=3,
        fault_share=0.5,
        refuse_each_update_once=True,
        declared_windows=[replace(w, min_yield=Decimal(0)) for w in windows()],
    ).play()
    assert month.sim.made  # something was bought, through faults
    # once per occurrence, usable pieces only, no job killed by a rotation or outliving its instance, off every block
    # before its instances end
    assert month.check() == []
    assert not any("-half-" in p.offering.id for p in month.sim.made)  # side-by-side halves are never bought
    # A request for capacity now is covered by an instant block starting minutes after it (issue 37 row 8), the
    # shortest that covers it: until the next day's 11:30, not a day more (issue 40).
    page = next(r for r, _ in requests.listed(month.ledger) if r.token == "page-1")
    (instant,) = [p.offering for p in month.sim.made if p.window == page.name]
    assert "-instant" in instant.id and timedelta(0) < instant.start - page.start <= timedelta(minutes=30)
    assert instant.end - instant.start < timedelta(days=1, hours=6)
    asked = [r for r, _ in requests.listed(month.ledger)]
    # The flapping alarm (three transitions to ALARM, 40 minutes apart) is one request, extended.
    alarms = [r for r in asked if r.token.startswith("alarm:")]
    assert len(alarms) == 1 and alarms[0].hours == 6  # 4 hours from the first, to the third's end (80 minutes later)
    assert [r.token for r in asked if r.token.startswith("page-")] == ["page-1"]  # the two overlapping pages: one
    # Refused Batch steps were retried; jobs ran on demand and on blocks.
    placed = {j["_environment"] for j in month.batch.jobs.values() if "_environment" in j}
    assert placed == {ON_DEMAND_CE, BLOCK_CE} and month.rotation_errors > 0
    # Measured by the jobs: every paid hour of every block is with a job, or idle with or without work waiting.
    for name, hours in month.figures().items():
        assert hours.paid == pytest.approx(hours.with_job + hours.idle_waited + hours.idle_none), name
        assert 0 <= hours.cut <= hours.with_job, name
    assert total(month).with_job > 0 and month.lost_jobs == []  # the drain stopped and copied what was on a block


def test_the_reference_month_buys_for_yield_and_fills_what_it_buys():
    """The reference windows as declared (min_yield 0.5): the 8-hour weekly window's whole day (33 %) and the page's
    29-hour instant block for 8.5 hours (29 %) are declined with their reasons; the launch test's two days are bought
    and filled: block hours with no job at most 15 % of those paid, work cut at the end at most 2 % (issue 40's goal,
    on four days; the 30-day figures and the offline optimum are in docs/performance.md)."""
    month = Month(ledger=in_memory_ledger(), days=4, seed=3).play()
    assert month.check() == []
    assert {p.window for p in month.sim.made} == {"launch-test"}
    declined = {d["occurrence"].split("@")[0]: d["reason"] for d in month.declined()}
    assert set(declined) >= {"weekly-eval", "launch-test-r0eb236"}
    assert declined["weekly-eval"].startswith("expected yield 33 %")
    hours = total(month)
    assert hours.paid > 0
    assert hours.idle_none + hours.idle_waited <= 0.15 * hours.paid and hours.cut <= 0.02 * hours.paid, hours
