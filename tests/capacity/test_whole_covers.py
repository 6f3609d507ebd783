"""A cover is bought whole or not at all, as far as AWS allows (issue 24, outcome 6): pieces in
the planner's order (cheapest first), a piece that fails stops the rest, and what was bought is
reported and counted by the next run, which buys only what is still missing."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from moto import mock_aws

from gpu_governance_runtime.capacity import controller

from .builders import NOW, at, block, window
from .simulated_ec2 import SimulatedEc2
from .stubbed_aws import create_ledger_table

# 10 Dec 14:00 to 12 Dec 20:00: no three-day block alone covers it, two one after the other do.
WINDOW = window(
    mode="auto",
    duration_hours=54,
    budget=Decimal("50000"),
    consumer={
        "kind": "batch_compute_environment",
        "launch_template_name": "gpu-p5",
        "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
        "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
        "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
    },
)
EARLY = block("cbo-early", at(8), 3, per_hour="29")  # 8 Dec 11:30 to 11 Dec 11:30
LATE = block("cbo-late", at(11), 3, per_hour="30")  # 11 Dec 11:30 to 14 Dec 11:30
REST = block("cbo-rest", at(11), 2, per_hour="31")  # what is missing once EARLY is held


@pytest.fixture
def ledger():
    with mock_aws():
        yield create_ledger_table()


def run(sim, ledger, notes):
    return controller.run(
        windows=[WINDOW],
        ledger=ledger,
        capacity=sim.market,
        notify=lambda s, m: notes.append((s, m)),
        now=sim.now,
        clock=sim.clock,
    )


def test_a_refused_first_piece_stops_the_cover(ledger):
    sim = SimulatedEc2(offerings=[EARLY, LATE], lag=timedelta(0), now=NOW, faults=["insufficient_capacity"])
    notes = []
    report = run(sim, ledger, notes)
    assert sim.made == []  # the second piece, useless alone, was not bought
    assert [i.id for i in report.bought] == []
    assert ledger.spent(WINDOW, NOW) == 0
    assert any(subject == "Capacity window not covered" for subject, _ in notes)


def test_a_refused_second_piece_is_reported_with_what_was_bought_and_the_next_run_buys_only_the_rest(ledger):
    sim = SimulatedEc2(offerings=[EARLY, LATE], lag=timedelta(0), now=NOW, faults=["ok", "insufficient_capacity"])
    notes = []
    run(sim, ledger, notes)
    assert [p.offering.id for p in sim.made] == ["cbo-early"]  # the cheaper piece first
    incomplete = next(m for s, m in notes if s == "Capacity cover incomplete")
    assert incomplete["stopped"] == "piece 2 of 2 (cbo-late) not bought; the other 0 not tried"
    assert incomplete["bought"] == [
        {
            "offering": "cbo-early",
            "from": EARLY.start.isoformat(),
            "to": EARLY.end.isoformat(),
            "instances": 4,
            "fee": str(EARLY.upfront_fee),
        }
    ]
    # The next run counts the bought piece and buys only what it leaves: 11 Dec 11:30 on.
    sim.offerings = [EARLY, LATE, REST]
    sim.now += timedelta(minutes=5)
    report = run(sim, ledger, notes)
    assert [p.offering.id for p in sim.made] == ["cbo-early", "cbo-rest"]
    assert report.uncovered == ()
    assert ledger.spent(WINDOW, NOW) == EARLY.upfront_fee + REST.upfront_fee
