"""Submit a SageMaker training job into your team's quota share with boto3 only.

Run it with the team's submission role's credentials (docs/team-guide.md):

    python examples/member/submit_boto3.py --setup setup.json --priority-class standard \\
        --instance-type ml.p5.48xlarge --job-name llama \\
        --image 111122223333.dkr.ecr.us-east-1.amazonaws.com/acme-ml/research:1

``setup.json`` is your team's discovery document (the value of its SSM parameter). Prints the
service job's id; ``--dry-run`` prints the request instead of sending it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import TeamSetup, service_job_request, unique_job_name


def main(argv: list[str] | None = None, batch_client=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", required=True, help="the team's discovery document (JSON)")
    parser.add_argument("--priority-class", required=True)
    parser.add_argument("--instance-type", required=True)
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--job-name", required=True, help="the part after '<team>-'; a UTC time is appended")
    parser.add_argument("--image", required=True, help="training image, e.g. <the document's ecr_repository_uri>:<tag>")
    parser.add_argument(
        "--input", action="append", default=[], metavar="CHANNEL=S3URI", help="an input channel (repeatable)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the request, send nothing")
    args = parser.parse_args(argv)
    try:
        setup = TeamSetup.from_parameter(Path(args.setup).read_text(encoding="utf-8"))
        request = service_job_request(
            setup,
            job_name=unique_job_name(setup.team, args.job_name),
            priority_class=args.priority_class,
            instance_type=args.instance_type,
            instance_count=args.instance_count,
            image_uri=args.image,
            inputs=dict(item.split("=", 1) for item in args.input),
        )
    except GovernanceError as error:
        print(error, file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps(request, indent=2))
        return 0
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        if batch_client is None:
            import boto3

            batch_client = boto3.client(
                "batch", region_name=setup.region
            )  # the team's region, not the caller's default
        answer = batch_client.submit_service_job(**request)
    except NoCredentialsError:
        print(f"no AWS credentials: act as your team's submission role ({setup.submission_role_arn})", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as error:
        print(f"AWS Batch refused or could not be reached: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(
        f"submitted {answer['jobName']} as service job {answer['jobId']} to {setup.job_queue} (quota share {setup.quota_share})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
