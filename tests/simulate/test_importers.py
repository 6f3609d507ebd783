"""The history importers (sacct, Batch, Kueue) on recorded output, and `trace from-*` end to end.
tests/slurm/test_sacct_import.py runs the sacct importer on the real local Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.simulator import read_trace
from constructs_lib.simulator.importers import NOT_FINISHED, ImportOptions, from_batch, from_kueue, from_sacct

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = str(ROOT / "constructs_lib" / "data" / "default-governance.yaml")

G5 = "ml.g5.xlarge"
OPTIONS = ImportOptions(
    instance_type=G5, priorities={"low": 10, "borrow": 0, "urgent": 90}, checkpointable_teams=frozenset({"burst"})
)

# Recorded from the local Slurm (TZ=UTC sacct --allusers --allocations --parsable2 --format=...),
# plus a job step, a pending job and a running one, which are skipped.
SACCT = """JobID|Account|QOS|Submit|Start|End|NNodes|TimelimitRaw|State
12|burst|burst.low|2026-12-01T00:04:57|2026-12-01T00:05:07|2026-12-01T01:05:07|2|120|COMPLETED
12.batch|burst||2026-12-01T00:05:07|2026-12-01T00:05:07|2026-12-01T01:05:07|1||COMPLETED
13|steady|steady.urgent|2026-12-01T00:04:59|2026-12-01T00:05:00|2026-12-01T00:15:00|1|UNLIMITED|CANCELLED by 0
14|steady|steady.low|2026-12-01T00:06:00|Unknown|Unknown|1|60|PENDING
15|burst|burst.borrow|2026-12-01T00:07:00|2026-12-01T00:07:01|Unknown|1|Partition_Limit|RUNNING
"""


def test_sacct_finished_allocations_become_trace_jobs(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(SACCT)
    imported = from_sacct(path, OPTIONS)
    assert imported.skipped == {
        "job step (sacct --allocations leaves them out)": ("12.batch",),
        NOT_FINISHED: ("14", "15"),
    }
    assert imported.guessed == {f"instance type {G5} (--instance-type)": ("12", "13")}  # sacct names none
    jobs = {j.job_id: j for j in imported.jobs}
    assert set(jobs) == {"12", "13"}
    assert (
        jobs["12"].team,
        jobs["12"].count,
        jobs["12"].duration,
        jobs["12"].priority,
        jobs["12"].checkpointable,
        jobs["12"].max_run_time,
    ) == ("burst", 2, 3_600, 10, True, 7_200)
    assert (jobs["13"].submit_time, jobs["13"].priority, jobs["13"].max_run_time, jobs["13"].checkpointable) == (
        2.0,
        90,
        None,
        False,
    )
    assert jobs["12"].submit_time == 0.0  # times from the earliest submission


def test_sacct_errors_name_the_line_and_the_fields(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Account\n1|a\n")
    with pytest.raises(GovernanceError, match=r"sacct.txt:1: not sacct --parsable2 output .*\('QOS,Submit"):
        from_sacct(path, OPTIONS)
    path.write_text(SACCT.replace("|2|120|", "|two|120|"))
    with pytest.raises(GovernanceError, match=r"sacct.txt:2: unreadable sacct row"):
        from_sacct(path, OPTIONS)


# Issue 31: slurmdbd prints QoS Unknown for a job whose QoS id it does not know (a record written
# while it restarted, a QoS deleted since); another row's QoS is a class --priority does not name.
UNCLASSIFIED = (
    SACCT
    + """16|steady|Unknown|2026-12-01T00:08:00|2026-12-01T00:08:00|2026-12-01T00:38:00|1|60|COMPLETED
