"""A small stateful model of AWS Batch jobs on a fair-share job queue, played by AWS's documented
rules (each cited beside the code), behind the boto3 client methods and response shapes the
controllers use: ``list_jobs`` (through ``get_paginator``), ``describe_jobs``, ``submit_job``,
``terminate_job``, and for queues placed on compute environments (:meth:`FakeBatch.add_compute_environment`,
:meth:`FakeBatch.add_job_queue`) ``describe_compute_environments``, ``describe_job_queues``,
``update_compute_environment`` and ``update_job_queue``; and for quota-share queues of service jobs
(:meth:`FakeBatch.add_quota_share`) ``submit_service_job``, ``list_service_jobs``, ``terminate_service_job``,
``describe_quota_share`` and ``update_quota_share``. moto 5.2 cannot stand in: its ``submit_job`` drops
``shareIdentifier`` and, without Docker, marks every job SUCCEEDED at once, so a queue with running work
cannot be held in it; it has no service jobs or quota shares at all.

Each rule names its row of the register of AWS behaviour (docs/aws-behaviour.md) as ``[aws: <row id>]``;
the page and its words are in the row.

Time is the model's own (:class:`Clock`); :meth:`FakeBatch.advance` lets Batch's scheduler and
the jobs move on. Faults are injected at the call boundary through ``fault`` (see
:class:`Faults`): a throttle before a call, a read timeout after a call AWS carried out, a crash
of the caller between two calls.
"""

from __future__ import annotations

import heapq
import itertools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore import xform_name
from botocore.exceptions import ClientError, ReadTimeoutError

from . import sdk

ACCOUNT = "111122223333"
# [aws: batch.job-states]
ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
FINAL = ("SUCCEEDED", "FAILED")
DESCRIBE_LIMIT = 100  # [aws: batch.describe-jobs-limit]
REASON_LIMIT = 1024  # [aws: batch.terminate-job-reason-limit]
# Only these compute resources changed alone make a scaling update, which replaces no instance; any other change
# (the launch template among them) is an infrastructure update [aws: batch-ce.scaling-update-fields].
SCALING_ONLY = frozenset({"minvCpus", "maxvCpus", "desiredvCpus"})
# An infrastructure update gives running jobs updatePolicy.jobExecutionTimeoutMinutes (default 30) before their
# instances are replaced, or ends them at once with terminateJobsOnUpdate [aws: batch-ce.infrastructure-update-grace].
DEFAULT_JOB_EXECUTION_TIMEOUT_MINUTES = 30
QUEUE_ENVIRONMENTS_LIMIT = 3  # [aws: batch.job-queue-environment-order]
# An infrastructure update needs one of these allocation strategies; without the field, the environment has Batch's
# default, BEST_FIT, which refuses it [aws: batch-ce.infrastructure-update-strategy].
INFRASTRUCTURE_UPDATE_STRATEGIES = frozenset(
    {"BEST_FIT_PROGRESSIVE", "SPOT_CAPACITY_OPTIMIZED", "SPOT_PRICE_CAPACITY_OPTIMIZED"}
)
UPDATE_SECONDS = 300.0  # how long the model keeps a compute environment UPDATING after an infrastructure update
REPLACED = "Host EC2 instance replaced by a compute environment infrastructure update"


class Crash(BaseException):
    """The caller's process dies (a Lambda timeout or out-of-memory kill): nothing of the caller
    runs after it, not even an ``except Exception``."""


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Faults:
    """Faults at the call boundary, decided by ``plan(operation, phase)`` for phase ``before``
    (the request never reaches AWS) or ``after`` (AWS did it, the answer is lost): return None,
    ``"throttle"``, ``"timeout"`` or ``"crash"``."""

    plan: Callable[[str, str], str | None] = lambda operation, phase: None
    injected: list[tuple[str, str, str]] = field(default_factory=list)

    def check(
        self, operation: str, phase: str, *, throttle_code: str = "TooManyRequestsException", service: str = "batch"
    ) -> None:
        """``throttle_code``: the error code the service throttles with."""
        fault = self.plan(operation, phase)
        if fault is None:
            return
        self.injected.append((operation, phase, fault))
        if fault == "throttle":
            raise ClientError({"Error": {"Code": throttle_code, "Message": "Rate exceeded"}}, operation)
        if fault == "timeout":
            raise ReadTimeoutError(endpoint_url=f"https://{service}.us-east-1.amazonaws.com/{operation}")
        if fault == "crash":
            raise Crash(f"killed {phase} {operation}")
        raise AssertionError(f"unknown fault {fault!r}")


class LoseAnswer:
    """A fault plan: the next ``operation`` once armed is carried out and its answer lost (the SDK sends it again)."""

    def __init__(self, operation: str, *, armed: bool = True):
        self.operation, self.armed, self.lost = operation, armed, 0

    def __call__(self, operation: str, phase: str) -> str | None:
        if operation == self.operation and phase == "after" and self.armed:
            self.armed, self.lost = False, self.lost + 1
            return "timeout"
        return None


class _Paginator:
    def __init__(self, batch: FakeBatch, operation: str):
        self.batch, self.operation = batch, operation

    def paginate(self, **request: Any) -> Iterable[dict[str, Any]]:
        listing, field = {
            "list_jobs": (self.batch.list_jobs, "jobSummaryList"),
            "list_service_jobs": (self.batch.list_service_jobs, "jobSummaryList"),
            "list_quota_shares": (self.batch.list_quota_shares, "quotaShares"),
            "describe_job_queues": (self.batch.describe_job_queues, "jobQueues"),
        }[self.operation]
        entries = listing(**request)[field]
        for start in range(0, max(len(entries), 1), self.batch.page_size):
            yield {field: entries[start : start + self.batch.page_size]}


