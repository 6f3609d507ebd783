"""The usage observer of a pool on EKS where Kueue reclaims, shared by the backends that have one
(``backends/base.py`` ``kueue_observer``, given each backend's ClusterQueue names). Shown here for
HyperPod EKS: each reclaim tick reads the Kueue ClusterQueues task governance made from the teams'
compute quotas and publishes each team's guaranteed, used,
borrowed and lent instances and instance-hours. It never acts: Kueue reclaims natively.

One tick, for one pool (a ``RECLAIM_TARGETS`` entry ``{"pool", "eks_cluster", "gpus_per_instance"}``):

1. ``eks:DescribeCluster`` gives the API endpoint and its certificate authority;
2. a bearer token is made as ``aws eks get-token`` makes it (the aws-iam-authenticator scheme):
   an STS ``GetCallerIdentity`` URL presigned with header ``x-k8s-aws-id: <cluster>`` signed in,
   ``k8s-aws-v1.`` + base64url without padding. The role's EKS access entry maps it into
   ``EKS_USAGE_READER_GROUP``, which may get and list ClusterQueues (and patch the limited teams'
   where a backend's GPU-hour switch is their ``stopPolicy``);
3. ``GET /apis/kueue.x-k8s.io/v1beta1/clusterqueues`` page by page (``limit`` / ``continue``),
   with plain urllib verifying the cluster's CA (no Kubernetes client in the Lambda asset);
4. per team ClusterQueue and flavor (the flavor is the instance type, as task governance names
   it): ``spec`` nominal quota, ``status.flavorsUsage`` total and borrowed, in GPUs, divided by
   the pool's GPUs per instance;
5. per team ClusterQueue, its waiting work (``waiting_work``): ``Pending`` counts workloads, not
   instances (Kueue's status counts them; their requests are in Workload objects, whose pod
   templates this function is not let read), and ``StarvedBelowGuarantee`` is 1 while workloads
   wait for quota and the team reserves less than its nominal GPU quota on some flavor.

Lent is attributed as ``planner.share_usage`` does: per cohort and flavor, what the cohort's
queues borrowed comes first from the idle quota of queues that are no governed team's, then from
the governed teams' idle quota in team-name order, each at most its nominal quota minus its use
(and its ``lendingLimit``). So a team's lent never exceeds its idle guarantee, and the lent of a
cohort never exceeds what its queues borrowed. A tick that cannot read the cluster publishes
``PoolErrors`` and no usage: usage is under-reported, never invented.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import boto3
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError

from ..common import metrics
from ..common.log import write as log
from ..contract import GPU_RESOURCE, KUEUE_CLUSTER_QUEUES_PATH, POOL_ERRORS, SHARE_DIMENSIONS, hyperpod_cluster_queue
from ..policy import PoolPolicy
from ..usage import usage_records

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
TOKEN_EXPIRES_S = 60  # as `aws eks get-token`; the API server accepts a token for 15 minutes at most
REQUEST_TIMEOUT_S = 5.0  # one Kubernetes API request, as WITHIN_A_TICK's read timeout
PAGE_SIZE = 100
# A pool's read is started only with this much of the invocation left: DescribeCluster with
# botocore's retries and a few pages of ClusterQueues.
READ_SECONDS = 20.0
GAUGES = ("Guaranteed", "InUse", "Borrowed", "Lent")  # of contract.SHARE_METRICS: what Kueue's status shows
WAITING = ("Pending", "StarvedBelowGuarantee")  # of contract.SHARE_METRICS: from each ClusterQueue's workload counts


class EksUsageError(RuntimeError):
    """The cluster could not be read, or said something this observer does not understand."""


# --- the token and the cluster's API ------------------------------------------------------------


def eks_token(cluster_name: str, credentials: Any, region: str, sts_endpoint: str) -> str:
    """A Kubernetes bearer token for EKS: a presigned STS GetCallerIdentity URL that signs the
    cluster's name in (header ``x-k8s-aws-id``), so the token is good for this cluster only."""
    request = AWSRequest(
        method="GET",
        url=f"{sts_endpoint}/?Action=GetCallerIdentity&Version=2011-06-15",
        headers={CLUSTER_ID_HEADER: cluster_name},
    )
    SigV4QueryAuth(credentials, "sts", region, expires=TOKEN_EXPIRES_S).add_auth(request)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(request.url.encode()).decode().rstrip("=")


