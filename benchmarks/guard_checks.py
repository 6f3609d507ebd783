"""What the submission guard's checks cost per event (gpu_governance_runtime.guard.checks), the AWS
calls aside: a payload as the boto3 path sends it, the largest payload Batch accepts (10 KiB) filled
with allowed members, and 10 KiB of nesting (refused unread). Prints a Markdown table; the figures
size nothing by themselves (an event's AWS calls take hundreds of times longer, docs/security.md,
row 4), they show the checks are not what the guard waits on.

    python benchmarks/guard_checks.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambda"))

from gpu_governance_runtime.contract import TAG_COST_CENTRE, TAG_TEAM  # noqa: E402
from gpu_governance_runtime.guard.checks import TeamRules, violations  # noqa: E402

PAYLOAD_LIMIT = 10 * 1024  # Batch: "Maximum job service request payload size (for SubmitServiceJob API operations)"
REGISTRY = "111122223333.dkr.ecr.us-east-1.amazonaws.com"
ROLE = "arn:aws:iam::111122223333:role/gpu-governance/research-gpu-training"
TEAMS = {
    "research": TeamRules(execution_role_arn=ROLE, repositories=(f"{REGISTRY}/acme-ml/research",), cost_centre="cc")
}


def typical() -> dict:
    return {
        "TrainingJobName": "research-llama-ft",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": f"{REGISTRY}/acme-ml/research:1", "TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "VolumeSizeInGB": 500},
        "OutputDataConfig": {"S3OutputPath": "s3://acme-ml-research/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "Tags": [{"Key": TAG_TEAM, "Value": "research"}, {"Key": TAG_COST_CENTRE, "Value": "cc"}],
    }


def largest() -> dict:
    """The typical payload grown to 10 KiB with input channels (the member with the most items)."""
    request, index = typical(), 0
    request["InputDataConfig"] = []
    while len(json.dumps(request)) < PAYLOAD_LIMIT - 200:
        request["InputDataConfig"].append(
            {
                "ChannelName": f"c{index}",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://acme-ml-research/d/{index}"}},
            }
        )
        index += 1
    return request


def job(text: str) -> dict:
    return {"tags": {TAG_TEAM: "research"}, "quotaShareName": "research", "serviceRequestPayload": text}


def timed(text: str, runs: int) -> tuple[float, float, int]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        _, found = violations(job(text), TEAMS, plan_owner=lambda arn: "research", training_job_tags=None)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6, max(samples) * 1e6, len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    runs = parser.parse_args().runs
    cases = {
        "typical payload (boto3 path)": json.dumps(typical()),
        "10 KiB of allowed members": json.dumps(largest()),
        "10 KiB of nesting (refused unread)": "[" * (PAYLOAD_LIMIT // 2) + "]" * (PAYLOAD_LIMIT // 2),
    }
    print(f"| payload | bytes | median µs | max µs | violations | ({runs} runs, Python {sys.version.split()[0]}) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, text in cases.items():
        median, worst, found = timed(text, runs)
        print(f"| {name} | {len(text)} | {median:.0f} | {worst:.0f} | {found} | |")


if __name__ == "__main__":
    main()
