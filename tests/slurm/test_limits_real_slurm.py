"""Wall-time limits per team, pool and priority class, and per-member limits inside a team, on a
real Slurm (issue 43, items 3 and 4): QoS MaxWall with DenyOnLimit, user associations with MaxJobs
and GrpTRES=gres/gpu, applied idempotently and cleared again."""

from __future__ import annotations

from typing import Any

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run, wait_until
from .models import governance_model, model_data

pytestmark = pytest.mark.slurm


def limited_data() -> dict[str, Any]:
    data = model_data()
    urgent, standard, low = data["priority_classes"]
    standard["max_run_minutes"] = 30
    low["max_run_minutes"] = 1
    data["pools"][0]["max_run_minutes"] = 60
    critical, steady, burst = data["teams"]
    steady["max_run_minutes"] = 20
    burst["user_limits"] = {"max_running_jobs": 1, "max_gpus": 2}
    return data


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = governed_cluster(tmp_path_factory.mktemp("limits"))
    cluster.apply(GovernanceModel.from_dict(limited_data()))
    yield cluster
    cluster.cancel_all()
    cluster.apply(governance_model())  # the other modules' organisation, without limits


def shown(*what: str) -> list[list[str]]:
    return [line.split("|") for line in run("sacctmgr", "-n", "-P", "show", *what).stdout.split()]


def time_limit(job_id: str) -> str:
    return run("squeue", "-h", "-j", job_id, "-o", "%l").stdout.strip()


def test_each_qos_holds_the_tightest_of_its_team_pool_and_class_and_reapplying_changes_nothing(cluster: Cluster):
    walls = {name: (wall, flags) for name, wall, flags in shown("qos", "format=name,maxwall,flags") if "." in name}
    assert walls["critical.urgent"] == ("01:00:00", "DenyOnLimit")  # the pool's 60 alone
    assert walls["critical.standard"][0] == "00:30:00" and walls["critical.low"][0] == "00:01:00"  # the class's
    assert walls["steady.urgent"][0] == walls["steady.standard"][0] == "00:20:00"  # the team's 20 is tighter
    assert walls["steady.low"][0] == "00:01:00"
    assert walls["burst.borrow"][0] == "01:00:00"  # a borrower names no class: urgent has none, so the pool's
    assert cluster.apply(GovernanceModel.from_dict(limited_data())).changed == 0


def test_a_job_asking_for_longer_than_its_limit_is_refused_at_submission(cluster: Cluster):
    refused = cluster.submit_refused(
        "bob", account="steady", partition="steady", qos="steady.standard", gpus=1, minutes=45
    )
    assert "QOSMaxWallDurationPerJobLimit" in refused
    within = cluster.submit("bob", account="steady", partition="steady", qos="steady.standard", gpus=1, minutes=15)
    assert cluster.wait_running(within).state == "RUNNING"
    cluster.cancel_all()


def test_a_job_without_a_time_limit_gets_its_qos_limit_and_slurm_stops_it_there(cluster: Cluster):
    """The job asks for no time: Slurm gives it the QoS MaxWall (1 minute for class low) and ends it
    TIMEOUT when it is reached (after SIGTERM and KillWait; docs/slurm.md)."""
    job = cluster.submit("alice", account="critical", partition="critical", qos="critical.low", gpus=1)
    cluster.wait_running(job)
    assert time_limit(job) == "1:00"
    ended = wait_until(
        f"job {job} stopped at its limit",
        lambda: run("sacct", "-n", "-X", "-P", "-j", job, "--format=State").stdout.strip(),
        lambda state: state in ("TIMEOUT", "CANCELLED", "COMPLETED", "FAILED"),
        timeout=180,
    )
    assert ended == "TIMEOUT"


def test_each_member_of_a_limited_team_runs_at_most_one_job_and_two_gpus_while_another_member_still_runs(
    cluster: Cluster,
):
    users = {
        (account, user): (jobs, tres)
        for account, user, jobs, tres in shown("assoc", "format=account,user,maxjobs,grptres")
        if user
    }
    assert users[("burst", "carol")] == users[("burst", "dave")] == ("1", "gres/gpu=2")
    assert users[("steady", "bob")] == ("", "")  # steady declares no user limits
    first = cluster.submit("carol", account="burst", partition="burst", qos="burst.urgent", gpus=2)
    cluster.wait_running(first)
    second = cluster.submit("carol", account="burst", partition="burst", qos="burst.urgent", gpus=1)
    assert cluster.wait_pending_for(second, "AssocMaxJobsLimit").state == "PENDING"
    other = cluster.submit("dave", account="burst", partition="burst", qos="burst.urgent", gpus=2)
    assert cluster.wait_running(other).state == "RUNNING"  # the limit is carol's, not the team's
    cluster.cancel_all()
    # more GPUs than a member may hold: refused at submission (DenyOnLimit), never left pending
    refused = cluster.submit_refused("carol", account="burst", partition="burst", qos="burst.urgent", gpus=3)
    assert "AssocGrpGRES" in refused


def test_dropping_the_limits_clears_them_in_slurm(cluster: Cluster):
    assert cluster.apply(governance_model()).changed > 0
    walls = {name: (wall, flags) for name, wall, flags in shown("qos", "format=name,maxwall,flags") if "." in name}
    assert set(walls.values()) == {("", "")}
    users = [row for row in shown("assoc", "format=account,user,maxjobs,grptres") if row[1]]
    assert all(jobs == tres == "" for _, _, jobs, tres in users)
    assert cluster.apply(governance_model()).changed == 0
    cluster.apply(GovernanceModel.from_dict(limited_data()))