17|burst|burst.gold|2026-12-01T00:09:00|2026-12-01T00:09:00|2026-12-01T00:19:00|1|60|COMPLETED
18|steady|Unknown|2026-12-01T00:10:00|2026-12-01T00:10:00|2026-12-01T00:40:00|2|60|COMPLETED
"""
)


def test_sacct_rows_of_an_unknown_or_unmapped_qos_are_skipped_and_named_the_rest_imported(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(UNCLASSIFIED)
    imported = from_sacct(path, OPTIONS)
    assert [j.job_id for j in imported.jobs] == ["12", "13"]
    assert imported.skipped == {
        "job step (sacct --allocations leaves them out)": ("12.batch",),
        NOT_FINISHED: ("14", "15"),
        "with priority class 'Unknown' that --priority does not map (map it: --priority Unknown=N)": ("16", "18"),
        "with priority class 'gold' that --priority does not map (map it: --priority gold=N)": ("17",),
    }


def test_sacct_unknown_qos_is_imported_with_an_explicit_priority(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(UNCLASSIFIED)
    imported = from_sacct(
        path, ImportOptions(instance_type=G5, priorities={**OPTIONS.priorities, "Unknown": 5, "gold": 70})
    )
    jobs = {j.job_id: j for j in imported.jobs}
    assert {j: (jobs[j].team, jobs[j].priority, jobs[j].count) for j in ("16", "17", "18")} == {
        "16": ("steady", 5, 1),
        "17": ("burst", 70, 1),
        "18": ("steady", 5, 2),
    }
    assert set(imported.skipped) == {"job step (sacct --allocations leaves them out)", NOT_FINISHED}


def test_trace_from_sacct_says_in_one_line_what_it_skipped(tmp_path, capsys):
    source, output = tmp_path / "sacct.txt", tmp_path / "trace.csv"
    source.write_text(UNCLASSIFIED)
    priorities = ["--priority", "low=10", "--priority", "urgent=90", "--priority", "borrow=0"]
    assert main(["trace", "from-sacct", str(source), str(output), "--instance-type", G5, *priorities]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"wrote 2 jobs to {output}; skipped 6 records: 1 job step (sacct --allocations leaves them out) [12.batch]; "
        f"2 {NOT_FINISHED} [14, 15]; 2 with priority class 'Unknown' that --priority does not map (map it: --priority Unknown=N) [16, 18]; "
        "1 with priority class 'gold' that --priority does not map (map it: --priority gold=N) [17]; "
        f"guessed 2 records: 2 instance type {G5} (--instance-type) [12, 13]"
    )
    assert [j.job_id for j in read_trace(output)] == ["12", "13"]
    assert (
        main(
            [
                "trace",
                "from-sacct",
                str(source),
                str(output),
                "--instance-type",
                G5,
                *priorities,
                "--priority",
                "Unknown=0",
                "--priority",
                "gold=50",
            ]
        )
        == 0
    )
    assert "priority class" not in capsys.readouterr().err
    assert [j.job_id for j in read_trace(output)] == ["12", "13", "16", "17", "18"]


# Shapes from botocore's batch model: ListJobs pages (JobSummary), DescribeJobs (JobDetail),
# DescribeServiceJob (one object); times are epoch milliseconds.
LIST_JOBS = {
    "jobSummaryList": [
        {
            "jobArn": "arn:aws:batch:us-east-1:1:job/a",
            "jobId": "a",
            "jobName": "train",
            "createdAt": 1_000_000,
            "status": "SUCCEEDED",
            "startedAt": 1_060_000,
            "stoppedAt": 4_660_000,
            "nodeProperties": {"numNodes": 4},
        },
        {"jobId": "b", "jobName": "queued", "createdAt": 1_100_000, "status": "RUNNABLE"},
    ],
    "nextToken": "t1",
}
DESCRIBE_JOBS = {
    "jobs": [
        {
            "jobId": "a",
            "jobName": "train",
            "jobQueue": "q",
            "status": "SUCCEEDED",
            "shareIdentifier": "vision",
            "schedulingPriority": 50,
            "createdAt": 1_000_000,
            "startedAt": 1_060_000,
            "stoppedAt": 4_660_000,
            "timeout": {"attemptDurationSeconds": 7200},
            "tags": {"gpu-governance:checkpointable": "true"},
            "jobDefinition": "d",
        },
    ]
}
DESCRIBE_SERVICE_JOB = {
    "jobId": "s",
    "jobName": "sm",
    "jobQueue": "q",
    "createdAt": 1_200_000,
    "startedAt": 1_200_000,
    "stoppedAt": 1_800_000,
    "status": "SUCCEEDED",
    "shareIdentifier": "nlp",
    "quotaShareName": "nlp-share",
    "schedulingPriority": 10,
    "serviceJobType": "SAGEMAKER_TRAINING",
    "timeoutConfig": {"attemptDurationSeconds": 900},
    "capacityUsage": [{"capacityUnit": "ml.p5.48xlarge", "quantity": 2.0}],
    "tags": {"gpu-governance:instances": "2", "gpu-governance:instance-type": "ml.p5.48xlarge"},
}


def test_batch_pages_are_merged_by_job_id(tmp_path):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps([LIST_JOBS, DESCRIBE_JOBS, DESCRIBE_SERVICE_JOB]))
    imported = from_batch(path, OPTIONS)
    assert imported.skipped == {NOT_FINISHED: ("b",)}
    assert imported.guessed == {f"instance type {G5} (--instance-type)": ("a",)}  # a compute job names no type
    a, s = imported.jobs
    assert (a.job_id, a.team, a.count, a.duration, a.priority, a.checkpointable, a.max_run_time, a.instance_type) == (
        "a",
        "vision",
        4,
        3_600,
        50,
        True,
        7_200,
        G5,
    )
    assert (s.job_id, s.team, s.count, s.instance_type, s.submit_time, s.max_run_time, s.checkpointable) == (
        "s",
        "nlp-share",
        2,
        "ml.p5.48xlarge",
        200.0,
        900,
        False,
    )
    path.write_text(json.dumps({"items": []}))
    with pytest.raises(GovernanceError, match="not a Batch response"):
        from_batch(path, OPTIONS)


# Issue 26: real service-job records, as ListServiceJobs (ServiceJobSummary: no priority, no tags)
# and DescribeServiceJob return them; for service jobs capacityUsage is in the instance type.
# A compute job's capacityUsage is in vCPUs; an older record's in NUM_INSTANCES; a FIFO queue's
# job has no share. Each is checked against botocore's model below.
LIST_SERVICE_JOBS = {
    "jobSummaryList": [
        {
            "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/p4",
            "jobId": "p4",
            "jobName": "pretrain",
            "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "research",
            "shareIdentifier": "research",
            "status": "SUCCEEDED",
            "statusReason": "Succeeded",
            "isTerminated": False,
            "createdAt": 1_000_000,
            "scheduledAt": 1_030_000,
            "startedAt": 1_060_000,
            "stoppedAt": 4_660_000,
            "capacityUsage": [{"capacityUnit": "ml.p5.48xlarge", "quantity": 4.0}],
            "latestAttempt": {
                "serviceResourceId": {
                    "name": "TrainingJobArn",
                    "value": "arn:aws:sagemaker:us-east-1:111122223333:training-job/pretrain",
                }
            },
        },
        {
            "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/old",
            "jobId": "old",
            "jobName": "older",
            "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "research",
            "status": "SUCCEEDED",
            "createdAt": 1_100_000,
            "startedAt": 1_100_000,
            "stoppedAt": 1_700_000,
            "capacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": 2.0}],
        },
    ]
}
DESCRIBE_SERVICE_JOB_P8 = {
    "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/p8",
    "jobId": "p8",
    "jobName": "finetune",
    "jobQueue": "sagemaker-training",
    "serviceJobType": "SAGEMAKER_TRAINING",
    "quotaShareName": "training",
    "shareIdentifier": "training",
    "schedulingPriority": 90,
    "status": "SUCCEEDED",
    "statusReason": "Succeeded",
    "isTerminated": False,
    "createdAt": 1_200_000,
    "scheduledAt": 1_210_000,
    "startedAt": 1_260_000,
    "stoppedAt": 2_460_000,
    "capacityUsage": [{"capacityUnit": "ml.p5.48xlarge", "quantity": 8.0}],
    "timeoutConfig": {"attemptDurationSeconds": 3_600},
    "retryStrategy": {"attempts": 1},
    "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 2},
    "tags": {"owner": "training"},
    "serviceRequestPayload": json.dumps(
        {
            "TrainingJobName": "finetune",
            "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 8, "VolumeSizeInGB": 100},
        }
    ),
}
COMPUTE_JOBS = {
    "jobSummaryList": [
        {
            "jobArn": "arn:aws:batch:us-east-1:111122223333:job/c",
            "jobId": "c",
            "jobName": "eval",
            "shareIdentifier": "research",
            "status": "SUCCEEDED",
            "createdAt": 1_300_000,
            "startedAt": 1_300_000,
            "stoppedAt": 1_900_000,
            "capacityUsage": [{"capacityUnit": "VCPU", "quantity": 96.0}],
        },
        {
            "jobArn": "arn:aws:batch:us-east-1:111122223333:job/fifo",
            "jobId": "fifo",
            "jobName": "fifo",
            "status": "SUCCEEDED",
            "createdAt": 1_300_000,
            "startedAt": 1_300_000,
            "stoppedAt": 1_900_000,
        },
    ]
}


def test_batch_fixtures_are_the_shapes_botocore_returns():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:  # add_response checks each response against the service model
        stub.add_response("list_service_jobs", LIST_SERVICE_JOBS)
        stub.add_response("describe_service_job", DESCRIBE_SERVICE_JOB_P8)
        stub.add_response("list_jobs", COMPUTE_JOBS)


def test_batch_service_jobs_take_type_and_count_from_capacity_usage_and_say_what_was_guessed(tmp_path):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps([LIST_SERVICE_JOBS, DESCRIBE_SERVICE_JOB_P8, COMPUTE_JOBS]))
    imported = from_batch(path, OPTIONS)
    jobs = {j.job_id: (j.team, j.instance_type, j.count, j.priority, j.max_run_time) for j in imported.jobs}
    assert jobs == {
        "p4": ("research", "ml.p5.48xlarge", 4, 0, None),
        "old": ("research", G5, 2, 0, None),
        "p8": ("training", "ml.p5.48xlarge", 8, 90, 3_600),
        "c": ("research", G5, 1, 0, None),
    }
    assert imported.skipped == {"without a share (no quotaShareName or shareIdentifier)": ("fifo",)}
    assert imported.guessed == {
        "priority 0 (no schedulingPriority: add the Describe responses)": ("p4", "old", "c"),
        f"instance type {G5} (--instance-type)": ("old", "c"),
        "instance count 1": ("c",),
    }


def test_trace_from_batch_of_service_jobs_replays_in_the_pool(tmp_path, capsys):
    source, output = tmp_path / "batch.json", tmp_path / "trace.csv"
    source.write_text(json.dumps([LIST_SERVICE_JOBS["jobSummaryList"][0], DESCRIBE_SERVICE_JOB_P8]))
    assert main(["trace", "from-batch", str(source), str(output), "--instance-type", "ml.g6e.12xlarge"]) == 0
    assert capsys.readouterr().err.strip() == (
        f"wrote 2 jobs to {output}; guessed 1 record: "
        "1 priority 0 (no schedulingPriority: add the Describe responses) [p4]"
    )
    assert [(j.team, j.count) for j in read_trace(output)] == [("research", 4), ("training", 8)]
    assert (
        main(["simulate", "--config", DEFAULT_CONFIG, "--pool", "sagemaker-training", "--trace", str(output), "--json"])
        == 0
    )


def workload(
    name,
    queue,
    created,
    admitted,
    finished,
    pods,
    priority=None,
    finished_status="True",
    namespace="team-a",
    assignments=(),
    **spec,
):
    conditions = [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted}]
    if finished:
        conditions.append({"type": "Finished", "status": finished_status, "lastTransitionTime": finished})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": []}}}],
            **({"priority": priority} if priority is not None else {}),
            **spec,
        },
        "status": {
            "admission": {"clusterQueue": queue, "podSetAssignments": list(assignments)},
            "conditions": conditions,
        },
    }


def assigned(flavor, pods, gpus_per_pod=8):
    """A pod set's admission as Kueue v1beta1 writes it (PodSetAssignment): the flavor of each resource."""
    return {
        "name": "main",
        "flavors": {"cpu": flavor, "memory": flavor, "nvidia.com/gpu": flavor},
        "resourceUsage": {
            "cpu": str(96 * pods),
            "memory": f"{1000 * pods}Gi",
            "nvidia.com/gpu": str(gpus_per_pod * pods),
        },
        "count": pods,
    }


