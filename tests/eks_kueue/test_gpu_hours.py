"""GPU-hour limits on an ``eks_kueue`` pool (issue 42): at a team's limit the reclaim controller sets
its ClusterQueue's ``stopPolicy`` to ``Hold`` (no new admission; admitted workloads go on), and back to
``None`` next period, as a JSON merge patch at the ``metadata.resourceVersion`` it read. The cluster is
a model of the Kubernetes API playing its rules: every change bumps the resourceVersion, a patch
carrying another one is refused 409 Conflict, a read may lag, an answer may be lost after the change
was made. The ClusterQueues are the library's own (constructs_lib/backends/eks_kueue/kueue.py); the
ledger is moto's DynamoDB."""

from __future__ import annotations

import copy
import os
import ssl
from datetime import UTC, datetime
from typing import Any

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

import pytest  # noqa: E402

from constructs_lib.backends.eks_kueue import kueue  # noqa: E402
from constructs_lib.model import GovernanceModel  # noqa: E402
from gpu_governance_runtime.backends import BACKENDS as RUNTIME_BACKENDS  # noqa: E402
from gpu_governance_runtime.backends.base import ReclaimClients  # noqa: E402
from gpu_governance_runtime.backends.eks_kueue import cluster_queue  # noqa: E402
from gpu_governance_runtime.backends.eks_kueue.gpu_hours import ClusterQueueSwitch  # noqa: E402
from gpu_governance_runtime.backends.kueue_usage import ClusterApi, EksShareUsage, EksUsageError  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import EKS_KUEUE, KUEUE_CLUSTER_QUEUES_PATH, SharingStrategy  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Share  # noqa: E402
from gpu_governance_runtime.policy import PoolPolicy  # noqa: E402
from gpu_governance_runtime.reclaim import gpu_hours  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

from .org import POOL, example_data, example_model  # noqa: E402

MODEL = example_model()
EKS = MODEL.pool(POOL)
P5 = "p5.48xlarge"  # 8 GPUs
ENDPOINT = "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com"
# 2025-12-02 10:00 UTC; a day's limit of 16 GPU hours is 2 hours of one p5 instance
MORNING = datetime(2025, 12, 2, 10, tzinfo=UTC).timestamp()
NEXT_DAY = datetime(2025, 12, 3, 0, 1, tzinfo=UTC).timestamp()
LIMIT = (16, "day")


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


class KubernetesApi:
    """ClusterQueues as the API server serves them: GET by name, PATCH as a JSON merge patch whose
    ``metadata.resourceVersion``, when given, must be the stored one (else 409 Conflict)
    [aws: eks.kubernetes-patch-resource-version]."""

    def __init__(self, queues: list[dict[str, Any]]):
        self.version = 5000
        self.stored: dict[str, list[dict[str, Any]]] = {}  # every version of each, oldest first
        for queue in queues:
            self._store(queue)
        self.log: list[tuple[str, ...]] = []  # requests and ledger writes, in order
        self.lagging: set[str] = set()  # a GET of these answers the version before the last
        self.lose_next_answer = False  # the next PATCH is made, then its answer is lost (a timeout)

    def _store(self, queue: dict[str, Any]) -> None:
        self.version += 1
        queue = copy.deepcopy(queue)
        queue["metadata"]["resourceVersion"] = str(self.version)
        self.stored.setdefault(queue["metadata"]["name"], []).append(queue)

    def now(self, name: str) -> dict[str, Any]:
        return self.stored[name][-1]

    def edit(self, name: str, patch: dict[str, Any]) -> None:
        """A change made by someone else (a deploy, a platform admin)."""
        self._store(_merge(self.now(name), patch))

    def request(self, method: str, url: str, token: str, context: ssl.SSLContext, patch: Any = None) -> Any:
        assert token == "token" and isinstance(context, ssl.SSLContext)
        path = url.removeprefix(ENDPOINT)
        name = path.removeprefix(f"{KUEUE_CLUSTER_QUEUES_PATH}/")
        assert path == f"{KUEUE_CLUSTER_QUEUES_PATH}/{name}"
        if name not in self.stored:
            raise EksUsageError(f"{method} {path}: HTTP 404 clusterqueues.kueue.x-k8s.io {name!r} not found")
        if method == "GET":
            self.log.append(("GET", name))
            versions = self.stored[name]
            return copy.deepcopy(versions[-2] if name in self.lagging and len(versions) > 1 else versions[-1])
        assert method == "PATCH" and patch is not None
        self.log.append(("PATCH", name, patch["spec"]["stopPolicy"]))
        given = (patch.get("metadata") or {}).get("resourceVersion")
        if given is not None and given != self.now(name)["metadata"]["resourceVersion"]:
            raise EksUsageError(
                f"{method} {path}: HTTP 409 Operation cannot be fulfilled on clusterqueues.kueue.x-k8s.io "
                f'"{name}": the object has been modified; please apply your changes to the latest version and try again'
            )
        self._store(_merge(self.now(name), patch))
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise EksUsageError(f"{method} {path}: TimeoutError('The read operation timed out')")
        return copy.deepcopy(self.now(name))

    def stop_policy(self, team: str) -> str:
        return self.now(cluster_queue(team))["spec"].get("stopPolicy", "None")


