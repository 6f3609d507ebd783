"""Hard GPU-hour limits per period (issue 28, item 5): the model, Slurm's GrpTRESMins and reset
period, what `validate`, `explain`, `audit`, the discovery document and `status` say. The real
Slurm proof is tests/slurm/test_real_slurm.py::test_a_team_at_its_gpu_hour_limit_starts_no_job_that_would_pass_it_while_other_teams_start."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from constructs_lib.backends.hyperpod_slurm.status import slurm_observation
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.discovery import describe
from constructs_lib.member.setup import TeamSetup
from constructs_lib.member.waiting import explain
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.policy import compile_policy
from constructs_lib.organisation.audit import audit
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.limits import next_reset
from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.slurm import render_apply_script

from .org import default_data

MONTHLY = {"hours": 100, "period": "month"}


def model_with(**team_changes) -> GovernanceModel:
    data = default_data()
    for team in data["teams"]:
        team.pop("gpu_hour_limit", None)  # the reference organisation declares one: each test says its own
    for index, changes in team_changes.items():
        data["teams"][int(index.removeprefix("t"))].update(changes)
    return GovernanceModel.from_dict(data)


@pytest.mark.parametrize(
    "limit, expected",
    [
        ({"hours": 0, "period": "month"}, "teams[1].gpu_hour_limit.hours: invalid (0)"),
        ({"hours": 10, "period": "year"}, "teams[1].gpu_hour_limit.period: invalid ('year')"),
        ({"period": "week"}, "teams[1].gpu_hour_limit.hours"),
        ({"hours": 10, "period": "day", "soft": True}, "teams[1].gpu_hour_limit.soft"),
        (100, "teams[1].gpu_hour_limit: invalid (100)"),
    ],
)
def test_a_bad_gpu_hour_limit_is_refused_naming_the_field_and_value(limit, expected):
    with pytest.raises(GovernanceError) as error:
        model_with(t1={"gpu_hour_limit": limit})
    assert expected in str(error.value)


def test_the_period_error_says_what_is_allowed():
    with pytest.raises(GovernanceError) as error:
        model_with(t1={"gpu_hour_limit": {"hours": 10, "period": "year"}})
    assert all(word in str(error.value) for word in ("day", "week", "month"))


def test_slurm_holds_the_limit_as_grp_tres_mins_and_resets_usage_each_period_without_decay():
    plan = slurm_plan(model_with(t1={"gpu_hour_limit": MONTHLY}), "hyperpod-slurm")
    limits = {a.name: a.gpu_minutes_limit for a in plan.accounts}
    assert limits == {"research": None, "training": 6000, "production": None}
    assert plan.usage_reset_period == "MONTHLY"
    script = render_apply_script(plan)
    accounts = {line.split()[1]: line.split()[2:] for line in script.splitlines() if line.startswith("gg_account ")}
    assert accounts["training"][-2:] == ["''", "6000"]  # no GrpJobs, GrpTRESMins=gres/gpu=6000
    assert len(accounts["research"]) == 4
    assert "gg_setting PriorityDecayHalfLife 0" in script and "gg_setting PriorityUsageResetPeriod MONTHLY" in script


def test_a_paused_team_with_a_limit_keeps_both():
    plan = slurm_plan(
        model_with(t1={"gpu_hour_limit": {"hours": 5, "period": "day"}, "paused": True}), "hyperpod-slurm"
    )
    script = render_apply_script(plan)
    assert "gg_account training acme-ml" in script
    training = next(line for line in script.splitlines() if line.startswith("gg_account training "))
    assert training.split()[-2:] == ["0", "300"] and "gg_setting PriorityUsageResetPeriod DAILY" in script


def test_without_a_limit_slurm_keeps_its_decay():
    script = render_apply_script(slurm_plan(model_with(), "hyperpod-slurm"))
    settings = [line.split()[1] for line in script.splitlines() if line.startswith("gg_setting ")]
    assert (
        "PriorityType" in settings
        and "PriorityDecayHalfLife" not in settings
        and "PriorityUsageResetPeriod" not in settings
    )


def test_limits_of_different_periods_on_one_slurm_cluster_are_refused():
    with pytest.raises(GovernanceError) as error:
        model_with(t0={"gpu_hour_limit": MONTHLY}, t2={"gpu_hour_limit": {"hours": 5, "period": "week"}})
    message = str(error.value)
    assert "teams[2].gpu_hour_limit.period" in message and "'week'" in message and "PriorityUsageResetPeriod" in message
    assert "month, as every GPU-hour limit on pool hyperpod-slurm" in message


def test_validate_names_each_pool_where_the_limit_is_not_enforced_in_one_line():
    lines = [line for line in caveats(model_with(t1={"gpu_hour_limit": MONTHLY})) if ".gpu_hour_limit" in line]
    assert [line.split(":", 1)[0] for line in lines] == ["teams[1].gpu_hour_limit"] * 4
    fair_share = next(line for line in lines if "ec2-gpu" in line)
    assert fair_share.startswith("teams[1].gpu_hour_limit: not enforced on pool ec2-gpu (batch_fair_share)")
    assert "counted on pool hyperpod-slurm (hyperpod_slurm) alone: Slurm (GrpTRESMins)" in next(
        line for line in lines if "hyperpod-slurm" in line
    )
    assert "counted on pool sagemaker-training (batch_quota_share) alone: the reclaim controller" in next(
        line for line in lines if "sagemaker-training" in line
    )
    assert not [
        line for line in lines if "not enforced" in line and ("sagemaker-training" in line or "hyperpod-eks" in line)
    ]
    assert not [line for line in caveats(model_with()) if "gpu_hour_limit" in line]


def test_explain_and_audit_show_the_limit():
    model = model_with(t1={"gpu_hour_limit": MONTHLY})
    shown = {(d.team, d.pool): d.gpu_hour_limit for d in deals(model)}
    assert shown["training", "hyperpod-slurm"] == "100 GPU h per month"
    assert (
        shown["training", "ec2-gpu"] == "100 GPU h per month (not enforced here)"
    )  # Batch fair share: no per-share state
    assert (
        shown["training", "sagemaker-training"] == "100 GPU h per month"
    )  # the reclaim controller disables the quota share
    assert shown["research", "hyperpod-slurm"] == "-"
    workload = [row.can for row in audit(model) if row.team == "training" and row.layer == "workload"]
    assert any("GPU-hour limit 100 GPU h per month" in can for can in workload)
    assert not any("GPU-hour limit" in row.can for row in audit(model) if row.team == "research")


def test_the_discovery_document_tells_the_limit_and_an_older_one_still_reads():
    model = model_with(t1={"gpu_hour_limit": MONTHLY})
    document = describe(model, "training", "hyperpod-slurm")
    assert document["gpu_hour_limit"] == {"hours": 100, "period": "month", "enforced": True}
    assert describe(model, "training", "ec2-gpu")["gpu_hour_limit"]["enforced"] is False
    assert describe(model, "training", "sagemaker-training")["gpu_hour_limit"]["enforced"] is True
    assert describe(model, "training", "hyperpod-eks")["gpu_hour_limit"]["enforced"] is True
    assert describe(model, "research", "hyperpod-slurm")["gpu_hour_limit"] is None
    assert TeamSetup.from_document(document).gpu_hour_limit["hours"] == 100
    older = {
        key: value for key, value in document.items() if key != "gpu_hour_limit"
    }  # published before the limit existed
    assert TeamSetup.from_document(older).gpu_hour_limit is None


def test_status_says_a_slurm_job_waits_for_the_teams_gpu_hour_limit_and_when_it_resets():
    pool = parse_policy(compile_policy(model_with())).pool("hyperpod-slurm")
    squeue = "\n".join(
        [
            "31|a|training|training.low|PENDING|1|training|1000|2027-01-15T07:00:00|AssocGrpGRESMinutes",
            "32|b|training|training.low|PENDING|1|training|900|2027-01-15T07:01:00|Resources",
        ]
    )
    now = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    status = explain(
        pool, "training", slurm_observation(squeue, pool, "training"), now=now, gpu_hour_limit=(100, "month")
    )
    limited = next(j for j in status.jobs if j.job_id == "31")
    assert limited.reason == "gpu_hour_limit"
    assert limited.text.startswith(
        "team reached its GPU-hour limit for the month (100 GPU hours): too few are left for this job; "
        "the count starts again at 2027-02-01 00:00 UTC"
    )
    assert "AssocGrpGRESMinutes" in limited.text
    assert next(j for j in status.jobs if j.job_id == "32").position == 2  # the held-back job is still listed ahead


@pytest.mark.parametrize(
    "period, now, resets",
    [
        ("day", "2026-12-01T18:40", "2026-12-02T00:00"),
        ("week", "2026-12-01T18:40", "2026-12-06T00:00"),  # Slurm's WEEKLY: Sunday 00:00
        ("week", "2026-12-06T00:00", "2026-12-13T00:00"),  # at the reset itself: the next one
        ("month", "2026-12-31T23:59", "2027-01-01T00:00"),
        ("month", "2027-01-01T00:00", "2027-02-01T00:00"),
    ],
)
def test_the_next_reset_follows_slurms_calendar(period, now, resets):
    at = datetime.fromisoformat(now).replace(tzinfo=UTC)
    assert next_reset(period, at) == datetime.fromisoformat(resets).replace(tzinfo=UTC)


def test_the_reference_organisation_shows_a_gpu_hour_limit():
    model = GovernanceModel.from_dict(default_data())
    assert {t.name: t.gpu_hour_limit for t in model.teams if t.gpu_hour_limit}.keys() == {"research"}
