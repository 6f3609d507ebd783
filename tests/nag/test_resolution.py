"""A resource's properties and identity policy are resolved once while its rules run, and afresh
at every other check: a change made after one check (a later aspect's tags, say) is seen by the
next."""

from __future__ import annotations

from aws_cdk import App, Stack, aws_iam as iam

from constructs_lib.nag.cfn import cfn_type, identity_policy, one_resource_check, properties, stack_of


def _role(stack: Stack, id: str, action: str) -> iam.CfnRole:
    return iam.CfnRole(
        stack,
        id,
        assume_role_policy_document={},
        policies=[
            iam.CfnRole.PolicyProperty(
                policy_name="p",
                policy_document={
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
                },
            )
        ],
    )


def test_within_one_check_each_resource_is_resolved_once_and_kept_apart_from_the_others():
    stack = Stack(App(), "s")
    first, second = _role(stack, "First", "batch:SubmitJob"), _role(stack, "Second", "ec2:PurchaseCapacityBlock")
    with one_resource_check():
        before = properties(first)
        first.role_name = "changed-during-the-check"
        assert properties(first) is before  # the rules of one check share one resolution
        assert identity_policy(first) is identity_policy(first)
        # another resource a rule looks up (the stack index) is its own entry, not the first's
        assert [s.actions for s in identity_policy(second).statements] == [("ec2:PurchaseCapacityBlock",)]
        assert [s.actions for s in identity_policy(first).statements] == [("batch:SubmitJob",)]


def test_every_check_resolves_afresh():
    stack = Stack(App(), "s")
    role = _role(stack, "Role", "batch:SubmitJob")
    with one_resource_check():
        assert "RoleName" not in properties(role)
    role.role_name = "tagged-later"
    with one_resource_check():
        assert properties(role)["RoleName"] == "tagged-later"
    assert properties(role)["RoleName"] == "tagged-later"  # outside a check: always resolved


def test_within_one_check_the_type_and_stack_of_a_resource_cross_jsii_once(monkeypatch):
    """Every rule of the pack asks them (issue 27: round trips per team, docs/performance.md). An
    L1 class names its type, so for an L1 resource the type never crosses."""
    from aws_cdk import CfnResource
    from jsii._kernel.providers import process

    stack = Stack(App(), "s")
    role = _role(stack, "Role", "batch:SubmitJob")
    quota = CfnResource(stack, "Quota", type="AWS::SageMaker::ComputeQuota")
    cfn_type(role)  # the class's type, read once per class
    sent = []
    send = process._NodeProcess.send
    monkeypatch.setattr(process._NodeProcess, "send", lambda self, *args: sent.append(args[0]) or send(self, *args))
    with one_resource_check():
        answers = [(cfn_type(role), stack_of(role), cfn_type(quota)) for _ in range(3)]
        identity_policy(role)  # reads the type and, for its own Ref, the stack: both kept
    assert answers == [("AWS::IAM::Role", stack, "AWS::SageMaker::ComputeQuota")] * 3
    reads = [getattr(r, "property", None) for r in sent if type(r).__name__ == "GetRequest"]
    assert reads.count("cfnResourceType") == 1  # the generic resource's, once; the role's never
    assert sum(getattr(r, "method", None) == "of" for r in sent) == 1  # Stack.of, once
