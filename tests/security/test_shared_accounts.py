"""Issue 38, lead "two teams sharing an account can act as each other and validate says nothing".

IAM tells two teams' members in one account apart only by what the policies name. The library's
own policies name exact member ARNs and, for Identity Center users, the pattern
``AWSReservedSSO_<permission set>_*``: a pattern that also matches another team's Identity Center
roles (the same permission set, or one named ``<name>_<more>``) lets those people act for both
teams, so validate refuses it. Whether one team's member role can become another's is for the
account's own IAM, which the library does not see: validate warns of member roles of two teams in
one account."""

from __future__ import annotations

import pytest
from aws_cdk import App, Environment, Stack, aws_iam as iam

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.principals import shared_account_warnings
from constructs_lib.tenancy.team import member_trust
from tests.foundation.org import default_data

from .iam_eval import Principal, Request, World

ACCOUNT = "444455556666"  # the reference's consumer account "research": teams research and training
SSO = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com"


def with_permission_sets(**per_team: list[dict]) -> dict:
    data = default_data()
    for team in data["teams"]:
        if team["name"] in per_team:
            team["permission_sets"] = per_team[team["name"]]
    return data


def without_slurm(data: dict) -> dict:
    """``data`` with training off the Slurm pool, whose POSIX user names an Identity Center role's
    name (over 32 characters) could not be."""
    del data["teams"][1]["quotas"]["hyperpod-slurm"]
    return data


def refusals(data: dict) -> list[str]:
    with pytest.raises(GovernanceError) as caught:
        GovernanceModel.from_dict(data)
    return [str(p) for p in caught.value.problems]


def test_the_attack_is_real_a_broader_permission_set_pattern_admits_another_teams_users():
    """The trust the library writes for a team with permission set DataScientists admits the
    Identity Center role of a permission set DataScientists_Training: its users, if their
    permission set lets them assume roles at all, become the team."""
    model = GovernanceModel.from_dict(default_data())
    research = next(t for t in model.teams if t.name == "research")
    stack = Stack(App(), "Trust", env=Environment(account="111122223333", region="us-east-1"))
    role = iam.Role(stack, "Submit", assumed_by=member_trust(model.member_principals(research), None, ()))
    submit = "arn:aws:iam::111122223333:role/research-gpu-submit"
    world = World(trust={submit: stack.resolve(role.assume_role_policy.to_json())})
    for intruder in (
        f"{SSO}/eu-west-2/AWSReservedSSO_DataScientists_Training_0123456789abcdef",
        f"{SSO}/AWSReservedSSO_DataScientists_0123456789abcdef",  # the same permission set in the other team
    ):
        world.add_identity(intruder, {"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}]})
        assert world.is_allowed(Request(Principal(arn=intruder), "sts:AssumeRole", submit)), intruder
    stranger = f"{SSO}/AWSReservedSSO_DataScientistsTraining_0123456789abcdef"  # no "_" after the name
    world.add_identity(stranger, {"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}]})
    assert not world.is_allowed(Request(Principal(arn=stranger), "sts:AssumeRole", submit))


def test_validate_refuses_a_permission_set_whose_pattern_admits_another_teams_roles():
    prefix = refusals(with_permission_sets(training=[{"name": "DataScientists_Training"}]))
    assert prefix == [
        "teams[0].permission_sets[0].name: its Identity Center roles (AWSReservedSSO_DataScientists_* in account "
        "444455556666) also match team training's permission set DataScientists_Training ('DataScientists') - a "
        "permission set named neither as another team's in that account nor as another's name followed by '_': its "
        "users would act for both teams"
    ]
    same = refusals(with_permission_sets(training=[{"name": "DataScientists"}]))
    assert [p.split(":")[0] for p in same] == ["teams[0].permission_sets[0].name", "teams[1].permission_sets[0].name"]


def test_validate_refuses_a_member_arn_another_teams_permission_set_admits():
    data = without_slurm(default_data())
    listed = f"{SSO}/AWSReservedSSO_DataScientists_0123456789abcdef"
    data["teams"][1]["members"].append(listed)  # training lists research's Identity Center role by its ARN
    (problem,) = refusals(data)
    assert problem.startswith("teams[0].permission_sets[0].name: ") and f"team training's member {listed}" in problem


@pytest.mark.parametrize(
    "training_sets",
    [
        [{"name": "DataScientistsTraining"}],  # no "_" after the name: the pattern does not reach it
        [
            {"name": "Data"}
        ],  # shorter, without "_": AWSReservedSSO_Data_* does not match AWSReservedSSO_DataScientists_...
        [{"name": "DataScientists", "account": "product"}],  # the same name in another account
    ],
)
def test_permission_sets_that_stay_apart_are_accepted(training_sets):
    GovernanceModel.from_dict(with_permission_sets(training=training_sets))


def test_validate_warns_of_member_roles_of_two_teams_in_one_account(capsys):
    from constructs_lib.cli import main

    model = GovernanceModel.from_dict(default_data())
    assert shared_account_warnings(model) == [
        "teams[0].members: member roles of 2 teams in account 444455556666: research (ResearchScientists) and "
        "training (TrainingEngineers) - IAM keeps these teams apart only as far as that account's own policies do: a "
        "member role whose trust policy names the account can be assumed by any principal there allowed "
        "sts:AssumeRole on it, another team's member included, who then acts for the role's team. Make each member "
        "role trust only its own people (an identity provider, or Identity Center through permission_sets), or give "
        "each team an account of its own"
    ]
    assert main(["validate", "--example"]) == 0  # deployable: a warning, not a refusal
    assert f"warning: {shared_account_warnings(model)[0]}" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "training_members",
    [
        ["arn:aws:iam::111122223333:role/TrainingEngineers"],  # an account no other team's member is in
        [f"arn:aws:iam::{ACCOUNT}:user/trainer"],  # a user: nobody assumes it
        [f"{SSO}/AWSReservedSSO_Trainers_0123456789abcdef"],  # an Identity Center role: Identity Center assumes it
    ],
)
def test_no_warning_where_iam_alone_keeps_the_teams_apart(training_members):
    data = without_slurm(default_data())
    data["teams"][1]["members"] = training_members
    assert shared_account_warnings(GovernanceModel.from_dict(data)) == []
