"""A capacity window's nodes on the real local Slurm (tests/slurm/slurm-up.sh): the window's
instance group in its owner's partition, drained before the plan ends, the jobs still on it
requeued just before the end, resumed when the next plan is active, an admin's drain left alone.

Only the transports are replaced: the capacity controller's own shell commands run here, as SSM
Run Command runs them on the head node (``LocalRunCommand``), and SageMaker's ``ListClusterNodes``
answers through Stubber with the node's host name. The ledger runs on moto's DynamoDB.

The organisation here: teams critical (reserve, gpu-1) and steady (lend, gpu-2); critical's
window feeds instance group ``critical-window``, which is gpu-3. The module re-applies the
default test organisation (three teams, tests/slurm/models.py) and resumes gpu-3 when it ends.
"""

from __future__ import annotations

import os
from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.model import GovernanceModel  # noqa: E402
from gpu_governance_runtime.capacity import slurm_window  # noqa: E402
from gpu_governance_runtime.capacity.requeue import SIGNAL_LEAD, STOP_LEAD  # noqa: E402
from gpu_governance_runtime.planners.capacity import Window  # noqa: E402

from ..capacity.builders import at, reservation  # noqa: E402
from ..capacity.stubbed_aws import create_ledger_table  # noqa: E402
from .cluster import HEAD_NODE, Cluster, LocalRunCommand, governed_cluster, run, wait_until  # noqa: E402
from .models import INSTANCE_TYPE, NODE_MAP, POOL, default_teams, governance_model, model_data  # noqa: E402

pytestmark = pytest.mark.slurm

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
GROUP = "critical-window"
WINDOW_NODE = "gpu-3"
WINDOW_NAME = "release-warmup"
PLAN = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/warmup-1",
    at(10),
    1,
    state="active",
    count=1,
    window_name=WINDOW_NAME,
)
NEXT = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/warmup-2",
    at(12),
    1,
    state="active",
    count=1,
    window_name=WINDOW_NAME,
)
DRAINING, REQUEUEING = PLAN.end - SIGNAL_LEAD + timedelta(minutes=2), PLAN.end - STOP_LEAD + timedelta(minutes=1)
SERVING_NEXT = NEXT.start + timedelta(minutes=10)


def window_model() -> GovernanceModel:
    data = model_data(teams=[t for t in default_teams() if t["name"] != "burst"], capacity=2)
    data["pools"][0]["cluster_arn"] = CLUSTER
    data["capacity_windows"] = [
        {
            "name": WINDOW_NAME,
            "team": "critical",
            "instance_type": INSTANCE_TYPE,
            "instance_count": 1,
            "start": "2026-12-10T11:30:00Z",
            "duration_hours": 24,
            "repeat_every_days": 2,
            "feeds": {"kind": "hyperpod_instance_group", "pool": POOL, "instance_group": GROUP},
            "max_price_per_instance_hour": "10",
            "budget": {"amount": "1000"},
            "mode": "auto",
        }
    ]
    return GovernanceModel.from_dict(data)


def runtime_window(model: GovernanceModel) -> Window:
    from constructs_lib.model.policy import compile_policy
    from gpu_governance_runtime.policy import parse_policy

    (window,) = parse_policy(compile_policy(model)).capacity_windows
    return window


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = governed_cluster(tmp_path_factory.mktemp("slurm-window"))
    default_map = cluster.node_map.read_text()
    cluster.node_map.write_text(
        "".join(f"{group} {node}\n" for group, node in NODE_MAP.items() if node != WINDOW_NODE)
        + f"{GROUP} {WINDOW_NODE}\n"
    )
    cluster.apply(window_model())
    yield cluster
    cluster.cancel_all()
    run("scontrol", "update", f"NodeName={WINDOW_NODE}", "State=RESUME", check=False)  # whatever a failed test left
    cluster.node_map.write_text(default_map)
    cluster.apply(governance_model())
    assert node(WINDOW_NODE) == ("idle", "none"), "the window's node was not restored"


@pytest.fixture(scope="module")
def controller():
    with mock_aws():
        ledger = create_ledger_table()
        sagemaker = boto3.client("sagemaker", region_name="us-east-1")
        with Stubber(sagemaker) as stub:
            yield Controller(sagemaker, stub, ledger, runtime_window(window_model()))


