"""Unit tests of the model -> Slurm plan mapping (no Slurm needed)."""

from __future__ import annotations

import pytest

from constructs_lib.backends.hyperpod_slurm.layout import team_gid
from constructs_lib.core.errors import GovernanceError
from constructs_lib.slurm import hyperpod_instance_groups, posix_user_name, slurm_plan

from .models import INSTANCE_TYPE, POOL, default_teams, governance_model, model_data, team


def by_name(items):
    return {item.name: item for item in items}


@pytest.fixture(scope="module")
def plan():
    return slurm_plan(governance_model(), POOL, data_root="/fsx/teams/")


def test_each_team_is_an_account_under_the_organisation_with_its_fair_share(plan) -> None:
    accounts = by_name(plan.accounts)
    assert plan.organisation == "acme-ml"
    assert {name: a.fairshare for name, a in accounts.items()} == {"critical": 50, "steady": 30, "burst": 20}
    assert accounts["burst"].qos == ("burst.urgent", "burst.standard", "burst.low", "burst.borrow")
    assert accounts["steady"].default_qos == "steady.low"  # unasked jobs get the least urgent class


def test_members_become_users_of_their_team_account(plan) -> None:
    assert sorted((u.name, u.account) for u in plan.users) == [
        ("alice", "critical"),
        ("bob", "steady"),
        ("carol", "burst"),
        ("dave", "burst"),
    ]


def test_priority_classes_become_qos_priorities(plan) -> None:
    qos = by_name(plan.qos)
    assert [qos[f"steady.{c}"].priority for c in ("urgent", "standard", "low")] == [90, 50, 10]
    assert qos["burst.borrow"].priority == 0


def test_lenders_preempt_borrowers_and_in_share_preemption_only_where_on(plan) -> None:
    qos = by_name(plan.qos)
    assert qos["steady.urgent"].preempts == ("burst.borrow",)  # steady: in-share preemption off
    assert qos["burst.standard"].preempts == ("burst.borrow", "burst.low")  # burst: on
    # A reserve team lends nothing, so nobody borrows on its nodes; only its own classes.
    assert qos["critical.urgent"].preempts == ("critical.standard", "critical.low")
    assert qos["critical.low"].preempts == ()


def test_borrow_qos_caps_gpus_at_the_borrow_limit(plan) -> None:
    assert by_name(plan.qos)["burst.borrow"].grp_gpus == 4  # 100% of one 4-GPU instance
    teams = default_teams()
    teams[2] = team("burst", "background", ["carol"], borrow_limit=50)
    teams[2]["quotas"] = {POOL: {INSTANCE_TYPE: 2}}
    half = slurm_plan(governance_model(teams=teams, capacity=4), POOL)
    assert by_name(half.qos)["burst.borrow"].grp_gpus == 4  # 50% of two instances = 1 x 4 GPUs
    assert "steady.borrow" not in by_name(half.qos)  # lenders that do not borrow have none


def test_partitions_dedicate_quota_nodes_and_pool_lent_ones(plan) -> None:
    partitions = by_name(plan.partitions)
    assert partitions["critical"].instance_groups == ("critical-g5-12xlarge",)
    assert partitions["critical"].allow_accounts == ("critical",)
    borrow = partitions["borrow"]
    assert borrow.instance_groups == ("steady-g5-12xlarge", "burst-g5-12xlarge")  # never critical's
    assert borrow.allow_accounts == ("burst",)
    assert borrow.allow_qos == ("burst.borrow",)


def test_unassigned_capacity_is_lent_through_a_shared_instance_group() -> None:
    model = governance_model(capacity=5)
    groups = {g.name: (g.instance_type, g.count, g.owner) for g in hyperpod_instance_groups(model, POOL)}
    assert groups["shared-g5-12xlarge"] == (INSTANCE_TYPE, 2, "shared")
    assert groups["critical-g5-12xlarge"] == (INSTANCE_TYPE, 1, "critical")
    plan = slurm_plan(model, POOL)
    assert "shared-g5-12xlarge" in by_name(plan.partitions)["borrow"].instance_groups


def test_no_borrowers_means_no_borrow_partition() -> None:
    plan = slurm_plan(governance_model(teams=default_teams()[:2]), POOL)
    assert "borrow" not in by_name(plan.partitions)
    assert all(q.preempts == () for q in plan.qos if q.name.startswith("steady."))


