"""Submit a SageMaker training job into your team's quota share with the SageMaker Python SDK's
AWS Batch support (the ``[member]`` extra, docs/install.md: sagemaker-train >= 1.27).

Run it with the team's submission role's credentials (docs/team-guide.md):

    python examples/member/submit_sagemaker_sdk.py --setup setup.json --priority-class standard \\
        --instance-type ml.p5.48xlarge --job-name llama \\
        --image 111122223333.dkr.ecr.us-east-1.amazonaws.com/acme-ml/research:1

``setup.json`` is your team's discovery document. The SDK names the training job
``<team>-<job-name>-<time>`` and checkpoints to ``<checkpoint prefix>/<team>-<job-name>/``, so
resubmitting the same job name resumes from its checkpoints. The job runs on your team's active
training plan for the instance type, when it owns one (read from the document's
``training_plans_parameter``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import TeamSetup, model_trainer, submit_with_sdk


def main(argv: list[str] | None = None, sagemaker_session=None, batch_client=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", required=True, help="the team's discovery document (JSON)")
    parser.add_argument("--priority-class", required=True)
    parser.add_argument("--instance-type", required=True)
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--job-name", required=True, help="the part after '<team>-'")
    parser.add_argument("--image", required=True, help="training image, e.g. <the document's ecr_repository_uri>:<tag>")
    args = parser.parse_args(argv)
    # The SDK checks the execution role with iam:SimulatePrincipalPolicy, which the team's
    # submission role may not call (the SDK then only warns); the platform checked the role.
    os.environ.setdefault("SAGEMAKER_VALIDATE_ROLE", "false")
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        setup = TeamSetup.from_parameter(Path(args.setup).read_text(encoding="utf-8"))
        trainer = model_trainer(
            setup,
            base_job_name=f"{setup.team}-{args.job_name}",
            instance_type=args.instance_type,
            instance_count=args.instance_count,
            image_uri=args.image,
            sagemaker_session=sagemaker_session,
        )
        queued = submit_with_sdk(setup, trainer, priority_class=args.priority_class, batch_client=batch_client)
    except GovernanceError as error:
        print(error, file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:  # the SDK is not installed: the sentence says which extra brings it
        print(error, file=sys.stderr)
        return 1
    except NoCredentialsError:
        print(f"no AWS credentials: act as your team's submission role ({setup.submission_role_arn})", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as error:  # the training plans parameter or AWS Batch
        print(f"AWS refused or could not be reached: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(f"submitted {queued.job_name} ({queued.job_arn}) to {setup.job_queue} (quota share {setup.quota_share})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
