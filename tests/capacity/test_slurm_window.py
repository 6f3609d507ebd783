"""The nodes a training plan brings to a HyperPod Slurm pool: drained ``requeue.SIGNAL_LEAD`` before the
plan ends, their jobs requeued ``requeue.STOP_LEAD`` before it, resumed when the next plan is active;
recorded, idempotent, put right by the next run after a crash or a throttled call; an admin's
drain left alone; dry run only reads. SageMaker and SSM through Stubber with full response shapes
(moto lacks ListClusterNodes), the ledger on moto's DynamoDB. What the shell commands do on a real
Slurm is shown in tests/slurm/test_capacity_window_nodes.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity import slurm_window
from gpu_governance_runtime.capacity.requeue import SIGNAL_LEAD, STOP_LEAD
from gpu_governance_runtime.planners.market import SCHEDULE_LIMIT, TERMINATION_LEAD

from .builders import at, reservation, window
from .stubbed_aws import create_ledger_table

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
HEAD = "i-0123456789abcdef0"
GROUP = "critical-window"
TYPE = "ml.g5.12xlarge"
WINDOW = window(
    name="release-warmup",
    team="critical",
    market="training_plan",
    instance_type=TYPE,
    mode="auto",
    consumer={
        "kind": "hyperpod_instance_group",
        "pool": "research-slurm",
        "instance_group": GROUP,
        "cluster_arn": CLUSTER,
    },
)
PLAN = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/warmup-1",
    at(10),
    1,
    state="active",
    count=2,
    window_name=WINDOW.name,
)
NEXT = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/warmup-2",
    at(12),
    1,
    state="active",
    count=2,
    window_name=WINDOW.name,
)
SERVING, DRAINING, REQUEUEING = (
    PLAN.start + timedelta(hours=2),
    PLAN.end - SIGNAL_LEAD + timedelta(minutes=1),
    PLAN.end - timedelta(minutes=33),
)
LAUNCHED = datetime(2026, 12, 10, 11, 40, tzinfo=UTC)
NODES = {"i-0aaaaaaaaaaaaaaa1": "10.1.0.11", "i-0aaaaaaaaaaaaaaa2": "10.1.0.12", "i-0aaaaaaaaaaaaaaa3": "10.1.0.13"}
ADMIN_REASON = "bad GPU 3, ticket 4711"
OURS = f"{slurm_window.MARKER} {WINDOW.name} ends 2026-12-11T11:30Z"


def slurm_name(ip: str) -> str:
    return "ip-" + ip.replace(".", "-")


@pytest.fixture
def aws():
    with mock_aws():
        sagemaker, ssm = (
            boto3.client("sagemaker", region_name="us-east-1"),
            boto3.client("ssm", region_name="us-east-1"),
        )
        sent: list[list[str]] = []
        ssm.meta.events.register(
            "provide-client-params.ssm.SendCommand", lambda params, **_: sent.append(params["Parameters"]["commands"])
        )
        with Stubber(sagemaker) as sm_stub, Stubber(ssm) as ssm_stub:
            yield sagemaker, sm_stub, ssm, ssm_stub, sent, create_ledger_table()
            sm_stub.assert_no_pending_responses()
            ssm_stub.assert_no_pending_responses()


def summary(instance_id: str, ip: str, *, group: str = GROUP, status: str = "Running", with_host: bool = True) -> dict:
    node = {
        "InstanceGroupName": group,
        "InstanceId": instance_id,
        "NodeLogicalId": f"node-{instance_id}",
        "InstanceType": TYPE,
        "LaunchTime": LAUNCHED,
        "LastSoftwareUpdateTime": LAUNCHED,
        "InstanceStatus": {"Status": status, "Message": ""},
        "CurrentImageReleaseVersion": "2026.11.1",
        "ImageVersionStatus": "Current",
    }
    return {**node, "PrivateDnsHostname": f"{slurm_name(ip)}.ec2.internal"} if with_host else node


def cluster_lists(stub, *, with_host: bool = True) -> None:
    """The group's three nodes (one listed without a host name, as an older botocore parses it),
    a node of a group whose name only contains the window's, and one shutting down."""
    nodes = [summary(i, ip, with_host=with_host and n > 0) for n, (i, ip) in enumerate(NODES.items())]
    nodes += [
        summary("i-0bbbbbbbbbbbbbbb1", "10.1.9.1", group=f"{GROUP}-2"),
        summary("i-0bbbbbbbbbbbbbbb2", "10.1.9.2", status="ShuttingDown"),
    ]
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": nodes[:2], "NextToken": "page-2"},
        {"ClusterName": CLUSTER, "InstanceGroupNameContains": GROUP},
    )
    ((first_id, first_ip),) = list(NODES.items())[:1]
    stub.add_response(
        "describe_cluster_node",
        {
            "NodeDetails": {
                "InstanceGroupName": GROUP,
                "InstanceId": first_id,
                "NodeLogicalId": f"node-{first_id}",
                "InstanceStatus": {"Status": "Running", "Message": ""},
                "InstanceType": TYPE,
                "LaunchTime": LAUNCHED,
                "LastSoftwareUpdateTime": LAUNCHED,
                "LifeCycleConfig": {"SourceS3Uri": "s3://acme-lifecycle/slurm/", "OnCreate": "on_create.sh"},
                "ThreadsPerCore": 1,
                "PrivatePrimaryIp": first_ip,
                "PrivateDnsHostname": f"{slurm_name(first_ip)}.ec2.internal",
                "Placement": {"AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az1"},
                "CurrentImageId": "default",
                "DesiredImageId": "default",
                "CapacityType": "OnDemand",
            }
        },
        {"ClusterName": CLUSTER, "NodeId": first_id},
    )
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": nodes[2:]},
        {"ClusterName": CLUSTER, "InstanceGroupNameContains": GROUP, "NextToken": "page-2"},
    )


