"""Training plans delivered: each team learns the ARNs of its active training plans for SageMaker
training jobs from an SSM parameter (``contract.team_training_plans_parameter``), which a job
passes as ``ResourceConfig.TrainingPlanArn``. HyperPod instance groups are pointed at their plan
by ``hyperpod.py`` instead.

Idempotent: the parameter is read first and written only when the list changed, so a repeated
run or event writes nothing, and a run that crashed midway is completed by the next. A team
whose plans have all ended gets ``[]``, so no job is sent to an expired plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from ..contract import CONSUMER_SAGEMAKER_TRAINING_JOBS, team_training_plans_parameter
from ..planners.offers import Reservation
from ..planners.window import Window


def publish(
    *, windows: Mapping[str, Window], owned: Iterable[Reservation], ssm: Any, organisation: str
) -> list[dict[str, Any]]:
    plans: dict[str, list[dict[str, str]]] = {
        w.team: [] for w in windows.values() if w.consumer.get("kind") == CONSUMER_SAGEMAKER_TRAINING_JOBS
    }
    for plan in owned:
        window = windows.get(plan.window)
        if (
            window is not None
            and window.consumer.get("kind") == CONSUMER_SAGEMAKER_TRAINING_JOBS
            and plan.state == "active"
        ):
            plans[window.team].append(
                {
                    "arn": plan.id,
                    "window": window.name,
                    "instance_type": window.instance_type,
                    "ends": plan.end.isoformat(),
                }
            )
    results = []
    for team, active in sorted(plans.items()):
        name = team_training_plans_parameter(organisation, team)
        value = json.dumps(sorted(active, key=lambda p: p["arn"]), sort_keys=True)
        try:
            changed = put_if_changed(ssm, name, value)
        except ClientError as error:  # reported and retried next run; the other teams are still served
            results.append({"team": team, "parameter": name, "error": f"{error.response['Error']['Code']}: {error}"})
            continue
        results.append({"team": team, "parameter": name, "plans": [p["arn"] for p in active], "changed": changed})
    return results


def put_if_changed(ssm: Any, name: str, value: str, *, key_id: str | None = None) -> bool:
    """Write the SSM parameter only when its value differs (a write bumps its version and costs a
    call every run otherwise); whether it was written. With ``key_id``, a SecureString under that
    KMS key (rewritten too when someone left a plain String of the same value). A ClientError goes
    to the caller."""
    wanted = ("SecureString" if key_id else "String", value)
    try:
        found = ssm.get_parameter(Name=name, **({"WithDecryption": True} if key_id else {}))["Parameter"]
        current = (found["Type"], found["Value"])
    except ssm.exceptions.ParameterNotFound:
        current = None
    if current != wanted:
        ssm.put_parameter(
            Name=name, Value=value, Type=wanted[0], Overwrite=True, **({"KeyId": key_id} if key_id else {})
        )
    return current != wanted
