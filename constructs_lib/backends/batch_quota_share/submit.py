"""`gpu-governance team submit-example TEAM --backend batch`: an AWS CLI ``submit-service-job``
request into the team's quota share. Values only a deployment knows (bucket, key) come from
``--setup``; without it they are read from the shell variables ``TEAM_BUCKET`` and
``TEAM_KMS_KEY`` when the snippet runs."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from constructs_lib.cli.member import image_of
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.setup import TeamSetup, unique_job_name

from .member import active_training_plan, service_job_request

# Shell variables the batch snippet reads for what only a deployment knows.
UNKNOWN_UNTIL_DEPLOYED = {"bucket": "TEAM_BUCKET", "kms_key_arn": "TEAM_KMS_KEY"}


def example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """An AWS CLI ``submit-service-job`` request into the team's quota share."""
    image = image_of(args, setup)
    job_name = unique_job_name(setup.team, args.job_name)
    plans = None
    if args.training_plans:
        try:
            plans = Path(args.training_plans).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise GovernanceError.single(
                "--training-plans", "cannot read the file", args.training_plans, f"a readable JSON file ({error})"
            ) from None
    plan = active_training_plan(setup, instance_type, plans)
    sys.stdout.write(
        _batch_snippet(
            setup,
            job_name=job_name,
            priority_class=priority_class,
            instance_type=instance_type,
            image_uri=image,
            training_plan_arn=plan,
        )
    )
    return 0


def _batch_snippet(setup: TeamSetup, **job: str) -> str:
    # ${NAME:?}: the shell stops with "NAME: parameter null or not set" instead of sending an empty bucket.
    placeholders = {
        key: f"${{{variable}:?}}" for key, variable in UNKNOWN_UNTIL_DEPLOYED.items() if getattr(setup, key) is None
    }
    filled = replace(setup, **placeholders)
    request = service_job_request(filled, **job)
    file = f"{setup.team}-job.json"
    lines = [
        f"# team {setup.team}, pool {setup.pool}: quota share {setup.quota_share}, priority class {job['priority_class']} "
        f"(schedulingPriority {request['schedulingPriority']}), run as {setup.submission_role_arn}"
    ]
    lines.append("set -euo pipefail  # a script (bash submit.sh): it stops at the first error")
    if placeholders:
        # Checked before anything runs: the first one missing is the only error, and aws never runs.
        lines.append(
            ": "
            + " ".join(
                f'"${{{variable}:?set it to the {key} of the team discovery document}}"'
                for key, variable in UNKNOWN_UNTIL_DEPLOYED.items()
                if key in placeholders
            )
        )
    if job.get("training_plan_arn"):
        lines.append(f"# on the team's training plan {job['training_plan_arn']} (ResourceConfig.TrainingPlanArn)")
    elif setup.training_plans_parameter:
        lines.append(
            f"# no active training plan of {job['instance_type']} given: when the team owns one, pass --training-plans with the value of "
            f"`aws ssm get-parameter --name {setup.training_plans_parameter} --query Parameter.Value --output text`"
        )
    # An unquoted heredoc expands the variables; quoted, nothing in the JSON is touched.
    lines += [
        f"cat > {file} <<{'EOF' if placeholders else chr(39) + 'EOF' + chr(39)}",
        json.dumps(request, indent=2),
        "EOF",
        f"aws batch submit-service-job --region {setup.region} --cli-input-json file://{file}",
        "",
    ]
    return "\n".join(lines)