def library_queue(team: str, *, paused: bool = False) -> dict[str, Any]:
    """The library's ClusterQueue of ``team`` (Hold when the governance file pauses it)."""
    declared = next(t for t in MODEL.teams if t.name == team).model_copy(update={"paused": paused})
    queue = kueue.cluster_queue_object(EKS, declared, kueue.cohort_of(EKS, declared, MODEL.groups))
    queue["metadata"]["uid"] = f"uid-{team}"
    return queue


def pool(*, paused: bool = False) -> PoolPolicy:
    return PoolPolicy(
        name=POOL,
        backend=EKS_KUEUE,
        capacity={P5: 6},
        shares=(
            Share(
                name="research",
                quota={P5: 2},
                strategy=SharingStrategy.LEND_AND_BORROW,
                paused=paused,
                gpu_hour_limit=LIMIT,
            ),
            Share(name="training", quota={P5: 2}, strategy=SharingStrategy.LEND_AND_BORROW, gpu_hour_limit=LIMIT),
            Share(name="production", quota={P5: 2}, strategy=SharingStrategy.RESERVE),
        ),
    )


@pytest.fixture
def cluster():
    api = KubernetesApi([library_queue(t) for t in ("research", "training", "production")])
    with reclaim_ledger_table() as table:
        ledger = Ledger(table)
        put = ledger.put

        def recorded_put(key: str, **fields: Any) -> None:
            put(key, **fields)
            api.log.append(("ledger", key, fields["status"]))

        ledger.put = recorded_put
        yield api, ledger


def tick(cluster, now: float, research: float, *, training: float = 0, policy=None, dry_run: bool = False):
    """One hour-long tick seeing ``research`` (and ``training``) p5 instances in use; research's record."""
    api, ledger = cluster
    connect = lambda: (ClusterApi(endpoint=ENDPOINT, context=ssl.create_default_context()), "token")  # noqa: E731
    records = gpu_hours.enforce(
        policy or pool(),
        [("research", P5, research), ("training", P5, training), ("production", P5, 2)],
        ledger=ledger,
        switch=lambda team: ClusterQueueSwitch(connect, cluster_queue(team), request=api.request),
        notify=lambda detail: None,
        now=now,
        tick_seconds=3600,
        dry_run=dry_run,
        pool_gpus={P5: 8},
    )
    return {r["team"]: r for r in records}


KEY = f"hour-limit#{POOL}#research"
RESEARCH = cluster_queue("research")


def test_the_limit_holds_the_teams_cluster_queue_once_recorded_before_and_after_and_next_period_admits(cluster):
    api, ledger = cluster
    read = api.now(RESEARCH)["metadata"]["resourceVersion"]
    assert tick(cluster, MORNING, 2)["research"]["switch"] == "disabled"  # 16 of 16 GPU hours
    assert api.log == [
        ("GET", RESEARCH),
        ("ledger", KEY, "disabling"),
        ("PATCH", RESEARCH, "Hold"),
        ("ledger", KEY, "disabled"),
    ]
    assert api.stop_policy("research") == "Hold"
    assert api.stored[RESEARCH][-2]["metadata"]["resourceVersion"] == read  # the patch was made at the version read
    assert tick(cluster, MORNING + 3600, 2)["research"]["switch"] == "off"  # still over: read, not changed
    assert tick(cluster, MORNING + 3600, 2)["research"]["switch"] == "off"  # the same tick again
    assert [entry for entry in api.log if entry[0] == "PATCH"] == [("PATCH", RESEARCH, "Hold")]
    api.log.clear()
    assert tick(cluster, NEXT_DAY, 0)["research"]["switch"] == "enabled"
    assert api.log == [
        ("ledger", KEY, "enabling"),
        ("GET", RESEARCH),
        ("PATCH", RESEARCH, "None"),
        ("ledger", KEY, "enabled"),
    ]
    assert api.stop_policy("research") == "None"
    assert tick(cluster, NEXT_DAY + 3600, 0)["research"]["switch"] == "as_deployed"
    assert ledger.get(KEY)["status"] == "enabled"


