"""The constructs that deploy the Lambda controllers (code in ``lambda/gpu_governance_runtime``):
``capacity`` buys and rotates capacity for declared windows, ``reclaim`` lends, borrows and
reclaims where a backend cannot, ``guard`` checks service jobs' payloads against their team. All
build on ``base.GovernanceController``."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .capacity import CapacityController
    from .guard import SubmissionGuard
    from .reclaim import ReclaimController, ReclaimTarget

__all__ = ["CapacityController", "ReclaimController", "ReclaimTarget", "SubmissionGuard"]
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CapacityController": "capacity",
        "ReclaimController": "reclaim",
        "ReclaimTarget": "reclaim",
        "SubmissionGuard": "guard",
    },
)
