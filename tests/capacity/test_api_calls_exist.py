"""Every AWS call in the Lambda runtime and the capacity CLI, checked whole against the installed
botocore model, without running it.

How: the source is parsed (``ast``) and each call on a name that holds a client (``ec2``,
``self.batch``, ``purchase_sagemaker``, a DynamoDB ``table`` ...) is checked where it is written:

- the operation exists (and ``get_paginator`` names a paginated one);
- every keyword is a member of the request shape; literal dicts and lists are checked member by
  member down the nested shapes, literal strings against the enum; when no ``**`` splat is
  involved, every required member is there;
- every key the code reads from the response (``resp["K"]``, ``resp.get("K")``, through
  variables, ``for`` loops, comprehensions, ``next(...)`` and pages of a paginator) is a member
  of the response shape; functions that receive response items from their caller are declared in
  ``RECEIVES`` with the shape they receive;
- a call of an operation that paginates reads every page, unless it names its items (below).

What a static check cannot see is covered where it is tested at run time: requests built from
response data (``**request`` splats, launch template data, instance-group specifications) are
validated against the request shape from the fullest possible response (``shape_examples``),
and every Stubber-backed test has botocore validate requests and canned responses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

import gpu_governance_runtime
from gpu_governance_runtime.planners.kinds import KINDS

from .shape_examples import example, problems

RUNTIME = Path(gpu_governance_runtime.__file__).parent
SOURCES = sorted(RUNTIME.rglob("*.py")) + [Path(__file__).parents[2] / "constructs_lib" / "cli" / "capacity.py"]

# How the code names its clients -> the service each one is.
CLIENT_NAMES = {
    "ec2": "ec2",
    "purchase_ec2": "ec2",
    "sagemaker": "sagemaker",
    "purchase_sagemaker": "sagemaker",
    "_db": "dynamodb",
    "dynamodb": "dynamodb",
    "sns": "sns",
    "events": "events",
    "batch": "batch",
    "eks": "eks",
    "ecs": "ecs",
    "ssm": "ssm",
    "sqs": "sqs",
    "table": "dynamodb",
    "ce": "ce",
    "submit": "batch",
}
RESOURCES = {"table"}  # boto3 resources: the resource fills in TableName
NOT_OPERATIONS = {"get_paginator", "meta", "exceptions", "Table", "can_paginate"}
# Operations that paginate but are read in one call, and why that reads everything.
ONE_CALL_READS_ALL = {
    ("ec2", "DescribeCapacityReservations"): "CapacityReservationIds names the one reservation of the event",
    ("ec2", "DescribeLaunchTemplateVersions"): "Versions names the one $Default version",
    ("batch", "DescribeComputeEnvironments"): "computeEnvironments names the one compute environment",
    ("batch", "DescribeJobQueues"): "jobQueues names the one job queue",
    ("ec2", "DescribeInstanceTypes"): "InstanceTypes names the one instance type",
    ("ec2", "DescribeSubnets"): "SubnetIds names the consumer's subnets, every one answered",
    ("batch", "DescribeServiceEnvironments"): "serviceEnvironments names the one service environment",
    ("dynamodb", "Scan"): "the ledgers page by hand, looping on LastEvaluatedKey / ExclusiveStartKey",
}
# Functions that read response items handed to them: (function, parameter) -> [(service, operation, member or None)].
RECEIVES = {
    ("block_offering", "o"): [("ec2", "DescribeCapacityBlockOfferings", "CapacityBlockOfferings")],
    ("reservation_from_api", "item"): [("ec2", "DescribeCapacityReservations", "CapacityReservations")],
    ("training_plan_offering", "o"): [("sagemaker", "SearchTrainingPlanOfferings", "TrainingPlanOfferings")],
    ("_training_plan", "plan"): [
        ("sagemaker", "ListTrainingPlans", "TrainingPlanSummaries"),
        ("sagemaker", "DescribeTrainingPlan", None),
    ],
    ("copy_request", "job"): [("batch", "DescribeJobs", "jobs")],
    ("_fields", "job"): [("batch", "DescribeJobs", "jobs")],
}


def model(service: str):
    return boto3.client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ).meta.service_model


def operation(service: str, method: str):
    client = boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    name = client.meta.method_to_api_mapping.get(method)
    return client.meta.service_model.operation_model(name) if name else None


@dataclass(frozen=True)
class _Pages:
    """A paginator's pages, or a list the code built from them: a list shape botocore has none for."""

    member: Any
    type_name: str = "list"