# HyperPod task governance: namespace hyperpod-ns-<team>, ClusterQueue hyperpod-ns-<team>-clusterqueue,
# ResourceFlavors named after the instance type.
HYPERPOD_WORKLOADS = [
    workload(
        "pretrain",
        "hyperpod-ns-research-clusterqueue",
        "2026-11-01T00:00:00Z",
        "2026-11-01T00:00:30Z",
        "2026-11-01T01:00:30Z",
        2,
        priority=10,
        namespace="hyperpod-ns-research",
        assignments=[assigned("ml.p5.48xlarge", 2)],
    ),
    # admitted with fewer pods than asked (partial admission): the admitted count is what ran
    workload(
        "sweep",
        "shared-cq",
        "2026-11-01T00:05:00Z",
        "2026-11-01T00:05:00Z",
        "2026-11-01T00:35:00Z",
        4,
        priority=50,
        namespace="hyperpod-ns-training",
        assignments=[assigned("ml.g6e.48xlarge", 3)],
    ),
]


def test_kueue_workloads_map_queue_or_namespace_to_the_team_and_flavor_to_the_instance_type(tmp_path):
    path = tmp_path / "wl.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": HYPERPOD_WORKLOADS}))
    imported = from_kueue(path, OPTIONS)
    assert [(j.job_id, j.team, j.instance_type, j.count) for j in imported.jobs] == [
        ("hyperpod-ns-research/pretrain", "research", "ml.p5.48xlarge", 2),
        ("hyperpod-ns-training/sweep", "training", "ml.g6e.48xlarge", 3),
    ]
    assert (imported.skipped, imported.guessed) == ({}, {})