class FakeBatch:
    """One account's jobs on fair-share queues of ``capacity`` instances each (one instance type)."""

    def __init__(
        self,
        clock: Clock,
        *,
        capacity: dict[str, int],
        faults: Faults | None = None,
        listing_lag: float | Callable[[], float] = 0.0,
        page_size: int = 100,
        environments: dict[str, Environment] | None = None,
    ):
        """``environments``: compute environments (by ARN) whose jobs run on named ECS container
        instances; their queues' capacity is the instances live now, not ``capacity``.
        ``listing_lag``: seconds a job is missing from ListJobs after its submission, or a draw of
        them per job."""
        self.clock, self.capacity, self.faults = clock, dict(capacity), faults or Faults()
        self.environments = environments or {}
        self.listing_lag, self.page_size = listing_lag, page_size
        self.jobs: dict[str, dict[str, Any]] = {}
        self.active: dict[
            str, dict[str, Any]
        ] = {}  # the jobs not yet SUCCEEDED or FAILED (what the scheduler looks at)
        self.ended: dict[str, dict[str, dict[str, Any]]] = {
            status: {} for status in FINAL
        }  # final status -> its jobs (ListJobs of one)
        self.by_name: dict[str, list[str]] = {}
        self.work: dict[str, float] = {}  # job id -> seconds of work left (the model's, not Batch's)
        self.requests: list[tuple[str, dict[str, Any]]] = []  # every request that reached AWS, with its time (_at)
        self.compute_environments: dict[
            str, dict[str, Any]
        ] = {}  # ARN -> what DescribeComputeEnvironments shows (add_compute_environment)
        self.queues: dict[
            str, dict[str, Any]
        ] = {}  # job queue ARN -> what DescribeJobQueues shows (queues placed on environments)
        self.quota_shares: dict[str, dict[str, Any]] = {}  # quota share ARN -> what DescribeQuotaShare shows
        self.service_queues: dict[str, dict[str, int]] = {}  # quota-share job queue -> instances per type it holds
        self.service_jobs: dict[str, dict[str, Any]] = {}  # service job id -> the job
        self.caller = "team"  # who sends the request being answered (``client``'s ``by``; a team's own calls otherwise)
        self._ids = itertools.count(1)
        self._instance_ids = itertools.count(1)

    def client(self, *, config: Any = None, by: str, calls: sdk.Calls | None = None) -> Any:
        """A real boto3 Batch client with ``config`` (its retries apply, :mod:`tests.aws_model.sdk`) whose
        requests this model answers, each one recorded in the model's ``requests`` and in ``calls`` as
        sent ``by`` that sender."""

        def answer(operation: str, request: dict[str, Any]) -> dict[str, Any]:
            saved, self.caller = self.caller, by
            try:
                return getattr(self, xform_name(operation))(**request)
            finally:
                self.caller = saved

        return sdk.client("batch", answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    # --- the API ----------------------------------------------------------------------------

    def get_paginator(self, operation: str) -> _Paginator:
        assert operation in ("list_jobs", "describe_job_queues", "list_service_jobs", "list_quota_shares"), operation
        return _Paginator(self, operation)

    def describe_compute_environments(self, *, computeEnvironments: list[str]) -> dict[str, Any]:
        self._call(
            "DescribeComputeEnvironments", {"computeEnvironments": computeEnvironments}
        )  # [aws: batch.compute-environment-disabled]
        found = [
            _public(self.compute_environments[arn])
            if arn in self.compute_environments
            else {
                "computeEnvironmentArn": arn,
                "computeEnvironmentName": arn.rsplit("/", 1)[-1],
                "ecsClusterArn": self.environments[arn].cluster,
                "state": "ENABLED",
                "status": "VALID",
            }
            for arn in computeEnvironments
            if arn in self.compute_environments or arn in self.environments
        ]
        return self._answer("DescribeComputeEnvironments", {"computeEnvironments": found})

    def describe_job_queues(self, *, jobQueues: list[str] | None = None, **_: Any) -> dict[str, Any]:
        self._call(
            "DescribeJobQueues", {"jobQueues": jobQueues} if jobQueues else {}
        )  # [aws: batch.job-queue-environment-order]
        listed = [
            {
                "jobQueueArn": queue,
                "jobQueueName": queue.rsplit("/", 1)[-1],
                "state": "ENABLED",
                "status": "VALID",
                "priority": 1,
                "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": arn}],
            }
            for arn, environment in self.environments.items()
            for queue in environment.queues
        ]
        listed += [_public(queue) for queue in self.queues.values()]
        return self._answer(
            "DescribeJobQueues", {"jobQueues": [q for q in listed if not jobQueues or q["jobQueueArn"] in jobQueues]}
        )

    def list_jobs(
        self, *, jobQueue: str, jobStatus: str | None = None, filters: list[dict[str, Any]] | None = None, **_: Any
    ) -> dict[str, Any]:
        self._call("ListJobs", {"jobQueue": jobQueue, "jobStatus": jobStatus, "filters": filters})
        if filters:
            # With filters, jobStatus is ignored and jobs of every status are listed [aws: batch.list-jobs-filters].
            (entry,) = filters
            assert entry["name"] == "JOB_NAME", entry
            listed = [self.jobs[i] for name in entry["values"] for i in self.by_name.get(name, [])]
        else:
            status = jobStatus or "RUNNING"  # jobStatus defaults to RUNNING
            listed = [
                j
                for j in (self.active if status in ACTIVE else self.ended.get(status, {})).values()
                if j["status"] == status
            ]
        listed = [  # a job appears in listings a while after it was submitted [aws: batch.listing-lags]
            j for j in listed if j["jobQueue"] == jobQueue and self.clock.now >= j["_listed_at"]
        ]
        summaries = [
            {
                "jobId": j["jobId"],
                "jobArn": j["jobArn"],
                "jobName": j["jobName"],
                "status": j["status"],
                "createdAt": j["createdAt"],
            }
            for j in sorted(listed, key=lambda j: -j["createdAt"])
        ]
        return self._answer("ListJobs", {"jobSummaryList": summaries})

    def describe_jobs(self, *, jobs: list[str]) -> dict[str, Any]:
        if len(jobs) > DESCRIBE_LIMIT:  # [aws: batch.describe-jobs-limit]
            raise ClientError({"Error": {"Code": "ClientException", "Message": "up to 100 jobs"}}, "DescribeJobs")
        self._call("DescribeJobs", {"jobs": jobs})
        return self._answer("DescribeJobs", {"jobs": [_public(self.jobs[i]) for i in jobs if i in self.jobs]})

    def submit_job(self, **request: Any) -> dict[str, Any]:
        self._call("SubmitJob", request)
        for required in ("jobName", "jobQueue", "jobDefinition"):
            if required not in request:
                raise ClientError(
                    {"Error": {"Code": "ClientException", "Message": f"{required} is required"}}, "SubmitJob"
                )
        # A fair-share queue needs shareIdentifier [aws: batch.fair-share-needs-share-identifier].
        if "shareIdentifier" not in request:
            raise ClientError(
                {"Error": {"Code": "ClientException", "Message": "shareIdentifier is required on a fair-share queue"}},
                "SubmitJob",
            )
        job_id = f"job-{next(self._ids):06d}"
        self.jobs[job_id] = self.active[job_id] = self._new_job(job_id, request)
        self.by_name.setdefault(request["jobName"], []).append(job_id)
        self.work[job_id] = float(request.get("parameters", {}).get("work_seconds", 3600))
        self._settle_dependencies()
        return self._answer(
            "SubmitJob", {"jobId": job_id, "jobName": request["jobName"], "jobArn": self.jobs[job_id]["jobArn"]}
        )

    def terminate_job(self, *, jobId: str, reason: str) -> dict[str, Any]:
        self._call("TerminateJob", {"jobId": jobId, "reason": reason})
        if len(reason) > REASON_LIMIT:  # [aws: batch.terminate-job-reason-limit]
            raise ClientError(
                {"Error": {"Code": "ClientException", "Message": "reason longer than 1024"}}, "TerminateJob"
            )
        job = self.jobs.get(jobId)
        if job is not None and job["status"] in ACTIVE:
            # STARTING or RUNNING jobs are terminated and go to FAILED; earlier ones are cancelled (FAILED too)
            # [aws: batch.terminate-job-ends-failed]. A terminated job is final: its retry strategy covers failures of
            # the job or its host, not TerminateJob [aws: batch.terminated-job-not-retried].
            if job["status"] in ("STARTING", "RUNNING"):
                job["attempts"].append({"startedAt": job["startedAt"], "stoppedAt": self._ms(), "statusReason": reason})
            job["_stopped_by"] = self.caller  # the request that ended it (what CloudTrail would show), not its reason
            self._end(job, "FAILED", reason)
            self._settle_dependencies()
        return self._answer("TerminateJob", {})

    def update_compute_environment(
        self,
        *,
        computeEnvironment: str,
        state: str | None = None,
        computeResources: dict[str, Any] | None = None,
        updatePolicy: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self._call(
            "UpdateComputeEnvironment",
            {
                "computeEnvironment": computeEnvironment,
                "state": state,
                "computeResources": computeResources,
                "updatePolicy": updatePolicy,
            },
        )
        environment = self.compute_environments[computeEnvironment]
        if environment["status"] == "UPDATING":  # the model refuses an update while the last one is still under way
            raise ClientError(
                {
                    "Error": {
                        "Code": "ClientException",
                        "Message": f"{environment['computeEnvironmentName']} is being updated",
                    }
                },
                "UpdateComputeEnvironment",
            )
        if state is not None:
            # A DISABLED environment gets no new job placed and does not scale out; jobs STARTING or RUNNING on it
            # continue normally [aws: batch.compute-environment-disabled].
            environment["state"] = state
        if computeResources and not set(computeResources) <= SCALING_ONLY:
            strategy = environment["computeResources"].get("allocationStrategy", "BEST_FIT")
            if strategy not in INFRASTRUCTURE_UPDATE_STRATEGIES:
                raise ClientError(
                    {
                        "Error": {
                            "Code": "ClientException",
                            "Message": f"infrastructure updates are not supported with allocationStrategy {strategy}",
                        }
                    },
                    "UpdateComputeEnvironment",
                )
        if computeResources:
            resources = environment["computeResources"]
            resources.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in computeResources.items()})
            if not set(computeResources) <= SCALING_ONLY:  # [aws: batch-ce.scaling-update-fields]
                policy = updatePolicy or {}
                environment["status"], environment["_valid_at"] = "UPDATING", self.clock.now + UPDATE_SECONDS
                grace = (
                    0.0
                    if policy.get("terminateJobsOnUpdate")
                    else 60.0 * policy.get("jobExecutionTimeoutMinutes", DEFAULT_JOB_EXECUTION_TIMEOUT_MINUTES)
                )
                for job in self.active.values():
                    if job.get("_environment") == computeEnvironment and job["status"] in ("STARTING", "RUNNING"):
                        job["_replaced_at"] = self.clock.now + grace
                self._replace_instances()
        return self._answer(
            "UpdateComputeEnvironment",
            {
                "computeEnvironmentName": environment["computeEnvironmentName"],
                "computeEnvironmentArn": computeEnvironment,
            },
        )

    def update_job_queue(self, *, jobQueue: str, computeEnvironmentOrder: list[dict[str, Any]]) -> dict[str, Any]:
        self._call("UpdateJobQueue", {"jobQueue": jobQueue, "computeEnvironmentOrder": computeEnvironmentOrder})
        # Up to three compute environments, each VALID when it is associated; the order only decides where jobs not
        # yet placed go, so no running job moves [aws: batch.job-queue-environment-order].
        if len(computeEnvironmentOrder) > QUEUE_ENVIRONMENTS_LIMIT:
            raise ClientError(
                {"Error": {"Code": "ClientException", "Message": "at most 3 compute environments"}}, "UpdateJobQueue"
            )
        known = {o["computeEnvironment"] for o in self.queues[jobQueue]["computeEnvironmentOrder"]}
        for entry in computeEnvironmentOrder:
            arn = entry["computeEnvironment"]
            if arn not in known and self.compute_environments[arn]["status"] != "VALID":
                raise ClientError(
                    {"Error": {"Code": "ClientException", "Message": f"{arn} is not VALID"}}, "UpdateJobQueue"
                )
        self.queues[jobQueue]["computeEnvironmentOrder"] = [dict(o) for o in computeEnvironmentOrder]
        return self._answer(
            "UpdateJobQueue", {"jobQueueName": self.queues[jobQueue]["jobQueueName"], "jobQueueArn": jobQueue}
        )

    # --- quota-share queues of service jobs ---------------------------------------------------

    def list_quota_shares(self, *, jobQueue: str, **_: Any) -> dict[str, Any]:
        self._call("ListQuotaShares", {"jobQueue": jobQueue})  # [aws: batch.quota-share-disabled]
        shares = [_public(q) for q in self.quota_shares.values() if q["jobQueueArn"] == jobQueue]
        return self._answer("ListQuotaShares", {"quotaShares": shares})

    def describe_quota_share(self, *, quotaShareArn: str) -> dict[str, Any]:
        self._call("DescribeQuotaShare", {"quotaShareArn": quotaShareArn})  # [aws: batch.quota-share-disabled]
        return self._answer("DescribeQuotaShare", _public(self.quota_shares[quotaShareArn]))

    def update_quota_share(self, *, quotaShareArn: str, state: str) -> dict[str, Any]:
        self._call("UpdateQuotaShare", {"quotaShareArn": quotaShareArn, "state": state})
        # DISABLED: new jobs are refused, the jobs already submitted still start and finish
        # [aws: batch.quota-share-disabled] (see submit_service_job and _run_service_jobs).
        share = self.quota_shares[quotaShareArn]
        share["state"] = state
        return self._answer(
            "UpdateQuotaShare", {"quotaShareName": share["quotaShareName"], "quotaShareArn": quotaShareArn}
        )

    def submit_service_job(self, **request: Any) -> dict[str, Any]:
        self._call("SubmitServiceJob", request)
        share = self._quota_share(request["jobQueue"], request["quotaShareName"])
        if share["state"] != "ENABLED":  # new jobs won't be accepted [aws: batch.quota-share-disabled]
            raise ClientError(
                {"Error": {"Code": "ClientException", "Message": f"quota share {share['quotaShareName']} is DISABLED"}},
                "SubmitServiceJob",
            )
        job_id = f"sj-{next(self._ids):06d}"
        # the training job's request: its instances, and the model's seconds of work in a hyperparameter
        payload = json.loads(request["serviceRequestPayload"])
        resources = (payload["ResourceConfig"]["InstanceType"], payload["ResourceConfig"].get("InstanceCount", 1))
        self.service_jobs[job_id] = {
            "jobId": job_id,
            "jobArn": f"arn:aws:batch:us-east-1:{ACCOUNT}:service-job/{job_id}",
            "jobName": request["jobName"],
            "jobQueue": request["jobQueue"],
            "quotaShareName": request["quotaShareName"],
            "schedulingPriority": request.get("schedulingPriority", 0),
            "status": "SUBMITTED",
            "createdAt": self._ms(),
            "capacityUsage": [{"capacityUnit": resources[0], "quantity": resources[1]}],
            "serviceJobType": request["serviceJobType"],
            "serviceRequestPayload": request["serviceRequestPayload"],
            "tags": dict(request.get("tags", {})),
        }
        self.work[job_id] = float(payload.get("HyperParameters", {}).get("work_seconds", 3600))
        return self._answer("SubmitServiceJob", {"jobId": job_id, "jobName": request["jobName"]})

    def list_service_jobs(
        self, *, jobQueue: str, jobStatus: str = "RUNNING", filters: list[dict[str, Any]] | None = None, **_: Any
    ) -> dict[str, Any]:
        self._call("ListServiceJobs", {"jobQueue": jobQueue, "jobStatus": jobStatus, "filters": filters})
        # QUOTA_SHARE_NAME and jobStatus together, newest first [aws: batch.list-service-jobs-by-share]
        shares = {v for f in filters or () if f["name"] == "QUOTA_SHARE_NAME" for v in f["values"]}
        listed = [
            {k: j[k] for k in ("jobId", "jobArn", "jobName", "status", "createdAt", "quotaShareName", "capacityUsage")}
            for j in sorted(self.service_jobs.values(), key=lambda j: -j["createdAt"])
            if j["jobQueue"] == jobQueue and j["status"] == jobStatus and (not shares or j["quotaShareName"] in shares)
        ]
        return self._answer("ListServiceJobs", {"jobSummaryList": listed})

    def terminate_service_job(self, *, jobId: str, reason: str) -> dict[str, Any]:
        self._call("TerminateServiceJob", {"jobId": jobId, "reason": reason})
        job = self.service_jobs[jobId]  # ends the job whatever its state [aws: batch.terminate-service-job]
        if job["status"] not in FINAL:
            job.update(_stopped_by=self.caller, _stopped_while=job["status"])  # who ended it, and from which state
            job.update(status="FAILED", statusReason=reason, stoppedAt=self._ms(), isTerminated=True)
        return self._answer("TerminateServiceJob", {})

    def describe_service_job(self, *, jobId: str) -> dict[str, Any]:
        self._call("DescribeServiceJob", {"jobId": jobId})  # [aws: batch.describe-service-job]
        if jobId not in self.service_jobs:
            raise ClientError(
                {"Error": {"Code": "ClientException", "Message": f"{jobId} not found"}}, "DescribeServiceJob"
            )
        return self._answer("DescribeServiceJob", _public(self.service_jobs[jobId]))

    def get_job_queue_snapshot(self, *, jobQueue: str) -> dict[str, Any]:
        """A quota-share queue's use per share (RUNNING service jobs) and each share's first RUNNABLE job
        [aws: batch.job-queue-snapshot-quota-shares]."""
        self._call("GetJobQueueSnapshot", {"jobQueue": jobQueue})
        jobs = [j for j in self.service_jobs.values() if j["jobQueue"] == jobQueue]
        used: dict[str, dict[str, float]] = {}
        for job in jobs:
            if job["status"] == "RUNNING":
                usage = job["capacityUsage"][0]
                share = used.setdefault(job["quotaShareName"], {})
                share[usage["capacityUnit"]] = share.get(usage["capacityUnit"], 0) + usage["quantity"]
        fronts: dict[str, list[dict[str, Any]]] = {}
        for job in _scheduling_order(j for j in jobs if j["status"] == "RUNNABLE"):
            fronts.setdefault(job["quotaShareName"], [{"jobArn": job["jobArn"], "earliestTimeAtPosition": self._ms()}])
        return self._answer(
            "GetJobQueueSnapshot",
            {
                "frontOfQuotaShares": {"quotaShares": fronts, "lastUpdatedAt": self._ms()},
                "queueUtilization": {
                    "quotaShareUtilization": {
                        "topCapacityUtilization": [
                            {
                                "quotaShareName": share,
                                "capacityUsage": [{"capacityUnit": t, "quantity": n} for t, n in usage.items()],
                            }
                            for share, usage in sorted(used.items())
                        ]
                    },
                    "lastUpdatedAt": self._ms(),
                },
            },
        )

    def add_quota_share(self, queue: str, name: str, *, capacity: dict[str, int], state: str = "ENABLED") -> str:
        """Quota share ``name`` of quota-share job queue ``queue``, holding ``capacity`` instances per type;
        the queue holds the sum of its shares' capacity. Returns the share's ARN."""
        arn = f"{queue}/quota-share/{name}"
        self.quota_shares[arn] = {
            "quotaShareName": name,
            "quotaShareArn": arn,
            "jobQueueArn": queue,
            "state": state,
            "status": "VALID",
            "capacityLimits": [{"capacityUnit": t, "maxCapacity": n} for t, n in capacity.items()],
        }
        held = self.service_queues.setdefault(queue, {})
        for instance_type, count in capacity.items():
            held[instance_type] = held.get(instance_type, 0) + count
        return arn

    def _quota_share(self, queue: str, name: str) -> dict[str, Any]:
        return next(q for q in self.quota_shares.values() if q["jobQueueArn"] == queue and q["quotaShareName"] == name)

    def _run_service_jobs(self, seconds: float) -> None:
        """Service jobs on their quota-share queues: SUBMITTED ones become RUNNABLE, running ones work
        and succeed, and RUNNABLE ones start in :func:`_scheduling_order` where the queue has room, the
        jobs of a DISABLED share among them: it accepts no new job, but those already submitted can
        finish [aws: batch.quota-share-disabled]. Idle capacity goes to any share (each lends and borrows)."""
        for job in self.service_jobs.values():
            if job["status"] == "RUNNING":
                self.work[job["jobId"]] -= seconds
                if self.work[job["jobId"]] <= 0:
                    job.update(status="SUCCEEDED", stoppedAt=self._ms())
        for queue, held in self.service_queues.items():
            jobs = [j for j in self.service_jobs.values() if j["jobQueue"] == queue]
            used: dict[str, int] = {}
            for job in jobs:
                if job["status"] == "RUNNING":
                    usage = job["capacityUsage"][0]
                    used[usage["capacityUnit"]] = used.get(usage["capacityUnit"], 0) + usage["quantity"]
            for job in _scheduling_order(j for j in jobs if j["status"] == "RUNNABLE"):
                usage = job["capacityUsage"][0]
                if used.get(usage["capacityUnit"], 0) + usage["quantity"] <= held.get(usage["capacityUnit"], 0):
                    job.update(status="RUNNING", startedAt=self._ms())
                    used[usage["capacityUnit"]] = used.get(usage["capacityUnit"], 0) + usage["quantity"]
            for job in jobs:
                if job["status"] == "SUBMITTED":
                    job["status"] = "RUNNABLE"

    # --- the world moving on --------------------------------------------------------------------

    def add_compute_environment(
        self,
        arn: str,
        *,
        vcpus_per_instance: int,
        max_vcpus: int,
        state: str = "ENABLED",
        launch_template: dict[str, Any] | None = None,
        allocation_strategy: str | None = None,
        subnets: tuple[str, ...] = ("subnet-0a1b2c3d",),
        launch_capacity: Callable[[dict[str, Any]], int | None] | None = None,
        launches_into: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        """A managed EC2 compute environment as its owner created it: instances of ``vcpus_per_instance`` vCPUs up to
        ``max_vcpus`` (``allocation_strategy`` None: Batch's default, BEST_FIT). ``launch_capacity`` answers, for the
        environment's launch template, how many instances EC2 can launch from it at most (a Capacity Block's count),
        or None when not bounded (on demand); ``launches_into``, the Capacity Block its instances launch into (None: on
        demand)."""
        self.compute_environments[arn] = {
            "computeEnvironmentName": arn.rsplit("/", 1)[1],
            "computeEnvironmentArn": arn,
            "type": "MANAGED",
            "state": state,
            "status": "VALID",
            "ecsClusterArn": f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/{arn.rsplit('/', 1)[1]}",
            "computeResources": {
                "type": "EC2",
                "minvCpus": 0,
                "maxvCpus": max_vcpus,
                "desiredvCpus": 0,
                "instanceTypes": ["p5.48xlarge"],
                "subnets": list(subnets),
                "instanceRole": f"arn:aws:iam::{ACCOUNT}:instance-profile/ecsInstanceRole",
                **({"launchTemplate": dict(launch_template)} if launch_template else {}),
                **({"allocationStrategy": allocation_strategy} if allocation_strategy else {}),
            },
            "_vcpus_per_instance": vcpus_per_instance,
            "_launch_capacity": launch_capacity or (lambda template: None),
            "_launches_into": launches_into or (lambda template: None),
        }

    def add_job_queue(self, arn: str, *, compute_environments: list[str]) -> None:
        """A job queue that places its jobs on ``compute_environments``, tried in this order."""
        self.queues[arn] = {
            "jobQueueName": arn.rsplit("/", 1)[1],
            "jobQueueArn": arn,
            "state": "ENABLED",
            "status": "VALID",
            "priority": 1,
            "computeEnvironmentOrder": [
                {"order": i + 1, "computeEnvironment": e} for i, e in enumerate(compute_environments)
            ],
        }

    def add_job(self, **request: Any) -> str:
        """A team's own submission (never faulted)."""
        return self._unfaulted(self.submit_job, request)["jobId"]

    def add_service_job(self, **request: Any) -> str | None:
        """A team's own service job (never faulted); None when its quota share refuses it (DISABLED)."""
        try:
            return self._unfaulted(self.submit_service_job, request)["jobId"]
        except ClientError:
            return None

    def deploy_quota_share(self, arn: str, state: str) -> None:
        """The team's stack deployed again: CloudFormation sets the quota share's state as its template declares."""
        self.quota_shares[arn]["state"] = state

    def _unfaulted(self, call: Callable[..., dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
        saved, self.faults = self.faults, Faults()
        try:
            return call(**request)
        finally:
            self.faults = saved

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: running jobs work, finish (SUCCEEDED), and the scheduler starts
        RUNNABLE jobs on free instances in :func:`_scheduling_order`; service jobs run on their
        quota-share queues (:meth:`_run_service_jobs`)."""
        self.clock.now += seconds
        for job in list(self.active.values()):
            if job["status"] == "STARTING":
                job["status"] = "RUNNING"
            elif job["status"] == "RUNNING":
                self.work[job["jobId"]] -= seconds
                if self.work[job["jobId"]] <= 0:
                    self._end(job, "SUCCEEDED", "Essential container in task exited")
        self._settle_dependencies()
        self._replace_instances()
        self._end_with_their_instances()
        for environment in self.compute_environments.values():
            if environment["status"] == "UPDATING" and self.clock.now >= environment["_valid_at"]:
                environment["status"] = "VALID"
        for queue in self.queues.values():
            self._place_in_order(queue)
        for environment in self.environments.values():
            self._place(environment)
        self._run_service_jobs(seconds)
        for queue, capacity in self.capacity.items():
            used = sum(
                _size(j)
                for j in self.active.values()
                if j["jobQueue"] == queue and j["status"] in ("STARTING", "RUNNING")
            )
            for job in _scheduling_order(
                j for j in self.active.values() if j["jobQueue"] == queue and j["status"] == "RUNNABLE"
            ):
                if used + _size(job) <= capacity:
                    job.update(status="STARTING", startedAt=self._ms())
                    used += _size(job)

    def fail_on_its_own(self, job_id: str, reason: str = "Host EC2 instance terminated") -> None:
        """The job's host fails: a job with attempts left under its retry strategy goes back to RUNNABLE
        [aws: batch.retry-strategy-attempts], unless its ``evaluateOnExit`` exits on this reason
        [aws: batch.evaluate-on-exit]; else it is FAILED."""
        job = self.jobs[job_id]
        job["attempts"].append({"startedAt": job.get("startedAt"), "stoppedAt": self._ms(), "statusReason": reason})
        strategy = job.get("retryStrategy", {})
        if len(job["attempts"]) < strategy.get("attempts", 1) and _retries(strategy.get("evaluateOnExit", []), reason):
            job.update(status="RUNNABLE", statusReason=reason)
        else:
            self._end(job, "FAILED", reason)
        self._settle_dependencies()

    # --- internals --------------------------------------------------------------------------

    def _place_in_order(self, queue: dict[str, Any]) -> None:
        """Place the queue's RUNNABLE jobs: each on the first compute environment in ascending order that is ENABLED and VALID
        and has free instances [aws: batch.job-queue-environment-order]."""
        order = [
            self.compute_environments[o["computeEnvironment"]]
            for o in sorted(queue["computeEnvironmentOrder"], key=lambda o: o["order"])
        ]
        for job in _scheduling_order(
            j for j in self.active.values() if j["jobQueue"] == queue["jobQueueArn"] and j["status"] == "RUNNABLE"
        ):
            for environment in order:
                if (
                    environment["state"] == "ENABLED"
                    and environment["status"] == "VALID"
                    and self._free(environment) >= _size(job)
                ):
                    self._launch(job, environment)
                    break

    def _launch(self, job: dict[str, Any], environment: dict[str, Any]) -> None:
        """The job starts on an instance of its own (one job per instance in this model), launched from the
        environment's launch template as it is now and registered in the environment's ECS cluster as a container
        instance, which DescribeJobs names [aws: batch-ce.ecs-container-instance-filter]."""
        instance = f"i-{next(self._instance_ids):017x}"
        cluster = environment["ecsClusterArn"].rsplit("/", 1)[1]
        job.update(
            status="STARTING",
            startedAt=self._ms(),
            _environment=environment["computeEnvironmentArn"],
            _launched_from=dict(environment["computeResources"].get("launchTemplate", {})),
            _instance=instance,
        )
        job["container"]["containerInstanceArn"] = container_instance_arn(cluster, instance)

    def _free(self, environment: dict[str, Any]) -> int:
        return self.instances(environment) - self.running_on(environment)

    def instances(self, environment: dict[str, Any]) -> int:
        """How many instances the environment can run: past maxvCpus by one instance whenever the strategy allows it
        [aws: batch-ce.max-vcpus-overshoot], and no more than EC2 can launch from the environment's launch template
        (into a Capacity Block: its count [aws: ec2-cb.launch-beyond-block-fails])."""
        resources = environment["computeResources"]
        instances = resources["maxvCpus"] // environment["_vcpus_per_instance"]
        if resources.get("allocationStrategy", "BEST_FIT") != "BEST_FIT" and resources["maxvCpus"] > 0:
            instances += 1
        bound = environment["_launch_capacity"](resources.get("launchTemplate", {}))
        return instances if bound is None else min(instances, bound)

    def running_on(self, environment: dict[str, Any]) -> int:
        """Instances busy with a job of the environment's (one job per instance in this model)."""
        return sum(
            _size(j)
            for j in self.active.values()
            if j.get("_environment") == environment["computeEnvironmentArn"] and j["status"] in ("STARTING", "RUNNING")
        )

    def _replace_instances(self) -> None:
        """Jobs still running when an infrastructure update's grace is over lose their instance (FAILED)."""
        for job in list(self.active.values()):
            if job.get("_replaced_at") is not None and self.clock.now >= job["_replaced_at"]:
                job["attempts"].append(
                    {"startedAt": job.get("startedAt"), "stoppedAt": self._ms(), "statusReason": REPLACED}
                )
                self._end(job, "FAILED", REPLACED)

    def _end_with_their_instances(self) -> None:
        """A job whose instance EC2 no longer runs (launched into a Capacity Block whose instances have ended: EC2
        can run none from that launch template any more) fails as its host did, whatever it was doing; its retry
        strategy applies [aws: batch-ce.jobs-fail-with-block-instances]. No job outlives its instance."""
        for job in list(self.active.values()):
            launched = job.get("_launched_from")
            if launched is None or job["status"] not in ("STARTING", "RUNNING"):
                continue
            if self.compute_environments[job["_environment"]]["_launch_capacity"](launched) == 0:
                instance = job.pop("_instance")
                job.pop("_launched_from")
                job["container"].pop("containerInstanceArn", None)
                self.fail_on_its_own(job["jobId"], f"Host EC2 (instance {instance}) terminated.")

    def instances_in(self, reservation_id: str) -> list[str]:
        """The running instances launched into the Capacity Block (one per job in this model)."""
        return [
            j["_instance"]
            for j in self.active.values()
            if j.get("_instance")
            and self.compute_environments[j["_environment"]]["_launches_into"](j["_launched_from"]) == reservation_id
        ]

    def container_instances(self, cluster: str) -> dict[str, str]:
        """Container instance ARN -> EC2 instance id, of the instances running a job in the ECS cluster of a compute
        environment added with :meth:`add_compute_environment`."""
        return {
            j["container"]["containerInstanceArn"]: j["_instance"]
            for j in self.active.values()
            if j.get("_instance") and self.compute_environments[j["_environment"]]["ecsClusterArn"] == cluster
        }

    def _place(self, environment: Environment) -> None:
        """Jobs of an environment's queues run one per container instance. A job whose instance is
        gone fails as its host did (the retry strategy applies, [aws: batch.retry-strategy-attempts]);
        RUNNABLE jobs start on free instances, in the scheduler's order (:func:`_scheduling_order`)."""
        live = environment.instances()
        placed = {
            j["container"].get("containerInstanceArn"): j
            for j in self.active.values()
            if j["jobQueue"] in environment.queues and j["status"] in ("STARTING", "RUNNING")
        }
        for instance, job in placed.items():
            if instance not in live:
                job["container"].pop("containerInstanceArn", None)
                self.fail_on_its_own(job["jobId"], f"Host EC2 (instance {instance}) terminated.")
        free = [i for i in live if i not in placed]
        for job in list(
            _scheduling_order(
                j for j in self.active.values() if j["jobQueue"] in environment.queues and j["status"] == "RUNNABLE"
            )
        )[: len(free)]:
            job.update(status="STARTING", startedAt=self._ms())
            job["container"]["containerInstanceArn"] = free.pop(0)

    def _new_job(self, job_id: str, request: dict[str, Any]) -> dict[str, Any]:
        definition = request["jobDefinition"]
        job = {
            "jobId": job_id,
            "jobName": request["jobName"],
            "jobArn": f"arn:aws:batch:us-east-1:{ACCOUNT}:job/{job_id}",
            "jobQueue": request["jobQueue"],
            "status": "SUBMITTED",
            "createdAt": self._ms(),
            "attempts": [],
            "jobDefinition": definition
            if definition.startswith("arn:")
            else f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/{definition}",
            "shareIdentifier": request["shareIdentifier"],
            "schedulingPriority": request.get("schedulingPriorityOverride", 0),
            "parameters": dict(request.get("parameters", {})),
            "tags": dict(request.get("tags", {})),
            "container": dict(request.get("containerOverrides", {})),
            "dependsOn": list(request.get("dependsOn", [])),
            # when ListJobs first shows it [aws: batch.listing-lags]
            "_listed_at": self.clock.now + (self.listing_lag() if callable(self.listing_lag) else self.listing_lag),
        }
        for name in ("retryStrategy", "timeout", "propagateTags", "arrayProperties"):
            if name in request:
                job[name] = request[name]
        if "nodeOverrides" in request:
            overrides = request["nodeOverrides"]
            job["nodeProperties"] = {
                "numNodes": overrides.get("numNodes", 1),
                "mainNode": 0,
                "nodeRangeProperties": [
                    {"targetNodes": o["targetNodes"], "container": o.get("containerOverrides", {})}
                    for o in overrides.get("nodePropertyOverrides", [])
                ],
            }
        return job

    def _settle_dependencies(self) -> None:
        # A job waits PENDING until its dependencies succeed, then is RUNNABLE; if any of them fails it goes from
        # PENDING to FAILED [aws: batch.job-dependencies].
        for job in list(self.active.values()):
            if job["status"] not in ("SUBMITTED", "PENDING"):
                continue
            states = [
                self.jobs[d["jobId"]]["status"] if d["jobId"] in self.jobs else "SUCCEEDED" for d in job["dependsOn"]
            ]
            if "FAILED" in states:
                self._end(job, "FAILED", "Dependent Job failed")
            elif all(s == "SUCCEEDED" for s in states):
                job["status"] = "RUNNABLE"
            else:
                job["status"] = "PENDING"

    def _end(self, job: dict[str, Any], status: str, reason: str) -> None:
        job.update(status=status, statusReason=reason, stoppedAt=self._ms())
        self.active.pop(job["jobId"], None)
        self.ended[status][job["jobId"]] = job

    def _call(self, operation: str, request: dict[str, Any]) -> None:
        self.faults.check(operation, "before")
        # _at: when it reached AWS (model time); _by: who sent it
        self.requests.append((operation, {**request, "_at": self.clock.now, "_by": self.caller}))

    def _answer(self, operation: str, response: dict[str, Any]) -> dict[str, Any]:
        self.faults.check(operation, "after")
        return response

    def _ms(self) -> int:
        return int(self.clock.now * 1000)


def container_instance_arn(cluster_name: str, instance_id: str) -> str:
    return f"arn:aws:ecs:us-east-1:{ACCOUNT}:container-instance/{cluster_name}/{instance_id[2:]}"


class ClusterInstances:
    """ECS ``list_container_instances`` (paginated, ``ec2InstanceId in [...]`` filter) over the clusters of the compute
    environments a :class:`FakeBatch` runs jobs in [aws: batch-ce.ecs-container-instance-filter]."""

    def __init__(self, batch: FakeBatch):
        self.batch = batch

    def get_paginator(self, operation: str) -> Pages:
        assert operation == "list_container_instances", operation
        return Pages(self.list_container_instances, "containerInstanceArns", self.batch.page_size)

    def list_container_instances(self, *, cluster: str, filter: str = "") -> dict[str, Any]:
        # [aws: batch-ce.ecs-container-instance-filter]
        self.batch.faults.check("ListContainerInstances", "before", throttle_code="ThrottlingException", service="ecs")
        wanted = instances_named(filter)
        return {
            "containerInstanceArns": [
                arn
                for arn, instance in self.batch.container_instances(cluster).items()
                if wanted is None or instance in wanted
            ]
        }


def instances_named(filter: str) -> set[str] | None:
    """The EC2 instance ids an ECS ``ec2InstanceId in [...]`` filter names (None: no filter)
    [aws: batch-ce.ecs-container-instance-filter]."""
    return set(re.findall(r"'(i-[0-9a-f]+)'", filter)) if filter else None


class BlockInstances:
    """EC2 ``describe_instances`` (paginated) filtered by ``capacity-reservation-id``: the instances a :class:`FakeBatch`
    launched into the block, all running [aws: ec2-cb.expiration-warning-and-termination]."""

    def __init__(self, batch: FakeBatch):
        self.batch = batch

    def get_paginator(self, operation: str) -> Pages:
        assert operation == "describe_instances", operation
        return Pages(self.describe_instances, "Reservations", self.batch.page_size)

    def describe_instances(self, *, Filters: list[dict[str, Any]]) -> dict[str, Any]:
        # [aws: ec2-cb.expiration-warning-and-termination]: the block's instances run until 30 minutes before its end
        self.batch.faults.check("DescribeInstances", "before", throttle_code="RequestLimitExceeded", service="ec2")
        wanted = {f["Name"]: f["Values"] for f in Filters}
        (reservation,) = wanted["capacity-reservation-id"]
        return {"Reservations": instance_reservations(self.batch.instances_in(reservation), reservation)}


def instance_reservations(instances: Iterable[str], reservation_id: str) -> list[dict[str, Any]]:
    """DescribeInstances' ``Reservations`` for running instances launched into a Capacity Block."""
    return [
        {
            "ReservationId": f"r-{i[2:]}",
            "Instances": [
                {
                    "InstanceId": i,
                    "State": {"Name": "running"},
                    "CapacityReservationId": reservation_id,
                    "InstanceType": "p5.48xlarge",
                }
            ],
        }
        for i in instances
    ]


class Pages:
    """A paginator over one answer, ``page_size`` entries a page."""

    def __init__(self, answer, field: str, page_size: int):
        self.answer, self.field, self.page_size = answer, field, page_size

    def paginate(self, **request: Any) -> Iterable[dict[str, Any]]:
        entries = self.answer(**request)[self.field]
        for start in range(0, max(len(entries), 1), self.page_size):
            yield {self.field: entries[start : start + self.page_size]}


@dataclass
class Environment:
    """A managed compute environment: its ECS cluster, the queues it feeds, and the container
    instance ARNs registered in it now (``instances()``, e.g. a Capacity Block's live instances)."""

    cluster: str
    queues: tuple[str, ...]
    instances: Callable[[], list[str]]


def _scheduling_order(jobs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """RUNNABLE jobs in the order the model starts them: by scheduling priority, highest first, then
    oldest, within one share identifier only [aws: batch.priority-within-share]. Between shares the
    share whose next job is the oldest goes first: Batch weighs shares by their usage, which the model
    does not play, and no invariant of the scenarios rests on an order across shares."""
    by_share: dict[Any, deque] = {}
    for job in sorted(jobs, key=lambda j: (-j.get("schedulingPriority", 0), j["createdAt"])):
        by_share.setdefault(job.get("shareIdentifier", job.get("quotaShareName")), deque()).append(job)
    queues = list(by_share.values())
    heads = [(queue[0]["createdAt"], n) for n, queue in enumerate(queues)]
    heapq.heapify(heads)
    while heads:
        _, n = heapq.heappop(heads)
        yield queues[n].popleft()
        if queues[n]:
            heapq.heappush(heads, (queues[n][0]["createdAt"], n))


def _retries(conditions: list[dict[str, str]], reason: str) -> bool:
    """Whether a failed attempt is retried under ``evaluateOnExit`` [aws: batch.evaluate-on-exit]: the
    first entry whose every condition matches decides (RETRY or EXIT); none matching, it is retried.
    The model's attempts fail with their host (the controllers' doing), so a reason is all they have:
    ``onStatusReason`` and ``onReason`` match it as globs (a trailing ``*`` matches a prefix); an
    ``onExitCode`` condition never matches, no container having exited."""

    def glob(pattern: str | None) -> bool:
        if pattern is None:
            return True
        return reason.startswith(pattern[:-1]) if pattern.endswith("*") else reason == pattern

    for condition in conditions:
        if "onExitCode" not in condition and glob(condition.get("onStatusReason")) and glob(condition.get("onReason")):
            return condition["action"].upper() == "RETRY"
    return True


def _size(job: dict[str, Any]) -> int:
    return int(job.get("nodeProperties", {}).get("numNodes", 1))


def _public(job: dict[str, Any]) -> dict[str, Any]:
    """DescribeJobs omits what a job has not got (startedAt before it starts, ...)."""
    return {
        k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
        for k, v in job.items()
        if v is not None and not k.startswith("_")
    }  # _...: the model's own bookkeeping
