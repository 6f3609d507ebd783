"""One definition per concept (issue 27): the backend registry, "unlimited", the consumer kinds,
the cost-centre tag value, the windows that raise a quota and the per-share metric."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk.assertions import Template

from constructs_lib.backends import BACKENDS, backend_of, backends_where
from constructs_lib.backends.batch_quota_share import UNLIMITED_BORROW_LIMIT
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import UNLIMITED, GovernanceModel, SharingPolicy, SharingStrategy
from constructs_lib.model.capacity import raising_windows
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.guardrails import quota_raise_actions
from gpu_governance_runtime import contract

PACKAGE = Path(__file__).resolve().parents[2] / "constructs_lib"


def _default(**changes) -> dict:
    return {**load_model(None).model_dump(mode="json", exclude_none=True), **changes}


def test_the_registry_lists_the_contracts_backends_in_its_order():
    assert tuple(BACKENDS) == contract.BACKENDS
    assert all(b.name == name for name, b in BACKENDS.items())


def test_every_backend_names_a_construct_builder_and_a_stack_dictionary():
    import importlib

    for backend in BACKENDS.values():
        module, _, function = backend.construct.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), backend.name
        assert backend.stack_attribute in ("queues", "hyperpod_eks_clusters", "hyperpod_slurm_clusters"), backend.name


def test_the_registry_answers_by_pool_or_name():
    model = load_model(None)
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


# Modules that still compare with a backend's name (issue 27, item 1 is incremental): the list only shrinks.
STILL_NAMING_A_BACKEND = {
    "cli/member.py",
    "member/batch.py",
    "member/setup.py",
    "member/status.py",
    "model/organisation.py",
    "model/slurm.py",
}
_BACKEND_NAME = re.compile(
    r"\b(BATCH_QUOTA_SHARE|BATCH_FAIR_SHARE|HYPERPOD_EKS|HYPERPOD_SLURM|HYPERPOD_BACKENDS)\b|\"(batch_quota_share|batch_fair_share|hyperpod_eks|hyperpod_slurm)\""
)


def _names_a_backend(path: Path) -> bool:
    return bool(_BACKEND_NAME.search(path.read_text()))


def test_outside_the_registry_only_the_listed_modules_name_a_backend():
    # (the package root's "hyperpod_eks" is the name of the construct package, not of a backend)
    naming = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.parts[-2] != "backends" and p != PACKAGE / "__init__.py" and _names_a_backend(p)
    }
    assert naming <= STILL_NAMING_A_BACKEND, "ask constructs_lib.backends instead of naming a backend"
    assert naming >= STILL_NAMING_A_BACKEND, "a module no longer names a backend: drop it from the list"


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