def ssm_answers(stub, output: str, *, status: str = "Success") -> None:
    command_id = str(uuid.uuid4())
    stub.add_response(
        "send_command",
        {
            "Command": {
                "CommandId": command_id,
                "DocumentName": "AWS-RunShellScript",
                "DocumentVersion": "$DEFAULT",
                "Comment": slurm_window.COMMENT,
                "Parameters": {"commands": ["..."]},
                "InstanceIds": [HEAD],
                "Targets": [],
                "RequestedDateTime": LAUNCHED,
                "Status": "Pending",
                "StatusDetails": "Pending",
                "MaxConcurrency": "50",
                "MaxErrors": "0",
                "TargetCount": 1,
                "CompletedCount": 0,
                "ErrorCount": 0,
                "DeliveryTimedOutCount": 0,
                "ServiceRole": "",
                "TimeoutSeconds": 3600,
            }
        },
        {
            "InstanceIds": [HEAD],
            "DocumentName": "AWS-RunShellScript",
            "Parameters": {"commands": ANY, "executionTimeout": ["60"]},
            "Comment": slurm_window.COMMENT,
            "TimeoutSeconds": 30,
        },
    )
    stub.add_response(
        "get_command_invocation",
        {
            "CommandId": command_id,
            "InstanceId": HEAD,
            "Comment": slurm_window.COMMENT,
            "DocumentName": "AWS-RunShellScript",
            "DocumentVersion": "$DEFAULT",
            "PluginName": "aws:runShellScript",
            "ResponseCode": 0 if status == "Success" else 1,
            "ExecutionStartDateTime": "2026-12-11T10:51:00Z",
            "ExecutionElapsedTime": "PT1.2S",
            "ExecutionEndDateTime": "2026-12-11T10:51:01Z",
            "Status": status,
            "StatusDetails": status,
            "StandardOutputContent": output,
            "StandardOutputUrl": "",
            "StandardErrorContent": "",
            "StandardErrorUrl": "",
        },
        {"CommandId": command_id, "InstanceId": HEAD},
    )


