"""The planner with a tree of groups (issue 43, Kueue's hierarchical cohorts): each level's
quota guaranteed to its members, its borrowing limit their ceiling, its lending limit what leaves
it. Scenarios, the policy reader's tree, then properties over generated trees on top of the
generated states of tests/reclaim/strategies.py (a one-level forest: test_planner_groups.py, as
before trees)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from hypothesis import assume, example, given, strategies as st

from gpu_governance_runtime.planners.reclaim import (
    RECLAIM,
    PoolState,
    RunningJob,
    Settings,
    ShareGroup,
    apply_plan,
    is_guarantee_job,
    may_borrow,
    plan_tick,
    preemptible_in_share,
)
from gpu_governance_runtime.policy import PolicyError, parse_policy
from tests.hierarchy import test_planner_groups as one_level
from tests.hierarchy.test_groups_policy import DOCUMENT
from tests.hierarchy.test_planner_groups import UNCAPPED, T, borrower, pending, running
from tests.reclaim.strategies import NOW, PROPERTY_SETTINGS, pool_states

# Nothing protected, no cap: whatever waits, waits for the rules, not for anti-thrash.
NO_ANTI_THRASH = Settings(min_run_time_s=0, max_preemptions_per_tick=10_000, max_preemption_searches_per_tick=10_000)


def org(*, ai: int = 6, vision_borrowing: dict | None = None, lending: dict | None = None) -> tuple[ShareGroup, ...]:
    """ai (quota 6) holds vision (quota 4: zeta, beta) and the share nlp; omega is outside."""
    return (
        ShareGroup(name="ai", shares=("nlp",), quota={T: ai}, borrowing_limit={}, lending_limit=lending or {}),
        ShareGroup(
            name="vision", shares=("zeta", "beta"), quota={T: 4}, parent="ai", borrowing_limit=vision_borrowing or {}
        ),
    )


SHARES = (borrower("zeta", 1), borrower("beta", 1), borrower("nlp", 1), borrower("omega", 2))


def zeta_asks_for_one_more(*jobs: RunningJob) -> PoolState:
    """A full pool of 9: ai (7) holds vision (4: zeta, beta) and nlp; omega outside; zeta waits for 1."""
    return PoolState(
        capacity={T: 9}, shares=SHARES, now=NOW, groups=org(ai=7), running=jobs, pending=(pending("zeta-more", "zeta"),)
    )


def parent_guarantee() -> PoolState:
    """vision is at its quota (4), ai has 1 idle; omega and nlp (inside ai) borrow 1 each."""
    return zeta_asks_for_one_more(
        running("z1", "zeta", 2),
        running("b1", "beta", 2),
        running("n1", "nlp"),
        running("n2", "nlp", started_at=NOW - 100),  # the cheapest victim, but inside ai
        running("o1", "omega", 2),
        running("o2", "omega", started_at=NOW - 600),
    )


def within_every_guarantee() -> PoolState:
    """zeta borrows 1 inside vision (holding 3), ai holds 5, omega borrows 2: zeta's next job is
    within both groups' quotas."""
    return zeta_asks_for_one_more(
        running("z1", "zeta", 2),
        running("b1", "beta"),
        running("n1", "nlp", 2),
        running("o1", "omega", 4, started_at=NOW - 600),
    )


def test_a_job_within_the_parents_guarantee_reclaims_from_outside_the_parent_only():
    state = parent_guarantee()
    plan = plan_tick(state, UNCAPPED)
    assert [(p.job_id, p.kind, p.for_job) for p in plan.preemptions] == [("o2", RECLAIM, "zeta-more")]
    assert [s.job_id for s in plan.starts] == ["zeta-more"]
    # one level (vision alone, a ceiling at its quota): zeta's job is beyond vision's quota and waits
    flat = replace(state, groups=(ShareGroup(name="vision", shares=("zeta", "beta"), quota={T: 4}),))
    assert plan_tick(flat, UNCAPPED).preemptions == ()


