"""The generated governance applied to a real Slurm with accounting, then proven with sleep
jobs: each sharing strategy's behaviour under contention, preemption by requeue, idempotence.

The local cluster (tests/slurm/slurm-up.sh) has three 4-GPU nodes: gpu-1 is team critical's
(reserve), gpu-2 team steady's (lend), gpu-3 team burst's (lend and borrow, borrow limit 100%
= 4 GPUs). Partition `borrow` spans gpu-2 and gpu-3.
"""

from __future__ import annotations

import subprocess

import pytest

from constructs_lib.model import GovernanceModel
from constructs_lib.slurm import slurm_plan

from .cluster import Cluster, run
from .models import POOL, default_teams, governance_model

pytestmark = pytest.mark.slurm


@pytest.fixture
def idle(cluster: Cluster) -> Cluster:
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()


def own(cluster: Cluster, user: str, team: str, priority_class: str = "low", gpus: int = 4) -> str:
    return cluster.submit(user, account=team, partition=team, qos=f"{team}.{priority_class}", gpus=gpus)


def borrowing(cluster: Cluster, gpus: int) -> str:
    return cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=gpus)


def test_accounts_fair_share_and_users_follow_the_model(cluster: Cluster) -> None:
    tree = run("sacctmgr", "-n", "-P", "show", "assoc", "where", "parent=acme-ml", "format=account,fairshare").stdout
    assert sorted(tree.split()) == ["burst|20", "critical|50", "steady|30"]
    members = run("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=burst", "format=user").stdout.split()
    assert sorted(members) == ["carol", "dave"]
    shares = run("sshare", "-n", "-P", "-A", "critical,steady,burst", "-o", "account,rawshares").stdout
    assert {"critical|50", "steady|30", "burst|20"} <= set(shares.split())


def test_qos_carry_priority_borrow_cap_and_preemption(cluster: Cluster) -> None:
    qos = {
        line.split("|")[0]: line.split("|")[1:]
        for line in run("sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt,grptres").stdout.split()
    }
    assert qos["burst.borrow"] == ["0", "", "gres/gpu=4"]
    assert qos["steady.urgent"] == ["90", "burst.borrow", ""]  # a lender reclaims, nothing else
    assert qos["critical.urgent"] == ["90", "critical.low,critical.standard", ""]  # in-share on
    assert qos["steady.low"][1] == "burst.borrow"  # in-share off: no steady.* here


def test_partitions_put_each_quota_on_its_own_nodes(cluster: Cluster) -> None:
    partitions = {}
    for line in run("scontrol", "-o", "show", "partition").stdout.splitlines():
        fields = dict(pair.split("=", 1) for pair in line.split() if "=" in pair)
        partitions[fields["PartitionName"]] = (fields["Nodes"], fields["AllowAccounts"])
    assert partitions["critical"] == ("gpu-1", "critical")
    assert partitions["steady"] == ("gpu-2", "steady")
    assert partitions["burst"] == ("gpu-3", "burst")
    assert partitions["borrow"] == ("gpu-[2-3]", "burst")


def test_reapplying_changes_nothing(cluster: Cluster) -> None:
    before = cluster.accounting()
    fragment = run("bash", "-c", "stat -c %Y /etc/slurm/gpu-governance.conf").stdout
    applied = cluster.apply(governance_model())
    assert applied.changed == 0, applied.output
    assert "changed:" not in applied.output
    assert cluster.accounting() == before
    assert run("bash", "-c", "stat -c %Y /etc/slurm/gpu-governance.conf").stdout == fragment


def preempt_lists(cluster: Cluster) -> dict[str, str]:
    shown = run("sacctmgr", "-n", "-P", "show", "qos", "format=name,preempt,description").stdout.splitlines()
    rows = (line.split("|") for line in shown)
    return {name: preempt for name, preempt, description in rows if description.startswith("gpu-governance:")}


def planned_preempt_lists(model: GovernanceModel) -> dict[str, str]:
    return {q.name: ",".join(sorted(q.preempts)) for q in slurm_plan(model, POOL).qos}


def test_preempt_lists_can_be_emptied_and_filled_again(cluster: Cluster) -> None:
    """Slurm 22.05 refuses to name a QoS in a preempt list once that QoS's own list was emptied
    ("QOS Preemption loop detected"), so turning preemption off and on again must still apply."""
    lending = governance_model()
    teams = default_teams()
    teams[0]["sharing"] = {"in_share_preemption": False}  # critical.urgent and .standard: emptied
    # steady.low is emptied and, in the same run, named by steady.standard and steady.urgent.
    teams[1] |= {"preset": None, "sharing": {"strategy": "reserve", "in_share_preemption": True}}
    reserving = governance_model(teams=teams)
    assert planned_preempt_lists(reserving)["steady.standard"] == "steady.low"

    before = cluster.accounting()
    dry = cluster.apply(reserving, "--dry-run")
    assert "would change: qos critical.urgent preempts: 'critical.low,critical.standard' -> ''" in dry.output
    assert "would change: qos steady.low preempts: 'burst.borrow' -> ''" in dry.output
    assert cluster.accounting() == before
    for model in (reserving, lending):
        cluster.apply(model)
        assert preempt_lists(cluster) == planned_preempt_lists(model)
    assert preempt_lists(cluster)["critical.urgent"] == "critical.low,critical.standard"
    assert preempt_lists(cluster)["steady.low"] == "burst.borrow"
    again = cluster.apply(lending)
    assert again.changed == 0, again.output


