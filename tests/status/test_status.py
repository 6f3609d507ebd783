"""`gpu-governance status`: the pure reasoning (constructs_lib.member.waiting), the three backend readers
on recorded / stubbed backend output, and the command's exits. Batch is botocore's Stubber with
full response shapes (every optional member), validated against the Batch model; Kueue objects
are v1beta1 Workloads and ClusterQueues as `kubectl get -o json` prints them."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws

from constructs_lib import cli
from constructs_lib.backends.batch_quota_share import status as batch_status
from constructs_lib.backends.batch_quota_share.status import batch_observation
from constructs_lib.backends.hyperpod_eks.kubernetes import TENANTS
from constructs_lib.backends.hyperpod_slurm.status import slurm_observation
from constructs_lib.member.kueue import kueue_observation
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob, explain, render
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime import contract
from gpu_governance_runtime.policy import parse_policy

MODEL = GovernanceModel.from_dict(yaml.safe_load(default_config_text()))
POLICY = parse_policy(compile_policy(MODEL))
BATCH = POLICY.pool(
    "sagemaker-training"
)  # p5 8: research 2 (lend and borrow, 100%), training 4 (lend), production 2 (reserve)
P5 = "ml.p5.48xlarge"
NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


def waiting(job_id, team, count, priority=0, at=0.0, **extra):
    return ObservedJob(
        job_id=job_id,
        team=team,
        state=WAITING,
        instance_type=extra.pop("instance_type", P5),
        count=count,
        priority=priority,
        submitted_at=at,
        **extra,
    )


def reasons(status):
    return {j.job_id: j.reason for j in status.jobs}


# --- the reasoning ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "in_use, team, job, reason",
    [
        ({"training": {P5: 4}}, "training", 1, "share_at_limit"),  # lend: never borrows past its 4
        ({"research": {P5: 4}}, "research", 1, "borrow_limit"),  # 2 + 100% = 4
        (
            {"research": {P5: 2}, "training": {P5: 4}, "production": {P5: 2}},
            "research",
            1,
            "pool_full",
        ),  # may borrow, nothing idle
        ({"research": {P5: 6}, "training": {P5: 2}}, "production", 2, "reclaiming"),  # inside its guarantee, pool full
        ({}, "production", 2, "next"),
        ({}, "production", 3, "too_large"),  # reserve: 2 is all it can ever hold
    ],
)
def test_the_reason_follows_the_share_and_the_pool(in_use, team, job, reason):
    status = explain(
        BATCH,
        team,
        Observation(
            backend="batch_quota_share",
            pool=BATCH.name,
            unit="instances",
            in_use=in_use,
            jobs=(waiting("j", team, job),),
        ),
        now=NOW,
    )
    assert reasons(status) == {"j": reason}


def test_usage_lines_show_in_use_guaranteed_borrowed_and_lent():
    status = explain(
        BATCH,
        "research",
        Observation(backend="b", pool=BATCH.name, unit="instances", in_use={"research": {P5: 3}}, jobs=()),
        now=NOW,
    )
    p5 = next(u for u in status.usage if u.instance_type == P5)
    assert (p5.in_use, p5.guaranteed, p5.borrowed, p5.lent) == (3, 2, 1, 0)
    idle = explain(
        BATCH, "training", Observation(backend="b", pool=BATCH.name, unit="instances", in_use={}, jobs=()), now=NOW
    )
    assert next(u for u in idle.usage if u.instance_type == P5).lent == 4
    reserve = explain(
        BATCH, "production", Observation(backend="b", pool=BATCH.name, unit="instances", in_use={}, jobs=()), now=NOW
    )
    assert next(u for u in reserve.usage if u.instance_type == P5).lent == 0  # reserve never lends


def test_position_and_lower_priority_within_the_team():
    jobs = (
        waiting("old-low", "production", 1, priority=10, at=1),
        waiting("new-high", "production", 1, priority=90, at=2),
        waiting("new-low", "production", 1, priority=10, at=3),
    )
    status = explain(
        BATCH, "production", Observation(backend="b", pool=BATCH.name, unit="instances", in_use={}, jobs=jobs), now=NOW
    )
    assert [(j.job_id, j.position, j.reason) for j in status.jobs] == [
        ("new-high", 1, "next"),
        ("old-low", 2, "lower_priority"),
        ("new-low", 3, "lower_priority"),
    ]
    assert "behind 2 " in status.jobs[2].text


def test_a_held_job_holds_no_one_back():
    jobs = (waiting("held", "production", 1, priority=90, reason="held"), waiting("free", "production", 1, priority=10))
    status = explain(
        BATCH, "production", Observation(backend="b", pool=BATCH.name, unit="instances", in_use={}, jobs=jobs), now=NOW
    )
    assert reasons(status) == {"held": "held", "free": "next"}


def test_a_job_waiting_for_a_capacity_window_not_yet_active():
    data = compile_policy(MODEL)
    later = NOW + timedelta(days=3)
    window = {
        **data["capacity_windows"][0],
        "instance_type": "ml.p4d.24xlarge",
        "start": later.isoformat(),
        "repeat_every_days": None,
    }
    policy = parse_policy({**data, "capacity_windows": [window]})
    status = explain(
        policy.pool(BATCH.name),
        "research",
        Observation(
            backend="b",
            pool=BATCH.name,
            unit="instances",
            in_use={},
            jobs=(waiting("w", "research", 1, instance_type="ml.p4d.24xlarge"),),
        ),
        windows=policy.capacity_windows,
        now=NOW,
    )
    (job,) = status.jobs
    assert job.reason == "window_not_active" and window["name"] in job.text and f"{later:%Y-%m-%d %H:%M}" in job.text
    none = explain(
        BATCH,
        "research",
        Observation(
            backend="b",
            pool=BATCH.name,
            unit="instances",
            in_use={},
            jobs=(waiting("w", "research", 1, instance_type="ml.p4d.24xlarge"),),
        ),
        now=NOW,
    )
    assert reasons(none) == {"w": "too_large"}  # no window supplies it: it never runs here


def test_other_teams_jobs_are_never_shown():
    jobs = (waiting("mine", "research", 1), waiting("theirs", "training", 1))
    status = explain(
        BATCH, "research", Observation(backend="b", pool=BATCH.name, unit="instances", in_use={}, jobs=jobs), now=NOW
    )
    assert set(reasons(status)) == {"mine"}


# --- Batch ------------------------------------------------------------------------------------------

QUEUE = "sagemaker-training"


def arn(job_id):
    return f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}"


def service_summary(job_id, status, count, reason="", created=0):
    return {
        "latestAttempt": {
            "serviceResourceId": {
                "name": "TrainingJobArn",
                "value": f"arn:aws:sagemaker:us-east-1:111122223333:training-job/{job_id}",
            }
        },
        "capacityUsage": [{"capacityUnit": P5, "quantity": float(count)}],
        "createdAt": 1_800_000_000_000 + created,
        "jobArn": arn(job_id),
        "jobId": job_id,
        "jobName": f"name-{job_id}",
        "scheduledAt": 0,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "shareIdentifier": "research",
        "quotaShareName": "research",
        "status": status,
        "statusReason": reason,
        "startedAt": 0,
        "stoppedAt": 0,
        "isTerminated": False,
    }


def service_job(summary, priority, plan=None):
    attempt = {"serviceResourceId": summary["latestAttempt"]["serviceResourceId"]}
    resources = {"InstanceType": P5, "InstanceCount": 2, **({"TrainingPlanArn": plan} if plan else {})}
    return {
        "attempts": [],
        "capacityUsage": summary["capacityUsage"],
        "createdAt": summary["createdAt"],
        "isTerminated": False,
        "jobArn": summary["jobArn"],
        "jobId": summary["jobId"],
        "jobName": summary["jobName"],
        "jobQueue": QUEUE,
        "latestAttempt": attempt,
        "retryStrategy": {"attempts": 1, "evaluateOnExit": []},
        "scheduledAt": 0,
        "schedulingPriority": priority,
        "serviceRequestPayload": json.dumps({"ResourceConfig": resources}),
        "serviceJobType": "SAGEMAKER_TRAINING",
        "shareIdentifier": summary["shareIdentifier"],
        "quotaShareName": summary["quotaShareName"],
        "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 1},
        "preemptionSummary": {"preemptedAttemptCount": 0, "recentPreemptedAttempts": []},
        "startedAt": 0,
        "status": summary["status"],
        "statusReason": summary["statusReason"],
        "stoppedAt": 0,
        "tags": {"gpu-governance:team": summary["quotaShareName"]},
        "timeoutConfig": {"attemptDurationSeconds": 3600},
    }


def stub_batch(stubber, use, listed, priorities, plans=None, team="research", state="ENABLED"):
    stubber.add_response(
        "get_job_queue_snapshot",
        {
            "frontOfQueue": {"jobs": [{"jobArn": arn("front"), "earliestTimeAtPosition": 1}], "lastUpdatedAt": 2},
            "frontOfQuotaShares": {
                "quotaShares": {"research": [{"jobArn": arn("front"), "earliestTimeAtPosition": 1}]},
                "lastUpdatedAt": 2,
            },
            "queueUtilization": {
                "totalCapacityUsage": [
                    {"capacityUnit": P5, "quantity": float(sum(u.get(P5, 0) for u in use.values()))}
                ],
                "fairshareUtilization": {"activeShareCount": 0, "topCapacityUtilization": []},
                "quotaShareUtilization": {
                    "topCapacityUtilization": [
                        {
                            "quotaShareName": s,
                            "capacityUsage": [{"capacityUnit": t, "quantity": float(n)} for t, n in u.items()],
                        }
                        for s, u in use.items()
                    ]
                },
                "lastUpdatedAt": 2,
            },
        },
        {"jobQueue": QUEUE},
    )
    if next(s for s in BATCH.shares if s.name == team).gpu_hour_limit:  # the reference's research team has one
        stubber.add_response(
            "list_quota_shares",
            {
                "quotaShares": [
                    {
                        "quotaShareName": team,
                        "quotaShareArn": f"{QUEUE}/quota-share/{team}",
                        "jobQueueArn": QUEUE,
                        "capacityLimits": [{"maxCapacity": 2, "capacityUnit": P5}],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                        "state": state,
                        "status": "VALID",
                    }
                ]
            },
            {"jobQueue": QUEUE},
        )
    statuses = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")
    for status in statuses:
        jobs = [j for j in listed if j["status"] == status]
        stubber.add_response(
            "list_service_jobs",
            {"jobSummaryList": jobs},
            {"jobQueue": QUEUE, "jobStatus": status, "filters": [{"name": "QUOTA_SHARE_NAME", "values": [team]}]},
        )
    waiting = sorted(
        (j for j in listed if j["status"] == "RUNNABLE"), key=lambda j: (j["jobId"] != "front", j["createdAt"])
    )
    running = sorted(
        (j for j in listed if j["status"] in statuses[3:]), key=lambda j: statuses.index(j["status"])
    )  # described for their plan
    for summary in waiting + running:
        stubber.add_response(
            "describe_service_job",
            service_job(summary, priorities[summary["jobId"]], (plans or {}).get(summary["jobId"])),
            {"jobId": summary["jobId"]},
        )


def test_batch_reader_explains_the_teams_jobs():
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    listed = [
        service_summary("run", "RUNNING", 4),
        service_summary("front", "RUNNABLE", 2, created=1),
        service_summary("later", "RUNNABLE", 1, created=2),
        service_summary(
            "broken",
            "RUNNABLE",
            2,
            created=3,
            reason="MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE - Service "
            "environment(s) associated with the job queue cannot meet the capacity requirement of the job.",
        ),
    ]
    with Stubber(client) as stubber:
        stub_batch(
            stubber,
            {"research": {P5: 4}, "training": {P5: 4}},
            listed,
            {"run": 90, "front": 50, "later": 10, "broken": 50},
        )
        observation = batch_observation(client, BATCH, "research")
        stubber.assert_no_pending_responses()
    status = explain(BATCH, "research", observation, now=NOW)
    by_id = {j.job_id: j for j in status.jobs}
    assert by_id["run"].state == RUNNING
    assert (by_id["front"].reason, by_id["front"].position) == ("borrow_limit", 1)  # holds 4 = 2 + 100%
    assert by_id["later"].reason == "lower_priority"
    assert by_id["broken"].reason == "misconfigured" and "SERVICE_ENVIRONMENT_MAX_RESOURCE" in by_id["broken"].text
    assert next(u for u in status.usage if u.instance_type == P5).borrowed == 2


def test_a_batch_job_waits_for_the_gpu_hour_limit_while_the_controller_has_disabled_the_share():
    # Issue 28, item 5: the reclaim controller disables research's quota share at its GPU-hour limit (8000 per month).
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    listed = [service_summary("run", "RUNNING", 1), service_summary("front", "RUNNABLE", 1, created=1)]
    with Stubber(client) as stubber:
        stub_batch(stubber, {"research": {P5: 1}}, listed, {"run": 50, "front": 50}, state="DISABLED")
        observation = batch_observation(client, BATCH, "research")
        stubber.assert_no_pending_responses()
    limited = explain(BATCH, "research", observation, now=NOW, gpu_hour_limit=(8000, "month"))
    front = next(j for j in limited.jobs if j.job_id == "front")
    assert front.reason == "gpu_hour_limit"
    assert (
        front.text.startswith("team reached its GPU-hour limit for the month (8000 GPU hours)")
        and "2027-02-01 00:00 UTC" in front.text
    )
    with Stubber(client) as stubber:  # the share enabled again: the job waits for what it waited for before
        stub_batch(stubber, {"research": {P5: 1}}, listed, {"run": 50, "front": 50}, state="ENABLED")
        enabled = batch_observation(client, BATCH, "research")
    assert (
        next(
            j
            for j in explain(BATCH, "research", enabled, now=NOW, gpu_hour_limit=(8000, "month")).jobs
            if j.job_id == "front"
        ).reason
        != "gpu_hour_limit"
    )


PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/weekly-validation-202701151130-1"
PLANS = [
    {"arn": PLAN, "window": "weekly-validation", "instance_type": P5, "ends": "2027-01-16T11:30:00+00:00"},
    {"arn": PLAN + "-ended", "window": "weekly-validation", "instance_type": P5, "ends": "2027-01-14T11:30:00+00:00"},
]


def test_a_running_job_is_told_whether_it_is_on_the_teams_training_plan():
    # Issue 24, outcome 9: the plan a job runs on is the ResourceConfig.TrainingPlanArn of the request Batch holds for it.
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    listed = [
        service_summary("on-plan", "RUNNING", 2),
        service_summary("elsewhere", "STARTING", 2),
        service_summary("on-demand", "SCHEDULED", 2),
        service_summary("on-ended", "RUNNING", 2),
    ]
    with Stubber(client) as stubber:
        stub_batch(
            stubber,
            {"research": {P5: 8}},
            listed,
            dict.fromkeys(["on-plan", "elsewhere", "on-demand", "on-ended"], 50),
            plans={
                "on-plan": PLAN,
                "elsewhere": PLAN.replace("111122223333", "444455556666"),
                "on-ended": PLAN + "-ended",
            },
        )
        observation = batch_observation(client, BATCH, "research", training_plans=PLANS)
        stubber.assert_no_pending_responses()
    status = explain(BATCH, "research", observation, now=NOW)
    told = {j.job_id: j.training_plan for j in status.jobs}
    assert told["on-plan"] == f"on the team's training plan {PLAN} (window weekly-validation)"
    assert told["elsewhere"].endswith("not one of the team's active plans") and told["on-ended"].endswith(
        "not one of the team's active plans"
    )
    assert told["on-demand"] == (
        f"on demand, not on the team's training plan {PLAN} of {P5} (window weekly-validation): "
        "submit with ResourceConfig.TrainingPlanArn (docs/team-guide.md)"
    )
    assert f"on-plan (name-on-plan): running, on the team's training plan {PLAN}" in render([status])
    # Plans not read (a team without training-job windows): only a job's own plan is told.
    unread = explain(BATCH, "research", replace(observation, training_plans=None), now=NOW)
    assert {j.job_id: j.training_plan for j in unread.jobs}["on-demand"] == ""
    assert {j.job_id: j.training_plan for j in unread.jobs}["on-plan"] == f"on training plan {PLAN}"


def test_the_command_reads_the_teams_training_plans_and_tells_each_running_job(capsys, monkeypatch):
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stub_batch(
        stubber,
        {"production": {P5: 2}},
        [{**service_summary("nightly", "RUNNING", 2), "quotaShareName": "production", "shareIdentifier": "production"}],
        {"nightly": 50},
        plans={"nightly": PLAN},
        team="production",
    )
    stubber.activate()
    monkeypatch.setattr(batch_status, "batch_client", lambda region: client)
    with mock_aws():
        boto3.client("ssm", region_name="us-east-1").put_parameter(
            Name=contract.team_training_plans_parameter(MODEL.organisation, "production"),
            Type="String",
            Value=json.dumps([{**PLANS[0], "ends": "2999-01-16T11:30:00+00:00"}]),
        )
        code, out, err = run(capsys, "--team", "production", "--pool", "sagemaker-training")
    assert code == 0, err
    assert f"nightly (name-nightly): running, on the team's training plan {PLAN} (window weekly-validation)" in out


def test_training_plans_that_cannot_be_read_leave_a_note_and_the_jobs_are_still_explained(capsys, monkeypatch):
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stub_batch(
        stubber,
        {"production": {P5: 2}},
        [{**service_summary("nightly", "RUNNING", 2), "quotaShareName": "production", "shareIdentifier": "production"}],
        {"nightly": 50},
        team="production",
    )
    stubber.activate()
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    ssm_stub = Stubber(ssm)
    ssm_stub.add_client_error("get_parameter", service_error_code="AccessDeniedException", http_status_code=400)
    ssm_stub.activate()
    monkeypatch.setattr(batch_status, "batch_client", lambda region: client)
    monkeypatch.setattr(batch_status, "ssm_client", lambda region: ssm)
    code, out, err = run(capsys, "--team", "production", "--pool", "sagemaker-training")
    assert code == 0, err
    assert (
        "nightly (name-nightly): running\n" in out + "\n"
        and "note: the team's training plans (/" in out
        and "AccessDeniedException" in out
    )


# --- HyperPod EKS (Kueue v1beta1) -------------------------------------------------------------------

NS = "hyperpod-ns-research"


def workload(name, gpus, priority, conditions, admission=None, requeue=None):
    status = {
        "conditions": [
            {
                "type": t,
                "status": s,
                "reason": r,
                "message": m,
                "lastTransitionTime": "2027-01-15T07:00:00Z",
                "observedGeneration": 1,
            }
            for t, s, r, m in conditions
        ]
    }
    if admission:
        status["admission"] = admission
    if requeue:
        status["requeueState"] = requeue
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{name}-1a2b3",
            "namespace": NS,
            "creationTimestamp": "2027-01-15T06:00:00Z",
            "labels": {"kueue.x-k8s.io/job-uid": "uid"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "uid", "controller": True}
            ],
        },
        "spec": {
            "active": True,
            "queueName": f"{NS}-localqueue",
            "priority": priority,
            "priorityClassName": "training-priority",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "train:1",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
        "status": status,
    }


def cluster_queue(team, used, nominal, borrowing_limit=None):
    resource = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
    if borrowing_limit is not None:
        resource["borrowingLimit"] = str(borrowing_limit)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": f"hyperpod-ns-{team}-clusterqueue"},
        "spec": {
            "cohort": "shared-pool",
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": P5, "resources": [resource]}]}
            ],
        },
        "status": {
            "flavorsUsage": [
                {
                    "name": P5,
                    "resources": [
                        {"name": "nvidia.com/gpu", "total": str(used), "borrowed": str(max(0, used - nominal))}
                    ],
                }
            ],
            "flavorsReservation": [],
            "pendingWorkloads": 2,
            "reservingWorkloads": 1,
            "admittedWorkloads": 1,
            "conditions": [
                {"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads"}
            ],
        },
    }


ADMITTED = workload(
    "running",
    8,
    500,
    [
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue hyperpod-ns-research-clusterqueue"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    ],
    admission={
        "clusterQueue": "hyperpod-ns-research-clusterqueue",
        "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": P5}, "resourceUsage": {"nvidia.com/gpu": "8"}, "count": 1}
        ],
    },
)
PENDING = workload(
    "waits",
    16,
    100,
    [
        (
            "QuotaReserved",
            "False",
            "Pending",
            f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {P5}, 8 more needed",
        )
    ],
)
PREEMPTED = workload(
    "victim",
    8,
    100,
    [
        (
            "QuotaReserved",
            "False",
            "Pending",
            f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {P5}, 8 more needed",
        ),
        (
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a workload (UID: u2) due to reclamation within the cohort",
        ),
        (
            "Preempted",
            "True",
            "InCohortReclamation",
            "Preempted to accommodate a workload (UID: u2) due to reclamation within the cohort",
        ),
        ("Requeued", "True", "Preempted", "Preempted to accommodate a workload"),
    ],
    requeue={"count": 1, "requeueAt": "2027-01-15T08:05:00Z"},
)
OVER_LIMIT = workload(
    "greedy",
    8,
    100,
    [
        (
            "QuotaReserved",
            "False",
            "Pending",
            f"couldn't assign flavors to pod set main: borrowing limit for nvidia.com/gpu in flavor {P5} exceeded",
        )
    ],
)
FINISHED = workload("done", 8, 100, [("Finished", "True", "Succeeded", "Job finished successfully")])


def test_kueue_reader_explains_workloads():
    eks = POLICY.pool("hyperpod-eks")
    queues = {"items": [cluster_queue("research", 24, 16, borrowing_limit=8), cluster_queue("training", 8, 16)]}
    observation = kueue_observation(
        {"items": [ADMITTED, PENDING, PREEMPTED, OVER_LIMIT, FINISHED]}, queues, eks, "research", TENANTS
    )
    status = explain(eks, "research", observation, now=NOW)
    by_id = {j.job_id: j for j in status.jobs}
    assert set(by_id) == {"running", "waits", "victim", "greedy"}  # finished workloads are not shown
    assert by_id["running"].state == RUNNING
    assert by_id["waits"].reason == "pool_full"  # above its 16 GPUs, borrowing allowed, the cohort is full
    assert "(32 of 32 GPUs in use)" in by_id["waits"].text  # what Kueue reports; the figures are Kueue's, in GPUs
    assert (
        by_id["victim"].reason == "pool_full"
        and "InCohortReclamation" in by_id["victim"].text
        and "requeued 1 time" in by_id["victim"].text
    )
    assert (
        by_id["greedy"].reason == "borrow_limit"
        and "holds 24 GPUs" in by_id["greedy"].text
        and "ceiling of 24" in by_id["greedy"].text
    )  # 16 + 8
    p5 = next(u for u in status.usage if u.instance_type == P5)
    assert (status.unit, p5.in_use, p5.guaranteed, p5.borrowed) == ("GPUs", 24, 16, 8)


def test_kueue_inside_the_guarantee_is_reclaim():
    eks = POLICY.pool("hyperpod-eks")
    observation = kueue_observation(
        {"items": [PENDING]}, {"items": [cluster_queue("research", 8, 16)]}, eks, "research", TENANTS
    )
    assert reasons(explain(eks, "research", observation, now=NOW)) == {"waits": "reclaiming"}


# --- Slurm ------------------------------------------------------------------------------------------

SLURM = POLICY.pool(
    "hyperpod-slurm"
)  # p5 6: research 2 (lend and borrow 100%), training 2 (lend), production 2 (reserve)
SQUEUE = "\n".join(
    [
        "11|a|research|research.standard|RUNNING|2|research|4000|2027-01-15T07:00:00|None",
        "12|b|research|research.borrow|RUNNING|2|borrow|100|2027-01-15T07:01:00|None",
        "13|c|research|research.borrow|PENDING|1|borrow|100|2027-01-15T07:02:00|QOSGrpGRES",
        "14|d|research|research.low|PENDING|1|research|1000|2027-01-15T07:03:00|JobHeldUser",
        "15|e|training|training.urgent|RUNNING|2|training|9000|2027-01-15T07:04:00|None",
        "16|f|training|training.urgent|PENDING|1|training|9000|2027-01-15T07:05:00|Resources",
        "17|g|outsider|outsider.x|RUNNING|1|other|1|2027-01-15T07:05:00|None",
    ]
)


def test_slurm_reader_maps_reason_codes():
    research = explain(SLURM, "research", slurm_observation(SQUEUE, SLURM, "research"), now=NOW)
    assert reasons(research) == {"11": "running", "12": "running", "13": "borrow_limit", "14": "held"}
    borrowing = next(j for j in research.jobs if j.job_id == "13")
    assert "borrow QoS research.borrow" in borrowing.text and "QOSGrpGRES" in borrowing.text
    training = explain(SLURM, "training", slurm_observation(SQUEUE, SLURM, "training"), now=NOW)
    assert reasons(training) == {
        "15": "running",
        "16": "share_at_limit",
    }  # lend: its 2 nodes are busy, it does not borrow
    assert "preset steady" not in training.jobs[1].text  # no preset passed here


def test_a_slurm_job_waiting_in_its_teams_own_partition_is_told_its_limit_and_the_borrow_partition():
    # research (lend and borrow) holds its 2 nodes in its own partition; the pool's other 4 are busy too
    squeue = "\n".join(
        [
            "21|a|research|research.standard|RUNNING|2|research|4000|2027-01-15T07:00:00|None",
            "22|b|training|training.urgent|RUNNING|2|training|9000|2027-01-15T07:01:00|None",
            "23|c|production|production.urgent|RUNNING|2|production|9000|2027-01-15T07:01:00|None",
            "24|d|research|research.standard|PENDING|1|research|4000|2027-01-15T07:02:00|Resources",
        ]
    )
    research = explain(SLURM, "research", slurm_observation(squeue, SLURM, "research"), now=NOW)
    waiting = next(j for j in research.jobs if j.job_id == "24")
    assert waiting.reason == "own_partition_full"
    assert "uses 2 of its 2 guaranteed nodes, all its own partition research holds" in waiting.text
    assert (
        "partition borrow with QoS research.borrow" in waiting.text and "no idle capacity to borrow" not in waiting.text
    )
    # the same job in the borrow partition waits for idle capacity, as before
    borrowing = explain(
        SLURM,
        "research",
        slurm_observation(
            squeue.replace("1|research|4000|2027-01-15T07:02", "1|borrow|4000|2027-01-15T07:02"), SLURM, "research"
        ),
        now=NOW,
    )
    assert next(j for j in borrowing.jobs if j.job_id == "24").reason == "pool_full"


# --- the command ------------------------------------------------------------------------------------


def run(capsys, *argv):
    code = cli.main(["status", "--example", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_command_reads_squeue_from_a_file(tmp_path, capsys):
    path = tmp_path / "squeue.txt"
    path.write_text(SQUEUE)
    code, out, err = run(capsys, "--team", "training", "--pool", "hyperpod-slurm", "--squeue", str(path))
    assert code == 0, err
    assert (
        "16 (f): waiting #1 - your team uses 2 of its 2 guaranteed nodes and its sharing strategy (lend, preset steady) does not borrow"
        in out
    )
    code, out, _ = run(
        capsys, "--team", "training", "--pool", "hyperpod-slurm", "--squeue", str(path), "--json", "--job", "16"
    )
    (status,) = json.loads(out)
    assert [j["reason"] for j in status["jobs"]] == ["share_at_limit"]


def test_command_reads_kueue_objects_from_files(tmp_path, capsys):
    (tmp_path / "w.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [PENDING]}))
    (tmp_path / "q.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [cluster_queue("research", 8, 16)]})
    )
    code, out, err = run(
        capsys,
        "--team",
        "research",
        "--pool",
        "hyperpod-eks",
        "--workloads",
        str(tmp_path / "w.json"),
        "--cluster-queues",
        str(tmp_path / "q.json"),
    )
    assert code == 0, err
    assert "waits (job-waits-1a2b3): waiting #1 - inside your guarantee" in out


def test_kueue_without_cluster_queues_still_explains_the_jobs(tmp_path, capsys, monkeypatch):
    (tmp_path / "w.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [OVER_LIMIT]}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no kubectl here: the cluster queues cannot be listed
    code, out, err = run(
        capsys, "--team", "research", "--pool", "hyperpod-eks", "--workloads", str(tmp_path / "w.json")
    )
    assert code == 0, err
    assert (
        "greedy (job-greedy-1a2b3): waiting #1 - borrowing at its limit" in out
        and "no ClusterQueue objects read" in out
    )


def test_kubectl_missing_for_workloads_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run(capsys, "--team", "research", "--pool", "hyperpod-eks")
    assert (
        code == 1
        and len(err.strip().splitlines()) == 1
        and "kubectl get workloads -n hyperpod-ns-research -o json" in err
    )


@pytest.mark.parametrize(
    "argv, wrong",
    [
        (["--team", "nobody"], "no such team"),
        (["--team", "research", "--pool", "ec2-gpu"], "not a pool team research has a quota in"),
        (["--team", "research", "--pool", "hyperpod-slurm", "--squeue", "/nonexistent"], "cannot read the file"),
    ],
)
def test_bad_input_exits_2_without_a_traceback(capsys, argv, wrong):
    code, _, err = run(capsys, *argv)
    assert code == 2 and wrong in err and "Traceback" not in err


def test_garbage_squeue_is_bad_input(tmp_path, capsys):
    (tmp_path / "s").write_text("not squeue\n")
    code, _, err = run(capsys, "--team", "research", "--pool", "hyperpod-slurm", "--squeue", str(tmp_path / "s"))
    assert code == 2 and "10 fields" in err


def test_no_credentials_is_one_line_naming_the_role(capsys, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = run(capsys, "--team", "research", "--pool", "sagemaker-training")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "no AWS credentials" in err and "batch:ListServiceJobs" in err


def test_access_denied_is_one_line_naming_the_call(capsys, monkeypatch):
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_client_error("get_job_queue_snapshot", service_error_code="AccessDeniedException", http_status_code=403)
    stubber.activate()
    monkeypatch.setattr(batch_status, "batch_client", lambda region: client)
    code, _, err = run(capsys, "--team", "research", "--pool", "sagemaker-training")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "AccessDeniedException on batch:GetJobQueueSnapshot" in err


def test_a_job_inside_its_guarantee_once_its_own_lower_priority_jobs_make_way_is_not_told_the_share_is_at_its_limit():
    # Issue 29: training (lend, quota 4) with in-share preemption runs 3 at priority 10; its
    # priority-90 job of 4 is a guarantee job (the planner's definition): the priority-10 jobs
    # make way. A job of the same priority is not: the share is at its limit.
    pool = replace(
        BATCH, shares=tuple(replace(s, in_share_preemption=True) if s.name == "training" else s for s in BATCH.shares)
    )
    low = ObservedJob(job_id="low", team="training", state=RUNNING, instance_type=P5, count=3, priority=10)
    for priority, reason in ((90, "making_way"), (10, "share_at_limit")):
        observation = Observation(
            backend="batch_quota_share",
            pool=pool.name,
            unit="instances",
            in_use={"training": {P5: 3}},
            jobs=(low, waiting("j", "training", 4, priority=priority)),
        )
        status = explain(pool, "training", observation, now=NOW)
        assert reasons(status) == {"low": "running", "j": reason}
        if reason == "making_way":
            assert "lower-priority jobs make way" in status.jobs[1].text
    # A running Batch service job's priority is not listed: it is not set aside on a guess.
    unknown = replace(low, priority_known=False)
    observation = Observation(
        backend="batch_quota_share",
        pool=pool.name,
        unit="instances",
        in_use={"training": {P5: 3}},
        jobs=(unknown, waiting("j", "training", 4, priority=90)),
    )
    assert reasons(explain(pool, "training", observation, now=NOW))["j"] == "share_at_limit"


def test_a_paused_teams_job_waits_because_the_team_is_paused_and_its_lent_capacity_honours_a_lending_limit():
    data = yaml.safe_load(default_config_text())
    data["teams"][0]["paused"] = True
    policy = parse_policy(compile_policy(GovernanceModel.from_dict(data)))
    slurm = policy.pool("hyperpod-slurm")  # research paused; training lends at most 50% of its 2 nodes
    status = explain(
        slurm,
        "research",
        Observation(
            backend="hyperpod_slurm", pool=slurm.name, unit="nodes", in_use={}, jobs=(waiting("j", "research", 1),)
        ),
        now=NOW,
    )
    assert reasons(status) == {"j": "paused"} and "team paused" in status.jobs[0].text
    idle = explain(
        slurm,
        "training",
        Observation(backend="hyperpod_slurm", pool=slurm.name, unit="nodes", in_use={}, jobs=()),
        now=NOW,
    )
    assert next(u for u in idle.usage if u.instance_type == P5).lent == 1


def test_slurm_says_a_job_held_by_a_paused_account_waits_for_the_team_to_resume():
    line = "7|train|research|research.low|PENDING|1|research|100|2027-01-15T07:00:00|AssocGrpJobsLimit"
    status = explain(SLURM, "research", slurm_observation(line, SLURM, "research"), now=NOW)
    assert reasons(status) == {"7": "paused"} and "GrpJobs=0" in status.jobs[0].text