def test_a_change_made_since_the_read_is_refused_and_read_again_next_tick(cluster):
    api, ledger = cluster
    api.edit(RESEARCH, {"metadata": {"annotations": {"note": "a deploy"}}, "spec": {"fairSharing": {"weight": "3"}}})
    api.lagging.add(RESEARCH)  # the read answers the version before the deploy
    refused = tick(cluster, MORNING, 2)["research"]
    assert refused["switch"] == "retry_next_tick" and "HTTP 409" in refused["error"]
    assert ledger.get(KEY)["status"] == "disabling"  # recorded before the call: the next tick finishes it
    assert api.now(RESEARCH)["spec"]["fairSharing"] == {"weight": "3"} and api.stop_policy("research") == "None"
    api.lagging.clear()
    assert tick(cluster, MORNING + 3600, 2)["research"]["switch"] == "disabled"
    held = api.now(RESEARCH)
    assert held["spec"]["stopPolicy"] == "Hold" and held["spec"]["fairSharing"] == {"weight": "3"}  # the deploy's kept
    assert held["metadata"]["annotations"]["note"] == "a deploy"


def test_a_patch_whose_answer_was_lost_is_not_made_twice(cluster):
    api, ledger = cluster
    api.lose_next_answer = True
    assert tick(cluster, MORNING, 2)["research"]["switch"] == "retry_next_tick"
    assert api.stop_policy("research") == "Hold"  # made, its answer lost
    assert tick(cluster, MORNING + 3600, 2)["research"]["switch"] == "off"  # read as done: no second patch
    assert [entry for entry in api.log if entry[0] == "PATCH"] == [("PATCH", RESEARCH, "Hold")]
    item = ledger.get(KEY)
    assert (item["status"], item["was_on"]) == ("disabled", True)  # still the controller's to let in next period
    assert tick(cluster, NEXT_DAY, 0)["research"]["switch"] == "enabled"
    assert api.stop_policy("research") == "None"


def test_a_paused_team_is_never_switched_on(cluster):
    api, ledger = cluster
    api.edit(RESEARCH, {"spec": {"stopPolicy": library_queue("research", paused=True)["spec"]["stopPolicy"]}})
    assert api.stop_policy("research") == "Hold"  # as the construct deploys a paused team's
    paused = pool(paused=True)
    assert tick(cluster, MORNING, 2, policy=paused)["research"]["switch"] == "off"
    assert tick(cluster, NEXT_DAY, 0, policy=paused)["research"]["switch"] == "left_off"
    assert tick(cluster, NEXT_DAY + 3600, 0, policy=paused)["research"]["switch"] == "as_deployed"
    assert not [entry for entry in api.log if entry[0] == "PATCH"] and api.stop_policy("research") == "Hold"


def test_a_team_paused_after_its_limit_held_it_is_not_switched_on(cluster):
    api, _ = cluster
    assert tick(cluster, MORNING, 2)["research"]["switch"] == "disabled"
    assert tick(cluster, NEXT_DAY, 0, policy=pool(paused=True))["research"]["switch"] == "left_off"
    assert [entry for entry in api.log if entry[0] == "PATCH"] == [("PATCH", RESEARCH, "Hold")]
    assert api.stop_policy("research") == "Hold"


def test_one_teams_limit_never_holds_another_teams_cluster_queue(cluster):
    api, _ = cluster
    before = {t: copy.deepcopy(api.now(cluster_queue(t))) for t in ("training", "production")}
    records = tick(cluster, MORNING, 2, training=1)  # research at 16 of 16, training at 8 of 16
    assert (records["research"]["switch"], records["training"]["switch"]) == ("disabled", "as_deployed")
    assert {t: api.now(cluster_queue(t)) for t in before} == before  # not even a new resourceVersion
    assert {entry[1] for entry in api.log if entry[0] in ("GET", "PATCH")} == {RESEARCH}


def test_dry_run_records_and_changes_nothing(cluster):
    api, ledger = cluster
    record = tick(cluster, MORNING, 2, dry_run=True)["research"]
    assert (record["switch"], record["used_gpu_hours"]) == ("would_disable", 16)
    assert api.log == [] and ledger.get(KEY) is None  # not even read
    assert api.stop_policy("research") == "None"


def test_the_registry_gives_an_eks_kueue_pool_the_cluster_queue_switch(monkeypatch):
    from gpu_governance_runtime.reclaim import handler as controller

    limits = RUNTIME_BACKENDS[EKS_KUEUE].gpu_hour_limits
    assert limits is not None
    clients = ReclaimClients(batch=None, batch_submit=None, ssm=None, eks=None, sagemaker=None, events=None)
    target = {"pool": POOL, "eks_cluster": "acme-gpu", "gpus_per_instance": {P5: 8}}
    switch = limits.switch(clients, target, "research")
    assert isinstance(switch, ClusterQueueSwitch) and switch.name == "gpu-team-research-clusterqueue"
    rows = (EksShareUsage(share="research", instance_type=P5, guaranteed=2, in_use=1.5, borrowed=0, lent=0),)
    with reclaim_ledger_table() as table:
        hour_limits = controller.gpu_hour_limits(
            target, pool(), Ledger(table), now=MORNING, tick_seconds=3600, dry_run=True
        )
        assert hour_limits is not None
        records = {r["team"]: r for r in hour_limits(rows)}
    assert (records["research"]["used_gpu_hours"], records["research"]["switch"]) == (12, "as_deployed")


