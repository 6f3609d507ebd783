"""What members and the platform read of an ``eks_kueue`` pool (issue 42 item 2): `status` from
its Workloads and ClusterQueues, usage as the reclaim controller reads it from the ClusterQueues
the library writes (and so chargeback), `trace from-kueue` for its Workloads, and `simulate` of
the pool. The objects read are the library's own ClusterQueues with a status as Kueue reports it."""

from __future__ import annotations

import copy
import json

from constructs_lib import cli
from constructs_lib.backends import backend_of
from constructs_lib.backends.eks_kueue import kueue
from constructs_lib.cli.usage import queries
from constructs_lib.model.policy import compile_policy
from constructs_lib.simulator.importers import ImportOptions, from_kueue
from gpu_governance_runtime.backends import BACKENDS as RUNTIME_BACKENDS, kueue_usage
from gpu_governance_runtime.backends.eks_kueue import cluster_queue
from gpu_governance_runtime.contract import EKS_KUEUE, RECLAIM_NAMESPACE
from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.usage import usage_records

from .org import EXAMPLE, POOL, example_model

MODEL = example_model()
EKS = MODEL.pool(POOL)
POLICY = parse_policy(compile_policy(MODEL))
TEAMS = {t.name: t for t in MODEL.teams}
P5, G6E = "p5.48xlarge", "g6e.12xlarge"


def observed(team: str, usage: dict[str, tuple[int, int]]) -> dict:
    """The library's ClusterQueue of ``team`` as `kubectl get clusterqueues -o json` returns it
    once Kueue has admitted work: per flavor (GPUs in use, GPUs of it borrowed)."""
    queue = copy.deepcopy(kueue.cluster_queue_object(EKS, TEAMS[team], kueue.cohort_of(EKS, TEAMS[team], MODEL.groups)))
    flavors = [
        {
            "name": flavor,
            "resources": [{"name": "nvidia.com/gpu", "total": str(total), "borrowed": str(borrowed)}],
        }
        for flavor, (total, borrowed) in usage.items()
    ]
    queue["status"] = {
        "flavorsUsage": flavors,
        "flavorsReservation": flavors,
        "pendingWorkloads": 1,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
    }
    return queue


# In the group's cohort: research runs 3 p5 (24 GPUs), one of them borrowed; training runs 1 of its
# 2 and lends the other (its lendingLimit is 1 instance); production runs both of its own.
QUEUES = [
    observed("research", {P5: (24, 8)}),
    observed("training", {P5: (8, 0)}),
    observed("production", {P5: (16, 0)}),
]


def test_usage_is_read_from_the_queues_the_library_writes_under_the_runtimes_names():
    observer = RUNTIME_BACKENDS[EKS_KUEUE]
    assert observer.observe_usage is not None and observer.reclaim_adapter is None  # Kueue reclaims, we observe
    entry = (
        backend_of(EKS).part("reclaim").entry(backend_of(EKS).part("reclaim").target(EKS, None), EKS)
    )  # RECLAIM_TARGETS as the capacity stack writes it
    assert entry == {"pool": POOL, "eks_cluster": "acme-gpu", "gpus_per_instance": {G6E: 4, P5: 8}}
    rows = kueue_usage.share_usage(QUEUES, POLICY.pool(POOL), entry["gpus_per_instance"], cluster_queue)
    by_team = {(r.share, r.instance_type): (r.guaranteed, r.in_use, r.borrowed, r.lent) for r in rows}
    assert by_team[("research", P5)] == (2, 3, 1, 0)
    assert by_team[("training", P5)] == (2, 1, 0, 1)  # what research borrowed is training's lending
    assert by_team[("production", P5)] == (2, 2, 0, 0)
    # under HyperPod's names no queue is a team's: the runtime reads this backend's
    assert kueue_usage.share_usage(QUEUES, POLICY.pool(POOL), entry["gpus_per_instance"]) == ()


def test_chargeback_queries_every_series_the_observer_publishes():
    rows = kueue_usage.share_usage(QUEUES, POLICY.pool(POOL), {G6E: 4, P5: 8}, cluster_queue)
    records = [
        r for r in usage_records(POOL, rows, tick_seconds=60, namespace=RECLAIM_NAMESPACE, now=1.8e9) if "_aws" in r
    ]
    published = {(r["Pool"], r["Share"]) for r in records}
    assert published == {(POOL, t) for t in ("research", "training", "production")}
    asked = {(pool, team) for pool, team, _ in queries(MODEL, [t.name for t in MODEL.teams]).values()}
    assert published <= asked  # `gpu-governance usage report` reads what was published


