"""The short version of the simulated month (issue 24, proof): two days of declared, recurring,
on-demand and flapping-alarm windows on the simulated market, with faults at every purchase call,
a lagging listing, lost expiration warnings and throttled Batch updates, with teams' jobs on the
Batch model; ``python -m tests.capacity.bench_month`` runs the 30 days and reports the
paid-but-idle instance-hours (docs/performance.md)."""

from datetime import timedelta

from gpu_governance_runtime.capacity import requests

from .simulated_month import BLOCK_CE, ON_DEMAND_CE, Month, in_memory_ledger


def test_four_simulated_days_keep_every_invariant():
    month = Month(ledger=in_memory_ledger(), days=4, seed=3, fault_share=0.5, refuse_each_update_once=True).play()
    assert month.sim.made  # something was bought, through faults
    assert month.check() == []  # once per occurrence, usable pieces only, off every block before its instances end
    assert not any("-half-" in p.offering.id for p in month.sim.made)  # side-by-side halves are never bought
    # A request for capacity now is covered by an instant block starting minutes after it, not from the next 11:30
    # UTC (issue 37 row 8: the market before offered none, and the request waited for 11:30 or went uncovered).
    page = next(r for r, _ in requests.listed(month.ledger) if r.token == "page-1")
    (instant,) = [p.offering for p in month.sim.made if p.window == page.name]
    assert instant.id.endswith("-instant") and timedelta(0) < instant.start - page.start <= timedelta(minutes=30)
    asked = [r for r, _ in requests.listed(month.ledger)]
    # The flapping alarm (three transitions to ALARM, 40 minutes apart) is one request, extended.
    alarms = [r for r in asked if r.token.startswith("alarm:")]
    assert len(alarms) == 1 and alarms[0].hours == 6  # 4 hours from the first, to the third's end (80 minutes later)
    # The two overlapping pages are one request too.
    assert [r.token for r in asked if r.token.startswith("page-")] == ["page-1"]
    # The Batch block: new jobs went to it, refused steps were retried, and jobs that were running on demand when it
    # arrived kept running there (no job killed by a rotation: month.check()).
    placed = {j["_environment"] for j in month.batch.jobs.values() if "_environment" in j}
    assert placed == {ON_DEMAND_CE, BLOCK_CE} and month.rotation_errors > 0