def test_dry_run_reports_a_change_without_making_it(cluster: Cluster) -> None:
    before = cluster.accounting()
    teams = default_teams()
    teams[1]["fair_share_weight"] = 45
    applied = cluster.apply(governance_model(teams=teams), "--dry-run")
    changes = [line for line in applied.output.splitlines() if "would change" in line]
    # The fragment names the policy digest, so it records the new version too.
    assert len(changes) == 2 == applied.changed, changes
    assert "would change: account steady: acme-ml|30|" in changes[0]
    assert "would change: write /etc/slurm/gpu-governance.conf" in changes[1]
    assert cluster.accounting() == before


def test_reserve_capacity_is_never_used_by_other_teams(idle: Cluster) -> None:
    own(idle, "carol", "burst")
    own(idle, "bob", "steady")
    extra = borrowing(idle, 1)
    # Every lent GPU is busy; critical's four idle GPUs are not reachable by borrowing.
    idle.wait_pending_for(extra, "Resources")
    error = idle.submit_refused("carol", account="burst", partition="critical", qos="burst.low", gpus=1)
    assert "Invalid account or account/partition combination" in error, error


def test_borrower_runs_on_idle_lent_capacity(idle: Cluster) -> None:
    mine = idle.wait_running(own(idle, "carol", "burst"))
    borrowed = idle.wait_running(borrowing(idle, 4))
    assert mine.nodes == "gpu-3"
    assert borrowed.nodes == "gpu-2"  # steady's node, idle, lent


def test_borrowing_stops_at_the_borrow_limit(idle: Cluster) -> None:
    idle.wait_running(borrowing(idle, 4))
    over = borrowing(idle, 1)
    # Four lent GPUs are still idle: the limit, not the capacity, holds the job back.
    idle.wait_pending_for(over, "QOSGrpGRES")


def test_lender_reclaims_lent_capacity_by_requeueing_the_borrower(idle: Cluster) -> None:
    idle.wait_running(own(idle, "carol", "burst"))
    borrowed = idle.wait_running(borrowing(idle, 4))
    assert borrowed.nodes == "gpu-2"
    lender = idle.wait_running(own(idle, "bob", "steady"))
    assert lender.nodes == "gpu-2"
    idle.wait_requeued(borrowed.id)


def test_in_share_preemption_requeues_the_lower_class(idle: Cluster) -> None:
    low = idle.wait_running(own(idle, "alice", "critical", "low"))
    urgent = idle.wait_running(own(idle, "alice", "critical", "urgent"))
    assert urgent.nodes == "gpu-1"
    idle.wait_requeued(low.id)


def test_without_in_share_preemption_the_urgent_job_waits(idle: Cluster) -> None:
    low = idle.wait_running(own(idle, "bob", "steady", "low"))
    urgent = own(idle, "bob", "steady", "urgent")
    # Once the scheduler has tried and failed to place it, nothing was preempted.
    idle.wait_pending_for(urgent, "Resources")
    still = idle.job(low.id)
    assert (still.state, still.restarts) == ("RUNNING", 0)


def test_removing_a_team_keeps_its_running_jobs_and_says_so(idle: Cluster) -> None:
    job = idle.wait_running(own(idle, "carol", "burst"))
    without_burst = governance_model(teams=default_teams()[:2])
    applied = idle.apply(without_burst)
    assert f"account burst left the policy but has jobs {job.id}" in applied.output
    assert f"partition burst left the policy but has jobs {job.id}" in applied.output
    assert idle.job(job.id).state == "RUNNING"
    partition = run("scontrol", "-o", "show", "partition", "burst").stdout
    assert "State=DRAIN" in partition
    idle.cancel_all()
    applied = idle.apply(without_burst)
    assert "changed: remove account burst" in applied.output
    assert run("sacctmgr", "-n", "-P", "show", "account", "burst", "format=account").stdout.strip() == ""
    assert run("scontrol", "show", "partition", "burst", check=False).returncode != 0
    restored = idle.apply(governance_model())
    assert "changed: add account burst" in restored.output


