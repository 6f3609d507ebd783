"""A stopped Batch job's copy keeps everything that defined it (issue 23, outcome 4: requeue used
to drop dependsOn and the node and pod overrides). DescribeJobs shapes as the API reference gives
them, with the optional members a real job carries."""

from gpu_governance_runtime.common.batch_copy import copy_request, restartable

DEFINITION = "arn:aws:batch:us-east-1:111122223333:job-definition/train:12"


def described(**extra):
    return {
        "jobId": "j-1",
        "jobName": "train",
        "jobQueue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu",
        "status": "RUNNING",
        "jobDefinition": DEFINITION,
        "shareIdentifier": "research",
        "schedulingPriority": 30,
        "createdAt": 1,
        "startedAt": 2,
        "tags": {"aws:batch:share": "x", "team": "research"},
        **extra,
    }


def test_dependencies_node_ranges_and_instance_types_are_kept():
    job = described(
        dependsOn=[{"jobId": "prep-1", "type": "SEQUENTIAL"}],
        nodeProperties={
            "numNodes": 4,
            "mainNode": 0,
            "nodeRangeProperties": [
                {
                    "targetNodes": "0",
                    "container": {"command": ["launcher"], "instanceType": "p5.48xlarge", "image": "img", "vcpus": 4},
                },
                {
                    "targetNodes": "1:",
                    "container": {
                        "command": ["worker"],
                        "instanceType": "p5.48xlarge",
                        "environment": [
                            {"name": "AWS_BATCH_JOB_NODE_INDEX", "value": "1"},
                            {"name": "NCCL_DEBUG", "value": "WARN"},
                        ],
                    },
                },
            ],
        },
    )
    request = copy_request(job)
    assert request["dependsOn"] == [{"jobId": "prep-1", "type": "SEQUENTIAL"}]
    assert request["nodeOverrides"] == {
        "numNodes": 4,
        "nodePropertyOverrides": [
            {"targetNodes": "0", "containerOverrides": {"command": ["launcher"], "instanceType": "p5.48xlarge"}},
            {
                "targetNodes": "1:",
                "containerOverrides": {
                    "command": ["worker"],
                    "instanceType": "p5.48xlarge",
                    "environment": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                },
            },
        ],
    }
    assert (request["jobDefinition"], request["schedulingPriorityOverride"]) == (DEFINITION, 30)
    assert request["tags"] == {
        "team": "research",
        "gpu-governance:requeued-from": "j-1",
        "gpu-governance:times-preempted": "1",
    }


def test_an_eks_jobs_pod_settings_are_kept():
    job = described(
        eksProperties={
            "podProperties": {
                "metadata": {"labels": {"app": "train"}},
                "containers": [
                    {
                        "name": "main",
                        "image": "img:1",
                        "command": ["python"],
                        "args": ["train.py"],
                        "env": [{"name": "X", "value": "1"}],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        "exitCode": 0,
                    }
                ],
            }
        }
    )
    assert copy_request(job)["eksPropertiesOverride"] == {
        "podProperties": {
            "metadata": {"labels": {"app": "train"}},
            "containers": [
                {
                    "name": "main",
                    "image": "img:1",
                    "command": ["python"],
                    "args": ["train.py"],
                    "env": [{"name": "X", "value": "1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        }
    }


def test_what_cannot_be_brought_back_as_it_was_says_why():
    assert restartable(described()) is None
    assert "array job" in restartable(described(arrayProperties={"size": 10}))
    assert "depend on it" in restartable(described(), waited_on={"j-1"})


def test_a_copy_carries_its_chains_count_of_preemptions():
    from gpu_governance_runtime.common.batch_copy import times_stopped

    assert copy_request(described())["tags"]["gpu-governance:times-preempted"] == "1"
    copy_of_copy = described(
        tags={"team": "research", "gpu-governance:requeued-from": "j-0", "gpu-governance:times-preempted": "4"}
    )
    assert copy_request(copy_of_copy)["tags"]["gpu-governance:times-preempted"] == "5"
    assert times_stopped(copy_of_copy) == 4


def test_an_absent_or_malformed_count_counts_once_and_never_fails(capsys):
    """Only the platform writes the count (a member's submission may not set the key), yet a bad value
    must neither raise (it would stop the pool's reclaim every tick) nor lower a copy below one preemption."""
    from gpu_governance_runtime.common.batch_copy import times_stopped

    assert times_stopped(described()) == 0  # a team's own job
    copy = {"team": "research", "gpu-governance:requeued-from": "j-0"}
    assert times_stopped(described(tags=copy)) == 1  # a copy made before the count existed
    for bad in ("lots", "0", "-8", "2.5", " 3", "9" * 300):
        assert times_stopped(described(tags={**copy, "gpu-governance:times-preempted": bad})) == 1, bad
    assert capsys.readouterr().out.count('"tag_ignored"') == 6
