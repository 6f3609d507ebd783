"""A team's GPU-hour switch in a HyperPod EKS pool: its compute quota's activation (reclaim/gpu_hours.py
turns it off at the team's limit)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...quotas import describe_team_compute_quota


@dataclass
class ComputeQuotaSwitch:
    """A HyperPod compute quota's ``ActivationState``, updated at the version read (``TargetVersion``)."""

    sagemaker: Any
    cluster_arn: str
    team: str

    @cached_property
    def _described(self) -> dict[str, Any]:
        return describe_team_compute_quota(self.sagemaker, self.cluster_arn, self.team)

    def enabled(self) -> bool:
        return self._described.get("ActivationState", "Enabled") == "Enabled"

    def set(self, enabled: bool) -> None:
        # the version read: a change made since is refused (and read again next tick), not overwritten
        # [aws: hyperpod.compute-quota-target-version]
        self.sagemaker.update_compute_quota(
            ComputeQuotaId=self._described["ComputeQuotaId"],
            TargetVersion=self._described["ComputeQuotaVersion"],
            ActivationState="Enabled" if enabled else "Disabled",
        )
