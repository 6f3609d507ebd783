"""A capacity window feeding an instance group of a Slurm pool: the group joins its owner's
partition only (never ``borrow``), and groups the window's end would wrongly drain, or that two
teams would share, are refused with one line each (no Slurm needed)."""

from __future__ import annotations

from typing import Any

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.slurm import slurm_plan

from .models import INSTANCE_TYPE, POOL, default_teams, member, model_data

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"


def window(name: str, team: str, group: str) -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "instance_type": INSTANCE_TYPE,
        "instance_count": 2,
        "start": "2026-12-10T11:30:00Z",
        "duration_hours": 8,
        "feeds": {"kind": "hyperpod_instance_group", "pool": POOL, "instance_group": group},
        "max_price_per_instance_hour": "10",
        "budget": {"amount": "1000"},
    }


def model(*windows: dict[str, Any], teams: list[dict[str, Any]] | None = None) -> GovernanceModel:
    data = model_data(teams=teams)
    data["pools"][0]["cluster_arn"] = CLUSTER
    data["capacity_windows"] = list(windows)
    return GovernanceModel.from_dict(data)


def errors(*windows: dict[str, Any], teams: list[dict[str, Any]] | None = None) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        slurm_plan(model(*windows, teams=teams), POOL)
    return str(raised.value).splitlines()


def test_the_windows_group_joins_its_owners_partition_and_no_other() -> None:
    plan = slurm_plan(model(window("warmup", "burst", "burst-window"), window("eval", "burst", "burst-eval")), POOL)
    partitions = {p.name: p for p in plan.partitions}
    assert partitions["burst"].instance_groups == ("burst-g5-12xlarge", "burst-eval", "burst-window")
    assert partitions["burst"].allow_accounts == ("burst",)
    # burst lends its quota node, but what its windows bring is its own alone.
    assert partitions["borrow"].instance_groups == ("steady-g5-12xlarge", "burst-g5-12xlarge")
    assert all(
        "window" not in g and "eval" not in g
        for name, p in partitions.items()
        if name != "burst"
        for g in p.instance_groups
    )


GENERATED = "['burst-g5-12xlarge', 'critical-g5-12xlarge', 'steady-g5-12xlarge']"


@pytest.mark.parametrize(
    "group, whose",
    [
        ("steady-g5-12xlarge", "team steady's quota"),
        ("critical-g5-12xlarge", "the team's own quota, whose nodes the window's end would drain"),
    ],
)
def test_a_group_the_pool_generates_is_refused(group: str, whose: str) -> None:
    assert errors(window("warmup", "critical", group)) == [
        f"capacity_windows[0].feeds.instance_group: a group the pool generates for {whose} ('{group}') - a group of the window's own, none of {GENERATED}"
    ]


def test_the_unassigned_lent_group_is_refused() -> None:
    (line,) = errors(
        window("warmup", "critical", "shared-g5-12xlarge"), teams=[t for t in default_teams() if t["name"] != "burst"]
    )
    assert "a group the pool generates for the pool's unassigned (lent) capacity ('shared-g5-12xlarge')" in line


def test_a_team_without_a_partition_in_the_pool_is_refused() -> None:
    data = model_data(
        teams=default_teams()
        + [
            {
                **default_teams()[1],
                "name": "guests",
                "members": [member("erin")],
                "quotas": {"other": {INSTANCE_TYPE: 1}},
            }
        ]
    )
    data["pools"][0]["cluster_arn"] = CLUSTER
    data["pools"].append({**data["pools"][0], "name": "other", "cluster_name": "other"})
    data["capacity_windows"] = [window("warmup", "guests", "guests-window")]
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    assert str(raised.value).splitlines() == [
        "capacity_windows[0].team: has no quota in Slurm pool research-slurm, so no partition for the window's nodes ('guests') - "
        "one of ['burst', 'critical', 'steady']"
    ]


def test_two_teams_cannot_feed_one_group() -> None:
    (line,) = errors(window("warmup", "critical", "burst-window"), window("eval", "burst", "burst-window"))
    assert line == (
        "capacity_windows[1].feeds.instance_group: also fed by a window of team critical: its nodes would be in two teams' "
        "partitions ('burst-window') - a group only team burst's windows feed"
    )


def test_the_cli_refuses_it_in_one_line_with_exit_code_2(tmp_path, capsys) -> None:
    import yaml

    from constructs_lib.cli.main import main

    data = model_data()
    data["pools"][0]["cluster_arn"] = CLUSTER
    data["capacity_windows"] = [window("warmup", "critical", "steady-g5-12xlarge")]
    path = tmp_path / "governance.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(path)]) == 2
    assert (
        "capacity_windows[0].feeds.instance_group: a group the pool generates for team steady's quota"
        in capsys.readouterr().err
    )
