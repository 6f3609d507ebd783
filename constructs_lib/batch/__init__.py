"""The old import path of the AWS Batch constructs, kept so existing apps keep working: the
quota-share queue is ``constructs_lib.backends.batch_quota_share``'s, the fair-share queue
``constructs_lib.backends.batch_fair_share``'s (import them from ``constructs_lib``)."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from constructs_lib.backends.batch_fair_share.construct import (
        FairShareJobQueue,
        FairShareJobQueueProps,
        fair_share_weight_factor,
    )
    from constructs_lib.backends.batch_queue import TEAM_TAG
    from constructs_lib.backends.batch_quota_share.construct import (
        QuotaManagedTrainingQueue,
        QuotaManagedTrainingQueueProps,
    )

_DEFINED_IN = {
    ".backends.batch_queue": ("TEAM_TAG",),
    ".backends.batch_fair_share.construct": ("FairShareJobQueue", "FairShareJobQueueProps", "fair_share_weight_factor"),
    ".backends.batch_quota_share.construct": ("QuotaManagedTrainingQueue", "QuotaManagedTrainingQueueProps"),
}
__all__ = [
    "TEAM_TAG",
    "FairShareJobQueue",
    "FairShareJobQueueProps",
    "QuotaManagedTrainingQueue",
    "QuotaManagedTrainingQueueProps",
    "fair_share_weight_factor",
]
__getattr__, __dir__ = lazy_exports(__name__, {name: module for module, names in _DEFINED_IN.items() for name in names})