def test_trace_from_kueue_replays_in_the_hyperpod_pool(tmp_path, capsys):
    source, output = tmp_path / "wl.json", tmp_path / "trace.csv"
    source.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": HYPERPOD_WORKLOADS}))
    assert main(["trace", "from-kueue", str(source), str(output), "--instance-type", G5]) == 0
    assert capsys.readouterr().err.strip() == f"wrote 2 jobs to {output}"
    assert (
        main(["simulate", "--config", DEFAULT_CONFIG, "--pool", "hyperpod-eks", "--trace", str(output), "--json"]) == 0
    )


def test_kueue_finished_workloads_become_trace_jobs(tmp_path):
    items = [
        workload(
            "w1",
            "cq-vision",
            "2026-11-01T00:00:00Z",
            "2026-11-01T00:01:00Z",
            "2026-11-01T02:01:00Z",
            4,
            priority=100,
            maximumExecutionTimeSeconds=10_800,
        ),
        workload(
            "w2",
            "cq-burst",
            "2026-11-01T00:10:00Z",
            "2026-11-01T00:10:00Z",
            "2026-11-01T00:20:00Z",
            1,
            priorityClassName="low",
        ),
        workload("running", "cq-burst", "2026-11-01T00:10:00Z", "2026-11-01T00:10:00Z", None, 1),
    ]
    path = tmp_path / "wl.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    imported = from_kueue(path, OPTIONS)
    assert imported.skipped == {NOT_FINISHED: ("team-a/running",)}
    assert imported.guessed == {  # not task governance's names, and no flavor assigned
        "team = ClusterQueue name (neither it nor the namespace is hyperpod-ns-<team>-clusterqueue / hyperpod-ns-<team> "
        "or gpu-team-<team>-clusterqueue / gpu-team-<team>)": (
            "team-a/w1",
            "team-a/w2",
        ),
        f"instance type {G5} (--instance-type)": ("team-a/w1", "team-a/w2"),
    }
    w1, w2 = imported.jobs
    assert (w1.job_id, w1.team, w1.count, w1.duration, w1.priority, w1.max_run_time) == (
        "team-a/w1",
        "cq-vision",
        4,
        7_200,
        100,
        10_800,
    )
    assert (w2.submit_time, w2.priority) == (600.0, 10)
    path.write_text(json.dumps({"kind": "List", "items": [{"kind": "Pod"}]}))
    with pytest.raises(GovernanceError, match=r"items\[0\]: unreadable Workload"):
        from_kueue(path, OPTIONS)