def _client(node: ast.AST) -> str | None:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name if name in CLIENT_NAMES else None


def _const(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) else None


class Checker:
    def __init__(self, path: Path):
        self.path = path.name
        self.tree = ast.parse(path.read_text())
        self.problems: list[str] = []  # deduplicated in check()
        self.calls: set[tuple[str, str]] = set()
        self.single_page: set[tuple[str, str]] = set()

    # --- requests -----------------------------------------------------------------------------

    def request(self, call: ast.Call, service: str, op, *, resource: bool, where: str) -> None:
        shape = op.input_shape
        members = shape.members if shape else {}
        given = set()
        for keyword in call.keywords:
            if keyword.arg is None:
                continue
            given.add(keyword.arg)
            if keyword.arg not in members:
                self.problems.append(f"{where}: {op.name} has no parameter {keyword.arg}")
            else:
                self.value(keyword.value, members[keyword.arg], f"{where}: {op.name}.{keyword.arg}")
        if shape is not None and not any(k.arg is None for k in call.keywords):
            required = set(shape.required_members) - given - ({"TableName"} if resource else set())
            if required:
                self.problems.append(f"{where}: {op.name} misses required {sorted(required)}")

    def value(self, node: ast.AST, shape: Any, path: str) -> None:
        kind = shape.type_name
        if isinstance(node, ast.Dict):
            if kind == "map":
                for item in node.values:
                    self.value(item, shape.value, f"{path}{{}}")
            elif kind == "structure":
                keys = [_const(k) if k is not None else None for k in node.keys]
                for key, item in zip(keys, node.values, strict=True):
                    if key is None:
                        continue
                    if key not in shape.members:
                        self.problems.append(f"{path}: no member {key!r}")
                    else:
                        self.value(item, shape.members[key], f"{path}.{key}")
                if None not in node.keys and not any(k is None for k in keys):
                    missing = set(shape.required_members) - set(keys)
                    if missing:
                        self.problems.append(f"{path}: misses required {sorted(missing)}")
            else:
                self.problems.append(f"{path}: a dict where the model has a {kind}")
        elif isinstance(node, (ast.List, ast.Tuple)):
            if kind != "list":
                self.problems.append(f"{path}: a list where the model has a {kind}")
            else:
                for item in node.elts:
                    if not isinstance(item, ast.Starred):
                        self.value(item, shape.member, f"{path}[]")
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp)) and kind == "list":
            self.value(node.elt, shape.member, f"{path}[]")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and kind == "string"
            and shape.enum
            and node.value not in shape.enum
        ):
            self.problems.append(f"{path}: {node.value!r} is not one of {shape.enum}")

    # --- responses ----------------------------------------------------------------------------

    def shape_of(self, node: ast.AST, env: dict[str, Any], where: str):
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.BoolOp):
            return self.shape_of(node.values[0], env, where)
        if isinstance(node, ast.Subscript):
            return self.member(self.shape_of(node.value, env, where), node.slice, where)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                owner = _client(func.value)
                if owner and func.attr not in NOT_OPERATIONS:
                    op = operation(CLIENT_NAMES[owner], func.attr)
                    return op.output_shape if op else None
                if func.attr == "get" and node.args:
                    return self.member(self.shape_of(func.value, env, where), node.args[0], where)
                if (
                    func.attr == "paginate"
                    and isinstance(func.value, ast.Call)
                    and isinstance(func.value.func, ast.Attribute)
                ):
                    paginator = func.value
                    if paginator.func.attr == "get_paginator" and _client(paginator.func.value):
                        op = operation(CLIENT_NAMES[_client(paginator.func.value)], _const(paginator.args[0]))
                        return _Pages(op.output_shape) if op else None
            if isinstance(func, ast.Name) and func.id == "all_items" and len(node.args) >= 3:
                op = operation(
                    CLIENT_NAMES.get(getattr(node.args[0], "attr", getattr(node.args[0], "id", "")), "ec2"),
                    _const(node.args[1]),
                )
                items = self.member(op.output_shape, node.args[2], where) if op else None
                return _Pages(items.member) if items is not None and items.type_name == "list" else None
            if (
                isinstance(func, ast.Name)
                and func.id == "next"
                and node.args
                and isinstance(node.args[0], ast.GeneratorExp)
            ):
                inner = dict(env)
                self.bind_generators(node.args[0].generators, inner, where)
                return self.shape_of(node.args[0].elt, inner, where)
        return None

    def member(self, shape, key_node: ast.AST, where: str):
        if shape is None:
            return None
        key = _const(key_node)
        if shape.type_name == "list":
            return shape.member if not isinstance(key, str) else None
        if shape.type_name == "map":
            return shape.value
        if shape.type_name == "structure" and isinstance(key, str):
            if key not in shape.members:
                self.problems.append(f"{where}: reads {key!r}, not in {shape.name} ({sorted(shape.members)})")
                return None
            return shape.members[key]
        return None

    def bind(self, target: ast.AST, shape, env: dict[str, Any]) -> None:
        if shape is None:
            return
        if isinstance(target, ast.Name):
            env[target.id] = shape
        elif isinstance(target, ast.Tuple) and shape.type_name == "list":
            for item in target.elts:
                self.bind(item, shape.member, env)

    def bind_generators(self, generators, env, where) -> None:
        for generator in generators:
            iterated = self.shape_of(generator.iter, env, where)
            if iterated is not None and iterated.type_name == "list":
                self.bind(generator.target, iterated.member, env)

    def function(self, func: ast.FunctionDef) -> None:
        env: dict[str, Any] = {}
        for (name, parameter), sources in RECEIVES.items():
            if func.name == name:
                for service, op_name, item in sources:
                    shape = model(service).operation_model(op_name).output_shape
                    shape = shape.members[item].member if item else shape
                    self.reads(func, {**env, parameter: shape})
                return
        self.reads(func, env)

    def reads(self, func: ast.FunctionDef, env: dict[str, Any]) -> None:
        """Follow the function in source order: each loop and comprehension binds its own names."""
        where = f"{self.path}:{func.name}"

        def visit(node: ast.AST, env: dict[str, Any]) -> None:
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                inner = dict(env)
                for generator in node.generators:
                    visit(generator.iter, inner)
                    self.bind_generators([generator], inner, where)
                    for condition in generator.ifs:
                        visit(condition, inner)
                for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                    visit(part, inner)
                return
            if isinstance(node, ast.For):
                visit(node.iter, env)
                iterated = self.shape_of(node.iter, env, where)
                if iterated is not None and iterated.type_name == "list":
                    self.bind(node.target, iterated.member, env)
                for statement in node.body + node.orelse:
                    visit(statement, env)
                return
            if isinstance(node, ast.Assign):
                visit(node.value, env)
                if len(node.targets) == 1:
                    self.bind(node.targets[0], self.shape_of(node.value, env, where), env)
                return
            if isinstance(node, (ast.Subscript, ast.Call)):
                self.shape_of(node, env, where)
            for child in ast.iter_child_nodes(node):
                visit(child, env)

        for statement in func.body:
            visit(statement, env)

    # --- all ----------------------------------------------------------------------------------

    def check(self) -> Checker:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(node)
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner, method = _client(node.func.value), node.func.attr
            where = f"{self.path}:{node.lineno}"
            if owner and method == "get_paginator":
                client = boto3.client(
                    CLIENT_NAMES[owner], region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
                )
                op = operation(CLIENT_NAMES[owner], _const(node.args[0]))
                if op is None or not client.can_paginate(_const(node.args[0])):
                    self.problems.append(f"{where}: {CLIENT_NAMES[owner]} has no paginator {_const(node.args[0])!r}")
                    continue
                self.calls.add((CLIENT_NAMES[owner], op.name))
            elif owner and method not in NOT_OPERATIONS:
                service = CLIENT_NAMES[owner]
                op = operation(service, method)
                if op is None:
                    self.problems.append(f"{where}: {service}.{method} is not in the installed botocore model")
                    continue
                self.calls.add((service, op.name))
                self.request(node, service, op, resource=owner in RESOURCES, where=where)
                if boto3.client(
                    service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
                ).can_paginate(method):
                    self.single_page.add((service, op.name))
            elif method == "paginate" and isinstance(node.func.value, ast.Call):
                paginator = node.func.value
                if (
                    isinstance(paginator.func, ast.Attribute)
                    and paginator.func.attr == "get_paginator"
                    and _client(paginator.func.value)
                ):
                    service = CLIENT_NAMES[_client(paginator.func.value)]
                    op = operation(service, _const(paginator.args[0]))
                    if op is not None:
                        self.request(node, service, op, resource=False, where=where)
        for node in ast.walk(
            self.tree
        ):  # the all_items(client, "operation", "Key", **params) helper (offers.py) pages through
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "all_items":
                service = CLIENT_NAMES[getattr(node.args[0], "attr", getattr(node.args[0], "id", ""))]
                op = operation(service, _const(node.args[1]))
                self.calls.add((service, op.name))
                self.request(node, service, op, resource=False, where=f"{self.path}:{node.lineno}")
        self.problems = list(dict.fromkeys(self.problems))
        return self


