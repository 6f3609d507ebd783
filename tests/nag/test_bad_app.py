"""A hand-written app of deliberately bad L1 resources, synthesized once with the pack on the
App: every bad resource is reported under its rule, nothing else is, and an acknowledged
finding is not."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack, Validations

from constructs_lib import GpuGovernanceChecks, acknowledge

from .resources import ACCOUNT, QUEUE, access_entry, compute_quota, function, job_queue, key, policy, quota_share, role

EXPECTED = {
    "Bad/UnlimitedShare": {"GpuGovernance-BorrowWithoutLimit"},
    "Bad/HyperPodQuota": {"GpuGovernance-BorrowWithoutLimit", "GpuGovernance-PresetContradiction[Preset::critical]"},
    "Bad/FifoQueue": {"GpuGovernance-SharedQueueWithoutPolicy"},
    "Bad/BuyAnything": {
        "GpuGovernance-CapacityPurchaseGrant[Resource::*]",
        "GpuGovernance-CapacityPurchaseGrant[Principal::<Buyer>]",
    },
    "Bad/Buyer": {
        "GpuGovernance-PassAnyRole[Resource::*]",
        "GpuGovernance-JobControlWithoutShare[Action::batch:SubmitServiceJob]",
    },
    "Bad/OpenKey": {
        "GpuGovernance-KeyRotation",
        f"GpuGovernance-KeyAdmitsAccount[Principal::arn:aws:iam::{ACCOUNT}:root]",
    },
    "Bad/TeamAsAdmin": {
        "GpuGovernance-EksAccessScope[Policy::AmazonEKSClusterAdminPolicy]",
        "GpuGovernance-EksAccessScope[Scope::cluster:AmazonEKSClusterAdminPolicy]",
    },
    "Bad/CriticalLends": {"GpuGovernance-PresetContradiction[Preset::critical]"},
    "Bad/Purchaser": {
        "GpuGovernance-PurchaserLimits[Missing::GPU_GOVERNANCE_BUDGET]",
        "GpuGovernance-PurchaserLimits[Missing::GPU_GOVERNANCE_PRICE_CAP]",
        "GpuGovernance-PurchaserLimits[Concurrency::unreserved]",
    },
}
REASON = "Deliberately open test key: shows that an acknowledged finding leaves the report."


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("bad.out")
    app = App(outdir=str(outdir))
    stack = Stack(app, "Bad")
    quota_share(stack, "UnlimitedShare", {"strategy": "LEND_AND_BORROW", "borrowLimit": -1})
    compute_quota(stack, "HyperPodQuota", {"Strategy": "LendAndBorrow", "BorrowLimit": 10000}, preset="critical")
    job_queue(stack, "FifoQueue", None)
    buyer = role(
        stack,
        "Buyer",
        {"Action": "iam:PassRole", "Resource": "*"},
        {"Action": "batch:SubmitServiceJob", "Resource": QUEUE},
    )
    policy(stack, "BuyAnything", [buyer.ref], {"Action": "ec2:PurchaseCapacityBlock", "Resource": "*"})
    key(stack, "OpenKey", {"Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*"}, rotation=False)
    acknowledged = key(
        stack, "AcknowledgedKey", {"Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:Decrypt"}
    )
    acknowledge(acknowledged, REASON, f"GpuGovernance-KeyAdmitsAccount[Principal::arn:aws:iam::{ACCOUNT}:root]")
    access_entry(stack, "TeamAsAdmin", policies=[("AmazonEKSClusterAdminPolicy", "cluster")])
    quota_share(stack, "CriticalLends", {"strategy": "LEND"}, preset="critical")
    function(stack, "Purchaser", buyer.attr_arn, variables={}, concurrency=None)
    Validations.of(app).add_plugins(GpuGovernanceChecks(app))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    return json.loads((outdir / "validation-report.json").read_text()), json.loads(
        (outdir / "Bad.metadata.json").read_text()
    )


def test_every_bad_resource_is_found_under_its_rule_and_nothing_else(report):
    validation, _ = report
    (plugin,) = [p for p in validation["pluginReports"] if p["pluginName"] == "GpuGovernance"]
    found: dict[str, set[str]] = {}
    for violation in plugin["violations"]:
        assert violation["severity"] == "error"
        assert violation["description"]  # the rule's one-line finding
        for construct in violation["violatingConstructs"]:
            found.setdefault(construct["constructPath"], set()).add(violation["ruleName"])
    assert found == EXPECTED


def test_acknowledged_finding_is_recorded_with_its_reason(report):
    _, metadata = report
    entries = [e for e in metadata["/Bad/AcknowledgedKey"] if e["type"] == "aws:cdk:acknowledged-rules"]
    assert list(entries[0]["data"].values()) == [REASON]
