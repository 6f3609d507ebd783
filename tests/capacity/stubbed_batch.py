"""A Batch compute environment with one job on an expiring Capacity Block and one elsewhere, as
the EC2, ECS and Batch Stubbers see it (shared by the requeue and handler tests)."""

from gpu_governance_runtime.capacity.requeue import TAG_REQUEUED_FROM

from .builders import at

BLOCK = "cr-0123456789abcdef0"
CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
ECS_CLUSTER = "arn:aws:ecs:us-east-1:111122223333:cluster/AWSBatch-gpu-p5-1a2b3c4d"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
OTHER_QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/cpu"
ON_BLOCK = f"arn:aws:ecs:us-east-1:111122223333:container-instance/{ECS_CLUSTER.rsplit('/', 1)[1]}/0aaa"
ELSEWHERE = f"arn:aws:ecs:us-east-1:111122223333:container-instance/{ECS_CLUSTER.rsplit('/', 1)[1]}/0bbb"
ENDS = at(11, 11, 30)
NOW = at(11, 10, 51)


def job(job_id, instance, **extra):
    return {
        "jobName": "train-llm",
        "jobId": job_id,
        "jobQueue": QUEUE,
        "status": "RUNNING",
        "startedAt": 1,
        "jobDefinition": "arn:aws:batch:us-east-1:111122223333:job-definition/train:3",
        "shareIdentifier": "research",
        "schedulingPriority": 50,
        "retryStrategy": {"attempts": 3},
        "timeout": {"attemptDurationSeconds": 86400},
        "parameters": {"epochs": "10"},
        "tags": {"team": "research", "aws:batch:share": "x"},
        "propagateTags": True,
        "container": {
            "command": ["python", "train.py"],
            "containerInstanceArn": instance,
            "environment": [
                {"name": "CHECKPOINT", "value": "s3://ckpt"},
                {"name": "AWS_BATCH_JOB_ID", "value": job_id},
            ],
            "resourceRequirements": [{"type": "GPU", "value": "8"}],
        },
        **extra,
    }


RUNNING = [job("job-on-block", ON_BLOCK), job("job-elsewhere", ELSEWHERE)]
COPY = {
    "jobName": "train-llm",
    "jobQueue": QUEUE,
    "jobDefinition": "arn:aws:batch:us-east-1:111122223333:job-definition/train:3",
    "parameters": {"epochs": "10"},
    "shareIdentifier": "research",
    "schedulingPriorityOverride": 50,
    "retryStrategy": {"attempts": 3},
    "timeout": {"attemptDurationSeconds": 86400},
    "propagateTags": True,
    "containerOverrides": {
        "command": ["python", "train.py"],
        "environment": [{"name": "CHECKPOINT", "value": "s3://ckpt"}],
        "resourceRequirements": [{"type": "GPU", "value": "8"}],
    },
    "tags": {"team": "research", TAG_REQUEUED_FROM: "job-on-block", "gpu-governance:times-preempted": "1"},
}


def discovery(stubs, running=RUNNING):
    """The calls that find the jobs on the block: instances, ECS cluster, container instances, queues, jobs."""
    stubs["ec2"].add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [{"InstanceId": "i-0aaaaaaaaaaaaaaa1"}]}]},
        {
            "Filters": [
                {"Name": "capacity-reservation-id", "Values": [BLOCK]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        },
    )
    stubs["batch"].add_response(
        "describe_compute_environments",
        {
            "computeEnvironments": [
                {"computeEnvironmentName": "gpu-p5", "computeEnvironmentArn": CE, "ecsClusterArn": ECS_CLUSTER}
            ]
        },
        {"computeEnvironments": [CE]},
    )
    stubs["ecs"].add_response(
        "list_container_instances",
        {"containerInstanceArns": [ON_BLOCK]},
        {"cluster": ECS_CLUSTER, "filter": "ec2InstanceId in ['i-0aaaaaaaaaaaaaaa1']"},
    )
    stubs["batch"].add_response(
        "describe_job_queues",
        {
            "jobQueues": [
                {
                    "jobQueueName": "gpu",
                    "jobQueueArn": QUEUE,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": CE}],
                },
                {
                    "jobQueueName": "cpu",
                    "jobQueueArn": OTHER_QUEUE,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": CE.replace("gpu-p5", "cpu")}],
                },
            ]
        },
        {},
    )
    stubs["batch"].add_response(
        "list_jobs",
        {"jobSummaryList": [{"jobId": j["jobId"], "jobName": j["jobName"]} for j in running]},
        {"jobQueue": QUEUE, "jobStatus": "RUNNING"},
    )
    if running:  # nothing listed: nothing described
        stubs["batch"].add_response("describe_jobs", {"jobs": running}, {"jobs": [j["jobId"] for j in running]})


REASON = (
    f"gpu-governance: Capacity Block {BLOCK} of window launch-load-test ends 2026-12-11 11:30 UTC and its instances "
    f"terminate 30 minutes earlier; requeued as a new job tagged {TAG_REQUEUED_FROM}"
)
STOPPED = job("job-on-block", ON_BLOCK, status="FAILED", statusReason=REASON)


def expect_terminate(stubs, job_id="job-on-block"):
    """At its stop time the job is read (still RUNNING), terminated, and read again (FAILED with the controller's reason)."""
    stubs["batch"].add_response("describe_jobs", {"jobs": [RUNNING[0]]}, {"jobs": [job_id]})
    stubs["batch"].add_response("terminate_job", {}, {"jobId": job_id, "reason": REASON})
    stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": [job_id]})


def expect_copy(stubs, listed=("job-on-block",), new="job-copy"):
    """No copy listed yet: one SubmitJob."""
    stubs["batch"].add_response(
        "list_jobs",
        {"jobSummaryList": [{"jobId": j, "jobName": "train-llm"} for j in listed]},
        {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]},
    )
    stubs["batch"].add_response("submit_job", {"jobName": "train-llm", "jobId": new}, COPY)
