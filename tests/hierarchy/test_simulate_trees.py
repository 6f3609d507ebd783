"""The simulator and the breach count know the group tree (issue 43): a replay plans the tree the
policy reader reads from the controller's document, and a job within a parent group's guarantee
that waits while a team outside it borrows is a breach."""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import replace
from pathlib import Path

from constructs_lib.model.loader import load_model
from constructs_lib.model.policy import compile_policy
from constructs_lib.simulator.engine import simulate
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings, ShareGroup, breached_shares
from gpu_governance_runtime.policy import parse_policy
from tests.hierarchy.test_groups_policy import DOCUMENT
from tests.hierarchy.test_planner_trees import parent_guarantee

G6E = "g6e.12xlarge"


def test_a_waiting_job_within_a_parents_guarantee_is_a_breach_while_an_outsider_borrows():
    state = parent_guarantee()  # zeta-more: beyond zeta's and vision's quotas, within ai's; omega borrows
    breached = breached_shares(state.shares, state.running, state.pending, waited_before=state.now, groups=state.groups)
    assert breached == {"zeta"}
    assert breached_shares(state.shares, state.running, state.pending, waited_before=state.now) == set()  # flat
    # a job that may not borrow now is held to its share's quota: its wait is no breach
    no = breached_shares(
        state.shares,
        state.running,
        state.pending,
        waited_before=state.now,
        groups=state.groups,
        borrows=lambda job: False,
    )
    assert no == set()


def test_an_outsider_within_its_own_groups_quota_borrows_from_nobody_in_the_tree():
    state = parent_guarantee()
    omega = ShareGroup(name="platform", shares=("omega",), quota={"p5": 3}, borrowing_limit={})
    kept = replace(state, groups=(*state.groups, omega))
    # omega runs 3 of its group's 3: its borrowing is inside its own group, not ai's headroom
    assert breached_shares(kept.shares, kept.running, kept.pending, waited_before=kept.now, groups=kept.groups) == set()


def _document(groups: list[dict]) -> dict:
    document = copy.deepcopy(DOCUMENT)
    document["pools"][0]["capacity"] = {G6E: 10}
    document["pools"][0]["groups"] = groups
    return document


# research (2) outside lab; lab (7): vision (6): training (6); one instance no team is guaranteed
TREE = [
    {"name": "lab", "shares": [], "quota": {G6E: 7}},
    {"name": "vision", "shares": ["training"], "quota": {G6E: 6}, "parent": "lab"},
]
ONE_LEVEL = [{"name": "vision", "shares": ["training"], "quota": {G6E: 6}, "borrowing_limit": {G6E: 0}}]
# training fills its quota; research borrows 2 for an hour; ten minutes in, training wants 1 more
TRACE = (
    TraceJob(
        job_id="training-six",
        team="training",
        submit_time=0,
        duration=7_200,
        instance_type=G6E,
        count=6,
        priority=1,
        checkpointable=True,
    ),
    TraceJob(
        job_id="research-wide",
        team="research",
        submit_time=0,
        duration=3_600,
        instance_type=G6E,
        count=4,
        priority=1,
        checkpointable=True,
    ),
    TraceJob(
        job_id="training-one",
        team="training",
        submit_time=600,
        duration=600,
        instance_type=G6E,
        count=1,
        priority=1,
        checkpointable=True,
    ),
)


def _replay(groups: list[dict], settings: Settings = Settings()):
    pool = parse_policy(_document(groups)).pool("ec2-gpu")  # the tree as the controller reads it
    return simulate(TRACE, shares=pool.shares, capacity=pool.capacity, settings=settings, groups=pool.groups)


def test_the_replay_plans_the_tree_the_controller_reads_from_its_document():
    tree, one_level = _replay(TREE), _replay(ONE_LEVEL)
    # within lab's guarantee: research's borrowed job is reclaimed at once
    assert tree.preemptions == 1 and max(tree.waits["training"]) <= 60
    # vision's quota as its ceiling (the one-level model): training's job waits for research's to end
    assert one_level.preemptions == 0 and max(one_level.waits["training"]) >= 3_000
    # reclaim switched off: the tree's waiting job is a breach; beyond every guarantee it is none
    off = _replay(TREE, Settings(max_preemptions_per_tick=0))
    assert off.guarantee_breaches > 0
    assert 0 < off.guarantee_breached_s["training"] <= off.guarantee_asked_s["training"]  # a breached team asks
    assert _replay(ONE_LEVEL, Settings(max_preemptions_per_tick=0)).guarantee_breaches == 0


def test_the_openb_benchmark_plans_the_tree_the_reader_reads_from_the_compiled_document():
    """benchmarks/tree_replay.py (docs/performance.md): its tree reaches the planner through the
    controller's reader, over the library's compiled document."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "tree_replay.py"
    spec = importlib.util.spec_from_file_location("tree_replay", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = load_model(bench.CONFIG)
    pool = bench.pool(compile_policy(model), quotas=bench.HEADROOM_QUOTAS, groups=bench.TREE)
    g5 = bench.G5
    assert pool.groups == (
        ShareGroup(name="lab", shares=("research",), quota={g5: 20}, borrowing_limit={}),
        ShareGroup(name="infra", shares=("platform",), quota={g5: 8}, parent="lab", borrowing_limit={}),
    )
    assert {s.name: s.quota[g5] for s in pool.shares} == {"serving": 20, "platform": 6, "research": 10}