def test_groups_and_data_paths_per_team(plan) -> None:
    groups = by_name(plan.groups)
    assert groups["gg-burst"].members == ("carol", "dave")
    assert groups["gg-burst"].gid == team_gid("acme-ml", "burst")
    assert len({g.gid for g in plan.groups}) == 3
    assert [(d.path, d.group, d.mode) for d in plan.data_paths][0] == ("/fsx/teams/critical", "gg-critical", "2770")


def test_posix_user_name_from_principal() -> None:
    assert posix_user_name("arn:aws:iam::444455556666:role/ml/Alice.Smith") == "alice-smith"


def test_bad_input_names_the_field_value_and_what_is_allowed() -> None:
    data = model_data()
    data["pools"][0]["gpus_per_instance"] = {}
    data["priority_classes"].append({"name": "borrow", "weight": 5})
    data["teams"][0]["members"].append("arn:aws:iam::444455556666:role/9lives")
    # alice is in critical: the same role name in another account is another role, but the same login
    data["teams"][1]["members"].append("arn:aws:iam::111122223333:role/Alice")
    from constructs_lib.model import GovernanceModel

    with pytest.raises(GovernanceError) as raised:
        slurm_plan(GovernanceModel.from_dict(data), POOL)
    problems = {p.path: p for p in raised.value.problems}
    assert set(problems) == {
        "pools[0].gpus_per_instance.ml.g5.12xlarge",
        "priority_classes[3].name",
        "teams[0].members[1]",
        "teams[1].members[1]",
    }
    assert "1-64" in problems["pools[0].gpus_per_instance.ml.g5.12xlarge"].allowed
    assert problems["teams[0].members[1]"].value == "arn:aws:iam::444455556666:role/9lives"
    assert "as does arn:aws:iam::444455556666:role/alice" in problems["teams[1].members[1]"].wrong


def test_reserved_team_names_and_unknown_pools_are_refused() -> None:
    teams = default_teams()
    teams[0]["name"] = "borrow"
    with pytest.raises(GovernanceError, match=r"teams\[0\]\.name: reserved on Slurm \('borrow'\)"):
        slurm_plan(governance_model(teams=teams), POOL)
    with pytest.raises(
        GovernanceError, match=r"pools: no hyperpod_slurm pool of this name \('nope'\) - one of \['research-slurm'\]"
    ):
        slurm_plan(governance_model(), "nope")


@pytest.mark.parametrize(
    "data_root",
    [
        "fsx/teams",
        "/",
        "//",
        "/fsx/../etc",
        "/fsx/teams/..",
        "/fsx/./teams",
        "/fsx//teams",
        "/fsx/te ams",
        "/fsx/$(id)",
        "/fsx/teams\n",
    ],
)
def test_data_root_that_is_not_a_plain_absolute_path_is_refused(data_root: str) -> None:
    with pytest.raises(GovernanceError) as raised:
        slurm_plan(governance_model(), POOL, data_root=data_root)
    (problem,) = raised.value.problems
    assert (problem.path, problem.wrong, problem.value) == ("data_root", "not a plain absolute path", data_root)


@pytest.mark.parametrize(
    "data_root",
    [
        "/etc",
        "/etc/teams",
        "/usr/local/teams",
        "/var/lib/slurm/teams",
        "/var/spool/x",
        "/root/teams",
        "/run/x",
        "/boot/",
        "/var/lib",
        "/home",
        "/tmp/",
        "/opt",
    ],
)
def test_data_root_in_a_system_directory_is_refused(data_root: str) -> None:
    """A team named etc under data root / (or /fsx/..) once rendered `gg_data_path /etc gg-etc 2770`."""
    with pytest.raises(GovernanceError, match=r"^data_root: a system directory \(/"):
        slurm_plan(governance_model(), POOL, data_root=data_root)


@pytest.mark.parametrize(
    "data_root", ["/fsx/teams/", "/var/lib/gpu-governance-slurm/tenant-data", "/shared/data.v2", "/home/shared"]
)
def test_plain_data_roots_are_accepted_without_a_trailing_slash(data_root: str) -> None:
    paths = [d.path for d in slurm_plan(governance_model(), POOL, data_root=data_root).data_paths]
    assert paths == [f"{data_root.rstrip('/')}/{t}" for t in ("critical", "steady", "burst")]


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("root", r"reserved on Slurm \('root'\)"),
        # named like the organisation, the team's names also cover every other team's (issue 25's check)
        ("acme-ml", r"its access-log prefix scope 'acme-ml/\*' overlaps team critical's"),
    ],
)
def test_team_named_like_slurm_root_or_the_organisation_account_is_refused(name: str, refused: str) -> None:
    teams = default_teams()
    teams[1]["name"] = name
    data = model_data(teams=teams)
    from constructs_lib.model import GovernanceModel

    with pytest.raises(GovernanceError, match=rf"teams\[1\]\.name: {refused}"):
        GovernanceModel.from_dict(data)


