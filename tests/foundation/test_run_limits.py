"""Wall-time limits per team, pool and priority class, and per-member limits inside a team (issue 43,
items 3 and 4): the model, the Slurm plan, and what `validate` and `explain` say where a backend does
not hold them. The real Slurm proof is tests/slurm/test_limits_real_slurm.py."""

from __future__ import annotations

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.run_limits import UserLimits
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm import render_apply_script

from .org import default_data

RESEARCH, TRAINING = 0, 1


def model_with(*, classes=None, pools=None, **team_changes) -> GovernanceModel:
    """The reference organisation with limits: ``classes`` and ``pools`` map a name to its
    ``max_run_minutes``; ``t<index>`` keyword arguments update that team."""
    data = default_data()
    for priority_class in data["priority_classes"]:
        if priority_class["name"] in (classes or {}):
            priority_class["max_run_minutes"] = classes[priority_class["name"]]
    for pool in data["pools"]:
        if pool["name"] in (pools or {}):
            pool["max_run_minutes"] = pools[pool["name"]]
    for index, changes in team_changes.items():
        data["teams"][int(index.removeprefix("t"))].update(changes)
    return GovernanceModel.from_dict(data)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"t1": {"max_run_minutes": 0}}, "teams[1].max_run_minutes: invalid (0)"),
        ({"t1": {"max_run_minutes": "2h"}}, "teams[1].max_run_minutes: invalid ('2h')"),
        ({"t1": {"user_limits": {}}}, "teams[1].user_limits: invalid"),
        ({"t1": {"user_limits": {"max_gpus": 0}}}, "teams[1].user_limits.max_gpus: invalid (0)"),
        ({"t1": {"user_limits": {"max_jobs": 2}}}, "teams[1].user_limits.max_jobs"),
        ({"pools": {"ec2-gpu": 600_000}}, "pools[1].max_run_minutes: invalid (600000)"),
        ({"classes": {"urgent": -5}}, "priority_classes[0].max_run_minutes: invalid (-5)"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field_and_value(changes, expected):
    with pytest.raises(GovernanceError) as error:
        model_with(**changes)
    assert expected in str(error.value)


def test_a_user_limit_that_limits_nothing_says_what_to_give():
    with pytest.raises(GovernanceError) as error:
        model_with(t1={"user_limits": {}})
    assert "max_running_jobs, max_gpus or both" in str(error.value)


def qos_walls(model: GovernanceModel) -> dict[str, tuple[int | None, bool]]:
    return {q.name: (q.max_wall_minutes, q.deny_on_limit) for q in slurm_plan(model, "hyperpod-slurm").qos}


def test_each_slurm_qos_holds_the_tightest_of_team_pool_and_class():
    model = model_with(
        classes={"standard": 120, "opportunistic": 30}, pools={"hyperpod-slurm": 600}, t1={"max_run_minutes": 60}
    )
    walls = qos_walls(model)
    assert walls["research.urgent"] == (600, True)  # the pool's
    assert walls["research.standard"] == (120, True) and walls["research.opportunistic"] == (30, True)
    assert walls["training.urgent"] == walls["training.standard"] == (60, True)  # the team's is tighter
    assert walls["training.opportunistic"] == (30, True)


def test_a_borrowing_job_runs_as_long_as_its_team_pool_and_every_class_allow():
    # research borrows in the reference organisation; its borrow QoS names no class
    some = qos_walls(model_with(classes={"standard": 120, "opportunistic": 30}))
    assert some["research.borrow"] == (None, True)  # urgent has no limit: a borrower may run as long
    every = qos_walls(model_with(classes={"urgent": 240, "standard": 120, "opportunistic": 30}))
    assert every["research.borrow"] == (240, True)  # the longest any class allows
    assert qos_walls(model_with(classes={"urgent": 240}, t0={"max_run_minutes": 90}))["research.borrow"] == (90, True)


def test_without_limits_the_slurm_plan_and_script_are_as_before():
    model = model_with()
    assert {wall for wall in qos_walls(model).values()} == {(None, False)}
    plan = slurm_plan(model, "hyperpod-slurm")
    assert {(u.max_jobs, u.max_gpus) for u in plan.users} == {(None, None)}
    calls = [line for line in render_apply_script(plan).splitlines() if line.startswith(("gg_qos ", "gg_user "))]
    assert calls and not any("DenyOnLimit" in line for line in calls)
    # no trailing empty arguments for the limits: gg_qos NAME PRIORITY GPUS GRACE, gg_user NAME ACCOUNT
    assert {len(line.split()) for line in calls} <= {3, 5} and not any(line.endswith("''") for line in calls)


def test_user_limits_become_each_members_association_under_the_team_account():
    model = model_with(t1={"user_limits": {"max_running_jobs": 2, "max_gpus": 16}})
    plan = slurm_plan(model, "hyperpod-slurm")
    limits = {(u.account, u.name): (u.max_jobs, u.max_gpus) for u in plan.users}
    training = {key: value for key, value in limits.items() if key[0] == "training"}
    assert training and set(training.values()) == {(2, 16)}
    assert {value for key, value in limits.items() if key[0] != "training"} == {(None, None)}
    script = render_apply_script(plan)
    member = next(u.name for u in plan.users if u.account == "training")
    assert f"gg_user {member} training 2 16" in script.splitlines()
    # the team's QoS refuse at submission what a member's limit would never let run
    assert all(deny for name, (_, deny) in qos_walls(model).items() if name.startswith("training."))
    assert not any(deny for name, (_, deny) in qos_walls(model).items() if name.startswith("research."))


def test_validate_names_each_pool_where_a_wall_time_limit_is_not_enforced():
    model = model_with(classes={"standard": 120}, pools={"hyperpod-eks": 600}, t1={"max_run_minutes": 60})
    lines = [line for line in caveats(model) if "max_run_minutes" in line]
    pool_lines = [line for line in lines if line.startswith("pools[")]
    assert len(pool_lines) == 1
    assert pool_lines[0].startswith(
        "pools[2].max_run_minutes: not enforced on pool hyperpod-eks (hyperpod_eks) for a HyperPodPyTorchJob"
    )
    team = [line for line in lines if line.startswith("teams[1].max_run_minutes")]
    assert [line.split(": not enforced on pool ")[1].split(" ")[0] for line in team] == ["hyperpod-eks"]
    assert "no run-time setting" in team[0] and "activeDeadlineSeconds" in team[0]
    classes = [line for line in lines if line.startswith("priority_classes[1]")]
    assert len(classes) == 1 and not any("hyperpod-slurm" in line or "ec2-gpu" in line for line in lines)
    # the quota-share pool's limit is the submission guard's, which in dry run only reports; the
    # fair-share pool's the reclaim controller's, likewise
    (dry,) = [line for line in caveats(model) if line.startswith("guard_mode")]
    assert "on pool sagemaker-training (batch_quota_share) the submission guard only reports" in dry
    (reclaim,) = [line for line in caveats(model) if line.startswith("reclaim_mode")]
    assert "on pool ec2-gpu (batch_fair_share) the reclaim controller only reports jobs" in reclaim
    acting = model.model_copy(update={"guard_mode": "act", "reclaim_mode": "act"})
    assert not [line for line in caveats(acting) if line.startswith(("guard_mode", "reclaim_mode"))]
    assert not [line for line in caveats(model_with()) if "max_run_minutes" in line or "reclaim_mode" in line]


def test_validate_names_each_pool_where_a_user_limit_is_not_enforced():
    model = model_with(t1={"user_limits": {"max_running_jobs": 2}})
    lines = [line for line in caveats(model) if "user_limits" in line]
    pools = [line.split(" on pool ")[1].split(" ")[0] for line in lines]
    assert pools == ["sagemaker-training", "ec2-gpu", "hyperpod-eks"]  # every pool of the team but Slurm
    assert all(line.startswith("teams[1].user_limits: not enforced") for line in lines)
    assert "ResourceQuota limits a namespace and never a user" in lines[2]
    assert "no scheduling dimension" in lines[0] and "no scheduling dimension" in lines[1]


def test_explain_shows_the_limits_and_where_they_do_not_hold():
    model = model_with(
        classes={"opportunistic": 30},
        pools={"hyperpod-slurm": 600},
        t1={"max_run_minutes": 60, "user_limits": {"max_running_jobs": 1, "max_gpus": 8}},
    )
    shown = {(d.team, d.pool): (d.max_run, d.user_limits) for d in deals(model)}
    assert shown["training", "hyperpod-slurm"] == (
        "60 min per job; opportunistic 30 min",
        "1 running job, 8 GPUs per member",
    )
    assert shown["research", "hyperpod-slurm"] == ("600 min per job; opportunistic 30 min", "-")
    assert shown["training", "hyperpod-eks"] == (
        "60 min per job; opportunistic 30 min (enforced for Jobs, CronJobs, pods and Kubeflow jobs only)",
        "1 running job, 8 GPUs per member (not enforced here)",
    )
    assert shown["research", "ec2-gpu"] == ("none per job; opportunistic 30 min", "-")  # the reclaim controller's
    assert {(d.max_run, d.user_limits) for d in deals(model_with())} == {("-", "-")}


def test_validate_warns_and_explain_shows_the_limits_through_the_cli(capsys, tmp_path):
    from .test_cli import explained, run, write

    data = default_data()
    data["teams"][TRAINING]["user_limits"] = {"max_running_jobs": 2}
    data["teams"][TRAINING]["max_run_minutes"] = 90
    path = write(tmp_path, data)
    code, out, err = run(capsys, "validate", "--config", path)
    assert code == 0
    assert "warning: teams[1].user_limits: not enforced on pool hyperpod-eks (hyperpod_eks)" in out + err
    assert "warning: teams[1].max_run_minutes: not enforced on pool hyperpod-eks (hyperpod_eks)" in out + err
    assert "warning: reclaim_mode: dry_run: on pool ec2-gpu (batch_fair_share)" in out + err
    rows = {(d["team"], d["pool"]): d for d in explained(capsys, "--config", path)["deals"]}
    assert rows["training", "hyperpod-slurm"]["max_run"] == "90 min per job"
    assert rows["training", "hyperpod-slurm"]["user_limits"] == "2 running jobs per member"
    data["teams"][TRAINING]["user_limits"] = {"max_running_jobs": 0}
    code, _, err = run(capsys, "validate", "--config", write(tmp_path, data))
    assert code == 2 and "teams[1].user_limits.max_running_jobs" in err and "Traceback" not in err


def test_status_tells_a_member_whose_job_waits_for_their_own_limit():
    from constructs_lib.backends.hyperpod_slurm.status import slurm_observation
    from constructs_lib.member.waiting import explain
    from tests.status.test_status import NOW, SLURM

    squeue = "\n".join(
        [
            "31|a|research|research.standard|RUNNING|1|research|4000|2027-01-15T07:00:00|None",
            "32|b|research|research.standard|PENDING|1|research|4000|2027-01-15T07:01:00|AssocMaxJobsLimit",
            "33|c|research|research.standard|PENDING|1|research|4000|2027-01-15T07:02:00|AssocGrpGRES",
        ]
    )
    jobs = {j.job_id: j for j in explain(SLURM, "research", slurm_observation(squeue, SLURM, "research"), now=NOW).jobs}
    assert "you run the most jobs one member of your team may (user_limits)" in jobs["32"].text
    assert "the GPUs one member may hold (user_limits)" in jobs["33"].text


def test_an_eks_kueue_pool_holds_run_time_limits_and_is_named_where_user_limits_do_not_hold():
    """Kueue stops a workload at its maximum execution time, which the team's admission policy
    requires (tests/hyperpod_eks/test_run_time_admission.py); nothing there sees a member."""
    from tests.eks_kueue.org import POOL, reference_with_eks_kueue

    reference = reference_with_eks_kueue()
    teams = [
        t.model_copy(update={"max_run_minutes": 60, "user_limits": UserLimits(max_running_jobs=1)})
        if t.name == "inference"
        else t
        for t in reference.teams
    ]
    pools = [p.model_copy(update={"max_run_minutes": 600}) if p.name == POOL else p for p in reference.pools]
    model = reference.model_copy(update={"teams": teams, "pools": pools})
    team = [t.name for t in teams].index("inference")
    lines = [line for line in caveats(model) if f"pool {POOL} " in line]
    assert [line.split(":")[0] for line in lines] == [f"teams[{team}].user_limits"]
    assert lines[0].startswith(f"teams[{team}].user_limits: not enforced on pool {POOL} (eks_kueue)")
    (shown,) = [(d.max_run, d.user_limits) for d in deals(model) if d.pool == POOL and d.team == "inference"]
    assert shown == ("60 min per job", "1 running job per member (not enforced here)")
