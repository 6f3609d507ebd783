"""The history importers (sacct, Batch, Kueue) on recorded output, and `trace from-*` end to end.
tests/slurm/test_sacct_import.py runs the sacct importer on the real local Slurm."""

from __future__ import annotations

import json

import pytest

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.simulator import read_trace
from constructs_lib.simulator.importers import ImportOptions, from_batch, from_kueue, from_sacct

G5 = "ml.g5.xlarge"
OPTIONS = ImportOptions(instance_type=G5, priorities={"low": 10, "borrow": 0, "urgent": 90}, checkpointable_teams=frozenset({"burst"}))

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
    assert imported.skipped == 3
    jobs = {j.job_id: j for j in imported.jobs}
    assert set(jobs) == {"12", "13"}
    assert (jobs["12"].team, jobs["12"].count, jobs["12"].duration, jobs["12"].priority, jobs["12"].checkpointable, jobs["12"].max_run_time) == ("burst", 2, 3_600, 10, True, 7_200)
    assert (jobs["13"].submit_time, jobs["13"].priority, jobs["13"].max_run_time, jobs["13"].checkpointable) == (2.0, 90, None, False)
    assert jobs["12"].submit_time == 0.0  # times from the earliest submission


def test_sacct_errors_name_the_line_and_the_fields(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Account\n1|a\n")
    with pytest.raises(GovernanceError, match=r"sacct.txt:1: not sacct --parsable2 output .*\('QOS,Submit"):
        from_sacct(path, OPTIONS)
    path.write_text(SACCT.replace("|2|120|", "|two|120|"))
    with pytest.raises(GovernanceError, match=r"sacct.txt:2: unreadable sacct row"):
        from_sacct(path, OPTIONS)
    path.write_text(SACCT.replace("burst.low", "burst.gold"))
    with pytest.raises(GovernanceError, match=r"sacct.txt:2.priority_class: unknown priority class \('gold'\)"):
        from_sacct(path, OPTIONS)


# Shapes from botocore's batch model: ListJobs pages (JobSummary), DescribeJobs (JobDetail),
# DescribeServiceJob (one object); times are epoch milliseconds.
LIST_JOBS = {"jobSummaryList": [
    {"jobArn": "arn:aws:batch:us-east-1:1:job/a", "jobId": "a", "jobName": "train", "createdAt": 1_000_000, "status": "SUCCEEDED", "startedAt": 1_060_000, "stoppedAt": 4_660_000, "nodeProperties": {"numNodes": 4}},
    {"jobId": "b", "jobName": "queued", "createdAt": 1_100_000, "status": "RUNNABLE"},
], "nextToken": "t1"}
DESCRIBE_JOBS = {"jobs": [
    {"jobId": "a", "jobName": "train", "jobQueue": "q", "status": "SUCCEEDED", "shareIdentifier": "vision", "schedulingPriority": 50, "createdAt": 1_000_000,
     "startedAt": 1_060_000, "stoppedAt": 4_660_000, "timeout": {"attemptDurationSeconds": 7200}, "tags": {"gpu-governance:checkpointable": "true"}, "jobDefinition": "d"},
]}
DESCRIBE_SERVICE_JOB = {"jobId": "s", "jobName": "sm", "jobQueue": "q", "createdAt": 1_200_000, "startedAt": 1_200_000, "stoppedAt": 1_800_000, "status": "SUCCEEDED",
                        "shareIdentifier": "nlp", "quotaShareName": "nlp-share", "schedulingPriority": 10, "serviceJobType": "SAGEMAKER_TRAINING",
                        "timeoutConfig": {"attemptDurationSeconds": 900}, "capacityUsage": [{"capacityUnit": "ml.p5.48xlarge", "quantity": 2.0}],
                        "tags": {"gpu-governance:instances": "2", "gpu-governance:instance-type": "ml.p5.48xlarge"}}


def test_batch_pages_are_merged_by_job_id(tmp_path):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps([LIST_JOBS, DESCRIBE_JOBS, DESCRIBE_SERVICE_JOB]))
    imported = from_batch(path, OPTIONS)
    assert imported.skipped == 1  # b never started
    a, s = imported.jobs
    assert (a.job_id, a.team, a.count, a.duration, a.priority, a.checkpointable, a.max_run_time, a.instance_type) == ("a", "vision", 4, 3_600, 50, True, 7_200, G5)
    assert (s.job_id, s.team, s.count, s.instance_type, s.submit_time, s.max_run_time, s.checkpointable) == ("s", "nlp-share", 2, "ml.p5.48xlarge", 200.0, 900, False)
    path.write_text(json.dumps({"items": []}))
    with pytest.raises(GovernanceError, match="not a Batch response"):
        from_batch(path, OPTIONS)


def workload(name, queue, created, admitted, finished, pods, priority=None, finished_status="True", **spec):
    conditions = [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted}]
    if finished:
        conditions.append({"type": "Finished", "status": finished_status, "lastTransitionTime": finished})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": []}}}], **({"priority": priority} if priority is not None else {}), **spec},
        "status": {"admission": {"clusterQueue": queue, "podSetAssignments": []}, "conditions": conditions},
    }


def test_kueue_finished_workloads_become_trace_jobs(tmp_path):
    items = [
        workload("w1", "cq-vision", "2026-11-01T00:00:00Z", "2026-11-01T00:01:00Z", "2026-11-01T02:01:00Z", 4, priority=100, maximumExecutionTimeSeconds=10_800),
        workload("w2", "cq-burst", "2026-11-01T00:10:00Z", "2026-11-01T00:10:00Z", "2026-11-01T00:20:00Z", 1, priorityClassName="low"),
        workload("running", "cq-burst", "2026-11-01T00:10:00Z", "2026-11-01T00:10:00Z", None, 1),
    ]
    path = tmp_path / "wl.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    imported = from_kueue(path, OPTIONS)
    assert imported.skipped == 1
    w1, w2 = imported.jobs
    assert (w1.job_id, w1.team, w1.count, w1.duration, w1.priority, w1.max_run_time) == ("team-a/w1", "cq-vision", 4, 7_200, 100, 10_800)
    assert (w2.submit_time, w2.priority) == (600.0, 10)
    path.write_text(json.dumps({"kind": "List", "items": [{"kind": "Pod"}]}))
    with pytest.raises(GovernanceError, match=r"items\[0\]: unreadable Workload"):
        from_kueue(path, OPTIONS)


def test_trace_from_sacct_cli_writes_a_trace_the_simulator_reads(tmp_path, capsys):
    source, output = tmp_path / "sacct.txt", tmp_path / "trace.csv"
    source.write_text(SACCT)
    assert main(["trace", "from-sacct", str(source), str(output), "--instance-type", G5, "--priority", "low=10", "--priority", "urgent=90", "--priority", "borrow=0"]) == 0
    assert "wrote 2 jobs" in capsys.readouterr().err
    assert [j.max_run_time for j in read_trace(output)] == [7_200, None]
    assert main(["trace", "from-sacct", str(source), str(output), "--instance-type", G5, "--priority", "low"]) == 2
    assert "--priority: not CLASS=N ('low')" in capsys.readouterr().err