def sts_endpoint(eks: Any) -> str:
    """The regional STS endpoint beside the EKS client's: the same region and partition."""
    return eks.meta.endpoint_url.replace("://eks.", "://sts.", 1)


@dataclass(frozen=True)
class ClusterApi:
    endpoint: str
    context: ssl.SSLContext


def cluster_api(eks: Any, cluster_name: str, *, in_vpc: bool = False) -> ClusterApi:
    """The cluster's endpoint and CA. A private-only endpoint resolves to addresses in the cluster's
    VPC: outside any VPC that is said at once rather than timed out on; inside one it is tried (the
    VPC must be the cluster's, or reach it, and the cluster's security group must admit 443)."""
    cluster = eks.describe_cluster(name=cluster_name)["cluster"]
    if not in_vpc and cluster.get("resourcesVpcConfig", {}).get("endpointPublicAccess") is False:
        raise EksUsageError(
            f"EKS cluster {cluster_name}: its API endpoint is private and the reclaim function runs outside any "
            "VPC: give the ReclaimController the cluster's vpc (docs/hyperpod-eks.md, Usage metrics)"
        )
    try:
        context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificateAuthority"]["data"]).decode())
    except (KeyError, ValueError, ssl.SSLError) as error:
        raise EksUsageError(f"EKS cluster {cluster_name}: no usable certificate authority ({error})") from None
    if not cluster.get("endpoint"):
        raise EksUsageError(f"EKS cluster {cluster_name}: no API endpoint yet (status {cluster.get('status')})")
    return ClusterApi(endpoint=cluster["endpoint"].rstrip("/"), context=context)


def list_cluster_queues(
    api: ClusterApi, token: str, *, time_left: Callable[[], float] = lambda: float("inf")
) -> list[dict[str, Any]]:
    """Every ClusterQueue, following ``continue`` (one consistent list: Kubernetes serves every
    page from the first page's resource version, or refuses with 410 once that has expired)."""
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    after: str | None = None
    while True:
        if time_left() < REQUEST_TIMEOUT_S + 1:
            raise EksUsageError(f"{len(items)} ClusterQueues read when the invocation ran out of time")
        query = urllib.parse.urlencode({"limit": PAGE_SIZE, **({"continue": after} if after else {})})
        page = request_json("GET", f"{api.endpoint}{KUEUE_CLUSTER_QUEUES_PATH}?{query}", token, api.context)
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise EksUsageError(f"GET {KUEUE_CLUSTER_QUEUES_PATH}: not a ClusterQueueList ({str(page)[:200]})")
        items += page["items"]
        after = (page.get("metadata") or {}).get("continue") or None
        if after is None:
            return items
        if after in seen:
            raise EksUsageError(
                f"GET {KUEUE_CLUSTER_QUEUES_PATH}: continue token repeated after {len(items)} ClusterQueues"
            )
        seen.add(after)


def request_json(method: str, url: str, token: str, context: ssl.SSLContext, patch: Any = None) -> Any:
    """One request to the cluster's API; ``patch``: a JSON merge patch (RFC 7386) sent with PATCH."""
    path = urllib.parse.urlsplit(url).path  # never the token, nor a continue token, in a message
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if patch is not None:
        headers["Content-Type"] = "application/merge-patch+json"
    body = None if patch is None else json.dumps(patch).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, context=context, timeout=REQUEST_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise EksUsageError(f"{method} {path}: HTTP {error.code} {_status_message(error)}") from None
    except (
        urllib.error.URLError,
        OSError,
        http.client.HTTPException,
        ValueError,
    ) as error:  # refused, TLS, timeout, not JSON
        raise EksUsageError(f"{method} {path}: {getattr(error, 'reason', None) or error!r}") from None