class Controller:
    """The capacity controller's Slurm step at a given moment, with SageMaker listing gpu-3 as
    the group's instance and SSM running the commands here."""

    def __init__(self, sagemaker, stub: Stubber, ledger, window: Window):
        self.sagemaker, self.stub, self.ledger, self.window, self.ssm = (
            sagemaker,
            stub,
            ledger,
            window,
            LocalRunCommand(),
        )

    def run(self, now, plans=(PLAN,)) -> dict:
        self.stub.add_response(
            "list_cluster_nodes",
            {
                "ClusterNodeSummaries": [
                    {
                        "InstanceGroupName": GROUP,
                        "InstanceId": "i-0aaaaaaaaaaaaaaa3",
                        "InstanceType": INSTANCE_TYPE,
                        "LaunchTime": PLAN.start,
                        "InstanceStatus": {"Status": "Running", "Message": ""},
                        "PrivateDnsHostname": f"{WINDOW_NODE}.cluster.internal",
                    }
                ]
            },
            {"ClusterName": CLUSTER, "InstanceGroupNameContains": GROUP},
        )
        (result,) = slurm_window.apply(
            windows={self.window.name: self.window},
            owned=list(plans),
            slurm_pools={POOL: ["critical", "steady"]},
            head_nodes={POOL: HEAD_NODE},
            sagemaker=self.sagemaker,
            ssm=self.ssm,
            ledger=self.ledger,
            now=now,
            sleep=lambda s: None,
        )
        self.stub.assert_no_pending_responses()
        assert "error" not in result, result
        return result


def node(name: str) -> tuple[str, str]:
    """(state, reason) as sinfo shows them."""
    state, reason = (
        run("sinfo", "--noheader", "--Node", f"--nodes={name}", "--format=%T|%E").stdout.splitlines()[0].split("|", 1)
    )
    return state, reason


def submit(user: str, *, node_name: str | None = None) -> str:
    where = [f"--nodelist={node_name}"] if node_name else []
    return (
        run(
            "runuser",
            "-u",
            user,
            "--",
            "sbatch",
            "--parsable",
            "--account=critical",
            "--partition=critical",
            "--qos=critical.standard",
            "--gres=gpu:4",
            "--chdir=/tmp",
            "--output=/dev/null",
            *where,
            "--wrap",
            "sleep 600",
        )
        .stdout.strip()
        .split(";")[0]
    )


def test_the_windows_group_is_in_the_owners_partition_only(cluster: Cluster) -> None:
    partitions = run("sinfo", "--noheader", "--Node", f"--nodes={WINDOW_NODE}", "--format=%P").stdout.split()
    assert sorted(p.rstrip("*") for p in partitions) == ["all", "critical"]  # `all` is the base config's, root only
    refused = cluster.submit_refused("bob", account="steady", partition="critical", qos="steady.standard", gpus=4)
    assert "Invalid account or account/partition combination" in refused


def test_drain_requeue_and_resume_of_the_windows_node(cluster: Cluster, controller: Controller) -> None:
    cluster.cancel_all()
    # critical fills its own node, so its next job lands on the window's node; then its own node frees.
    own = cluster.wait_running(submit("alice"))
    on_window = cluster.wait_running(submit("alice"))
    assert (own.nodes, on_window.nodes) == ("gpu-1", WINDOW_NODE)
    run("scancel", own.id)

    # Before SIGNAL_LEAD: nothing to do.
    assert controller.run(PLAN.start + timedelta(hours=1))["changed"] is False

    # SIGNAL_LEAD before the end: drained; the running job goes on, a new job cannot start there.
    drained = controller.run(DRAINING)
    assert drained["drain"] == {"done": [WINDOW_NODE]} and "requeue" not in drained
    assert node(WINDOW_NODE) == ("draining", f"{slurm_window.MARKER} {WINDOW_NAME} ends 2026-12-11T11:30Z")
    assert cluster.job(on_window.id).state == "RUNNING"
    pinned = cluster.wait_for(
        submit("alice", node_name=WINDOW_NODE),
        "waited for the drained node",
        lambda j: j.state == "PENDING" and j.reason.startswith("ReqNodeNotAvail"),
    )
    assert (
        controller.run(DRAINING + timedelta(minutes=1))["changed"] is False
    )  # a repeated run or event changes nothing

    # STOP_LEAD before the end: the job still on it is requeued and moves to the owner's other node.
    requeued = controller.run(REQUEUEING)
    assert requeued["requeue"] == {"done": [on_window.id]}
    cluster.wait_requeued(on_window.id)
    run(
        "scontrol", "update", f"JobId={on_window.id}", "StartTime=now"
    )  # skip Slurm's requeue delay (BeginTime, ~2 minutes)
    assert cluster.wait_running(on_window.id).nodes == "gpu-1"
    wait_until(
        f"{WINDOW_NODE} drained once the requeued job left it",
        lambda: node(WINDOW_NODE)[0],
        lambda state: state == "drained",
    )
    assert cluster.job(pinned.id).state == "PENDING"
    assert controller.run(REQUEUEING + timedelta(minutes=1))["changed"] is False

    # The next plan is active: the controller's drain is lifted and the waiting job starts there.
    resumed = controller.run(SERVING_NEXT, plans=(PLAN, NEXT))
    assert resumed["resume"] == {"done": [WINDOW_NODE]}
    assert cluster.wait_running(pinned.id).nodes == WINDOW_NODE
    assert node(WINDOW_NODE)[1] == "none"
    statuses = [
        (action.split("#")[0], status)
        for action, status, _ in controller.ledger.actions("slurm-", ("calling", "done", "failed"))
    ]
    assert statuses == [("slurm-nodes", "done"), ("slurm-nodes", "done"), ("slurm-requeue", "done")]
    cluster.cancel_all()


