"""The reclaim controller on the AWS model over simulated days, faults injected at every call
boundary (issue 23, "A model of AWS to test against"): the scenario checks its invariants after
every step (tests/aws_model/scenario.py). The month-long run is benchmarks/aws_scenarios.py."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.reclaim.planner import Settings  # noqa: E402
from tests.aws_model import scenario  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402


def test_half_a_day_with_faults_loses_no_job_runs_none_twice_and_holds_the_cap():
    with reclaim_ledger_table() as table:
        report = scenario.run(days=0.5, seed=7, table=table)
    # the scenario did what it is for: jobs were preempted and brought back, and faults hit
    assert report.preempted > 0 and report.copies > 0
    assert report.faults["throttle"] > 0 and report.faults["timeout"] > 0 and report.crashes > 0


def test_dry_run_changes_nothing_whatever_the_faults():
    with reclaim_ledger_table() as table:
        report = scenario.run(days=0.2, seed=3, dry_run=True, table=table)
    assert report.copies == 0


def test_the_checks_catch_a_controller_that_loses_jobs(monkeypatch):
    """The invariants are not vacuous: a controller that terminates and never resubmits is caught."""
    from gpu_governance_runtime.reclaim import adapters

    monkeypatch.setattr(adapters.BatchFairShareAdapter, "_bring_back",
                        lambda self, job, uncertain_since, progress: adapters.ActionResult(job_id=job["jobId"], outcome="done"))
    with reclaim_ledger_table() as table, pytest.raises(scenario.InvariantBroken, match="lost"):
        scenario.run(days=0.3, seed=7, table=table, fault_rates={"throttle": 0, "timeout": 0, "crash": 0},
                     settings=Settings(max_preemptions_per_tick=3))