def test_a_groups_borrowing_limit_is_its_members_ceiling():
    state = PoolState(
        capacity={T: 8},
        shares=SHARES,
        now=NOW,
        groups=org(vision_borrowing={T: 1}),
        running=(running("z1", "zeta", 2), running("b1", "beta", 3)),
        pending=(pending("zeta-more", "zeta"), pending("beta-more", "beta", submitted_at=NOW - 30)),
    )
    plan = plan_tick(state, UNCAPPED)
    assert plan.starts == () and plan.preemptions == ()  # vision holds 5 = quota 4 + borrowing limit 1
    unlimited = plan_tick(replace(state, groups=org()), UNCAPPED)
    assert [s.job_id for s in unlimited.starts] == ["zeta-more", "beta-more"]


def test_a_groups_lending_limit_holds_its_idle_quota_for_its_members():
    # ai lends at most 1 of its idle quota: omega borrows 1 and its second job waits.
    state = PoolState(
        capacity={T: 8},
        shares=SHARES,
        now=NOW,
        groups=org(lending={T: 1}),
        running=(running("o1", "omega", 3),),
        pending=(pending("omega-more", "omega"),),
    )
    assert plan_tick(state, UNCAPPED).starts == ()
    assert [s.job_id for s in plan_tick(replace(state, groups=org()), UNCAPPED).starts] == ["omega-more"]


def test_a_guarantee_job_takes_from_the_most_distant_borrower_first():
    # zeta's own job; beta (sibling), nlp (cousin in ai) and omega (outside) each borrow 1 and the
    # pool is full, both groups have room for it: omega's job goes although it lost the most work.
    shares = (borrower("zeta", 2), borrower("beta", 1), borrower("nlp", 1), borrower("omega", 1))
    state = PoolState(
        capacity={T: 7},
        shares=shares,
        now=NOW,
        groups=(
            ShareGroup(name="ai", shares=("nlp",), quota={T: 6}, borrowing_limit={}),
            ShareGroup(name="vision", shares=("zeta", "beta"), quota={T: 4}, parent="ai", borrowing_limit={}),
        ),
        running=(
            running("z1", "zeta"),
            running("b1", "beta", 2, started_at=NOW - 60),
            running("n1", "nlp", 2, started_at=NOW - 60),
            running("o1", "omega", 2, started_at=NOW - 90_000),
        ),
        pending=(pending("zeta-own", "zeta"),),
    )
    plan = plan_tick(state, UNCAPPED)
    assert [p.job_id for p in plan.preemptions] == ["o1"]
    assert [p.job_id for p in plan_tick(replace(state, groups=()), UNCAPPED).preemptions] == ["b1"]  # flat: least work


# --- the policy document's tree --------------------------------------------------------------


def tree_document(**vision) -> dict:
    document = copy.deepcopy(DOCUMENT)
    pool = document["pools"][0]
    pool["capacity"] = {"g6e.12xlarge": 10}
    pool["groups"] = [
        {"name": "lab", "shares": ["research"], "quota": {"g6e.12xlarge": 9}},
        {"name": "vision", "shares": ["training"], "quota": {"g6e.12xlarge": 6}, "parent": "lab", **vision},
    ]
    return document


def test_the_reader_reads_a_tree_with_its_limits():
    limits = {"borrowing_limit": {"g6e.12xlarge": 2}, "lending_limit": {"g6e.12xlarge": 1}}
    groups = parse_policy(tree_document(**limits)).pool("ec2-gpu").groups
    assert groups == (
        ShareGroup(name="lab", shares=("research",), quota={"g6e.12xlarge": 9}, borrowing_limit={}),
        ShareGroup(
            name="vision",
            shares=("training",),
            quota={"g6e.12xlarge": 6},
            parent="lab",
            borrowing_limit={"g6e.12xlarge": 2},
            lending_limit={"g6e.12xlarge": 1},
        ),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parent": "nobody"}, r"pools\[0\]\.groups\[1\]\.parent: 'nobody' - the name of a group listed before it"),
        ({"borrowing_limit": {"g6e.12xlarge": -1}}, r"pools\[0\]\.groups\[1\]\.borrowing_limit\.g6e\.12xlarge: -1"),
        ({"lending_limit": 3}, r"pools\[0\]\.groups\[1\]\.lending_limit: 3 - a mapping"),
        (
            {"quota": {"g6e.12xlarge": 5}},
            r"pools\[0\]\.groups\.vision\.quota\.g6e\.12xlarge: 5 - at least its shares' and child groups' quotas \(6\)",
        ),
    ],
)
def test_a_bad_tree_is_refused_naming_the_path(change, message):
    with pytest.raises(PolicyError, match=message):
        parse_policy(tree_document(**change))


