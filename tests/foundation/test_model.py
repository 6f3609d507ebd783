import re

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import (
    BatchQuotaSharePool,
    GovernanceModel,
    Preset,
    SharingPolicy,
    SharingStrategy,
    Team,
)
from constructs_lib.model.loader import load_model, parse_config

from .org import default_data


def problems_of(data) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    return str(raised.value).splitlines()


def test_default_organisation_uses_all_three_presets():
    model = load_model()
    assert {t.preset for t in model.teams} == set(Preset)
    assert len(model.consumer_accounts) == 2


@pytest.mark.parametrize(
    "preset, strategy, borrow_limit, preemption",
    [
        (Preset.BACKGROUND, SharingStrategy.LEND_AND_BORROW, 100, True),
        (Preset.STEADY, SharingStrategy.LEND, None, False),
        (Preset.CRITICAL, SharingStrategy.RESERVE, None, True),
    ],
)
def test_presets(preset, strategy, borrow_limit, preemption):
    team = Team(name="t", preset=preset)
    assert (team.sharing.strategy, team.sharing.borrow_limit, team.sharing.in_share_preemption) == (
        strategy,
        borrow_limit,
        preemption,
    )


def test_preset_fields_can_be_overridden():
    team = Team(name="t", preset="background", sharing={"borrow_limit": "unlimited", "in_share_preemption": False})
    assert team.sharing.strategy is SharingStrategy.LEND_AND_BORROW
    assert team.sharing.borrow_limit == "unlimited"
    assert team.sharing.in_share_preemption is False
    assert team.sharing.borrow_ceiling(4) is None


def test_preset_contradiction_is_rejected():
    with pytest.raises(GovernanceError, match="preset critical means strategy reserve, not lend"):
        Team(name="t", preset="critical", sharing={"strategy": "lend"})


def test_borrow_ceiling():
    assert SharingPolicy(strategy="lend_and_borrow", borrow_limit=50).borrow_ceiling(4) == 6
    assert SharingPolicy(strategy="lend").borrow_ceiling(4) == 4