CHECKED = {path: Checker(path).check() for path in SOURCES}


def all_calls() -> set[tuple[str, str]]:
    return {call for checker in CHECKED.values() for call in checker.calls}


def test_the_scan_finds_the_calls_that_spend_money_or_stop_work():
    assert {
        ("ec2", "PurchaseCapacityBlock"),
        ("ec2", "PurchaseCapacityBlockExtension"),
        ("sagemaker", "CreateTrainingPlan"),
        ("dynamodb", "TransactWriteItems"),
        ("batch", "TerminateJob"),
        ("batch", "SubmitJob"),
        ("ecs", "ListContainerInstances"),
        ("sagemaker", "UpdateCluster"),
        ("ssm", "SendCommand"),
        ("dynamodb", "PutItem"),
        ("ec2", "CreateLaunchTemplateVersion"),
        ("ec2", "DescribeCapacityBlockOfferings"),
        ("ec2", "DescribeCapacityBlockExtensionOfferings"),
        ("batch", "GetJobQueueSnapshot"),
    } <= all_calls()


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_call_matches_the_model(path):
    assert CHECKED[path].problems == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_paginated_listings_read_every_page(path):
    unexplained = CHECKED[path].single_page - set(ONE_CALL_READS_ALL)
    assert unexplained == set(), "call these through get_paginator (or list them in ONE_CALL_READS_ALL with the reason)"


