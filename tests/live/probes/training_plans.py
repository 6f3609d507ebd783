"""SageMaker training plans (register section ``sm-plan.*``): that SearchTrainingPlanOfferings takes
a duration in hours, as the capacity planner now searches (the gap's whole hours, not whole days;
``planners/market.py`` ``training_plan_search``), and what durations it answers. Read-only: a
search buys nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from gpu_governance_runtime.planners.kinds.training_plan import (  # plain Python
    TRAINING_PLAN_TARGETS,
    training_plan_offering,
    training_plan_search,
)

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed

INSTANCE_TYPE = Option("--plan-instance-type", "an instance type training plans are sold for (ml.p5.48xlarge)")
OPTIONS = [INSTANCE_TYPE]
GAP_HOURS = 15  # the guide's own example: not a whole number of days


def hours_search(context: Context, cleanup: Cleanup) -> Verdict:
    """The search the planner makes for a gap of GAP_HOURS starting a day from now, for one instance."""
    gap_start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    gap_end = gap_start + timedelta(hours=GAP_HOURS)
    hours, count = training_plan_search(gap_start, gap_end, 1)
    try:
        answer = context.client("sagemaker", None).search_training_plan_offerings(
            InstanceType=context.args.plan_instance_type,
            InstanceCount=count,
            StartTimeAfter=gap_start - timedelta(days=1),
            EndTimeBefore=gap_end + timedelta(days=1),
            DurationHours=hours,
            TargetResources=[TRAINING_PLAN_TARGETS["sagemaker_training_jobs"]],
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationException" and "Duration" in str(error):
            return failed(
                f"a search of {hours} hours was refused ({error}): the planner's training-plan searches fail and their "
                "windows are reported NOT COVERED"
            )
        return inconclusive(f"SearchTrainingPlanOfferings failed: {error}")
    offerings = [training_plan_offering(o) for o in answer.get("TrainingPlanOfferings") or []]
    if not offerings:
        return passed(f"a search of {hours} hours was accepted; no offering of {context.args.plan_instance_type} now")
    lengths = sorted({f"{o.duration_hours} h {o.duration_minutes} min" for o in offerings})
    days = all(o.duration_minutes == 0 and o.duration_hours % 24 == 0 for o in offerings)
    return passed(
        f"a search of {hours} hours was accepted: {len(offerings)} offerings of {', '.join(lengths)}"
        + (" (whole days only: the planner buys the cheapest that covers the gap)" if days else "")
    )


PROBES = [
    Probe(
        name="training-plan-hours-search",
        row="sm-plan.search-in-hours",
        does=(
            f"searches training plan offerings (SearchTrainingPlanOfferings) for one --plan-instance-type for "
            f"{GAP_HOURS} hours, starting a day from now, as the planner searches a gap"
        ),
        passes_when="the search in hours is accepted; the durations offered are printed",
        needs=(INSTANCE_TYPE.flag,),
        cost=lambda args: "none: SearchTrainingPlanOfferings only reads (nothing is bought)",
        run=hours_search,
    )
]