def _status_message(error: urllib.error.HTTPError) -> str:
    """The message of the Kubernetes Status object in the reply (401, 403, 410 ...), else its reason."""
    try:
        return str(json.loads(error.read(4096)).get("message", error.reason))[:300]
    except (ValueError, AttributeError, OSError):
        return str(error.reason)


# --- Kueue's figures -> each team's usage, in instances ---------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei))?$")
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity(value: Any, where: str) -> Decimal:
    """A Kubernetes resource quantity ("8", "8000m", 8, "1e1") as a number; never negative."""
    match = (
        _QUANTITY.match(str(value).strip()) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    )
    try:
        number = (
            Decimal(match[1]) * (Decimal(f"1{match[2]}") if match and match[2] else _SUFFIX[match[3]])
            if match
            else None
        )
    except InvalidOperation:
        number = None
    if number is None or number < 0:
        raise EksUsageError(f"{where}: {value!r} - a non-negative Kubernetes quantity")
    return number


@dataclass(frozen=True, kw_only=True)
class EksShareUsage:
    """One team's position on one instance type in instances (GPUs / GPUs per instance, so a
    job using half an instance's GPUs counts half): the rows ``usage.usage_records`` reads."""

    share: str
    instance_type: str
    guaranteed: float
    in_use: float
    borrowed: float
    lent: float


@dataclass(frozen=True, kw_only=True)
class _Gpus:
    """One ClusterQueue's GPU figures on one flavor."""

    queue: str
    cohort: str | None
    flavor: str
    nominal: Decimal
    lending_limit: Decimal | None
    total: Decimal
    borrowed: Decimal
    reserved: Decimal  # quota held by workloads admitted or still passing admission checks (flavorsReservation)

    def lendable(self) -> Decimal:
        if self.cohort is None:  # outside a cohort a queue neither lends nor borrows
            return Decimal(0)
        idle = max(Decimal(0), self.nominal - self.total)
        return idle if self.lending_limit is None else min(idle, self.lending_limit)


