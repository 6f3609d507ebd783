"""The short version of the simulated month (issue 24, proof): two days of declared, recurring,
on-demand and flapping-alarm windows on the simulated market, with faults at every purchase call,
a lagging listing and lost expiration warnings; ``python -m tests.capacity.bench_month`` runs the
month and reports the paid-but-idle instance-hours (docs/performance.md)."""

from moto import mock_aws

from gpu_governance_runtime.capacity import requests

from .simulated_month import Month
from .stubbed_aws import create_ledger_table


def test_two_simulated_days_keep_every_invariant():
    with mock_aws():
        month = Month(ledger=create_ledger_table(), days=2, seed=3, fault_share=0.5).play()
        assert month.sim.made  # something was bought, through faults
        assert month.check() == []  # once per occurrence, usable pieces only, off every block before its instances end
        assert not any("-half-" in p.offering.id for p in month.sim.made)  # side-by-side halves are never bought
        asked = [r for r, _ in requests.listed(month.ledger)]
        # The flapping alarm (three transitions to ALARM, 40 minutes apart) is one request, extended.
        alarms = [r for r in asked if r.token.startswith("alarm:")]
        assert len(alarms) == 1 and alarms[0].hours == 6  # 4 hours from the first, to the third's end (80 minutes later)
        # The two overlapping pages are one request too.
        assert [r.token for r in asked if r.token.startswith("page-")] == ["page-1"]
