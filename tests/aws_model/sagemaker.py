"""Small models of the SageMaker HyperPod compute quotas (task governance) and the EventBridge bus
the reclaim controller's GPU-hour limits act on (reclaim/gpu_hours.py): ``list_compute_quotas``,
``describe_compute_quota`` and ``update_compute_quota`` of one cluster's teams, and ``put_events``; and
``list_tags`` of the training plans the submission guard reads (guard/handler.py).
Served behind real boto3 clients (:meth:`FakeSageMaker.client`, :meth:`FakeEventBridge.client`,
:mod:`tests.aws_model.sdk`), faulted at the call boundary like the others (``Faults``).

Each rule names its row of the register (docs/aws-behaviour.md) as ``[aws: <row id>]``.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from . import sdk
from .batch import Clock, Faults

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"


class FakeSageMaker:
    """One HyperPod cluster's compute quotas, one per team, named after it."""

    def __init__(self, clock: Clock, *, faults: Faults | None = None, cluster: str = CLUSTER):
        self.clock, self.faults, self.cluster = clock, faults or Faults(), cluster
        self.quotas: dict[str, dict[str, Any]] = {}  # compute quota id -> what DescribeComputeQuota shows
        self.tags: dict[str, dict[str, str]] = {}  # resource ARN -> its tags (add_tagged)
        self.caller = "team"

    def client(self, *, config: Any = None, by: str, calls: sdk.Calls | None = None) -> Any:
        def answer(operation: str, request: dict[str, Any]) -> dict[str, Any]:
            saved, self.caller = self.caller, by
            try:
                return {
                    "ListComputeQuotas": self.list_compute_quotas,
                    "DescribeComputeQuota": self.describe_compute_quota,
                    "UpdateComputeQuota": self.update_compute_quota,
                    "ListTags": self.list_tags,
                }[operation](**request)
            finally:
                self.caller = saved

        return sdk.client("sagemaker", answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    def add_compute_quota(self, team: str, *, state: str = "Enabled") -> str:
        quota_id = f"{len(self.quotas) + 1:012d}"
        self.quotas[quota_id] = {
            "ComputeQuotaId": quota_id,
            "ComputeQuotaArn": f"{self.cluster.replace(':cluster/', ':compute-quota/')}/{quota_id}",
            "Name": team,
            "ClusterArn": self.cluster,
            "Status": "Created",
            "ActivationState": state,
            "ComputeQuotaVersion": 1,
            "ComputeQuotaTarget": {"TeamName": team},
        }
        return quota_id

    def deploy(self, quota_id: str, state: str) -> None:
        """The team's stack deployed again: the compute quota's state as its template declares (a new version)."""
        quota = self.quotas[quota_id]
        quota.update(ActivationState=state, ComputeQuotaVersion=quota["ComputeQuotaVersion"] + 1)

    def list_compute_quotas(self, *, ClusterArn: str, NameContains: str = "", **_: Any) -> dict[str, Any]:
        self._check("ListComputeQuotas", "before")  # [aws: hyperpod.compute-quota-target-version]
        listed = [
            {k: q[k] for k in ("ComputeQuotaId", "ComputeQuotaArn", "Name", "ClusterArn", "Status", "ActivationState")}
            | {"ComputeQuotaVersion": q["ComputeQuotaVersion"]}
            for q in self.quotas.values()
            if q["ClusterArn"] == ClusterArn and NameContains in q["Name"]
        ]
        return self._answered("ListComputeQuotas", {"ComputeQuotaSummaries": listed})

    def describe_compute_quota(self, *, ComputeQuotaId: str, **_: Any) -> dict[str, Any]:
        self._check("DescribeComputeQuota", "before")  # [aws: hyperpod.compute-quota-target-version]
        return self._answered("DescribeComputeQuota", dict(self.quotas[ComputeQuotaId]))

    def update_compute_quota(
        self, *, ComputeQuotaId: str, TargetVersion: int, ActivationState: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self._check("UpdateComputeQuota", "before")
        quota = self.quotas[ComputeQuotaId]
        # An update names the version it was read at; one made since is refused, not overwritten
        # [aws: hyperpod.compute-quota-target-version].
        if TargetVersion != quota["ComputeQuotaVersion"]:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ConflictException",
                        "Message": f"version {quota['ComputeQuotaVersion']} is current",
                    }
                },
                "UpdateComputeQuota",
            )
        if ActivationState is not None:
            quota["ActivationState"] = ActivationState
            quota["_changed_by"] = self.caller
        quota["ComputeQuotaVersion"] += 1
        return self._answered(
            "UpdateComputeQuota", {"ComputeQuotaArn": quota["ComputeQuotaArn"], "ComputeQuotaId": ComputeQuotaId}
        )

    def add_tagged(self, arn: str, tags: dict[str, str]) -> None:
        """A resource (a training plan the capacity controller bought) and the tags it was created with."""
        self.tags[arn] = dict(tags)

    def list_tags(self, *, ResourceArn: str, **_: Any) -> dict[str, Any]:
        self._check("ListTags", "before")  # the resource's tags, in one page here [aws: sm-plan.list-tags]
        tags = [{"Key": k, "Value": v} for k, v in self.tags[ResourceArn].items()]
        return self._answered("ListTags", {"Tags": tags})

    def _check(self, operation: str, phase: str) -> None:
        self.faults.check(operation, phase, throttle_code="ThrottlingException", service="sagemaker")

    def _answered(self, operation: str, response: dict[str, Any]) -> dict[str, Any]:
        self._check(operation, "after")
        return {k: v for k, v in response.items() if not k.startswith("_")}


class FakeEventBridge:
    """The account's default event bus: every entry it accepted, with when and from whom."""

    def __init__(self, clock: Clock, *, faults: Faults | None = None):
        self.clock, self.faults = clock, faults or Faults()
        self.accepted: list[dict[str, Any]] = []  # each entry as sent, with _at and _by

    def client(self, *, config: Any = None, by: str, calls: sdk.Calls | None = None) -> Any:
        def answer(operation: str, request: dict[str, Any]) -> dict[str, Any]:
            assert operation == "PutEvents", operation
            return self.put_events(**request, _by=by)

        return sdk.client("events", answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    def put_events(self, *, Entries: list[dict[str, Any]], _by: str = "team") -> dict[str, Any]:
        # Every entry accepted; PutEvents is not idempotent, so an entry sent again is put again and a rule
        # delivers each at least once [aws: events.put-events-each-entry].
        self.faults.check("PutEvents", "before", throttle_code="ThrottlingException", service="events")
        for entry in Entries:
            self.accepted.append({**entry, "Detail": json.loads(entry["Detail"]), "_at": self.clock.now, "_by": _by})
        self.faults.check("PutEvents", "after", throttle_code="ThrottlingException", service="events")
        return {
            "FailedEntryCount": 0,
            "Entries": [{"EventId": f"event-{len(self.accepted) - i}"} for i in range(len(Entries))],
        }
