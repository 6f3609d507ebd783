"""Group ids of the teams' OS groups (issue 27): declared or allocated, never two alike."""

from __future__ import annotations

from itertools import count

import pytest

from constructs_lib.backends.hyperpod_slurm.checks import slurm_problems
from constructs_lib.backends.hyperpod_slurm.layout import GID_BASE, GID_SPAN, team_gid, team_gids
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.slurm import slurm_plan
from tests.scale.generate import organisation

SLURM_POOL = "hyperpod-slurm"


def colliding_names(organisation_name: str, prefix: str) -> tuple[str, str]:
    """Two team names whose hashed ids are the same."""
    seen: dict[int, str] = {}
    for index in count():
        name = f"{prefix}{index}"
        gid = team_gid(organisation_name, name)
        if gid in seen:
            return seen[gid], name
        seen[gid] = name


def test_a_thousand_teams_get_distinct_ids_and_validate() -> None:
    """With hashed ids alone, two of these 1,000 names collide and validate refused one."""
    model = GovernanceModel.from_dict(organisation(1000))
    homes = [team_gid(model.organisation, t.name) for t in model.teams]
    assert len(set(homes)) < len(homes)  # the collision the allocation has to resolve
    assert slurm_problems(model, SLURM_POOL) == []
    gids = team_gids(model)
    assert len(set(gids.values())) == 1000 and all(GID_BASE <= g < GID_BASE + GID_SPAN for g in gids.values())
    assert {g.name: g.gid for g in slurm_plan(model, SLURM_POOL).groups} == {
        f"gg-{name}": gid for name, gid in gids.items()
    }


def test_colliding_names_probe_in_name_order_and_others_keep_their_hash() -> None:
    data = organisation(3)
    first, second = colliding_names("scale-ml", "t")
    data["teams"][0]["name"], data["teams"][1]["name"] = second, first  # file order must not matter
    gids = team_gids(GovernanceModel.from_dict(data))
    home = team_gid("scale-ml", first)
    assert (gids[first], gids[second]) == (home, home + 1 if home + 1 < GID_BASE + GID_SPAN else GID_BASE)
    assert gids["team-002"] == team_gid("scale-ml", "team-002")


def test_adding_a_team_keeps_every_existing_id_unless_the_newcomer_hashes_onto_it() -> None:
    before = team_gids(GovernanceModel.from_dict(organisation(1000)))
    after = team_gids(GovernanceModel.from_dict(organisation(1001)))
    assert team_gid("scale-ml", "team-1000") not in before.values()
    assert {n: g for n, g in after.items() if n != "team-1000"} == before  # the probed ones included


def test_a_declared_id_wins_and_the_hashed_holder_moves_on() -> None:
    data = organisation(3)
    home = team_gid("scale-ml", "team-001")
    data["teams"][0]["slurm_gid"] = home
    gids = team_gids(GovernanceModel.from_dict(data))
    assert gids["team-000"] == home and gids["team-001"] == home + 1
    plan = slurm_plan(GovernanceModel.from_dict(data), SLURM_POOL)
    assert {g.name: g.gid for g in plan.groups}["gg-team-000"] == home


def test_two_teams_declaring_one_id_are_refused() -> None:
    data = organisation(3)
    data["teams"][0]["slurm_gid"] = data["teams"][2]["slurm_gid"] = 700_001
    with pytest.raises(GovernanceError) as raised:  # validate runs the same organisation check
        GovernanceModel.from_dict(data)
    assert [(p.path, p.value) for p in raised.value.problems] == [("teams[2].slurm_gid", 700_001)]
    assert "also declared by team team-000" in raised.value.problems[0].wrong


@pytest.mark.parametrize("gid", [0, 999, 2**31])
def test_a_declared_id_outside_the_range_is_refused(gid: int) -> None:
    data = organisation(2)
    data["teams"][0]["slurm_gid"] = gid
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    (problem,) = raised.value.problems
    assert problem.path == "teams[0].slurm_gid" and problem.value == gid