def test_trace_from_sacct_cli_writes_a_trace_the_simulator_reads(tmp_path, capsys):
    source, output = tmp_path / "sacct.txt", tmp_path / "trace.csv"
    source.write_text(SACCT)
    assert (
        main(
            [
                "trace",
                "from-sacct",
                str(source),
                str(output),
                "--instance-type",
                G5,
                "--priority",
                "low=10",
                "--priority",
                "urgent=90",
                "--priority",
                "borrow=0",
            ]
        )
        == 0
    )
    assert "wrote 2 jobs" in capsys.readouterr().err
    assert [j.max_run_time for j in read_trace(output)] == [7_200, None]
    assert main(["trace", "from-sacct", str(source), str(output), "--instance-type", G5, "--priority", "low"]) == 2
    assert "--priority: not CLASS=N ('low')" in capsys.readouterr().err


# Issue 23: jobs the reclaim controller never preempts (batch_copy.restartable), as DescribeJobs
# returns them: an array job's child, a multi-container ECS job, a job another record depends on.
NOT_RESTARTABLE_JOBS = {
    "jobs": [
        {
            "jobId": "arr:0",
            "jobName": "sweep",
            "jobQueue": "q",
            "status": "SUCCEEDED",
            "shareIdentifier": "research",
            "schedulingPriority": 10,
            "createdAt": 1_000_000,
            "startedAt": 1_000_000,
            "stoppedAt": 1_600_000,
            "jobDefinition": "d",
            "arrayProperties": {"index": 0},
        },
        {
            "jobId": "ecs",
            "jobName": "multi",
            "jobQueue": "q",
            "status": "SUCCEEDED",
            "shareIdentifier": "research",
            "schedulingPriority": 10,
            "createdAt": 1_000_000,
            "startedAt": 1_000_000,
            "stoppedAt": 1_600_000,
            "jobDefinition": "d",
            "ecsProperties": {
                "taskProperties": [{"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}]
            },
        },
        {
            "jobId": "prep",
            "jobName": "prep",
            "jobQueue": "q",
            "status": "SUCCEEDED",
            "shareIdentifier": "research",
            "schedulingPriority": 10,
            "createdAt": 1_000_000,
            "startedAt": 1_000_000,
            "stoppedAt": 1_600_000,
            "jobDefinition": "d",
        },
        {
            "jobId": "train",
            "jobName": "train",
            "jobQueue": "q",
            "status": "SUCCEEDED",
            "shareIdentifier": "research",
            "schedulingPriority": 10,
            "createdAt": 1_000_000,
            "startedAt": 1_700_000,
            "stoppedAt": 2_600_000,
            "jobDefinition": "d",
            "dependsOn": [{"jobId": "prep", "type": "SEQUENTIAL"}],
        },
    ]
}


def test_batch_jobs_the_controller_never_preempts_are_imported_not_restartable(tmp_path):
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response("describe_jobs", NOT_RESTARTABLE_JOBS)  # the shapes botocore returns
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(NOT_RESTARTABLE_JOBS))
    imported = from_batch(path, OPTIONS)
    assert {j.job_id: j.restartable for j in imported.jobs} == {
        "arr:0": False,
        "ecs": False,
        "prep": False,
        "train": True,
    }
    # and the column survives the trace file
    assert main(["trace", "from-batch", str(path), str(tmp_path / "t.csv"), "--instance-type", G5]) == 0
    assert {j.job_id: j.restartable for j in read_trace(tmp_path / "t.csv")} == {
        "arr:0": False,
        "ecs": False,
        "prep": False,
        "train": True,
    }
