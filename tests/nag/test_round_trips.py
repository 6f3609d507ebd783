"""The pack evaluates its rules in Python and hands cdk-nag only what cdk-nag records: a finding
or a rule's error. A compliant resource costs no ``applyRule`` round trip through jsii (each
is about six calls: the rule's id, its callback, the node, info and level), and what is
reported stays the same (issue 27, item 5; docs/performance.md)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack, Validations, aws_kms as kms

from constructs_lib import GpuGovernanceChecks
from constructs_lib.nag import pack
from constructs_lib.nag.rule import GovernanceRule

from .resources import ACCOUNT, key

OPEN = {"Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*"}
TEAM_ONLY = {"Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/team-a"}, "Action": "kms:Decrypt"}


def _synth(tmp_path, build) -> dict:
    app = App(outdir=str(tmp_path))
    build(Stack(app, "Keys"))
    Validations.of(app).add_plugins(GpuGovernanceChecks(app))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    return json.loads((tmp_path / "validation-report.json").read_text())


def _violations(report: dict) -> dict[str, set[str]]:
    return {
        violation["ruleName"]: {r["constructPath"] for r in violation["violatingConstructs"]}
        for plugin in report["pluginReports"]
        for violation in plugin["violations"]
    }


def test_only_findings_cross_jsii_and_every_finding_is_still_reported(tmp_path, monkeypatch):
    applied: list[tuple[str, str]] = []
    apply_rule = GpuGovernanceChecks._apply_rule

    def counting(self, params):
        applied.append((params.node.node.path, params.rule_suffix_override))
        return apply_rule(self, params)

    monkeypatch.setattr(GpuGovernanceChecks, "_apply_rule", counting)

    def build(stack: Stack) -> None:
        key(stack, "Compliant", TEAM_ONLY)
        key(stack, "Open", OPEN, rotation=False)

    report = _synth(tmp_path, build)
    # The compliant key's rules (rotation, account principal, ...) never reach cdk-nag.
    assert sorted(applied) == [("Keys/Open", "KeyAdmitsAccount"), ("Keys/Open", "KeyRotation")]
    assert _violations(report) == {
        "GpuGovernance-KeyRotation": {"Keys/Open"},
        f"GpuGovernance-KeyAdmitsAccount[Principal::arn:aws:iam::{ACCOUNT}:root]": {"Keys/Open"},
    }


def test_a_rule_that_raises_is_reported_as_cdk_nag_reports_any_rules_error(tmp_path, monkeypatch):
    def broken(node, index):
        raise ValueError("cannot read this key")

    rule = GovernanceRule(
        id="Broken",
        info="A rule that raises.",
        explanation="Shows a rule's error reaching the report.",
        resource_types=frozenset({"AWS::KMS::Key"}),
        check=broken,
    )
    monkeypatch.setattr(pack, "RULES", (rule,))

    def build(stack: Stack) -> None:
        kms.CfnKey(stack, "Key", enable_key_rotation=True)

    report = _synth(tmp_path, build)
    (violation,) = [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    assert violation["ruleName"] == "GpuGovernance-Broken"
    assert violation["description"].startswith("Rule threw an error during validation.")
    assert [r["constructPath"] for r in violation["violatingConstructs"]] == ["Keys/Key"]