def mutate(path, value):
    data = default_data()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (
            ("capacity_account", "account_id"),
            "12345",
            "capacity_account.account_id: invalid ('12345') - 12 digits, an AWS account id",
        ),
        (("capacity_account", "region"), "mars-1", "capacity_account.region: invalid ('mars-1') - must match"),
        (
            ("teams", 0, "account"),
            "finance",
            "teams[0].account: undeclared account ('finance') - one of ['product', 'research']",
        ),
        (
            ("teams", 0, "quotas", "sagemaker-training", "ml.p5.48xlarge"),
            0,
            "teams[0].quotas.sagemaker-training.ml.p5.48xlarge: invalid (0) - at least 1",
        ),
        (
            ("teams", 0, "quotas", "sagemaker-training", "ml.p4d.24xlarge"),
            1,
            "teams[0].quotas.sagemaker-training.ml.p4d.24xlarge: pool has no capacity of this instance type ('ml.p4d.24xlarge') - one of ['ml.g6e.12xlarge', 'ml.p5.48xlarge']",
        ),
        (
            ("teams", 1, "sharing"),
            {"borrow_limit": 10},
            "teams[1].sharing: invalid ({'strategy': 'lend', 'in_share_preemption': False, 'borrow_limit': 10}) - borrow_limit is only allowed with strategy lend_and_borrow, not lend",
        ),
        (
            ("teams", 0, "name"),
            "research team",
            "teams[0].name: invalid ('research team') - must match ^[A-Za-z0-9][A-Za-z0-9_-]*$",
        ),
        (("teams", 0, "name"), "r" * 41, "teams[0].name: invalid ('rrrrr"),
        (("teams", 0, "fair_share_weight"), 101, "teams[0].fair_share_weight: invalid (101) - at most 100"),
        (("priority_classes", 0, "weight"), 101, "priority_classes[0].weight: invalid (101) - at most 100"),
        (("priority_classes", 0, "name"), "Urgent", "priority_classes[0].name: invalid ('Urgent') - must match"),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::444455556666:role/*"],
            "teams[0].members[0]: invalid ('arn:aws:iam::444455556666:role/*') - must match",
        ),
        (
            ("teams", 0, "quotas", "nowhere"),
            {"x.large": 1},
            "teams[0].quotas.nowhere: undeclared pool ('nowhere') - one of ['ec2-gpu', ",
        ),
        (
            ("pools", 0, "capacity", "ml.p5.48xlarge"),
            7,
            "pools[0].capacity.ml.p5.48xlarge: teams are guaranteed 8 instances but the pool has fewer (7) - at least 8, or smaller team quotas",
        ),
        (("pools", 0, "backend"), "slurm", "pools[0].backend: invalid"),
        (("pools", 0, "runnable_timeout_minutes"), 5, "pools[0].runnable_timeout_minutes: invalid (5) - at least 10"),
        (
            ("pools", 1, "compute_environments"),
            ["gpu-ce"],
            "pools[1].compute_environments[0]: invalid ('gpu-ce') - must match",
        ),
        (
            ("pools", 1, "capacity"),
            {"ml.p5.48xlarge": 1},
            "pools[1].capacity.ml.p5.48xlarge.[key]: invalid ('ml.p5.48xlarge') - must match",
        ),
        (("teams", 0, "colour"), "blue", "teams[0].colour: invalid ('blue') - not a known setting"),
        (
            ("teams", 0, "preset"),
            "urgent",
            "teams[0].preset: invalid ('urgent') - allowed: 'background', 'steady' or 'critical'",
        ),
        # Full-width digits are digits to \d; they would validate and then break synthesis.
        (("capacity_account", "account_id"), "\uff11" * 12, "capacity_account.account_id: invalid ('\uff11"),
        (
            ("capacity_account", "region"),
            "us-east-\u0661",
            "capacity_account.region: invalid ('us-east-\u0661') - must match",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::\uff14\uff14\uff14\uff14\uff15\uff15\uff15\uff15\uff16\uff16\uff16\uff16:role/R"],
            "teams[0].members[0]: invalid",
        ),
        (
            ("platform_admins",),
            ["arn:aws:iam::444455556666:role/GpuPlatformAdmin"],
            "platform_admins[0]: account 444455556666 is not allowed here ('arn:aws:iam::444455556666:role/GpuPlatformAdmin') - a role or user of the capacity account 111122223333",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::123412341234:role/Stranger"],
            "teams[0].members[0]: account 123412341234 is not allowed here ('arn:aws:iam::123412341234:role/Stranger') - an account of capacity_account or consumer_accounts, or one listed in external_accounts",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::111122223333:role/gpu-governance/training-gpu-submit"],
            "teams[0].members[0]: a role under the library's path /gpu-governance/",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::444455556666:role/training-gpu-submit"],
            "teams[0].members[0]: named like a team role of the library",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::111122223333:role/acme-ml-capacity-controller"],
            "teams[0].members[0]: named like a role of the capacity stack",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::111122223333:role/ACME-ML-Capacity-ReclaimControllerRole-X1"],
            "teams[0].members[0]: named like a role of the capacity stack",
        ),
        (
            ("teams", 0, "members"),
            ["arn:aws:iam::111122223333:role/cdk-hnb659fds-cfn-exec-role-111122223333-us-east-1"],
            "teams[0].members[0]: named like a CDK bootstrap role",
        ),
        (("organization_id",), "o-short", "organization_id: invalid ('o-short') - must match"),
        (("external_accounts",), ["444455556666"], "external_accounts[0]: already a declared account ('444455556666')"),
    ],
)
def test_each_rule_names_path_value_and_what_is_allowed(path, value, expected):
    lines = problems_of(mutate(path, value))
    assert any(line.startswith(expected) for line in lines), lines


def test_duplicate_team_names_ignoring_case():
    data = default_data()
    data["teams"].append({**data["teams"][2], "name": "Production"})
    data["pools"][0]["capacity"] = {"ml.p5.48xlarge": 20, "ml.g6e.12xlarge": 20}
    data["pools"][1]["capacity"] = {"g6e.12xlarge": 20}
    assert "teams[3].name: duplicate name ('production') - team names must differ (ignoring case)" in problems_of(data)


def test_more_than_twenty_shares_on_one_queue():
    data = default_data()
    data["pools"][0]["capacity"] = {"ml.p5.48xlarge": 100, "ml.g6e.12xlarge": 100}
    for i in range(18):
        data["teams"].append(
            {
                "name": f"extra{i}",
                "account": "research",
                "preset": "steady",
                "members": ["arn:aws:iam::444455556666:role/X"],
                "quotas": {"sagemaker-training": {"ml.p5.48xlarge": 1}},
            }
        )
    assert "pools[0]: too many teams (quota shares) on one Batch job queue (21) - at most 20" in problems_of(data)


def fair_share_pool_of(teams: int) -> dict:
    data = default_data()
    data["pools"][1]["capacity"] = {"g6e.12xlarge": 2 * teams}
    for i in range(teams - len(data["teams"])):
        data["teams"].append(
            {
                "name": f"extra{i}",
                "account": "research",
                "preset": "steady",
                "members": [f"arn:aws:iam::444455556666:role/Extra{i}"],
                "quotas": {"ec2-gpu": {"g6e.12xlarge": 1}},
            }
        )
    return data


def test_more_than_five_hundred_share_identifiers_on_one_fair_share_queue():
    """Batch: no more than 500 fair-share identifiers active in a job queue, one per team."""
    assert (
        "pools[1]: too many teams (fair-share identifiers) on pool ec2-gpu's Batch job queue (501) - at most 500 "
        "(AWS Batch's active share identifiers per job queue): split the teams over more fair-share pools"
    ) in problems_of(fair_share_pool_of(501))
    assert len(GovernanceModel.from_dict(fair_share_pool_of(500)).teams_in("ec2-gpu")) == 500


def test_more_than_five_capacity_limits_per_share():
    data = default_data()
    capacity = {f"ml.p{i}.48xlarge": 1 for i in range(6)}
    data["pools"][0]["capacity"] = capacity
    data["teams"] = [data["teams"][0]]
    data["teams"][0]["quotas"] = {"sagemaker-training": capacity}
    assert (
        "teams[0].quotas.sagemaker-training: too many instance types for one Batch quota share (6) - at most 5"
        in problems_of(data)
    )


def test_hyperpod_names_are_dns_labels():
    data = default_data()
    data["pools"].append(
        {
            "name": "hp",
            "backend": "hyperpod_eks",
            "capacity": {"ml.p5.48xlarge": 2},
            "cluster_arn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcdef123456",
            "eks_cluster_name": "hp-eks",
        }
    )
    data["teams"][0]["name"] = "Research_Team"
    data["teams"][0]["quotas"]["hp"] = {"ml.p5.48xlarge": 1}
    assert (
        "teams[0].name: not a HyperPod team name ('Research_Team') - a lowercase DNS label: a-z, 0-9 and '-', at most 40"
        in problems_of(data)
    )


def test_every_problem_is_listed_at_once():
    data = default_data()
    data["capacity_account"]["region"] = "nowhere"
    data["teams"][0]["fair_share_weight"] = 0
    data["priority_classes"][1]["weight"] = -1
    lines = problems_of(data)
    assert len(lines) == 3
    assert [line.split(":")[0] for line in lines] == [
        "capacity_account.region",
        "priority_classes[1].weight",
        "teams[0].fair_share_weight",
    ]


def test_organisation_checks_are_listed_together():
    data = default_data()
    data["teams"][0]["account"] = "finance"
    data["teams"][1]["quotas"]["ec2-gpu"] = {"p5.48xlarge": 1}
    lines = problems_of(data)
    assert len(lines) == 2


def test_typed_construction_reports_the_same_way():
    with pytest.raises(GovernanceError, match=r"capacity.ml.p5.48xlarge: invalid \(0\) - at least 1"):
        BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 0})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "the file is empty"),
        ("teams: [", "not valid YAML: expected the node content, but found '<stream end>' ('line 1, column 9')"),
        ("a: &x [1]\nb: *x\n", "YAML aliases are not supported; repeat the value instead ('line 2, column 4')"),
        (
            "organisation: a\norganisation: b\n",
            "duplicate key 'organisation'; each key may appear once ('line 2, column 1')",
        ),
        ("[1, 2]", "<root>: not a mapping ('list')"),
        ("42", "<root>: not a mapping ('int')"),
    ],
)
def test_file_level_errors(text, expected):
    with pytest.raises(GovernanceError, match=re.escape(expected)):
        parse_config(text, "test.yaml")


def test_huge_file_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("#" * (1024 * 1024 + 1))
    with pytest.raises(GovernanceError, match="file too large"):
        load_model(big)


def test_slurm_pools_need_the_gpus_of_each_instance_type():
    data = default_data()
    slurm = next(i for i, p in enumerate(data["pools"]) if p["backend"] == "hyperpod_slurm")
    data["pools"][slurm]["gpus_per_instance"] = {}
    assert (
        f"pools[{slurm}].gpus_per_instance.ml.p5.48xlarge: missing (None) - the GPUs of one instance (1-64): Slurm quotas are in GPUs"
        in problems_of(data)
    )


def test_members_of_a_listed_external_account_are_accepted():
    data = default_data()
    data["teams"][0]["members"].append("arn:aws:iam::123412341234:role/PartnerCI")
    data["external_accounts"] = ["123412341234"]
    data["organization_id"] = "o-a1b2c3d4e5"
    model = GovernanceModel.from_dict(data)
    assert model.external_accounts == ("123412341234",) and model.organization_id == "o-a1b2c3d4e5"


def test_no_pattern_lets_unicode_digits_or_letters_through():
    # pydantic's regex engine gives \d, \w and \s their Unicode meaning; the model spells ranges.
    import json

    patterns = [value for key, value in _walk(GovernanceModel.model_json_schema()) if key == "pattern"]
    assert len(patterns) > 10
    assert [p for p in patterns if any(escape in p for escape in ("\\d", "\\w", "\\s", "\\D", "\\W"))] == [], (
        json.dumps(patterns)
    )


def _walk(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("? [a, b]\n: 1\n", "test.yaml: not valid YAML: a sequence is used as a key"),
        ("a: {? {x: 1} : 2}\n", "test.yaml: not valid YAML: a mapping is used as a key"),
        ("on: 1\n", "test.yaml: not valid YAML: the key True is not text; write keys as text; quote them"),
        ("organisation: x\n1: 2\n", "test.yaml: not valid YAML: the key 1 is not text"),
        ("a: " + "[" * 10_000, "test.yaml: not valid YAML: nested more than 32 levels deep"),
        ("a: " + "{b: " * 5_000 + "1" + "}" * 5_000, "test.yaml: not valid YAML: nested more than 32 levels deep"),
    ],
)
def test_keys_that_are_not_text_and_deep_nesting_are_refused(text, expected):
    with pytest.raises(GovernanceError) as raised:
        parse_config(text, "test.yaml")
    assert str(raised.value).startswith(expected) and "\n" not in str(raised.value)


def test_non_text_setting_names_from_python_are_refused():
    with pytest.raises(GovernanceError, match=r"<root>: a setting name is not text \(True\) - setting names as text"):
        GovernanceModel.from_dict({**default_data(), True: 1})


def test_a_file_without_end_is_read_only_up_to_the_limit():
    # /dev/zero reports size 0 and never ends: the size guard must not trust st_size.
    with pytest.raises(GovernanceError, match=r"/dev/zero: file too large \('more than 1048576 bytes'\)"):
        load_model("/dev/zero")


@pytest.mark.parametrize(
    "name,wrong",
    [
        ("D" * 33, "teams[0].permission_sets[0].name: invalid"),  # IAM Identity Center: at most 32
        ("Data Scientists", "teams[0].permission_sets[0].name: invalid"),  # no spaces: [\w+=,.@-]
        ("Datenwissenschaftlerinnen_ü", "teams[0].permission_sets[0].name: invalid"),  # ASCII word characters only
    ],
)
def test_permission_set_names_follow_identity_center(name, wrong):
    data = default_data()
    data["teams"][0]["permission_sets"] = [{"name": name}]
    assert any(p.startswith(wrong) for p in problems_of(data))


def test_a_permission_set_is_assigned_in_a_declared_account():
    data = default_data()
    data["teams"][0]["permission_sets"] = [{"name": "DataScientists", "account": "finance"}]
    assert (
        "teams[0].permission_sets[0].account: undeclared account ('finance') - one of ['product', 'research']"
        in problems_of(data)
    )
    data["teams"][0]["permission_sets"] = [{"name": "ML.Ops+1@x=y,z-_", "account": "product"}]
    model = GovernanceModel.from_dict(data)
    assert model.member_principals(model.teams[0])[-1] == (
        "arn:aws:iam::777788889999:role/aws-reserved/sso.amazonaws.com/*/AWSReservedSSO_ML.Ops+1@x=y,z-__*"
    )