def test_pausing_a_team_holds_its_new_jobs_keeps_its_running_ones_and_resuming_releases_them(idle: Cluster) -> None:
    running = idle.wait_running(own(idle, "bob", "steady", gpus=2))
    teams = default_teams()
    teams[1] = {**teams[1], "paused": True}
    paused = idle.apply(governance_model(teams=teams))
    try:
        assert "changed: account steady" in paused.output
        waiting = own(idle, "bob", "steady", gpus=2)
        # GrpJobs=0: the job queues with Slurm's own reason, the running one is untouched
        idle.wait_pending_for(waiting, "AssocGrpJobsLimit")
        assert idle.job(running.id).state == "RUNNING"
        assert "changed:" not in idle.apply(governance_model(teams=teams)).output
    finally:
        resumed = idle.apply(governance_model())
    assert "changed: account steady" in resumed.output
    idle.wait_running(waiting)


def test_tenant_data_paths_keep_teams_apart(cluster: Cluster) -> None:
    burst_dir = cluster.data_root / "burst"
    steady_dir = cluster.data_root / "steady"
    wrote = run("runuser", "-u", "carol", "--", "touch", str(burst_dir / "carol.txt"), check=False)
    assert wrote.returncode == 0, wrote.stderr
    assert burst_dir.joinpath("carol.txt").stat().st_gid == burst_dir.stat().st_gid  # setgid dir
    for user, path in (("carol", steady_dir), ("bob", burst_dir)):
        denied = subprocess.run(["runuser", "-u", user, "--", "ls", str(path)], capture_output=True, text=True)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr


def test_os_only_leaves_accounting_alone(cluster: Cluster) -> None:
    before = cluster.accounting()
    teams = default_teams()
    teams[1]["fair_share_weight"] = 45  # an accounting change the OS-only run must not make
    applied = cluster.apply(governance_model(teams=teams), "--os-only")
    assert ", OS only" in applied.output
    assert applied.changed == 0, applied.output
    assert cluster.accounting() == before


def test_the_controller_move_documented_in_docs_slurm_md_works(idle: Cluster) -> None:
    """docs/slurm.md names what the reclaim controller must do; its first step, run for real."""
    idle.wait_running(own(idle, "carol", "burst", "standard"))
    waiting = idle.wait_pending_for(own(idle, "carol", "burst", "low"), "Resources")
    run(
        "scontrol",
        "update",
        f"JobId={waiting.id}",
        "Partition=borrow",
        "QOS=burst.borrow",
        "AdminComment=gg-moved-from=burst/burst.low",
    )
    moved = idle.wait_running(waiting.id)
    assert moved.nodes == "gpu-2"  # steady's idle, lent node
    assert "AdminComment=gg-moved-from=burst/burst.low" in run("scontrol", "show", "job", waiting.id).stdout


def gpu_minutes_used(account: str) -> int:
    """The GPU minutes Slurm counts against the account's GrpTRESMins (`scontrol show assoc_mgr`: limit(used))."""
    shown = run("scontrol", "show", "assoc_mgr", f"accounts={account}", "flags=assoc").stdout
    record = shown.split(f"Account={account} UserName= ", 1)[1]
    return int(record.split("gres/gpu=", 2)[2].split("(", 1)[1].split(")", 1)[0])  # GrpTRES first, then GrpTRESMins


def test_a_team_at_its_gpu_hour_limit_starts_no_job_that_would_pass_it_while_other_teams_start(idle: Cluster) -> None:
    # What the team has used already (earlier runs' jobs) plus at least an hour: the limit leaves
    # 60-119 GPU minutes, so a 4-GPU job of that many hours would pass it and a 1-GPU minute fits.
    hours = gpu_minutes_used("steady") // 60 + 2
    teams = default_teams()
    teams[1] = {**teams[1], "gpu_hour_limit": {"hours": hours, "period": "month"}}
    limited = idle.apply(governance_model(teams=teams))
    try:
        assert f"changed: account steady: GrpTRESMins none -> gres/gpu={hours * 60}" in limited.output
        assert run("scontrol", "show", "config").stdout.count("PriorityUsageResetPeriod = MONTHLY") == 1
        too_long = idle.submit(
            "bob", account="steady", partition="steady", qos="steady.low", gpus=4, minutes=hours * 60
        )
        # Slurm 22.05's own reason: the job would pass the account's GPU minutes, so it is never started
        idle.wait_pending_for(too_long, "AssocGrpGRESMinutes")
        # `safe` enforcement: a job without a time limit (the partitions have none) could pass any limit, so it never starts
        unbounded = own(idle, "bob", "steady", gpus=1)
        idle.wait_pending_for(unbounded, "AssocGrpGRESMinutes")
        idle.wait_running(own(idle, "carol", "burst", gpus=2))  # another team is not held by it
        idle.wait_running(idle.submit("bob", account="steady", partition="steady", qos="steady.low", gpus=1, minutes=1))
        assert idle.job(too_long).state == "PENDING"
        assert "changed:" not in idle.apply(governance_model(teams=teams)).output
        run("scancel", unbounded)
    finally:
        lifted = idle.apply(governance_model())
    assert "changed: account steady: GrpTRESMins" in lifted.output
    idle.wait_running(too_long)