def test_a_parent_with_less_quota_than_its_children_is_refused():
    document = tree_document()
    document["pools"][0]["groups"][0]["quota"] = {"g6e.12xlarge": 7}  # research 2 + vision 6
    with pytest.raises(PolicyError, match=r"groups\.lab\.quota\.g6e\.12xlarge: 7 - at least .* \(8\)"):
        parse_policy(document)


def test_a_cycle_is_refused_by_the_planners_state():
    groups = (
        ShareGroup(name="a", shares=("zeta",), quota={T: 2}, parent="b"),
        ShareGroup(name="b", shares=("beta",), quota={T: 2}, parent="a"),
    )
    with pytest.raises(ValueError, match=r"groups\.a\.parent: 'b' - a group that is not its own descendant"):
        PoolState(capacity={T: 4}, shares=SHARES, running=(), pending=(), now=NOW, groups=groups)


# --- properties ------------------------------------------------------------------------------


@st.composite
def tree_states(draw) -> PoolState:
    """A valid state with a forest of up to four groups (each under an earlier one or at the top),
    each quota covering its children's and the top level fitting the pool, limits drawn or absent,
    and every group within its ceiling now."""
    state = draw(pool_states())
    count = draw(st.integers(1, 4))
    parents = [None] + [draw(st.none() | st.integers(0, i - 1)) for i in range(1, count)]
    home = {s.name: draw(st.none() | st.integers(0, count - 1)) for s in state.shares}
    slack = {t: c - sum(s.quota.get(t, 0) for s in state.shares) for t, c in state.capacity.items()}
    quotas: list[dict[str, int]] = [{} for _ in range(count)]
    for index in reversed(range(count)):  # children (later) before parents
        for t in state.capacity:
            own = sum(s.quota.get(t, 0) for s in state.shares if home[s.name] == index)
            children = sum(quotas[c][t] for c in range(count) if parents[c] == index)
            extra = draw(st.integers(0, slack[t]))
            slack[t] -= extra
            quotas[index][t] = own + children + extra
    groups = tuple(
        ShareGroup(
            name=f"g{index}",
            shares=tuple(name for name, at in home.items() if at == index),
            quota=quotas[index],
            parent=None if parents[index] is None else f"g{parents[index]}",
            borrowing_limit={t: draw(st.integers(0, 4)) for t in state.capacity if draw(st.booleans())},
            lending_limit={t: draw(st.integers(0, 4)) for t in state.capacity if draw(st.booleans())},
        )
        for index in range(count)
    )
    tree = replace(state, groups=groups)
    assume(all(_use(tree, tree.running, g, t) <= _ceiling(g, t) for g in groups for t in g.quota))
    return tree


def _members(state: PoolState, group: ShareGroup) -> set[str]:
    members, names = set(group.shares), {group.name}
    for g in state.groups:  # parents are listed before children
        if g.parent in names:
            names.add(g.name)
            members |= set(g.shares)
    return members


def _use(state: PoolState, jobs, group: ShareGroup, instance_type: str) -> int:
    members = _members(state, group)
    return sum(j.count for j in jobs if j.share in members and j.instance_type == instance_type)


def _ceiling(group: ShareGroup, instance_type: str) -> float:
    limit = (group.borrowing_limit or {}).get(instance_type)
    return float("inf") if limit is None else group.quota[instance_type] + limit