def test_a_cluster_queue_without_a_resource_version_is_not_patched(cluster):
    api, _ = cluster
    api.stored[RESEARCH][-1]["metadata"].pop("resourceVersion")
    record = tick(cluster, MORNING, 2)["research"]
    assert record["switch"] == "retry_next_tick" and "resourceVersion" in record["error"]
    assert not [entry for entry in api.log if entry[0] == "PATCH"]


# --- the Kubernetes RBAC that lets the controller hold a ClusterQueue -----------------------------


def test_the_controllers_group_may_patch_only_the_limited_unpaused_teams_cluster_queues():
    from constructs_lib.tenancy.kubernetes import usage_reader_objects
    from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

    data = example_data()
    for team in data["teams"]:
        if team["name"] in ("research", "training"):
            team["gpu_hour_limit"] = {"hours": 100, "period": "week"}
        team["paused"] = team["name"] == "training"  # limited and paused: its ClusterQueue is Hold as deployed
    teams = GovernanceModel.from_dict(data).teams_in(POOL)
    production = next(t for t in teams if t.name == "production")  # no limit
    role, binding = kueue.usage_reader(EKS, teams)
    (read_only, _) = usage_reader_objects()
    assert binding == usage_reader_objects()[1] and binding["subjects"][0]["name"] == EKS_USAGE_READER_GROUP
    first, *new = role["rules"]
    assert first == read_only["rules"][0]  # get and list, as before
    assert new == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "resourceNames": ["gpu-team-research-clusterqueue"],
            "verbs": ["patch"],
        }
    ]
    assert kueue.usage_reader(EKS, [production])[0] == read_only  # no limit: nothing new


def test_a_teams_own_roles_still_cannot_change_any_cluster_queue():
    for team in MODEL.teams:
        for manifest in kueue.team_objects(EKS, team, MODEL.groups, MODEL.priority_classes):
            if manifest["kind"] not in ("Role", "ClusterRole"):
                continue
            for rule in manifest["rules"]:
                if {"clusterqueues", "*"} & set(rule.get("resources", ())) and {"kueue.x-k8s.io", "*"} & set(
                    rule.get("apiGroups", ())
                ):
                    assert set(rule["verbs"]) <= {"get", "list", "watch"}, (team.name, manifest["metadata"]["name"])


# --- on the wire: the switch against a real HTTPS server shaped as the API server ------------------


def test_the_switch_reads_and_patches_over_https_as_a_merge_patch_at_the_version_read(tmp_path, monkeypatch):
    from gpu_governance_runtime.backends.base import SwitchError
    from gpu_governance_runtime.backends.eks_kueue.gpu_hours import connect
    from tests.hyperpod_eks.kube_api import Reply, serve, status_object
    from tests.hyperpod_eks.test_usage_observer import CLUSTER, eks_client

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    kube, stop = serve(tmp_path)
    try:
        stored = {
            **library_queue("research"),
            "metadata": {**library_queue("research")["metadata"], "resourceVersion": "7"},
        }
        conflict = status_object(
            409, "Conflict", f'Operation cannot be fulfilled on clusterqueues.kueue.x-k8s.io "{RESEARCH}"'
        )
        answers = iter([Reply(200, stored), Reply(409, conflict), Reply(200, stored), Reply(200, stored)])
        kube.respond = lambda path, query, headers: next(answers)
        # a private endpoint: the tick that just read the cluster reached it, so the switch does too
        refused = ClusterQueueSwitch(connect(eks_client(kube, public=False)[0], CLUSTER), RESEARCH)
        assert refused.enabled()
        with pytest.raises(SwitchError, match="PATCH .*: HTTP 409 Operation cannot be fulfilled"):
            refused.set(False)
        held = ClusterQueueSwitch(connect(eks_client(kube)[0], CLUSTER), RESEARCH)
        held.set(False)
        path = f"{KUEUE_CLUSTER_QUEUES_PATH}/{RESEARCH}"
        patch = {"metadata": {"resourceVersion": "7"}, "spec": {"stopPolicy": "Hold"}}
        assert kube.bodies == [("PATCH", path, patch), ("PATCH", path, patch)]
        assert [p for p, _, _ in kube.requests] == [path] * 4
        for _, _, headers in kube.requests:
            assert headers["authorization"].startswith("Bearer k8s-aws-v1.")
        assert [h.get("content-type") for _, _, h in kube.requests] == [None, "application/merge-patch+json"] * 2
    finally:
        stop()