def _gpu_figures(queues: Iterable[Mapping[str, Any]]) -> Iterator[_Gpus]:
    for index, queue in enumerate(queues):
        name = (queue.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            raise EksUsageError(f"clusterqueues[{index}].metadata.name: {name!r} - a name")
        spec, status = queue.get("spec") or {}, queue.get("status") or {}
        nominal: dict[str, Decimal] = {}
        lending: dict[str, Decimal] = {}
        for group in spec.get("resourceGroups") or []:
            for flavor, resource, where in _gpu_resources(group.get("flavors"), f"{name}.spec.resourceGroups.flavors"):
                nominal[flavor] = quantity(resource.get("nominalQuota", 0), f"{where}.nominalQuota")
                if resource.get("lendingLimit") is not None:
                    lending[flavor] = quantity(resource["lendingLimit"], f"{where}.lendingLimit")
        used = {
            flavor: (
                quantity(resource.get("total", 0), f"{where}.total"),
                quantity(resource.get("borrowed", 0), f"{where}.borrowed"),
            )
            for flavor, resource, where in _gpu_resources(status.get("flavorsUsage"), f"{name}.status.flavorsUsage")
        }
        # A Kueue that reports no flavorsReservation is read as reserving what it admits.
        reserved = (
            {flavor: total for flavor, (total, _) in used.items()}
            if status.get("flavorsReservation") is None
            else {
                flavor: quantity(resource.get("total", 0), f"{where}.total")
                for flavor, resource, where in _gpu_resources(
                    status["flavorsReservation"], f"{name}.status.flavorsReservation"
                )
            }
        )
        for flavor in sorted(nominal.keys() | used.keys() | reserved.keys()):
            total, borrowed = used.get(flavor, (Decimal(0), Decimal(0)))
            yield _Gpus(
                queue=name,
                # v1beta2 calls it cohortName; Kueue serves v1beta1 (cohort) by converting it
                cohort=spec.get("cohortName") or spec.get("cohort") or None,
                flavor=flavor,
                nominal=nominal.get(flavor, Decimal(0)),
                lending_limit=lending.get(flavor),
                total=total,
                borrowed=borrowed,
                reserved=reserved.get(flavor, Decimal(0)),
            )


def _gpu_resources(flavors: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    for flavor in flavors or []:
        if not isinstance(flavor.get("name"), str):
            raise EksUsageError(f"{where}.name: {flavor.get('name')!r} - a flavor name")
        for resource in flavor.get("resources") or []:
            if resource.get("name") == GPU_RESOURCE:
                yield flavor["name"], resource, f"{where}[{flavor['name']}]"


def share_usage(
    queues: Iterable[Mapping[str, Any]],
    pool: PoolPolicy,
    gpus_per_instance: Mapping[str, int],
    cluster_queue: Callable[[str], str] = hyperpod_cluster_queue,
) -> tuple[EksShareUsage, ...]:
    """Per governed team (its ClusterQueue ``cluster_queue(team)``; default the name HyperPod task
    governance gives it, ``hyperpod-ns-<team>-clusterqueue``) and instance type."""
    teams = {cluster_queue(share.name): share.name for share in pool.shares}
    groups: dict[tuple[str, str], list[_Gpus]] = {}
    for figures in _gpu_figures(queues):
        groups.setdefault((figures.cohort or "", figures.flavor), []).append(figures)
    rows = []
    for (cohort, flavor), members in sorted(groups.items()):
        governed = sorted((m for m in members if m.queue in teams), key=lambda m: teams[m.queue])
        per_instance = gpus_per_instance.get(flavor)
        if per_instance is None:
            if any(m.nominal or m.total or m.borrowed for m in governed):
                raise EksUsageError(
                    f"pool {pool.name}: ClusterQueue {governed[0].queue} holds GPUs of flavor {flavor!r}, which is "
                    f"not an instance type with gpus_per_instance (one of {sorted(gpus_per_instance)})"
                )
            continue
        # What the cohort's queues borrowed, less what queues of no governed team lent, is the governed teams' lending.
        to_attribute = (
            max(
                Decimal(0),
                sum((m.borrowed for m in members), Decimal(0))
                - sum((m.lendable() for m in members if m.queue not in teams), Decimal(0)),
            )
            if cohort
            else Decimal(0)
        )
        for m in governed:
            lent = min(m.lendable(), to_attribute)
            to_attribute -= lent
            if m.nominal or m.total or lent:
                rows.append(
                    EksShareUsage(
                        share=teams[m.queue],
                        instance_type=flavor,
                        guaranteed=float(m.nominal / per_instance),
                        in_use=float(m.total / per_instance),
                        borrowed=float(m.borrowed / per_instance),
                        lent=float(lent / per_instance),
                    )
                )
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class EksWaiting:
    """One team's waiting work: ``pending`` workloads (not instances), and whether it is starved."""

    share: str
    pending: int
    starved: bool


def _workloads(status: Mapping[str, Any], field: str, queue: str) -> int:
    value = status.get(field, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise EksUsageError(f"{queue}.status.{field}: {value!r} - a non-negative count of workloads")
    return value


def waiting_work(
    queues: Iterable[Mapping[str, Any]], pool: PoolPolicy, cluster_queue: Callable[[str], str] = hyperpod_cluster_queue
) -> tuple[EksWaiting, ...]:
    """Per governed team whose ClusterQueue exists. Waiting: the workloads waiting for quota
    (``pendingWorkloads``) and those holding quota while their admission checks run (``reservingWorkloads``
    - ``admittedWorkloads``): neither runs yet. Starved, as ``planner.starved_shares`` means it: work
    waits for quota while the team reserves less than its guarantee. Kueue's status does not say
    what a waiting workload asks for, so "less" is per flavor, in GPUs: a workload larger than the
    idle guarantee, or for another flavor, counts as starving the team too (docs/hyperpod-eks.md)."""
    queues = list(queues)
    teams = {cluster_queue(share.name): share.name for share in pool.shares}
    below_guarantee = {g.queue for g in _gpu_figures(queues) if g.queue in teams and g.reserved < g.nominal}
    rows = []
    for queue in queues:
        name = (queue.get("metadata") or {}).get("name")
        if name not in teams:
            continue
        status = queue.get("status") or {}
        waiting_for_quota = _workloads(status, "pendingWorkloads", name)
        checking = max(
            0, _workloads(status, "reservingWorkloads", name) - _workloads(status, "admittedWorkloads", name)
        )
        rows.append(
            EksWaiting(
                share=teams[name],
                pending=waiting_for_quota + checking,
                starved=bool(waiting_for_quota) and name in below_guarantee,
            )
        )
    return tuple(sorted(rows, key=lambda row: row.share))


# --- one tick -------------------------------------------------------------------------------------


def tick(
    target: Mapping[str, Any],
    pool: PoolPolicy,
    *,
    eks: Any,
    namespace: str,
    now: float,
    tick_seconds: float,
    emit: Callable[[Mapping[str, Any]], None] = log,
    time_left: Callable[[], float] = lambda: float("inf"),
    credentials: Any = None,
    in_vpc: bool = False,
    hour_limits: Callable[[tuple[EksShareUsage, ...]], Any] | None = None,
    cluster_queue: Callable[[str], str] = hyperpod_cluster_queue,
) -> bool:
    """Read the pool's cluster and emit its gauges and usage records; True when they were emitted.
    A failure emits ``pool_failed`` and ``PoolErrors`` (alarmed) and nothing else. ``hour_limits``:
    given the rows read, counts and enforces the teams' GPU-hour limits (reclaim.gpu_hours); a
    tick that cannot read the cluster counts nothing."""
    if time_left() < READ_SECONDS:
        emit(
            {"event": "pool_deferred", "pool": pool.name, "reason": f"{time_left():.0f} s left; the next tick reads it"}
        )
        return False
    cluster = target["eks_cluster"]
    try:
        api = cluster_api(eks, cluster, in_vpc=in_vpc)
        token = eks_token(
            cluster, credentials or boto3.Session().get_credentials(), eks.meta.region_name, sts_endpoint(eks)
        )
        queues = list_cluster_queues(api, token, time_left=time_left)
        rows = share_usage(queues, pool, target["gpus_per_instance"], cluster_queue)
        waiting = waiting_work(queues, pool, cluster_queue)
    except (ClientError, BotoCoreError, EksUsageError) as error:
        emit({"event": "pool_failed", "pool": pool.name, "error": str(error)})
        emit(metrics.document(namespace, {"Pool": pool.name}, {POOL_ERRORS: (1, "Count")}, timestamp=now))
        return False
    found = {cluster_queue(s.name) for s in pool.shares} & {q.get("metadata", {}).get("name") for q in queues}
    missing = sorted(s.name for s in pool.shares if cluster_queue(s.name) not in found)
    if missing:  # their queues are not (yet) made: nothing to report for them
        emit({"event": "cluster_queues_missing", "pool": pool.name, "teams": missing})
    for record in share_gauges(pool.name, rows, waiting, namespace=namespace, now=now):
        emit(record)
    for record in usage_records(pool.name, rows, tick_seconds=tick_seconds, namespace=namespace, now=now):
        emit(record)
    if hour_limits is not None:
        hour_limits(rows)
    return True


def share_gauges(
    pool: str, rows: Iterable[EksShareUsage], waiting: Iterable[EksWaiting] = (), *, namespace: str, now: float
) -> list[dict[str, Any]]:
    """The instances each team holds now (summed over instance types) and its waiting work, as the
    dashboards draw them and the starvation alarms read them (0 while not starved, as the other backends)."""
    totals: dict[str, dict[str, float]] = {
        w.share: dict(zip(WAITING, (w.pending, int(w.starved)), strict=True)) for w in waiting
    }
    for row in rows:
        share = totals.setdefault(row.share, {})
        for metric, value in zip(GAUGES, (row.guaranteed, row.in_use, row.borrowed, row.lent), strict=True):
            share[metric] = share.get(metric, 0.0) + value
    return [
        metrics.document(
            namespace,
            dict(zip(SHARE_DIMENSIONS, (pool, share), strict=True)),
            {m: (v, "Count") for m, v in values.items()},
            timestamp=now,
        )
        for share, values in sorted(totals.items())
    ]