@PROPERTY_SETTINGS
@given(tree_states(), st.sampled_from([UNCAPPED, Settings()]))
def test_no_group_is_ever_beyond_its_quota_and_borrowing_limit_after_a_plan(state, settings):
    after = apply_plan(state, plan_tick(state, settings))
    for group in state.groups:
        for t in group.quota:
            assert _use(state, after.running, group, t) <= _ceiling(group, t), group.name


@PROPERTY_SETTINGS
@given(tree_states())
@example(parent_guarantee())
@example(within_every_guarantee())
def test_a_member_within_every_ancestors_guarantee_never_waits_while_an_outsider_borrows(state):
    """After the plan: a waiting job that its share may start (its guarantee, or a borrow within
    its ceiling), that every one of its groups' quotas still covers, does not wait while shares
    outside its nearest group run at least its size above their quotas, none of them kept by a
    group of their own within its quota."""
    after = apply_plan(state, plan_tick(state, NO_ANTI_THRASH))
    shares = {s.name: s for s in state.shares}
    for job in after.pending:
        t, share = job.instance_type, shares[job.share]
        groups = [g for g in state.groups if t in g.quota and job.share in _members(state, g)]
        if not groups or share.paused:
            continue
        own = [j for j in after.running if j.share == job.share and j.instance_type == t]
        used = sum(j.count for j in own)
        guarantee = is_guarantee_job(job, share, used, lambda: preemptible_in_share(share, job.priority, own))
        borrows = may_borrow(job, after.now, NO_ANTI_THRASH) and used + job.count <= share.ceiling(t, state.capacity[t])
        if not (guarantee or borrows):
            continue
        if any(_use(state, after.running, g, t) + job.count > g.quota[t] for g in groups):
            continue
        nearest = min(groups, key=lambda g: len(_members(state, g)))
        outsiders = sum(
            max(0, _share_use(after, other.name, t) - other.quota.get(t, 0))
            for other in state.shares
            if other.name not in _members(state, nearest) and not _kept(state, after, other.name, job.share, t)
        )
        assert outsiders < job.count, f"{job.job_id} of {job.share} waits while outsiders borrow {outsiders}"


def _share_use(state: PoolState, share: str, instance_type: str) -> int:
    return sum(j.count for j in state.running if j.share == share and j.instance_type == instance_type)


def _kept(state: PoolState, after: PoolState, other: str, share: str, instance_type: str) -> bool:
    """``other`` is in a group ``share`` is outside of that is within its quota."""
    return any(
        instance_type in g.quota
        and other in (members := _members(state, g))
        and share not in members
        and _use(state, after.running, g, instance_type) <= g.quota[instance_type]
        for g in state.groups
    )


@PROPERTY_SETTINGS
@given(tree_states())
def test_a_second_tick_over_a_trees_applied_plan_preempts_nothing_more(state):
    one_level.test_a_second_tick_over_the_applied_plan_preempts_nothing_more.hypothesis.inner_test(state)


@PROPERTY_SETTINGS
@given(tree_states(), st.randoms(use_true_random=False))
def test_the_same_tree_input_always_gives_the_same_plan(state, random):
    one_level.test_the_same_grouped_input_always_gives_the_same_plan.hypothesis.inner_test(state, random)


@PROPERTY_SETTINGS
@given(pool_states())
def test_a_one_level_group_with_no_borrowing_is_the_one_level_model(state):
    """A group whose borrowing limit is 0 on each of its types plans as a group of the one-level
    model (``borrowing_limit`` None: the quota is the ceiling)."""
    quota = {t: c for t, c in state.capacity.items()}
    members = tuple(s.name for s in state.shares[:2])
    one_level = replace(state, groups=(ShareGroup(name="g", shares=members, quota=quota),))
    zero = replace(one_level, groups=(replace(one_level.groups[0], borrowing_limit=dict.fromkeys(quota, 0)),))
    assert plan_tick(zero) == plan_tick(one_level)
