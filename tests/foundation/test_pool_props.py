"""One props shape for every pool construct (issue 27), as aws-cdk-lib has it: a base
``PoolGovernanceProps`` (``pool``, ``teams``) and one ``<Construct>Props`` per backend extending it,
whose fields are the construct's keyword arguments, in the same order; bad props are refused
naming the field, before anything is added to the scope."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from constructs_lib import (
    BatchFairSharePool,
    BatchQuotaSharePool,
    FairShareJobQueue,
    FairShareJobQueueProps,
    GovernanceError,
    PoolGovernanceProps,
    QuotaManagedTrainingQueue,
    QuotaManagedTrainingQueueProps,
    Team,
)
from constructs_lib.backends import BACKENDS

# Kept for one release, with a DeprecationWarning (CHANGELOG.md); not a field of the props.
DEPRECATED_KEYWORDS = {"pool_name"}

QUOTA_POOL = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 2})
FAIR_POOL = BatchFairSharePool(
    name="f",
    capacity={"p5.48xlarge": 2},
    compute_environments=["arn:aws:batch:us-east-1:111122223333:compute-environment/ce"],
)


def pool_construct(backend: str) -> tuple[type, type]:
    """The construct and props class of ``backend``, found beside the builder its descriptor names."""
    module = BACKENDS[backend].part("construct")
    (props,) = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, PoolGovernanceProps)
        and value is not PoolGovernanceProps
        and backend == value.BACKEND.name
    ]
    return getattr(module, props.__name__.removesuffix("Props")), props


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_backends_construct_takes_its_props_fields_as_keywords_in_order(backend):
    construct, props = pool_construct(backend)
    keywords = [
        p
        for p in inspect.signature(construct.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in DEPRECATED_KEYWORDS
    ]
    fields = dataclasses.fields(props)
    assert [p.name for p in keywords] == [f.name for f in fields]
    assert [f.name for f in fields][:2] == ["pool", "teams"]  # the base's fields lead, everywhere
    for field, keyword in zip(fields, keywords, strict=True):
        if field.default is not dataclasses.MISSING:
            assert keyword.default == field.default, field.name


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_props_name_a_pool_of_another_backend(backend):
    _, props = pool_construct(backend)
    other = FAIR_POOL if backend != FAIR_POOL.backend else QUOTA_POOL
    problems = props.problems(dataclasses.replace(_stand_in(props), pool=other))
    assert str(problems[0]) == (
        f"pool: not a {backend} pool ('{other.name} ({other.backend})') - a pool with backend {backend}"
    )
    # Nothing that reads the pool follows; a backend's own fields (empty in the stand-in) may.
    assert all(p.path.split("[")[0] not in ("pool", "teams") for p in problems[1:])


def _stand_in(props: type) -> PoolGovernanceProps:
    """An instance of ``props`` whose required fields past the base's are empty: once the pool is of
    another backend, nothing past it is read."""
    required = {f.name: () for f in dataclasses.fields(props) if f.default is dataclasses.MISSING}
    return props(**{**required, "pool": QUOTA_POOL, "teams": ()})


@pytest.mark.parametrize(
    ("construct", "pool", "message"),
    [
        (
            QuotaManagedTrainingQueue,
            FAIR_POOL,
            "pool: not a batch_quota_share pool ('f (batch_fair_share)') - a pool with backend batch_quota_share",
        ),
        (
            FairShareJobQueue,
            QUOTA_POOL,
            "pool: not a batch_fair_share pool ('q (batch_quota_share)') - a pool with backend batch_fair_share",
        ),
        (
            FairShareJobQueue,
            "f",
            "pool: not a batch_fair_share pool ('f (str)') - a pool with backend batch_fair_share",
        ),
    ],
)
def test_a_queue_refuses_a_pool_of_another_backend_before_building(construct, pool, message):
    stack = Stack(App(), "S")
    with pytest.raises(GovernanceError) as raised:
        construct(stack, "Queue", pool=pool, teams=[])
    assert str(raised.value) == message
    assert stack.node.try_find_child("Queue") is None


@pytest.mark.parametrize("teams", [None, "research", {"research": None}])
def test_teams_that_are_not_a_list_are_refused_naming_the_field(teams):
    stack = Stack(App(), "S")
    with pytest.raises(GovernanceError) as raised:
        QuotaManagedTrainingQueue(stack, "Queue", pool=QUOTA_POOL, teams=teams)
    assert str(raised.value) == f"teams: not a list of teams ('{type(teams).__name__}') - a list or tuple of Team"
    assert stack.node.try_find_child("Queue") is None


def test_a_team_that_is_not_a_team_is_refused_naming_it():
    stack = Stack(App(), "S")
    team = Team(name="a", preset="steady", quotas={"q": {"ml.p5.48xlarge": 1}})
    with pytest.raises(GovernanceError) as raised:
        QuotaManagedTrainingQueue(stack, "Queue", pool=QUOTA_POOL, teams=[team, "b"])
    assert str(raised.value) == "teams[1]: not a Team ('b') - a Team of the model"
    assert stack.node.try_find_child("Queue") is None


@pytest.mark.parametrize(
    ("construct", "pool"), [(QuotaManagedTrainingQueue, QUOTA_POOL), (FairShareJobQueue, FAIR_POOL)]
)
def test_a_team_given_twice_is_refused_naming_the_second(construct, pool):
    team = Team(name="a", preset="steady", quotas={"q": {"ml.p5.48xlarge": 1}, "f": {"p5.48xlarge": 1}})
    stack = Stack(App(), "S")
    with pytest.raises(GovernanceError) as raised:
        construct(stack, "Queue", pool=pool, teams=[team, team])
    assert str(raised.value).splitlines()[0] == "teams[1]: a second team of this name (teams[0]) ('a') - each team once"
    assert stack.node.try_find_child("Queue") is None


def test_props_passed_around_build_the_same_construct():
    teams = [Team(name="a", preset="steady", quotas={"q": {"ml.p5.48xlarge": 1}})]
    props = QuotaManagedTrainingQueueProps(pool=QUOTA_POOL, teams=teams)
    assert props.teams == tuple(teams)  # frozen: a list given is kept as a tuple
    templates = []
    for keywords in (vars(props), {"pool": QUOTA_POOL, "teams": teams}):
        stack = Stack(App(), "S")
        QuotaManagedTrainingQueue(stack, "Queue", **keywords)
        templates.append(Template.from_stack(stack).to_json())
    assert templates[0] == templates[1]
    assert props.problems() == []
    assert FairShareJobQueueProps(pool=FAIR_POOL, teams=()).problems() == []
