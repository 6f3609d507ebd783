"""The Batch model's compute environments play by the pages issue 37 read (rows 3 and 4): an
infrastructure update needs BEST_FIT_PROGRESSIVE (or a Spot strategy), and with those strategies
Batch may run one instance past ``maxvCpus``, which launches only where EC2 has capacity for it
(into a Capacity Block: no more than the block holds). Each test fails on the model before issue 37."""

import pytest
from botocore.exceptions import ClientError

from .batch import Clock, FakeBatch

CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5"
TEMPLATE = {"launchTemplateName": "gpu-p5", "version": "2"}


def batch_with(strategy: str | None, *, block_holds=lambda batch: None) -> FakeBatch:
    """``block_holds(batch)``: how many instances EC2 runs from the environment's launch template now."""
    batch = FakeBatch(Clock(now=0.0), capacity={})
    batch.add_compute_environment(
        CE,
        vcpus_per_instance=192,
        max_vcpus=2 * 192,
        launch_template=TEMPLATE,
        allocation_strategy=strategy,
        launch_capacity=lambda template: block_holds(batch),
    )
    batch.add_job_queue(QUEUE, compute_environments=[CE])
    return batch


@pytest.mark.parametrize("strategy", [None, "BEST_FIT"])
def test_an_infrastructure_update_of_a_best_fit_environment_is_refused(strategy):
    """[aws: batch-ce.infrastructure-update-strategy]: "BEST_FIT isn't supported" (no strategy: Batch's default,
    BEST_FIT). A scaling update alone still goes through."""
    batch = batch_with(strategy)
    with pytest.raises(ClientError, match="not supported with allocationStrategy BEST_FIT"):
        batch.update_compute_environment(
            computeEnvironment=CE, computeResources={"launchTemplate": {**TEMPLATE, "version": "3"}}
        )
    assert batch.compute_environments[CE]["computeResources"]["launchTemplate"] == TEMPLATE
    batch.update_compute_environment(computeEnvironment=CE, computeResources={"maxvCpus": 192})
    assert batch.compute_environments[CE]["computeResources"]["maxvCpus"] == 192


def test_best_fit_progressive_may_run_one_instance_past_max_vcpus_but_not_past_the_block():
    """[aws: batch-ce.max-vcpus-overshoot]: one instance more than maxvCpus on demand; [aws:
    ec2-cb.launch-beyond-block-fails]: from a launch template into a block of 2, still 2."""
    for holds, running in ((None, 3), (2, 2)):
        batch = batch_with("BEST_FIT_PROGRESSIVE", block_holds=lambda batch, holds=holds: holds)
        for n in range(4):
            batch.add_job(jobName=f"j{n}", jobQueue=QUEUE, jobDefinition="train:1", shareIdentifier="research")
        batch.advance(60)
        assert batch.running_on(batch.compute_environments[CE]) == running
    best_fit = batch_with(None)
    for n in range(4):
        best_fit.add_job(jobName=f"j{n}", jobQueue=QUEUE, jobDefinition="train:1", shareIdentifier="research")
    best_fit.advance(60)
    assert best_fit.running_on(best_fit.compute_environments[CE]) == 2  # BEST_FIT on demand never passes maxvCpus


def test_a_job_on_a_block_ends_with_the_blocks_instances_and_its_retry_strategy_applies():
    """[aws: batch-ce.jobs-fail-with-block-instances]: when EC2 can no longer run instances from the launch template a
    job's instance came from (its Capacity Block's instances ended), the job ends FAILED as its host did, or goes back
    to RUNNABLE while its retry strategy has attempts left [aws: batch.retry-strategy-attempts]; it never works on.
    Fails on the model before issue 40, where such jobs ran on instances that no longer existed."""
    batch = batch_with("BEST_FIT_PROGRESSIVE", block_holds=lambda batch: 2 if batch.clock.now < 3600.0 else 0)
    lost = batch.add_job(
        jobName="lost",
        jobQueue=QUEUE,
        jobDefinition="train:1",
        shareIdentifier="research",
        parameters={"work_seconds": "7200"},
    )
    retried = batch.add_job(
        jobName="retried",
        jobQueue=QUEUE,
        jobDefinition="train:1",
        shareIdentifier="research",
        parameters={"work_seconds": "7200"},
        retryStrategy={"attempts": 2},
    )
    batch.advance(0)
    on = batch.container_instances(batch.compute_environments[CE]["ecsClusterArn"])
    assert len(on) == 2 and {batch.jobs[j]["container"]["containerInstanceArn"] for j in (lost, retried)} == set(on)
    for _ in range(4):
        batch.advance(900)
    assert batch.jobs[lost]["status"] == "FAILED" and batch.jobs[lost]["statusReason"].startswith(
        "Host EC2 (instance i-"
    )
    assert batch.jobs[retried]["status"] == "RUNNABLE"  # waits: the block can launch nothing more
    # STARTING for the first 15 minutes, then worked until its instance ended, not a second longer
    assert batch.work[lost] == 7200 - (3600 - 900)
    batch.advance(900)
    assert (
        batch.work[retried] == 7200 - (3600 - 900)
        and batch.container_instances(batch.compute_environments[CE]["ecsClusterArn"]) == {}
    )
