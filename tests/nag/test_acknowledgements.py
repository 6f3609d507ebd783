"""A bare rule name is acknowledged in exactly the standard packs that apply the rule, as the
installed cdk-nag defines its packs."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import cdk_nag
import pytest
from aws_cdk import App, Stack, Validations, aws_iam as iam, aws_s3 as s3

from constructs_lib.core.acknowledgements import PACKS_WITH_RULE, acknowledge_wildcard_resources, finding_ids
from constructs_lib.organisation.compliance import STANDARD_PACKS


def installed_pack_rules() -> dict[str, dict[str, str]]:
    """Pack name -> {rule name: the finding id's suffix}, read from the packs' compiled sources
    in the cdk-nag wheel (AwsSolutions reports several rules under short ids such as S1)."""
    (bundle,) = (Path(cdk_nag.__file__).parent / "_jsii").glob("cdk-nag@*.jsii.tgz")
    packs = {}
    with tarfile.open(bundle) as archive:
        for member in archive.getmembers():
            if re.fullmatch(r"package/lib/packs/[\w-]+\.js", member.name):
                source = archive.extractfile(member).read().decode()
                name = re.search(r"this\.packName = '([^']+)'", source).group(1)
                rules = {}
                for call in re.findall(r"this\.applyRule\(\{(.*?)\}\);", source, re.S):
                    rule = re.search(r"rule: \w+\.(\w+)", call).group(1)
                    suffix = re.search(r"ruleSuffixOverride: '([^']+)'", call)
                    rules[rule] = suffix.group(1) if suffix else rule
                packs[name] = rules
    return packs


@pytest.fixture(scope="module")
def standard_packs() -> dict[str, dict[str, str]]:
    installed = installed_pack_rules()
    app = App()
    return {name: installed[name] for name in (pack(app).read_pack_name for pack in STANDARD_PACKS)}


def test_the_pack_sources_are_read(standard_packs):
    assert len(standard_packs) == 5
    assert standard_packs["AwsSolutions"]["S3BucketLoggingEnabled"] == "S1"  # the parser sees overrides
    assert all(len(rules) > 10 for rules in standard_packs.values())


@pytest.mark.parametrize("rule", sorted(PACKS_WITH_RULE))
def test_a_rule_expands_to_every_standard_pack_that_applies_it_and_no_other(standard_packs, rule):
    expected = tuple(f"{pack}-{rules[rule]}" for pack, rules in standard_packs.items() if rule in rules)
    assert len(expected) > 1
    assert finding_ids(rule) == expected


def test_ids_with_a_pack_prefix_pass_through_and_unknown_rules_fail():
    assert finding_ids("AwsSolutions-IAM5[Action::kms:ReEncrypt*]") == ("AwsSolutions-IAM5[Action::kms:ReEncrypt*]",)
    with pytest.raises(ValueError, match="LambdaInVpc: no pack prefix"):
        finding_ids("LambdaInVpc")


def test_wildcard_resources_are_resolved_in_one_round_trip_and_acknowledged_exactly(monkeypatch):
    stack = Stack(App(), "s")
    bucket = s3.CfnBucket(stack, "Data")
    policy = iam.CfnManagedPolicy(stack, "Policy", policy_document={})
    resolved = []
    resolve = Stack.resolve

    def counting(self, value):
        resolved.append(value)
        return resolve(self, value)

    monkeypatch.setattr(Stack, "resolve", counting)
    acknowledge_wildcard_resources(
        policy, [bucket.attr_arn, f"{bucket.attr_arn}/teams/a/*", "arn:aws:s3:::shared/*"], "The team's own prefix."
    )
    monkeypatch.undo()
    assert len(resolved) == 1  # a round trip through jsii per resolve; a team's policies name dozens
    acknowledged = [
        key for e in policy.node.metadata if e.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY for key in e.data
    ]
    assert sorted(k.split("::", 1)[1] for k in acknowledged) == [
        "AwsSolutions-IAM5[Resource::<Data.Arn>/teams/a/*]",
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::shared/*]",
    ]