def test_a_team_of_identity_center_users_only_is_a_team_with_members():
    data = default_data()
    data["teams"][0]["members"] = []
    assert GovernanceModel.from_dict(data).teams[0].permission_sets  # valid: the reference team has a permission set
    data["teams"][0]["permission_sets"] = []
    assert (
        "teams[0].members: nobody may act for the team ([]) - at least one IAM role or user ARN, or a permission_sets entry"
        in problems_of(data)
    )


def test_reclaim_mode_and_slurm_head_nodes_come_from_the_file():
    data = default_data()
    assert load_model(None).reclaim_mode == "dry_run"  # the default: only records what it would do
    data["reclaim_mode"] = "preempt"
    assert any(p.startswith("reclaim_mode: invalid ('preempt')") for p in problems_of(data))
    data["reclaim_mode"] = "act"
    slurm = next(p for p in data["pools"] if p["backend"] == "hyperpod_slurm")
    slurm["head_node"] = {"instance_id": "i-0123456789abcdef0"}
    model = GovernanceModel.from_dict(data)
    assert model.reclaim_mode == "act" and model.pool(slurm["name"]).reclaimed_instance_type == "ml.p5.48xlarge"
    slurm["head_node"] = {"instance_id": "head-node-1"}
    assert any(p.startswith("pools[3].head_node.instance_id: invalid ('head-node-1')") for p in problems_of(data))
    slurm["head_node"] = {"instance_id": "i-0123456789abcdef0", "instance_type": "ml.g6e.48xlarge"}
    assert any("head_node.instance_type 'ml.g6e.48xlarge' is not in the pool" in p for p in problems_of(data))