def slurm_shows(
    reasons: dict[int, str],
    *,
    jobs: dict[str, int] | None = None,
    partition: str = "critical",
    partitions: dict[int, list[str]] | None = None,
) -> str:
    """The read's output: node n (0-2) with its reason, in the owner's partition (or ``partitions[n]``) and the default one."""
    lines = []
    for n, ip in enumerate(NODES.values()):
        reason = reasons.get(n, "none")
        state = "idle" if reason == "none" else "drained"
        lines += [f"N|{slurm_name(ip)}|{state}|{p}|{reason}" for p in (partitions or {}).get(n, [partition]) + ["all*"]]
    lines += [f"J|{job}|{restarts}" for job, restarts in (jobs or {}).items()]
    return "\n".join(lines + [slurm_window.END]) + "\n"


def run(aws, now, *, plans=(PLAN,), mode="auto", head_nodes=None):
    sagemaker, _, ssm, _, _, ledger = aws
    return slurm_window.apply(
        windows={WINDOW.name: WINDOW.__class__(**{**WINDOW.__dict__, "mode": mode})},
        owned=list(plans),
        slurm_pools={"research-slurm": ["critical", "steady"]},
        head_nodes={"research-slurm": HEAD} if head_nodes is None else head_nodes,
        sagemaker=sagemaker,
        ssm=ssm,
        ledger=ledger,
        now=now,
        sleep=lambda s: None,
    )


def records(ledger):
    return [
        (action.split("@")[0], status, details)
        for action, status, details in ledger.actions("slurm-", ("calling", "done", "failed"))
    ]


NAMES = [slurm_name(ip) for ip in NODES.values()]


def test_at_lower_lead_nodes_without_a_reason_are_drained_and_an_admins_drain_is_left_alone(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({2: ADMIN_REASON}, jobs={"41": 0}))
    ssm_answers(ssm_stub, f"{NAMES[0]} drained\n{NAMES[1]} drained\n")
    (result,) = run(aws, DRAINING)
    assert (result["phase"], result["nodes"], result["drain"]) == ("drain", NAMES, {"done": NAMES[:2]})
    assert (
        result["left_alone"] == {NAMES[2]: ADMIN_REASON} and "requeue" not in result
    )  # jobs keep running until STOP_LEAD
    drain = sent[1]
    assert len(drain) == 2 and all(
        f"Reason='Reason={OURS}'" not in c and f"'Reason={OURS}'" in c and "State=DRAIN" in c for c in drain
    )
    assert records(ledger) == [
        (
            f"slurm-nodes#{CLUSTER}/{GROUP}",
            "done",
            {
                "drain": NAMES[:2],
                "window": WINDOW.name,
                "done": NAMES[:2],
                "skipped": {},
                "failed": [],
                "head_node": HEAD,
            },
        )
    ]


def test_near_the_end_jobs_still_running_are_requeued_only_as_read(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({0: OURS, 1: OURS, 2: ADMIN_REASON}, jobs={"41": 0, "42_3": 1}))
    ssm_answers(ssm_stub, "41 done\n42_3 now PENDING|2\n")
    (result,) = run(aws, REQUEUEING)
    assert (result["phase"], result["drain"]) == ("requeue", {})  # drained already: no drain command
    assert result["requeue"] == {"done": ["41"], "skipped": {"42_3": "now PENDING|2"}}
    assert (
        "= 'RUNNING|0' ]; then scontrol requeue 41" in sent[1][0]
        and "= 'RUNNING|1' ]; then scontrol requeue 42_3" in sent[1][1]
    )
    assert [(key, status) for key, status, _ in records(ledger)] == [(f"slurm-requeue#{CLUSTER}/{GROUP}", "done")]


def test_a_repeated_run_or_event_changes_nothing(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    for _ in range(2):
        cluster_lists(sm_stub)
        ssm_answers(ssm_stub, slurm_shows({0: OURS, 1: OURS, 2: ADMIN_REASON}))
        (result,) = run(aws, REQUEUEING)
        assert result["changed"] is False and "error" not in result
    assert len(sent) == 2 and records(ledger) == []  # two reads, no change


def test_a_crash_between_the_drain_and_its_record_is_put_right_by_the_next_run(aws, monkeypatch):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}))
    ssm_answers(ssm_stub, "".join(f"{n} drained\n" for n in NAMES))
    record = ledger.record_action

    def killed_after_the_call(action, *, status, **kwargs):
        if status == "done":
            raise SystemExit("function killed")
        record(action, status=status, **kwargs)

    monkeypatch.setattr(ledger, "record_action", killed_after_the_call)
    with pytest.raises(SystemExit):
        run(aws, DRAINING)
    monkeypatch.setattr(ledger, "record_action", record)
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({0: OURS, 1: OURS, 2: OURS}))
    (result,) = run(aws, DRAINING + timedelta(minutes=2))
    assert result["changed"] is False and result["left_alone"] == {} and len(sent) == 3  # read, drain; read
    assert [status for _, status, _ in records(ledger)] == ["calling"]  # recorded before the call; nothing sent twice


