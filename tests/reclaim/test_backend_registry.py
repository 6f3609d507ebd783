"""The reclaim handler asks the runtime's backend registry (``gpu_governance_runtime.backends``)
what to do with each target's pool (issue 27, item 1): build the adapter its backend declares, or
only observe usage where the backend's scheduler reclaims natively; USAGE_TARGETS read accounting
only where the backend declares it."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime import backends, contract  # noqa: E402
from gpu_governance_runtime.planners.reclaim import PendingJob, PoolState  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.reclaim.test_controller import G6E, QUEUE  # noqa: E402

SHARE = {"name": "research", "quota": {G6E: 2}, "strategy": "lend_and_borrow", "borrow_limit": None}
POLICY = {
    "version": 1,
    "organisation": "acme",
    "priority_classes": [],
    "capacity_windows": [],
    "pools": [
        {"name": "fair", "backend": contract.BATCH_FAIR_SHARE, "capacity": {G6E: 4}, "shares": [SHARE]},
        {"name": "kueue", "backend": contract.HYPERPOD_EKS, "capacity": {G6E: 4}, "shares": [SHARE]},
    ],
}
EKS_TARGET = {"pool": "kueue", "eks_cluster": "c", "cluster_arn": "arn:c", "gpus_per_instance": {G6E: 4}}


class QueueRead:  # a pool's queue, observed: one job waiting
    acts, reroutes_borrowers, usage_from_queue, action_seconds, preemptions_seen = False, False, True, 1.0, {}

    def __init__(self, pool):
        self.pool = pool

    def read(self, now):
        waiting = PendingJob(job_id="j1", share="research", instance_type=G6E, count=1, priority=0, submitted_at=now)
        return PoolState(capacity=self.pool.capacity, shares=self.pool.shares, running=(), pending=(waiting,), now=now)


@pytest.fixture
def environment(tmp_path, monkeypatch):
    (tmp_path / "policy.json").write_text(json.dumps(POLICY))
    monkeypatch.setenv("POLICY_PATH", str(tmp_path / "policy.json"))
    monkeypatch.setenv("LEDGER_TABLE", "ledger")  # dry run with an observing adapter: never read
    monkeypatch.setenv("TICK_SECONDS", "120")
    monkeypatch.setenv("RECLAIM_TARGETS", json.dumps([{"pool": "fair", "job_queue": QUEUE}, EKS_TARGET]))
    published, logged = [], []
    monkeypatch.setattr(controller.metrics, "publish", lambda namespace, dims, values: published.append((dims, values)))
    monkeypatch.setattr(controller, "log", logged.append)
    return monkeypatch, published, logged


def test_the_handler_builds_what_each_pools_backend_declares(environment, capsys):
    monkeypatch, published, _ = environment
    built, observed = [], []

    def adapter(target, pool, policy, clients, invocation):
        built.append((target["job_queue"], pool.name, clients.batch is controller.batch, invocation.tick_seconds))
        return QueueRead(pool)

    def observe(target, pool, tick):
        observed.append((target["eks_cluster"], pool.name, tick.tick_seconds, tick.hour_limits))

    fair, eks = backends.BACKENDS[contract.BATCH_FAIR_SHARE], backends.BACKENDS[contract.HYPERPOD_EKS]
    monkeypatch.setitem(backends.BACKENDS, contract.BATCH_FAIR_SHARE, replace(fair, reclaim_adapter=adapter))
    monkeypatch.setitem(backends.BACKENDS, contract.HYPERPOD_EKS, replace(eks, observe_usage=observe))
    result = controller.handler({}, None)
    assert built == [(QUEUE, "fair", True, 120.0)]
    assert observed == [("c", "kueue", 120.0, None)]  # usage only, and no team has a GPU-hour limit
    assert result == {
        "dry_run": True,
        "pools": [{"pool": "fair", "preemptions": 0, "starts": 0, "acted": 0, "failed": 0}],
    }
    assert published == []
    shares = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"Share"' in line]
    assert [(r["Pool"], r["Share"], r["Pending"]) for r in shares if "Pending" in r] == [
        ("fair", "research", 1)
    ]  # as the adapter read


def test_a_usage_target_whose_backend_reads_no_accounting_fails_alone_and_says_why(environment):
    monkeypatch, published, logged = environment
    monkeypatch.setitem(
        backends.BACKENDS,
        contract.BATCH_FAIR_SHARE,
        replace(backends.BACKENDS[contract.BATCH_FAIR_SHARE], reclaim_adapter=lambda target, pool, *_: QueueRead(pool)),
    )
    monkeypatch.setitem(
        backends.BACKENDS,
        contract.HYPERPOD_EKS,
        replace(backends.BACKENDS[contract.HYPERPOD_EKS], observe_usage=lambda *_: None),
    )
    monkeypatch.setenv("USAGE_TARGETS", json.dumps([{"pool": "fair", "instance_id": "i-1", "instance_type": G6E}]))
    result = controller.handler({}, None)
    assert [r["pool"] for r in result["pools"]] == ["fair"]  # its reclaim tick still ran
    assert [(r["pool"], r["error"]) for r in logged if r.get("event") == "pool_failed"] == [
        (
            "fair",
            "ValueError: USAGE_TARGETS: pool 'fair' has backend 'batch_fair_share'; its usage is not read from accounting",
        )
    ]
    assert published == [({"Pool": "fair"}, {contract.POOL_ERRORS: (1, "Count")})]


def test_a_reclaim_target_whose_backend_takes_no_adapter_is_refused_with_the_backends_reason():
    with pytest.raises(ValueError) as error:
        controller.build_adapter({"pool": "kueue"}, parse_policy(POLICY))
    assert str(error.value) == (
        "RECLAIM_TARGETS: pool 'kueue' has backend 'hyperpod_eks'; HyperPod EKS reclaims natively (Kueue)"
    )
