"""Per-team data and identity: the team's key, bucket and roles, which IAM (not project
membership) uses to decide access. Used by every backend."""

from .team import TRAINING_LOG_GROUP, SubmissionTarget, TeamTenancy, submission_role_arn, training_job_name_patterns

__all__ = ["TRAINING_LOG_GROUP", "SubmissionTarget", "TeamTenancy", "submission_role_arn", "training_job_name_patterns"]
