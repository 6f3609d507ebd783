"""A team's GPU-hour switch in an ``eks_kueue`` pool: its ClusterQueue's ``spec.stopPolicy``
(reclaim/gpu_hours.py holds it at the team's limit and lets it admit again next period).

``Hold`` stops the queue's new admissions and lets its admitted workloads finish; ``HoldAndDrain``,
which would evict them, is never set [aws: eks.kueue-stop-policy-hold]. The change is a JSON merge
patch carrying the ``metadata.resourceVersion`` read, so a change made since (a deploy, a person, a
paused team's stack) is refused with 409 Conflict and read again next tick, never overwritten
[aws: eks.kubernetes-patch-resource-version]. The cluster is reached as the usage observer reaches
it (backends/kueue_usage.py): the reclaim function's access entry maps its role into
``EKS_USAGE_READER_GROUP``, whose ClusterRole may also patch ClusterQueues on these pools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import boto3

from ...contract import KUEUE_CLUSTER_QUEUES_PATH
from ..base import SwitchError
from ..kueue_usage import ClusterApi, EksUsageError, cluster_api, eks_token, request_json, sts_endpoint

HOLD, ADMIT = "Hold", "None"  # Kueue's stopPolicy values (None: the default, admitting)


def connect(eks: Any, cluster: str) -> Callable[[], tuple[ClusterApi, str]]:
    """The cluster's API and a token, made when first asked (only a team at its limit reaches it).
    The endpoint's reach was checked by the tick's read, which just succeeded through it."""
    return lambda: (
        cluster_api(eks, cluster, in_vpc=True),
        eks_token(cluster, boto3.Session().get_credentials(), eks.meta.region_name, sts_endpoint(eks)),
    )


@dataclass
class ClusterQueueSwitch:
    """One ClusterQueue's ``stopPolicy``, read once and changed at the version read."""

    connect: Callable[[], tuple[ClusterApi, str]]
    name: str
    request: Callable[..., Any] = request_json

    @cached_property
    def _api(self) -> tuple[ClusterApi, str]:
        return self.connect()

    def _call(self, method: str, patch: Any = None) -> dict[str, Any]:
        api, token = self._api
        try:
            answer = self.request(
                method, f"{api.endpoint}{KUEUE_CLUSTER_QUEUES_PATH}/{self.name}", token, api.context, patch
            )
        except EksUsageError as error:  # 404, 409 Conflict, a timeout: the next tick reads again
            raise SwitchError(str(error)) from None
        if not isinstance(answer, dict) or (answer.get("metadata") or {}).get("name") != self.name:
            raise SwitchError(f"{method} ClusterQueue {self.name}: not that ClusterQueue ({str(answer)[:200]})")
        return answer

    @cached_property
    def _read(self) -> dict[str, Any]:
        return self._call("GET")

    def enabled(self) -> bool:
        return (self._read.get("spec") or {}).get("stopPolicy", ADMIT) == ADMIT

    def set(self, enabled: bool) -> None:
        version = (self._read.get("metadata") or {}).get("resourceVersion")
        if not version:
            raise SwitchError(f"ClusterQueue {self.name}: no metadata.resourceVersion read; not changed")
        self._call(
            "PATCH", {"metadata": {"resourceVersion": version}, "spec": {"stopPolicy": ADMIT if enabled else HOLD}}
        )
