"""One definition per concept (issue 27): the backend registry, "unlimited", the consumer kinds,
the cost-centre tag value, the windows that raise a quota and the per-share metric."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk.assertions import Template

from constructs_lib.backends import BACKENDS, backend_of, backends_where
from constructs_lib.backends.base import GPU_HOUR_SWITCH_ACTIONS
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.vocabulary import UNLIMITED_BORROW_LIMIT
from constructs_lib.member import MEMBER_BACKENDS
from constructs_lib.model import UNLIMITED, GovernanceModel, SharingPolicy, SharingStrategy
from constructs_lib.model.capacity import Feed, raising_windows
from constructs_lib.model.loader import load_model
from constructs_lib.model.pool_checks import check_pool_teams
from constructs_lib.organisation.guardrails import quota_raise_actions
from gpu_governance_runtime import contract
from tests.eks_kueue.org import reference_with_eks_kueue

PACKAGE = Path(__file__).resolve().parents[2] / "constructs_lib"


def _default(**changes) -> dict:
    return {**load_model(None).model_dump(mode="json", exclude_none=True), **changes}


def test_the_registry_lists_the_contracts_backends_in_its_order():
    assert tuple(BACKENDS) == contract.BACKENDS
    assert all(b.name == name for name, b in BACKENDS.items())


def test_every_backend_has_a_construct_builder_and_a_stack_dictionary():
    for backend in BACKENDS.values():
        assert callable(backend.part("construct").build_pool), backend.name
        assert backend.stack_attribute.isidentifier(), backend.name  # the capacity stack's dictionary of its pools


def test_the_registry_answers_by_pool_or_name():
    model = reference_with_eks_kueue()  # the reference, and the one backend it leaves to an example
    assert {backend_of(p).name for p in model.pools} == set(contract.BACKENDS)
    assert backend_of(contract.BATCH_FAIR_SHARE) is BACKENDS[contract.BATCH_FAIR_SHARE]
    # a lending limit holds where the reclaim controller plans the borrowers (docs/governance-file.md)
    assert backends_where(lambda b: b.reclaim_plans) == (contract.BATCH_FAIR_SHARE, contract.HYPERPOD_SLURM)


def test_a_window_may_feed_the_pools_whose_backend_takes_its_kind():
    assert (
        backends_where(lambda b: contract.CONSUMER_HYPERPOD_INSTANCE_GROUP in b.window_feeds)
        == contract.HYPERPOD_BACKENDS
    )
    assert backends_where(lambda b: contract.CONSUMER_SAGEMAKER_TRAINING_JOBS in b.window_feeds) == (
        contract.BATCH_QUOTA_SHARE,
    )


def test_every_member_tool_has_its_submission_example():
    tools = {name: b for name, b in BACKENDS.items() if b.member_tool}
    assert {b.member_tool: name for name, b in tools.items()} == MEMBER_BACKENDS
    assert {name for name, b in BACKENDS.items() if b.part("submit") is not None} == set(tools)
    for backend in tools.values():
        assert callable(backend.part("submit").example), backend.name


@pytest.mark.parametrize("backend", backends_where(lambda b: b.max_teams_per_pool is not None))
def test_a_pools_team_limit_is_its_backends(backend, monkeypatch):
    # The organisation check asks the descriptor (it compared with the backends' names and constants).
    model = load_model(None)
    pool = next(p for p in model.pools if p.backend == backend and len(model.teams_in(p.name)) > 1)
    teams = [(f"teams[{i}]", t) for i, t in enumerate(model.teams) if pool.name in t.quotas]
    assert not [p for p in check_pool_teams(pool, teams, "pools[0]") if p.path == "pools[0]"]
    limit = len(teams) - 1
    monkeypatch.setitem(BACKENDS, backend, replace(BACKENDS[backend], max_teams_per_pool=limit))
    (refused,) = [p for p in check_pool_teams(pool, teams, "pools[0]") if p.path == "pools[0]"]
    assert (refused.wrong, refused.value) == (BACKENDS[backend].too_many_teams.format(pool=pool.name), len(teams))
    assert refused.allowed.startswith(f"at most {limit}")


def test_the_kind_of_gpu_hour_switch_is_one_field_of_the_descriptor():
    assert {name: b.gpu_hour_switch for name, b in BACKENDS.items() if b.gpu_hour_switch} == {
        contract.BATCH_QUOTA_SHARE: "quota_share",
        contract.HYPERPOD_EKS: "compute_quota",
        contract.EKS_KUEUE: "cluster_queue",  # Kubernetes RBAC, no IAM action
    }
    assert BACKENDS[contract.EKS_KUEUE].gpu_hour_limit_switch == ()
    assert all(b.gpu_hour_limit_switch == GPU_HOUR_SWITCH_ACTIONS.get(b.gpu_hour_switch, ()) for b in BACKENDS.values())
    # The reclaim controller's IAM and validate's policy-size estimate looked for an action in the switch.
    action_in = re.compile(
        "|".join(rf'"{re.escape(a)}" (not )?in\b' for actions in GPU_HOUR_SWITCH_ACTIONS.values() for a in actions)
    )
    assert [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if action_in.search(p.read_text())] == []


def _registry_asked(node: ast.AST) -> list[str]:
    return [ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func) == "backend_of"]


def test_a_branch_that_asked_the_registry_does_not_ask_again():
    # explain.caveats asked backend_of(pool) in the grace line's condition and again in its text.
    asked_again = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.If)
        and set(_registry_asked(node.test)) & {c for statement in node.body for c in _registry_asked(statement)}
    ]
    assert asked_again == []


def test_what_a_window_reorders_is_defined_with_its_consumer_kind():
    from constructs_lib.organisation import guardrails

    kinds = {get_args(f.model_fields["kind"].annotation)[0]: f for f in get_args(get_args(Feed)[0])}
    assert set(kinds) == set(contract.CONSUMER_FIELDS)
    assert {kind: f.queue_reorders for kind, f in kinds.items() if f.queue_reorders} == {
        contract.CONSUMER_BATCH_COMPUTE_ENVIRONMENT: ("batch:UpdateJobQueue",)
    }
    assert not hasattr(guardrails, "QUEUE_REORDERS")  # was a second table keyed by consumer kind


def test_consumer_kinds_are_spelt_once_in_the_library():
    # The model's pydantic discriminators need literals; tests/contract ties them to the contract.
    spelt = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
                continue
            if isinstance(node, ast.Constant) and node.value in contract.CONSUMER_FIELDS:
                spelt.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    literal_annotations = [s for s in spelt if s.startswith("model/capacity.py")]
    assert sorted(set(spelt) - set(literal_annotations)) == []
    assert len(literal_annotations) == len(contract.CONSUMER_FIELDS)  # one Literal per kind, nothing else


@pytest.mark.parametrize(("borrow_limit", "percent", "ceiling"), [(UNLIMITED, None, None), (150, 150, 10)])
def test_unlimited_is_translated_in_one_place(borrow_limit, percent, ceiling):
    sharing = SharingPolicy(strategy=SharingStrategy.LEND_AND_BORROW, borrow_limit=borrow_limit)
    assert sharing.borrows_without_limit is (borrow_limit == UNLIMITED)
    assert sharing.borrow_percent == percent
    assert sharing.borrow_ceiling(4) == ceiling
    assert UNLIMITED_BORROW_LIMIT == -1  # Batch's "no limit"


def test_a_cost_centre_may_be_as_long_as_an_aws_tag_value():
    # A tag value holds up to 256 characters (https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html);
    # a team's cost_centre allowed only 128 while a window's allowed 256.
    data = _default()
    data["teams"][0]["cost_centre"] = "c" * 256
    data["capacity_windows"][0]["cost_centre"] = "c" * 256
    model = GovernanceModel.from_dict(data)
    assert model.teams[0].cost_centre == model.capacity_windows[0].cost_centre == "c" * 256
    for where in ("teams", "capacity_windows"):
        data = _default()
        data[where][0]["cost_centre"] = "c" * 257
        with pytest.raises(GovernanceError) as refused:
            GovernanceModel.from_dict(data)
        assert any(p.path == f"{where}[0].cost_centre" for p in refused.value.problems)


@pytest.fixture(scope="module")
def window_for_a_team_without_a_share() -> GovernanceModel:
    # The window buys training plans for production, which has no share in the quota-share pool it feeds.
    data = _default()
    production = next(t for t in data["teams"] if t["name"] == "production")
    del production["quotas"]["sagemaker-training"]
    return GovernanceModel.from_dict(data)


def test_a_window_raises_no_quota_of_a_team_without_a_share(window_for_a_team_without_a_share):
    model = window_for_a_team_without_a_share
    assert raising_windows(model) == []
    assert quota_raise_actions(model) == ()  # the guardrails exempt the controller from nothing


def test_the_capacity_controller_may_not_raise_a_share_that_no_window_raises(window_for_a_team_without_a_share):
    from constructs_lib.controllers.capacity import CapacityController

    stack = Stack(App(), "Capacity")
    CapacityController(stack, "CapacityController", model=window_for_a_team_without_a_share)
    actions = {
        a
        for policy in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert "batch:UpdateQuotaShare" not in actions and "batch:UpdateServiceEnvironment" not in actions
    assert "sagemaker:CreateTrainingPlan" in actions  # the window still buys


def test_one_per_share_metric_for_the_reclaim_dashboards_and_the_usage_dashboards():
    from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
    from constructs_lib.organisation.chargeback import Chargeback

    model = load_model(None)
    stack = Stack(App(), "Metrics")
    reclaim = ReclaimController(
        stack,
        "Reclaim",
        model=model,
        targets=[ReclaimTarget(pool="ec2-gpu", job_queue_arn="arn:aws:batch:us-east-1:111122223333:job-queue/ec2-gpu")],
    )
    daily = reclaim.metric_share("ec2-gpu", "research", "UsedHours", statistic="Sum", period=Duration.days(1))
    assert (daily.namespace, daily.statistic, daily.period.to_seconds(), daily.dimensions) == (
        contract.RECLAIM_NAMESPACE,
        "Sum",
        86_400,
        {"Pool": "ec2-gpu", "Share": "research"},
    )
    assert reclaim.metric_share("ec2-gpu", "research", "Borrowed").period.to_seconds() == reclaim.schedule.to_seconds()
    assert not hasattr(Chargeback, "metric_share")