def test_a_throttled_or_failed_command_is_recorded_and_tried_again(aws):
    _, sm_stub, _, ssm_stub, _, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}))
    ssm_stub.add_client_error("send_command", service_error_code="ThrottlingException", http_status_code=400)
    (result,) = run(aws, DRAINING)
    assert "ThrottlingException" in result["error"] and result["changed"] is False
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}))
    ssm_answers(ssm_stub, "", status="Failed")
    (result,) = run(aws, DRAINING + timedelta(minutes=15))
    assert "Failed" in result["error"]
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}))
    ssm_answers(ssm_stub, "".join(f"{n} drained\n" for n in NAMES))
    (result,) = run(aws, DRAINING + timedelta(minutes=30))
    assert result["drain"] == {"done": NAMES} and "error" not in result
    assert [status for _, status, _ in records(ledger)] == ["failed", "failed", "done"]  # each call its own record


def test_the_next_plan_resumes_only_the_controllers_drains(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({0: OURS, 1: OURS, 2: ADMIN_REASON}))
    ssm_answers(
        ssm_stub, f"{NAMES[0]} resumed\n{NAMES[1]} now {ADMIN_REASON}\n"
    )  # an admin drained node 1 since the read
    (result,) = run(aws, NEXT.start + timedelta(minutes=10), plans=(PLAN, NEXT))
    assert (result["phase"], result["plan"]) == ("serve", NEXT.id)
    assert result["resume"] == {"done": [NAMES[0]], "skipped": {NAMES[1]: f"now {ADMIN_REASON}"}}
    assert len(sent[1]) == 2 and all("State=RESUME" in c and f"{slurm_window.MARKER}" in c for c in sent[1])
    assert [(status, details["resume"]) for _, status, details in records(ledger)] == [("done", NAMES[:2])]


def test_a_node_whose_scontrol_failed_is_reported_and_tried_again(aws):
    _, sm_stub, _, ssm_stub, _, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}))
    ssm_answers(ssm_stub, f"{NAMES[0]} drained\n{NAMES[2]} drained\n")  # node 1's scontrol failed: no answer line
    (result,) = run(aws, DRAINING)
    assert result["drain"] == {
        "done": [NAMES[0], NAMES[2]],
        "failed": [NAMES[1]],
        "error": f"drain failed for {[NAMES[1]]}",
    }
    assert result["error"] == f"drain failed for {[NAMES[1]]}" and records(ledger)[0][2]["failed"] == [NAMES[1]]
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({0: OURS, 2: OURS}))
    ssm_answers(ssm_stub, f"{NAMES[1]} drained\n")
    (result,) = run(aws, DRAINING + timedelta(minutes=15))
    assert result["drain"] == {"done": [NAMES[1]]} and "error" not in result


def test_nodes_missing_from_the_owners_partition_join_it_live_and_a_repeated_run_changes_nothing(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}, partitions={0: [], 1: ["dev"]}))  # HyperPod brought them after the script ran
    ssm_answers(ssm_stub, "critical done\n")
    (result,) = run(aws, SERVING)
    assert result["join"] == {"done": ["critical"]} and result["changed"] is True and "error" not in result
    (join,) = sent[1]
    assert "scontrol -o show partition critical" in join and f"-v ours={NAMES[0]},{NAMES[1]} -v join=1" in join
    assert 'scontrol update PartitionName=critical "Nodes=$new" && echo critical done' in join
    assert records(ledger) == [
        (
            f"slurm-join#{CLUSTER}/{GROUP}",
            "done",
            {
                "join": {"critical": NAMES[:2]},
                "window": WINDOW.name,
                "done": ["critical"],
                "skipped": {},
                "failed": [],
                "head_node": HEAD,
            },
        )
    ]
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}, partitions={0: ["critical"], 1: ["dev", "critical"]}))
    (result,) = run(aws, SERVING + timedelta(minutes=5))
    assert result["changed"] is False and "join" not in result and len(sent) == 3 and len(records(ledger)) == 1