def test_guard_mode_comes_from_the_file_beside_reclaim_mode():
    data = default_data()
    assert load_model(None).guard_mode == "dry_run"  # the default: records and reports, stops nothing
    data["guard_mode"] = "terminate"
    assert any(p.startswith("guard_mode: invalid ('terminate')") for p in problems_of(data))
    data["guard_mode"] = "act"
    model = GovernanceModel.from_dict(data)
    assert model.guard_mode == "act" and model.reclaim_mode == "dry_run"  # each controller's mode is its own


def test_a_consumer_account_without_a_team_is_refused_before_synthesis():
    # Its stack would hold no resource, which CloudFormation refuses at synthesis (the default-rules
    # validation: "Resources section must exist and be non-empty"); validate says so first.
    data = default_data()
    data["consumer_accounts"]["idle"] = {"account_id": "999988887777", "region": "us-east-1"}
    assert problems_of(data) == [
        "consumer_accounts.idle: no team's account: its stack would be empty, which CloudFormation refuses "
        "('idle') - the account of at least one team (teams[].account); otherwise remove it "
        "(and destroy its stack if it was deployed)"
    ]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (
            ("pools", 0),
            "pools[0].backend: invalid ({'name': 'sagemaker-training', ",
        ),
        (
            ("capacity_windows", 0, "feeds"),
            "capacity_windows[0].feeds.kind: invalid ({'pool': 'sagemaker-training'}) - one of batch_compute_environment, "
            "eks_node_group, hyperpod_instance_group, sagemaker_training_jobs",
        ),
    ],
)
def test_a_missing_discriminator_names_its_own_field_and_tags(where, expected):
    # A feed without its kind was reported as ".backend" with the pools' backends.
    data = default_data()
    holder = data
    for step in where:
        holder = holder[step]
    del holder["backend" if where[0] == "pools" else "kind"]
    lines = problems_of(data)
    assert any(line.startswith(expected) for line in lines), lines
    assert any(
        line.endswith(" - one of batch_quota_share, batch_fair_share, hyperpod_eks, hyperpod_slurm, eks_kueue")
        for line in lines
    ) is (where[0] == "pools")