def test_an_admins_drain_is_left_alone(cluster: Cluster, controller: Controller) -> None:
    cluster.cancel_all()
    run("scontrol", "update", f"NodeName={WINDOW_NODE}", "State=DRAIN", "Reason=GPU 2 fails its health check")
    try:
        drained = controller.run(NEXT.end - SIGNAL_LEAD + timedelta(minutes=1), plans=(PLAN, NEXT))
        assert drained["left_alone"] == {WINDOW_NODE: "GPU 2 fails its health check"} and drained["changed"] is False
        resumed = controller.run(SERVING_NEXT, plans=(PLAN, NEXT))
        assert resumed["changed"] is False and resumed["resume"] == {}
        assert node(WINDOW_NODE) == ("drained", "GPU 2 fails its health check")
    finally:
        run("scontrol", "update", f"NodeName={WINDOW_NODE}", "State=RESUME")


def partition_nodes(name: str) -> list[str]:
    listed = run("sinfo", "--noheader", f"--partition={name}", "--format=%N").stdout.strip()
    return run("scontrol", "show", "hostnames", listed).stdout.split() if listed else []


def test_a_window_node_the_script_has_not_listed_joins_the_owners_partition_live(
    cluster: Cluster, controller: Controller
) -> None:
    """HyperPod brought gpu-3 after the governance script last ran (its node map lacks the
    window's group): the controller adds it to critical live, takes it out of another team's
    partition it was put in, and the script re-applied later keeps it."""
    cluster.cancel_all()
    window_map = cluster.node_map.read_text()
    fragment = (
        run("scontrol", "show", "config").stdout.split("SLURM_CONF", 1)[1].split("=", 1)[1].split()[0].rsplit("/", 1)[0]
        + "/gpu-governance.conf"
    )
    try:
        cluster.node_map.write_text(
            "".join(line for line in window_map.splitlines(keepends=True) if WINDOW_NODE not in line)
        )
        assert "instance group critical-window has no nodes" in cluster.apply(window_model()).output
        run(
            "scontrol", "reconfigure"
        )  # HyperPod restarts slurmctld when it adds nodes: critical is the fragment's again
        run(
            "scontrol", "update", "PartitionName=steady", f"Nodes=gpu-2,{WINDOW_NODE}"
        )  # an admin's slip, or a stale script
        assert WINDOW_NODE not in partition_nodes("critical") and WINDOW_NODE in partition_nodes("steady")

        serving = PLAN.start + timedelta(hours=3)
        joined = controller.run(serving)
        assert (joined["join"], joined["leave"]) == ({"done": ["critical"]}, {"done": ["steady"]})
        assert (partition_nodes("critical"), partition_nodes("steady")) == (["gpu-1", WINDOW_NODE], ["gpu-2"])
        assert (
            cluster.wait_running(submit("alice", node_name=WINDOW_NODE)).nodes == WINDOW_NODE
        )  # the owner's job runs there
        refused = run(
            "runuser",
            "-u",
            "bob",
            "--",
            "sbatch",
            "--account=steady",
            "--partition=steady",
            "--qos=steady.standard",
            f"--nodelist={WINDOW_NODE}",
            "--gres=gpu:4",
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            "sleep 600",
            check=False,
        )
        assert refused.returncode != 0, refused.stdout  # another team cannot reach it
        assert controller.run(serving + timedelta(minutes=5))["changed"] is False  # a repeated run changes nothing

        # slurmctld re-reads slurm.conf: the live addition is gone, the next run puts it back.
        run("scontrol", "reconfigure")
        assert WINDOW_NODE not in partition_nodes("critical")
        assert controller.run(serving + timedelta(minutes=10))["join"] == {"done": ["critical"]}

        # The governance script rewrites its fragment (here: someone edited it) and keeps the node it does not map.
        with open(fragment, "a") as file:
            file.write("# edited by hand\n")
        applied = cluster.apply(window_model())
        assert f"keep nodes outside the node map in partition critical: Nodes=gpu-1,{WINDOW_NODE}" in applied.output
        assert partition_nodes("critical") == ["gpu-1", WINDOW_NODE] and WINDOW_NODE not in partition_nodes("steady")
        assert controller.run(serving + timedelta(minutes=15))["changed"] is False
        assert cluster.apply(window_model()).changed == 0  # nor does the script, run again
        statuses = sorted(
            (action.split("#")[0], status)
            for action, status, _ in controller.ledger.actions("slurm-", ("calling", "done", "failed"))
            if action.startswith(("slurm-join", "slurm-leave"))
        )
        assert statuses == [("slurm-join", "done"), ("slurm-join", "done"), ("slurm-leave", "done")]
    finally:
        cluster.cancel_all()
        cluster.node_map.write_text(window_map)
        cluster.apply(window_model())
        assert (partition_nodes("critical"), partition_nodes("steady")) == (["gpu-1", WINDOW_NODE], ["gpu-2"])
