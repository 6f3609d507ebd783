"""What no offline test can show, checked in a sandbox capacity account (``make verify-live``).

Run it with credentials that may assume team A's submission role, against a deployed
organisation with a quota-share queue holding shares for teams A and B:

    python tests/live/verify_live.py --queue sagemaker-training --team-a research --team-b training \\
        --image <training image URI> --instance-type ml.g6e.12xlarge --output s3://<team A bucket>/verify-live/

It asks, as team A's submission role:

(a) quota share: may A submit into B's quota share? The policy names only A's share as the
    optional quota-share resource of batch:SubmitServiceJob; this shows whether Batch checks it.
(b) pass role: may A submit a service job whose payload runs as B's execution role? Batch's
    service-linked role may pass any role to SageMaker; this shows whether Batch checks the
    *submitter's* iam:PassRole. The job is named with B's prefix so B's trust condition (jobs
    named after B) does not decide the outcome.
(c) naming: the SageMaker training job name Batch gave, which the execution role's trust and
    log scope assume to be ``AWSBatch<payload TrainingJobName>``.

And what the submission guard (``SubmissionGuard``, docs/security.md) checks because IAM cannot:
does Batch or SageMaker itself refuse, into A's own share and as A's own role,

(d) tags: a payload whose training-job ``Tags`` name team B (B's budget and TeamSpendUsd)?
(e) plan: a payload whose ``ResourceConfig.TrainingPlanArn`` is B's plan (``--plan-b``)?
(f) image: a payload whose ``TrainingImage`` is in B's repository (``--image-b``; A's execution
    role is refused by B's repository policy, but only once an instance pulls it)?

"NOT enforced" there means only the guard stops such a job: set ``guard_mode: act`` in the governance file.

Every job it starts is terminated at once. Exit 0: both enforced and the naming as assumed;
1: a check found a hole; 3: inconclusive (setup, or no capacity before the timeout) or the
naming differs. docs/security.md says what to do in each case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_governance_runtime.contract import TAG_TEAM as TEAM_TAG  # plain Python: no aws_cdk

ENFORCED, HOLE, INCONCLUSIVE = "enforced", "NOT enforced", "inconclusive"
AS_ASSUMED, DIFFERS = "as assumed", "differs"  # (c) is an observation, not a control
BATCH_TRAINING_JOB_PREFIX = "AWSBatch"  # constructs_lib.model, without importing the library
_STARTED = {"SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"}


@dataclass(frozen=True)
class Outcome:
    check: str
    verdict: str
    detail: str


def payload(name: str, role_arn: str, image: str, instance_type: str, output: str) -> str:
    """The smallest SageMaker CreateTrainingJob request: one instance, one minute."""
    return json.dumps(
        {
            "TrainingJobName": name,
            "RoleArn": role_arn,
            "AlgorithmSpecification": {
                "TrainingImage": image,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["true"],
            },
            "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 1},
            "OutputDataConfig": {"S3OutputPath": output},
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
        }
    )


def _denied(error: Exception) -> bool:
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
    return code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation") or "not authorized" in str(error)


def _submit(batch, *, queue: str, share: str, team: str, body: str, name: str) -> str:
    return batch.submit_service_job(
        jobName=name,
        jobQueue=queue,
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=body,
        quotaShareName=share,
        tags={TEAM_TAG: team},
    )["jobId"]


def _terminate(batch, job_id: str) -> None:
    batch.terminate_service_job(jobId=job_id, reason="gpu-governance verify-live probe")


def check_quota_share(batch, *, queue: str, team_a: str, team_b: str, body: Callable[[str], str]) -> Outcome:
    """(a): A's own share must work (else the probe proves nothing), B's must be refused."""
    try:
        _terminate(
            batch,
            _submit(
                batch,
                queue=queue,
                share=team_a,
                team=team_a,
                body=body(f"{team_a}-verify-live-own"),
                name="verify-live-own",
            ),
        )
    except Exception as error:  # noqa: BLE001  any failure here is a setup problem, reported as such
        return Outcome("quota share", INCONCLUSIVE, f"team {team_a} cannot submit into its own share: {error}")
    try:
        job_id = _submit(
            batch, queue=queue, share=team_b, team=team_a, body=body(f"{team_a}-verify-live-a"), name="verify-live-a"
        )
    except Exception as error:  # noqa: BLE001
        if _denied(error):
            return Outcome("quota share", ENFORCED, f"SubmitServiceJob into share {team_b} refused: {error}")
        return Outcome("quota share", INCONCLUSIVE, f"refused for another reason: {error}")
    _terminate(batch, job_id)
    return Outcome("quota share", HOLE, f"team {team_a} submitted job {job_id} into share {team_b} (terminated)")


def check_pass_role(
    batch,
    *,
    queue: str,
    team_a: str,
    team_b: str,
    body: str,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Outcome, Outcome]:
    """(b) and (c): submit into A's own share a payload that runs as B's execution role."""
    try:
        job_id = _submit(batch, queue=queue, share=team_a, team=team_a, body=body, name="verify-live-b")
    except Exception as error:  # noqa: BLE001
        verdict = ENFORCED if _denied(error) else INCONCLUSIVE
        return Outcome("pass role", verdict, f"SubmitServiceJob refused: {error}"), Outcome(
            "naming", INCONCLUSIVE, "no job started"
        )
    job = _until_started_or_failed(batch, job_id, timeout_s=timeout_s, sleep=sleep, clock=clock)
    given = ((job.get("latestAttempt") or {}).get("serviceResourceId") or {}).get("value", "")
    expected = BATCH_TRAINING_JOB_PREFIX + json.loads(body)["TrainingJobName"]
    naming_verdict = (
        INCONCLUSIVE if not given else AS_ASSUMED if given.rsplit("/", 1)[-1].startswith(expected) else DIFFERS
    )
    naming = Outcome(
        "naming", naming_verdict, f"Batch named the training job {given or '(not started)'}; assumed {expected}..."
    )
    status, reason = job.get("status", "?"), job.get("statusReason", "")
    if status in _STARTED:
        return Outcome(
            "pass role", HOLE, f"job {job_id} of team {team_a} reached {status} as team {team_b}'s role (terminated)"
        ), naming
    if status == "FAILED" and ("PassRole" in reason or "not authorized" in reason):
        return Outcome("pass role", ENFORCED, f"job failed: {reason}"), naming
    return Outcome(
        "pass role", INCONCLUSIVE, f"job ended {status} ({reason or 'no capacity before the timeout?'})"
    ), naming


def _until_started_or_failed(
    batch, job_id: str, *, timeout_s: float, sleep: Callable[[float], None], clock: Callable[[], float]
) -> dict[str, Any]:
    """The service job as last described once it started or failed, or at the timeout; a job not
    ended by then is terminated (a probe never leaves a job running)."""
    deadline, job = clock() + timeout_s, {}
    try:
        while clock() < deadline:
            job = batch.describe_service_job(jobId=job_id)
            if job["status"] in _STARTED or job["status"] == "FAILED":
                break
            sleep(15)
    finally:
        if job.get("status") not in ("SUCCEEDED", "FAILED"):
            _terminate(batch, job_id)
    return job


def check_payload_refused(
    batch,
    *,
    check: str,
    queue: str,
    team: str,
    body: str,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """(d)-(f): does Batch or SageMaker refuse ``body`` (submitted into the team's own share) before
    its training job starts? Started: only the guard stops it (NOT enforced); refused at submission
    or failed before starting: enforced, with AWS's reason."""
    try:
        job_id = _submit(batch, queue=queue, share=team, team=team, body=body, name=f"verify-live-{check}")
    except Exception as error:  # noqa: BLE001
        return Outcome(
            check,
            ENFORCED if _denied(error) or "ClientException" in str(error) else INCONCLUSIVE,
            f"SubmitServiceJob refused: {error}",
        )
    job = _until_started_or_failed(batch, job_id, timeout_s=timeout_s, sleep=sleep, clock=clock)
    status, reason = job.get("status", "?"), job.get("statusReason", "")
    if status in _STARTED:
        return Outcome(check, HOLE, f"job {job_id} reached {status} (terminated): only the submission guard stops it")
    if status == "FAILED":
        return Outcome(check, ENFORCED, f"job failed before starting: {reason}")
    return Outcome(check, INCONCLUSIVE, f"job ended {status} ({reason or 'no capacity before the timeout?'})")


def main(argv: list[str] | None = None) -> int:
    import boto3

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", required=True, help="quota-share job queue name")
    parser.add_argument("--team-a", required=True)
    parser.add_argument("--team-b", required=True)
    parser.add_argument("--image", required=True, help="any training image the account can pull")
    parser.add_argument("--instance-type", required=True, help="an instance type of team A's quota share")
    parser.add_argument("--output", required=True, help="S3 output path team A may write")
    parser.add_argument("--region")
    parser.add_argument("--timeout-minutes", type=float, default=20)
    parser.add_argument("--plan-b", help="(e): a training plan ARN bought for team B (tagged gpu-governance:team = B)")
    parser.add_argument("--image-b", help="(f): an image URI in team B's repository")
    args = parser.parse_args(argv)

    session = boto3.Session(region_name=args.region)
    account = session.client("sts").get_caller_identity()["Account"]
    partition = session.get_partition_for_region(session.region_name)
    role = lambda team, kind: f"arn:{partition}:iam::{account}:role/gpu-governance/{team}-gpu-{kind}"  # noqa: E731  tenancy.ROLE_PATH
    credentials = session.client("sts").assume_role(
        RoleArn=role(args.team_a, "submit"), RoleSessionName="gpu-governance-verify-live"
    )["Credentials"]
    as_team_a = boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=session.region_name,
    ).client("batch")
    body = lambda name, team=args.team_a: payload(
        name, role(team, "training"), args.image, args.instance_type, args.output
    )  # noqa: E731
    outcomes = [check_quota_share(as_team_a, queue=args.queue, team_a=args.team_a, team_b=args.team_b, body=body)]
    outcomes += check_pass_role(
        as_team_a,
        queue=args.queue,
        team_a=args.team_a,
        team_b=args.team_b,
        body=body(f"{args.team_b}-verify-live-b", args.team_b),
        timeout_s=args.timeout_minutes * 60,
    )
    # (d)-(f): a payload otherwise A's own, with one thing of B's in it.
    own = json.loads(body(f"{args.team_a}-verify-live-guard"))
    probes = {"tags": {**own, "Tags": [{"Key": TEAM_TAG, "Value": args.team_b}]}}
    if args.plan_b:
        probes["plan"] = {**own, "ResourceConfig": {**own["ResourceConfig"], "TrainingPlanArn": args.plan_b}}
    if args.image_b:
        probes["image"] = {
            **own,
            "AlgorithmSpecification": {**own["AlgorithmSpecification"], "TrainingImage": args.image_b},
        }
    outcomes += [
        check_payload_refused(
            as_team_a,
            check=check,
            queue=args.queue,
            team=args.team_a,
            body=json.dumps(probe),
            timeout_s=args.timeout_minutes * 60,
        )
        for check, probe in probes.items()
    ]
    for outcome in outcomes:
        print(f"{outcome.check:12} {outcome.verdict:14} {outcome.detail}")
    verdicts = {o.verdict for o in outcomes}
    return 1 if HOLE in verdicts else 3 if verdicts & {INCONCLUSIVE, DIFFERS} else 0


if __name__ == "__main__":
    sys.exit(main())
