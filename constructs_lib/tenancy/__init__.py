"""Per-team data and identity: the team's key, bucket, roles and image repository, which IAM
(not project membership) uses to decide access. Used by every backend."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .team import TRAINING_LOG_GROUP, SubmissionTarget, TeamTenancy, submission_role_arn, training_job_name_patterns

__all__ = ["TRAINING_LOG_GROUP", "SubmissionTarget", "TeamTenancy", "submission_role_arn", "training_job_name_patterns"]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "team"))