def test_the_checker_catches_what_it_claims_to(tmp_path):
    """A wrong parameter, a missing required member, a bad enum, a key not in the response, a
    nested member that does not exist and a single-page listing are all reported."""
    source = tmp_path / "wrong.py"
    source.write_text(
        "def f(ec2, batch):\n"
        "    ec2.purchase_capacity_block(CapacityBlockOfferingId='x', InstancePlatform='Windows 95', Tag=[])\n"
        "    ec2.describe_capacity_block_offerings(CapacityDurationHours=24)['Offerings']\n"
        "    r = ec2.describe_capacity_reservations(Filters=[{'Name': 'a', 'Valuez': ['b']}])\n"
        "    for item in r['CapacityReservations']:\n"
        "        item['Size']\n"
        "    batch.terminate_job(jobId='j')\n"
        "    return [o['Price'] for o in all_items(ec2, 'describe_capacity_block_extension_offerings', 'CapacityBlockExtensionOfferings')]\n"
        "def block_offering(o):\n"
        "    return o.get('Fee')\n"
    )
    found = "\n".join(Checker(source).check().problems)
    for expected in (
        "has no parameter Tag",
        "'Windows 95' is not one of",
        "reads 'Offerings'",
        "no member 'Valuez'",
        "reads 'Size'",
        "misses required ['reason']",
        "reads 'Price'",
        "reads 'Fee'",
        "DescribeCapacityBlockExtensionOfferings misses required",
    ):
        assert expected in found, found
    assert Checker(source).check().single_page == {
        ("ec2", "DescribeCapacityBlockOfferings"),
        ("ec2", "DescribeCapacityReservations"),
    }