def test_a_join_found_done_since_the_read_is_skipped_and_nodes_are_joined_only_while_serving(aws):
    _, sm_stub, _, ssm_stub, _, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}, partitions={2: []}))
    ssm_answers(ssm_stub, "critical now has them\n")  # the governance script listed it since the read
    (result,) = run(aws, SERVING)
    assert result["join"] == {"done": [], "skipped": {"critical": "now has them"}} and result["changed"] is False
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}, partitions={2: []}))
    ssm_answers(ssm_stub, "".join(f"{n} drained\n" for n in NAMES))
    (result,) = run(aws, DRAINING)  # about to go: drained, not handed to the owner
    assert "join" not in result and result["drain"] == {"done": NAMES}


def test_a_node_in_borrow_or_another_teams_partition_is_taken_out_in_any_phase(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    # Node 0 also in borrow, node 1 in steady's partition, node 2 in a partition governance does not make.
    ssm_answers(
        ssm_stub,
        slurm_shows(
            {0: OURS, 1: OURS, 2: OURS},
            partitions={0: ["critical", "borrow"], 1: ["critical", "steady"], 2: ["critical", "dev"]},
        ),
    )
    ssm_answers(ssm_stub, "borrow done\nsteady done\n")
    (result,) = run(aws, REQUEUEING)
    assert result["leave"] == {"done": ["borrow", "steady"]} and result["changed"] is True
    borrow, steady = sent[1]
    assert f"-v ours={NAMES[0]} -v join=0" in borrow and "PartitionName=borrow" in borrow
    assert (
        f"-v ours={NAMES[1]} -v join=0" in steady and "PartitionName=steady" in steady and "dev" not in borrow + steady
    )
    assert records(ledger)[0][:2] == (f"slurm-leave#{CLUSTER}/{GROUP}", "done")
    assert records(ledger)[0][2]["leave"] == {"borrow": [NAMES[0]], "steady": [NAMES[1]]}


def test_dry_run_reads_and_reports_without_changing(aws):
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({2: ADMIN_REASON}, jobs={"41": 0}))
    (result,) = run(aws, REQUEUEING, mode="dry_run")
    assert result["drain"] == {"would_drain": NAMES[:2]} and result["requeue"] == {"would_requeue": ["41"]}
    assert len(sent) == 1 and "scontrol" not in "\n".join(sent[0]) and records(ledger) == []
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}, partitions={0: ["borrow"]}))
    (result,) = run(aws, SERVING, mode="dry_run")
    assert result["join"] == {"would_join": {"critical": [NAMES[0]]}} and result["leave"] == {
        "would_leave": {"borrow": [NAMES[0]]}
    }
    assert len(sent) == 2 and "scontrol" not in "\n".join(sent[1]) and records(ledger) == []


def test_without_an_active_plan_nothing_is_called(aws):
    assert run(aws, PLAN.end + timedelta(minutes=5)) == [
        {"pool": "research-slurm", "instance_group": GROUP, "windows": [WINDOW.name], "phase": "idle", "changed": False}
    ]


def test_a_pool_without_a_head_node_is_an_error_not_a_crash(aws):
    (result,) = run(aws, DRAINING, head_nodes={})
    assert "no head node for Slurm pool research-slurm" in result["error"]


def test_a_read_cut_short_is_not_acted_on(aws):
    _, sm_stub, _, ssm_stub, sent, _ = aws
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, slurm_shows({}).replace(slurm_window.END, ""))
    (result,) = run(aws, DRAINING)
    assert "cut short" in result["error"] and len(sent) == 1