def test_organisation_named_root_is_refused_once() -> None:
    data = model_data()
    data["organisation"] = "root"
    data["pools"].append({**data["pools"][0], "name": "second-slurm"})
    from constructs_lib.model import GovernanceModel

    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    assert [str(p) for p in raised.value.problems if p.path == "organisation"] == [
        "organisation: Slurm's root account ('root') - any name but 'root' on Slurm"
    ]


@pytest.mark.parametrize(
    ("arn", "wrong"),
    [
        ("arn:aws:iam::444455556666:role/root", "gives cluster user 'root', a system or privileged account"),
        ("arn:aws:iam::444455556666:user/Ubuntu", "gives cluster user 'ubuntu', a system or privileged account"),
        ("arn:aws:iam::444455556666:role/ops/slurm", "gives cluster user 'slurm', a system or privileged account"),
        ("arn:aws:iam::444455556666:role/_apt", "gives cluster user '_apt', a system or privileged account"),
        (
            "arn:aws:iam::444455556666:role/systemd-network",
            "gives cluster user 'systemd-network', a system or privileged account",
        ),
        ("arn:aws:iam::444455556666:role/x/../root", "has an empty, '.' or '..' path segment"),
        ("arn:aws:iam::444455556666:role/x/../eve", "has an empty, '.' or '..' path segment"),
        ("arn:aws:iam::444455556666:role/./eve", "has an empty, '.' or '..' path segment"),
        ("arn:aws:iam::444455556666:role/x//eve", "has an empty, '.' or '..' path segment"),
    ],
)
def test_members_mapping_to_system_users_or_other_paths_are_refused(arn: str, wrong: str) -> None:
    data = model_data()
    data["teams"][2]["members"].append(arn)
    from constructs_lib.model import GovernanceModel

    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    (problem,) = raised.value.problems
    assert (problem.path, problem.value) == ("teams[2].members[2]", arn)
    assert problem.wrong.startswith(wrong)


def test_docs_list_every_reserved_name_and_system_directory() -> None:
    from pathlib import Path

    from constructs_lib.backends.hyperpod_slurm.checks import (
        RESERVED_USER_PREFIXES,
        RESERVED_USERS,
        SHARED_PARENTS,
        SLURM_ROOT_ACCOUNT,
        SYSTEM_DIRECTORIES,
    )

    docs = (Path(__file__).resolve().parents[2] / "docs" / "slurm.md").read_text()
    listed = [*RESERVED_USERS, *RESERVED_USER_PREFIXES, SLURM_ROOT_ACCOUNT, *SYSTEM_DIRECTORIES, *SHARED_PARENTS]
    assert [name for name in listed if f"`{name}`" not in docs and f"`{name}*" not in docs] == []


def test_a_models_plan_is_built_once_however_many_teams_ask(monkeypatch) -> None:
    """Discovery describes each team's Slurm pool from the plan of every team: built per team, it
    made the synthesis of 1,000 teams cubic (docs/performance.md). One model, one plan per pool and
    data root; another model (another team list) gets its own."""
    import constructs_lib.backends.hyperpod_slurm.plan as slurm_model
    from constructs_lib.member.discovery import describe_team

    built = []
    build = slurm_model._build_slurm_plan
    monkeypatch.setattr(
        slurm_model,
        "_build_slurm_plan",
        lambda model, pool, data_root: built.append((pool, data_root)) or build(model, pool, data_root),
    )
    model = governance_model()
    documents = [describe_team(model, t.name) for t in model.teams]
    assert built == [(POOL, slurm_model.DEFAULT_DATA_ROOT)]
    assert [d["slurm_account"] for team_documents in documents for d in team_documents.values()] == [
        t.name for t in model.teams
    ]
    assert slurm_plan(model, POOL, data_root="/fsx/other") is not slurm_plan(model, POOL)
    fewer = governance_model(teams=default_teams()[:2])
    assert [a.name for a in slurm_plan(fewer, POOL).accounts] == ["critical", "steady"]
    assert len(built) == 3