# --- data read from one call and sent to another -------------------------------------------------


def test_a_described_job_is_resubmitted_within_the_submit_request():
    from gpu_governance_runtime.capacity.requeue import copy_request

    batch = model("batch")
    job = example(batch.operation_model("DescribeJobs").output_shape.members["jobs"].member)
    assert problems(copy_request(job), batch.operation_model("SubmitJob").input_shape) == ""


def test_a_described_instance_group_is_sent_back_within_the_update_request():
    from gpu_governance_runtime.hyperpod_cluster import SPECIFICATION_SHAPE, specification

    sagemaker = model("sagemaker")
    group = example(sagemaker.operation_model("DescribeCluster").output_shape.members["InstanceGroups"].member)
    shape = sagemaker.shape_for(SPECIFICATION_SHAPE)
    assert problems(specification(group, shape), shape) == ""


# --- what each function checks at cold start ------------------------------------------------------


def _calls_in(*modules: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path, checker in CHECKED.items():
        relative = path.relative_to(RUNTIME).as_posix() if RUNTIME in path.parents else ""
        if any(relative == m or relative.startswith(m + "/") for m in modules):
            for service, name in checker.calls:
                found.setdefault(service, set()).add(name)
    return found


@pytest.mark.parametrize(
    "handler, modules",
    [
        (
            "gpu_governance_runtime.capacity.handler",
            ("capacity", "planners/kinds", "hyperpod_cluster.py", "slurm/ssm.py", "common/batch_copy.py", "quotas.py"),
        ),
        (
            "gpu_governance_runtime.reclaim.handler",
            (
                "reclaim",
                "backends",
                "common/action_ledger.py",
                "slurm/ssm.py",
                "raised_guarantees.py",
                "common/batch_copy.py",
                "quotas.py",
            ),
        ),
        ("gpu_governance_runtime.dedicated_nodes", ("dedicated_nodes.py", "hyperpod_cluster.py")),
        ("gpu_governance_runtime.guard.handler", ("guard", "common/action_ledger.py")),
    ],
)
def test_each_function_declares_exactly_the_operations_its_code_calls(handler, modules, monkeypatch):
    import importlib

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

    declared = importlib.import_module(handler).REQUIRED_OPERATIONS
    assert {s: set(ops) for s, ops in declared.items()} == _calls_in(*modules)


@pytest.mark.parametrize("name", list(KINDS))
def test_each_capacity_kind_declares_exactly_the_operations_its_module_calls(name):
    assert {s: set(ops) for s, ops in KINDS[name].operations.items()} == _calls_in(f"planners/kinds/{name}.py")


def test_a_runtime_boto3_without_an_operation_stops_the_function_loudly(capsys):
    from gpu_governance_runtime import api_check

    old = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    required = {"ec2": ("PurchaseCapacityBlock", "PurchaseCapacityBlockFromTheFuture")}
    with pytest.raises(RuntimeError, match="lacks ec2:PurchaseCapacityBlockFromTheFuture"):
        api_check.require({"ec2": old}, required, namespace="GpuGovernance/Capacity")
    log, metric = [line for line in capsys.readouterr().out.splitlines() if line]
    assert '"level": "ERROR"' in log and "ec2:PurchaseCapacityBlockFromTheFuture" in log
    assert '"MissingApiOperations": 1' in metric and "GpuGovernance/Capacity" in metric
    api_check.require({"ec2": old}, {"ec2": ("PurchaseCapacityBlock",)}, namespace="x")  # all there: silent