def pending_workload(team: str, gpus: int) -> dict:
    namespace = kueue.namespace(team)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-sweep-1a2b3", "namespace": namespace, "creationTimestamp": "2027-01-15T06:00:00Z"},
        "spec": {
            "active": True,
            "queueName": f"{namespace}-localqueue",
            "priority": 50,
            "priorityClassName": "standard-priority",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "t", "image": "t:1", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
                            ]
                        }
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {P5}, 8 more needed",
                    "lastTransitionTime": "2027-01-15T07:00:00Z",
                }
            ]
        },
    }


def test_status_explains_a_waiting_workload_from_the_pools_queues(tmp_path, capsys):
    (tmp_path / "w.json").write_text(json.dumps({"kind": "List", "items": [pending_workload("research", 16)]}))
    (tmp_path / "q.json").write_text(json.dumps({"kind": "List", "items": QUEUES}))
    code = cli.main(
        [
            "status",
            "--config",
            str(EXAMPLE),
            "--team",
            "research",
            "--pool",
            POOL,
            "--workloads",
            str(tmp_path / "w.json"),
            "--cluster-queues",
            str(tmp_path / "q.json"),
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    [status] = json.loads(out.out)
    [job] = status["jobs"]
    # research holds 24 of its 16 + 16: above its guarantee, borrowing within its limit, the cohort full
    assert (job["job_id"], job["state"], job["reason"]) == ("job-sweep-1a2b3", "waiting", "pool_full")
    p5 = next(u for u in status["usage"] if u["instance_type"] == P5)
    assert (status["unit"], p5["in_use"], p5["guaranteed"], p5["borrowed"]) == ("GPUs", 24, 16, 8)


def finished_workload(team: str, name: str, flavor: str, pods: int) -> dict:
    namespace = kueue.namespace(team)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"queueName": f"{namespace}-localqueue", "priority": 50, "podSets": [{"name": "main", "count": pods}]},
        "status": {
            "admission": {
                "clusterQueue": kueue.cluster_queue(team),
                "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": flavor}, "count": pods}],
            },
            "conditions": [
                {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-11-01T00:01:00Z"},
                {"type": "Finished", "status": "True", "lastTransitionTime": "2026-11-01T02:01:00Z"},
            ],
        },
    }


def test_trace_from_kueue_reads_this_backends_teams_and_simulate_replays_them(tmp_path, capsys):
    items = [finished_workload("research", "pretrain", P5, 2), finished_workload("training", "sweep", G6E, 1)]
    source, trace = tmp_path / "wl.json", tmp_path / "trace.csv"
    source.write_text(json.dumps({"kind": "List", "items": items}))
    imported = from_kueue(source, ImportOptions(instance_type=G6E, priorities={}))
    assert [(j.job_id, j.team, j.instance_type, j.count) for j in imported.jobs] == [
        ("gpu-team-research/pretrain", "research", P5, 2),
        ("gpu-team-training/sweep", "training", G6E, 1),
    ]
    assert (imported.skipped, imported.guessed) == ({}, {})
    assert cli.main(["trace", "from-kueue", str(source), str(trace), "--instance-type", G6E]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", "--config", str(EXAMPLE), "--pool", POOL, "--trace", str(trace), "--json"]) == 0
    replay = json.loads(capsys.readouterr().out)["policy"]
    assert (replay["jobs_completed"], replay["jobs_unfinished"], replay["jobs_never_runnable"]) == (2, 0, 0)
    assert {team: t["jobs"] for team, t in replay["teams"].items()} == {"research": 1, "training": 1}
    assert replay["guarantee_kept"]["research"] == {"asked_h": 2.0, "breached_h": 0.0, "kept_percent": 100.0}


def test_the_policy_carries_the_lending_limits_and_groups_kueue_holds():
    """Kueue holds a lending limit and a group's quota natively (Backend.holds_limits_natively):
    the policy document carries them, so simulate and status replay what the cluster does."""
    [pool] = [p for p in compile_policy(MODEL)["pools"] if p["name"] == POOL]
    assert {s["name"]: s["lending_limit"] for s in pool["shares"]} == {
        "research": None,
        "training": 50,
        "production": None,
    }
    assert pool["groups"] == [
        # the group's quota is its ceiling, as the Cohort's borrowingLimit 0 holds it
        {
            "name": "vision",
            "shares": ["research", "training"],
            "quota": {P5: 5, G6E: 4},
            "borrowing_limit": {P5: 0, G6E: 0},
        }
    ]