def test_a_hostile_host_name_never_reaches_the_shell(aws):
    _, sm_stub, _, _, sent, _ = aws
    sm_stub.add_response(
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                {**summary("i-0aaaaaaaaaaaaaaa1", "10.1.0.11"), "PrivateDnsHostname": "ip-1;reboot"}
            ]
        },
        {"ClusterName": CLUSTER, "InstanceGroupNameContains": GROUP},
    )
    (result,) = run(aws, DRAINING)
    assert "unsafe Slurm identifier" in result["error"] and sent == []


@pytest.mark.parametrize(
    "now, expected",
    [
        (PLAN.start - timedelta(minutes=1), "idle"),
        (PLAN.start, "serve"),
        (PLAN.end - SIGNAL_LEAD - timedelta(seconds=1), "serve"),
        (PLAN.end - SIGNAL_LEAD, "drain"),
        (PLAN.end - STOP_LEAD, "requeue"),
        (PLAN.end, "idle"),
    ],
)
def test_phases(now, expected):
    assert slurm_window.phase(slurm_window.current_plan([PLAN], [WINDOW.name], now), now) == expected


@pytest.mark.parametrize("offset_seconds", range(0, int(SCHEDULE_LIMIT.total_seconds()), 20))
def test_runs_every_schedule_limit_drain_then_requeue_twice_before_the_instances_go(offset_seconds):
    """Whatever the runs' phase against the plan: one run drains before STOP_LEAD and two
    requeue before the termination (TERMINATION_LEAD before the end), so one failed run leaves one."""
    first = PLAN.end - timedelta(hours=1) + timedelta(seconds=offset_seconds)
    runs = [first + n * SCHEDULE_LIMIT for n in range(20)]
    phases = {t: slurm_window.phase(slurm_window.current_plan([PLAN], [WINDOW.name], t), t) for t in runs}
    assert any(p == "drain" for p in phases.values())
    assert sum(p == "requeue" and t < PLAN.end - TERMINATION_LEAD for t, p in phases.items()) == 2
    assert timedelta(minutes=5) == SCHEDULE_LIMIT  # the construct's rate is whole minutes


@pytest.mark.parametrize("failure", ["throttled", "crashed"])
def test_a_failed_first_requeue_run_leaves_a_second_before_the_nodes_go(aws, monkeypatch, failure):
    """Issue 23: the jobs are requeued from requeue.STOP_LEAD (40 minutes), not 35, so with runs
    SCHEDULE_LIMIT apart two land before the instances go (TERMINATION_LEAD): the first run there
    is throttled on SendCommand or dies before it, and the next still requeues the job, whole,
    instead of letting it go down with its node."""
    _, sm_stub, _, ssm_stub, sent, ledger = aws
    first = PLAN.end - STOP_LEAD + timedelta(minutes=1)  # the first scheduled run in the window
    second = first + SCHEDULE_LIMIT
    assert second < PLAN.end - TERMINATION_LEAD
    drained = slurm_shows({0: OURS, 1: OURS, 2: OURS}, jobs={"41": 0})
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, drained)
    if failure == "throttled":
        ssm_stub.add_client_error("send_command", service_error_code="ThrottlingException", http_status_code=400)
        (result,) = run(aws, first)
        assert result["phase"] == "requeue" and "ThrottlingException" in result["error"]
    else:
        record = ledger.record_action

        def killed_before_the_requeue(action, *, status, **kwargs):
            if action.startswith("slurm-requeue#"):
                raise SystemExit("function killed")
            record(action, status=status, **kwargs)

        monkeypatch.setattr(ledger, "record_action", killed_before_the_requeue)
        with pytest.raises(SystemExit):
            run(aws, first)
        monkeypatch.setattr(ledger, "record_action", record)
    cluster_lists(sm_stub)
    ssm_answers(ssm_stub, drained)
    ssm_answers(ssm_stub, "41 done\n")
    (result,) = run(aws, second)
    assert result["phase"] == "requeue" and result["requeue"] == {"done": ["41"]} and "error" not in result
    assert "= 'RUNNING|0' ]; then scontrol requeue 41" in sent[-1][0]
