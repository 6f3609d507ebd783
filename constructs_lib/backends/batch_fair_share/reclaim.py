"""How the reclaim controller reaches a ``batch_fair_share`` pool: through its job queue."""

from constructs_lib.controllers.reclaim import (
    job_queue_entry as entry,
    job_queue_problems as problems,
    job_queue_target as target,
)

__all__ = ["entry", "problems", "target"]
