"""The prover's encoding against the evaluator on hand-written policies: the shapes a trust or key
policy takes when it names the account and pins the principal with ``aws:PrincipalArn`` (issue
30), set operators on ``aws:TagKeys``, and what the encoding refuses rather than guess."""

from __future__ import annotations

import pytest

from .iam_eval import Principal, Request, Template, World
from .prover import Prover, Unsupported
from .tenants import Organisation

ACCOUNT = "111122223333"
TEAM_A = Principal(arn=f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/a-gpu-submit")
TEAM_B = Principal(arn=f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/b-gpu-submit")
ROLE = f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/a-gpu-training"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/a"


def organisation(trust_condition: dict, key_condition: dict | None = None) -> Organisation:
    world = World()
    world.trust[ROLE] = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole",
                "Condition": trust_condition,
            }
        ]
    }
    world.key_policies[KEY] = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "kms:*",
                "Resource": "*",
                "Condition": key_condition or {},
            }
        ]
    }
    for principal in (TEAM_A, TEAM_B):
        world.add_identity(
            principal.arn,
            {
                "Statement": [
                    {"Effect": "Allow", "Action": ["sts:AssumeRole", "kms:Decrypt"], "Resource": "*"},
                    {
                        "Effect": "Allow",
                        "Action": "batch:TagResource",
                        "Resource": f"arn:aws:batch:us-east-1:{ACCOUNT}:job/*",
                        "Condition": {
                            "ForAllValues:StringNotEquals": {"aws:TagKeys": ["gpu-governance:managed-by"]},
                            "ForAnyValue:StringEquals": {"aws:TagKeys": ["gpu-governance:team"]},
                        },
                    },
                ]
            },
        )
    return Organisation(world, {}, Template("capacity", {}, ACCOUNT, "us-east-1"), "acme")


PINS = [
    {"StringEquals": {"aws:PrincipalArn": TEAM_A.arn}},
    {"StringLike": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/a-*"}},
    {"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/gpu-governance/a-gpu-*"}},
    {"ArnEquals": {"aws:PrincipalArn": [TEAM_A.arn, f"arn:aws:iam::{ACCOUNT}:role/other"]}},
]


@pytest.mark.parametrize("pin", PINS, ids=lambda p: next(iter(p)))
def test_an_account_principal_pinned_by_principal_arn_admits_only_that_principal(pin):
    org = organisation(pin, pin)
    prover = Prover(org)
    for principal, admitted in ((TEAM_A, True), (TEAM_B, False)):
        for action, resource in (("sts:AssumeRole", ROLE), ("kms:Decrypt", KEY)):
            assert org.world.is_allowed(Request(principal, action, resource)) is admitted
            assert prover.decides(principal, action, resource, {}) is admitted
            assert (
                prover.reaches(principal, action, resource).satisfiable is admitted
            )  # whatever else the request holds


def test_tag_key_set_operators_decide_as_the_evaluator():
    org = organisation({})
    prover = Prover(org)
    job = f"arn:aws:batch:us-east-1:{ACCOUNT}:job/1"
    for keys in (
        [],
        ["gpu-governance:team"],
        ["gpu-governance:team", "project"],
        ["gpu-governance:team", "gpu-governance:managed-by"],
        ["project"],
    ):
        context = {"aws:TagKeys": keys} if keys else {}
        expected = org.world.is_allowed(Request(TEAM_A, "batch:TagResource", job, context))
        assert prover.decides(TEAM_A, "batch:TagResource", job, context) is expected, keys
    assert org.world.is_allowed(
        Request(TEAM_A, "batch:TagResource", job, {"aws:TagKeys": ["gpu-governance:team", "project"]})
    )


def test_operators_the_encoding_does_not_model_are_refused():
    org = organisation({"NumericLessThan": {"aws:MultiFactorAuthAge": "3600"}})
    with pytest.raises(Unsupported, match="NumericLessThan"):
        Prover(org).reaches(TEAM_A, "sts:AssumeRole", ROLE)
    org = organisation({"StringEquals": {"aws:PrincipalTag/team": "${aws:username}"}})
    with pytest.raises(Unsupported, match="policy variable"):
        Prover(org).reaches(TEAM_A, "sts:AssumeRole", ROLE)
