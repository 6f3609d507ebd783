"""The rules of the GpuGovernance pack, one per module; ``RULES`` is the pack's order."""

from . import (
    borrow_without_limit,
    capacity_purchase_grant,
    eks_access_scope,
    job_control_without_share,
    key_admits_account,
    kms_key_rotation,
    pass_any_role,
    preset_contradiction,
    purchaser_limits,
    shared_queue_without_policy,
)

RULES = tuple(
    module.RULE
    for module in (
        borrow_without_limit,
        shared_queue_without_policy,
        capacity_purchase_grant,
        job_control_without_share,
        pass_any_role,
        kms_key_rotation,
        key_admits_account,
        eks_access_scope,
        preset_contradiction,
        purchaser_limits,
    )
)
