"""Hostile values in every string field of a governance file that reaches a script, a Kubernetes
manifest, an IAM policy or a resource name: each is refused (exit 2, one line per problem naming
the field, no traceback) or, where the field's pattern lets it through, rendered inert.

Generated, not hand-written: every field below x every payload x three placements (alone,
appended, inserted in the middle of a valid value).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from constructs_lib.backends.hyperpod_eks import kubernetes
from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model import GovernanceModel, KubernetesTenancy
from constructs_lib.model.loader import default_config_text
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm import SlurmPlan, render_apply_script
from tests.foundation.org import synthesize_reference

ROOT = Path(__file__).resolve().parents[2]


def _base_data() -> dict[str, Any]:
    """The reference organisation plus what it leaves out: guardrails, a Slurm cluster ARN, and a
    capacity window of every feed kind, so that every string field has a valid value to attack."""
    data = yaml.safe_load(default_config_text())
    data["guardrails"] = {
        "management_account": {"account_id": "999988887777", "region": "us-east-1"},
        "target_ids": ["ou-abcd-12345678"],
        "exempt_principals": ["arn:aws:iam::111122223333:role/BreakGlass"],
        "tag_enforced_for": ["batch:job"],
    }
    data["pools"][3]["cluster_arn"] = "arn:aws:sagemaker:us-east-1:111122223333:cluster/slurm1234567"
    data["shared_image_repositories"] = ["arn:aws:ecr:us-east-1:111122223333:repository/base/pytorch"]
    window = data["capacity_windows"][0]
    window["availability_zones"] = ["us-east-1a"]
    common = {k: window[k] for k in ("team", "start", "duration_hours", "max_price_per_instance_hour", "budget")}
    data["capacity_windows"] += [
        {
            **common,
            "name": "batch-ce",
            "instance_type": "g6e.12xlarge",
            "instance_count": 1,
            "feeds": {
                "kind": "batch_compute_environment",
                "launch_template_name": "gpu-launch",
                "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-g6e",
                "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
                "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
            },
        },
        {
            **common,
            "name": "eks-ng",
            "instance_type": "g6e.12xlarge",
            "instance_count": 1,
            "feeds": {
                "kind": "eks_node_group",
                "launch_template_name": "gpu-launch",
                "cluster_name": "acme-eks",
                "nodegroup_name": "gpu-nodes",
            },
        },
        {
            **common,
            "name": "hp-ig",
            "instance_type": "ml.p5.48xlarge",
            "instance_count": 1,
            "feeds": {"kind": "hyperpod_instance_group", "pool": "hyperpod-slurm", "instance_group": "research-window"},
        },
    ]
    return data


BASE = _base_data()


def base_data() -> dict[str, Any]:
    return copy.deepcopy(BASE)


class Key(str):
    """The last step of a field's location is a mapping key (the value is the key's name)."""


# Every string field of the governance file: its location in base_data() and the path the
# one-line message names (for a mapping key, the mapping's path).
FIELDS: dict[str, tuple[Any, ...]] = {
    "organisation": ("organisation",),
    "capacity_account.account_id": ("capacity_account", "account_id"),
    "capacity_account.region": ("capacity_account", "region"),
    "consumer_accounts": ("consumer_accounts", Key("research")),
    "consumer_accounts.product.account_id": ("consumer_accounts", "product", "account_id"),
    "consumer_accounts.product.region": ("consumer_accounts", "product", "region"),
    "platform_admins[0]": ("platform_admins", 0),
    "priority_classes[0].name": ("priority_classes", 0, "name"),
    "pools[0].name": ("pools", 0, "name"),
    "pools[0].capacity": ("pools", 0, "capacity", Key("ml.p5.48xlarge")),
    "pools[1].name": ("pools", 1, "name"),
    "pools[1].capacity": ("pools", 1, "capacity", Key("g6e.12xlarge")),
    "pools[1].compute_environments[0]": ("pools", 1, "compute_environments", 0),
    "pools[2].cluster_arn": ("pools", 2, "cluster_arn"),
    "pools[2].eks_cluster_name": ("pools", 2, "eks_cluster_name"),
    "pools[2].kubernetes_version": ("pools", 2, "kubernetes_version"),
    "pools[3].name": ("pools", 3, "name"),
    "pools[3].cluster_name": ("pools", 3, "cluster_name"),
    "pools[3].cluster_arn": ("pools", 3, "cluster_arn"),
    "pools[3].gpus_per_instance": ("pools", 3, "gpus_per_instance", Key("ml.p5.48xlarge")),
    "teams[0].name": ("teams", 0, "name"),
    "teams[0].account": ("teams", 0, "account"),
    "teams[0].preset": ("teams", 0, "preset"),
    "teams[0].members[0]": ("teams", 0, "members", 0),
    "teams[0].quotas": ("teams", 0, "quotas", Key("sagemaker-training")),
    "teams[0].quotas.sagemaker-training": ("teams", 0, "quotas", "sagemaker-training", Key("ml.p5.48xlarge")),
    "teams[0].kubernetes": ("teams", 0, "kubernetes", Key("hyperpod-eks")),
    "teams[2].kubernetes.hyperpod-eks.dedicated_instance_groups[0]": (
        "teams",
        2,
        "kubernetes",
        "hyperpod-eks",
        "dedicated_instance_groups",
        0,
    ),
    "capacity_windows[0].name": ("capacity_windows", 0, "name"),
    "capacity_windows[0].instance_type": ("capacity_windows", 0, "instance_type"),
    "capacity_windows[0].mode": ("capacity_windows", 0, "mode"),
    "capacity_windows[0].availability_zones[0]": ("capacity_windows", 0, "availability_zones", 0),
    "capacity_windows[0].feeds.pool": ("capacity_windows", 0, "feeds", "pool"),
    "capacity_windows[1].feeds.launch_template_name": ("capacity_windows", 1, "feeds", "launch_template_name"),
    "capacity_windows[1].feeds.compute_environment": ("capacity_windows", 1, "feeds", "compute_environment"),
    "capacity_windows[2].feeds.cluster_name": ("capacity_windows", 2, "feeds", "cluster_name"),
    "capacity_windows[2].feeds.nodegroup_name": ("capacity_windows", 2, "feeds", "nodegroup_name"),
    "capacity_windows[3].feeds.instance_group": ("capacity_windows", 3, "feeds", "instance_group"),
    "guardrails.management_account.account_id": ("guardrails", "management_account", "account_id"),
    "guardrails.target_ids[0]": ("guardrails", "target_ids", 0),
    "guardrails.exempt_principals[0]": ("guardrails", "exempt_principals", 0),
    "guardrails.tag_enforced_for[0]": ("guardrails", "tag_enforced_for", 0),
    "shared_image_repositories[0]": ("shared_image_repositories", 0),
}

PAYLOADS: dict[str, str] = {
    "command-substitution": "$(touch /tmp/gg-pwned)",
    "backticks": "`touch /tmp/gg-pwned`",
    "semicolon": ";touch /tmp/gg-pwned",
    "and": "&&id",
    "pipe": "|id",
    "newline": "\ntouch /tmp/gg-pwned",
    "trailing-newline": "\n",
    "carriage-return": "\r",
    "nul": "\x00",
    "tab": "\t",
    "space": " x",
    "quotes": "'\"",
    "glob": "*",
    "question-mark": "?",
    "brackets": "[a-z]",
    "redirect": ">/etc/passwd",
    "variable": "${HOME}",
    "traversal": "/../../etc",
    "dot-dot": "..",
    "leading-dash": "-rf",
    "very-long": "a" * 1000,
    "accented": "é",
    "full-width-digit": "１",
    "arabic-indic-digit": "٣",
    "zero-width-space": "\u200b",
    "right-to-left-override": "\u202e",
    "emoji": "\U0001f680",
}

# What a value that passes validation may consist of: no shell, YAML or Slurm metacharacter, no
# whitespace or control character, ASCII only, and no longer than the longest pattern allows.
INERT = re.compile(r"[A-Za-z0-9._:/@+=,()-]{1,600}")
# Fields whose pattern admits more, and why that is still inert: the exempt principal ARN is only
# ever a JSON string in a service control policy condition (ArnNotLike), where '*' is a wildcard.
EXTRA_INERT = {"guardrails.exempt_principals[0]": "*"}


def placements(base: str, payload: str) -> list[str]:
    middle = len(base) // 2
    return [payload, base + payload, base[:middle] + payload + base[middle:]]


def with_value(data: dict[str, Any], location: tuple[Any, ...], value: str) -> dict[str, Any]:
    data = copy.deepcopy(data)
    *parents, last = location
    holder = data
    for step in parents:
        holder = holder[step]
    if isinstance(last, Key):
        holder[value] = holder.pop(last)
    else:
        holder[last] = value
    return data


def base_value(location: tuple[Any, ...]) -> str:
    *parents, last = location
    holder = base_data()
    for step in parents:
        holder = holder[step]
    return str(last) if isinstance(last, Key) else holder[last]


def problems_of(data: dict[str, Any]) -> tuple[Problem, ...]:
    try:
        GovernanceModel.from_dict(data)
    except GovernanceError as error:
        return error.problems
    return ()


def validate(tmp_path: Path, data: dict[str, Any], capsys) -> tuple[int, str]:
    """`gpu-governance validate` on the data written as a UTF-8 file (JSON, which is YAML)."""
    config = tmp_path / "governance.yaml"
    config.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    code = main(["validate", "--config", str(config)])
    return code, capsys.readouterr().err


def test_the_base_organisation_is_valid(tmp_path, capsys) -> None:
    assert validate(tmp_path, base_data(), capsys) == (0, "")


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", FIELDS)
def test_every_field_refuses_or_only_takes_inert_values(field: str, payload: str, tmp_path, capsys) -> None:
    location = FIELDS[field]
    extra = re.escape(EXTRA_INERT.get(field, ""))
    for value in placements(base_value(location), payload):
        data = with_value(BASE, location, value)
        problems = problems_of(data)
        named = [p for p in problems if p.path.startswith(field)]
        if not named:
            # The field took the value (a reference elsewhere may still miss it): it must be inert.
            assert re.fullmatch(rf"[A-Za-z0-9._:/@+=,(){extra}-]{{1,600}}", value), f"{field} accepted {value!r}"
        # One line per problem: neither a value nor a mapping key with a newline splits one.
        assert all(len(str(p).splitlines()) == 1 for p in problems), problems
    # The command line says the same, exits 2 and prints no traceback (last placement).
    code, err = validate(tmp_path, data, capsys)
    assert (code, err.splitlines()) == (
        (2, ["gpu-governance validate: invalid input", *map(str, problems)]) if problems else (0, [])
    )


@pytest.mark.parametrize(
    "payload", ["/", "/fsx/../etc", "/fsx/teams$(reboot)", "/fsx/teams\n", "/etc", "/fsx/" + "a" * 300, "/fsx/tëams"]
)
def test_slurm_data_root_is_refused_by_the_command_line(payload: str) -> None:
    """Through a real process: exit 2, the one-line message, no traceback."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "constructs_lib.cli",
            "slurm",
            "script",
            "--example",
            "--pool",
            "hyperpod-slurm",
            "--data-root",
            payload,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == "gpu-governance slurm: invalid input"
    assert result.stderr.splitlines()[1].startswith("data_root: ") and len(result.stderr.splitlines()) == 2
    assert "Traceback" not in result.stderr


# --- rendered inert: the Slurm apply script ------------------------------------------------------

CANARY_PAYLOADS = {
    "command-substitution": "$(touch {canary})",
    "backticks": "`touch {canary}`",
    "semicolon": ";touch {canary};",
    "newline": "\ntouch {canary}\n",
    "single-quote": "'$(touch {canary})'",
    "double-quote": '"$(touch {canary})"',
    "backslash-newline": "\\\ntouch {canary}",
    "glob-and-variable": "* ${{HOME}} $0 !!",
}

STUBBED = (
    "gg_begin",
    "gg_group",
    "gg_data_path",
    "gg_load_node_map",
    "gg_qos",
    "gg_qos_preempts",
    "gg_account",
    "gg_user",
    "gg_remove_undeclared",
    "gg_setting",
    "gg_partition",
    "gg_write_fragment",
    "gg_check_restart_settings",
    "gg_end",
)


END = "<<end-of-call>>"


def run_with_stubs(script: str, tmp_path: Path) -> list[list[str]]:
    """Run a generated script with every gg_* function replaced by one that records its
    arguments (NUL-separated), so what each call receives is what bash parsed, not what we hope."""
    record = tmp_path / "calls"
    stubs = "".join(f"{name}() {{ printf '%s\\0' {name} \"$@\" '{END}' >>{record}; }}\n" for name in STUBBED)
    stubs += f"gg_begin() {{ printf '%s\\0' gg_begin \"$GG_ORGANISATION\" \"$GG_MARKER\" '{END}' >>{record}; }}\n"
    library_start = script.index("# Functions of the generated governance script")
    library_end = script.index('for arg in "$@"; do')
    stubbed = script[:library_start] + stubs + script[library_end:]
    result = subprocess.run(
        ["bash", "-c", stubbed, "apply"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "GG_FRAGMENT": str(tmp_path / "fragment")},
    )
    assert result.returncode == 0, result.stderr
    calls = record.read_bytes().decode().split(f"{END}\0")
    return [call.split("\0")[:-1] for call in calls if call]


def strings_of(plan: Any) -> set[str]:
    """Every string the plan carries (names, members, paths)."""
    if isinstance(plan, str):
        return {plan}
    if is_dataclass(plan):
        return set().union(*(strings_of(getattr(plan, f.name)) for f in fields(plan)))
    if isinstance(plan, tuple):
        return set().union(set(), *(strings_of(item) for item in plan))
    return set()


def poisoned(plan: Any, payload: str) -> Any:
    """The plan with the payload appended to every string it carries, consistently, so that
    references between its objects still hold."""
    if isinstance(plan, str):
        return plan + payload
    if is_dataclass(plan):
        return replace(plan, **{f.name: poisoned(getattr(plan, f.name), payload) for f in fields(plan)})
    if isinstance(plan, tuple):
        return tuple(poisoned(item, payload) for item in plan)
    return plan


def assert_inert(plan: SlurmPlan, tmp_path: Path, canary: Path | None = None) -> None:
    script = render_apply_script(plan)
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    calls = run_with_stubs(script, tmp_path)
    if canary is not None:
        assert not canary.exists(), "a value was executed"
    arguments = {argument for call in calls for argument in call[1:]}
    # Every string of the plan reached a function as one whole argument (or, for QoS and account
    # lists, as one item of a comma list), never split, expanded or executed.
    items = arguments | {item for argument in arguments for item in argument.split(",")}
    assert strings_of(plan) <= items, strings_of(plan) - items
    assert ["gg_begin", plan.organisation, f"gpu-governance:{plan.organisation}"] in calls


@pytest.fixture(scope="module")
def reference_plan() -> SlurmPlan:
    return slurm_plan(GovernanceModel.from_dict(base_data()), "hyperpod-slurm")


@pytest.mark.parametrize("payload", CANARY_PAYLOADS.values(), ids=CANARY_PAYLOADS.keys())
def test_the_apply_script_quotes_every_value_even_past_validation(reference_plan, payload: str, tmp_path) -> None:
    """Defence in depth: the renderer alone makes any string inert, whatever validation let by."""
    canary = tmp_path / "pwned"
    assert_inert(poisoned(reference_plan, payload.format(canary=canary)), tmp_path, canary)


def test_hostile_but_valid_names_stay_inert_in_the_apply_script(tmp_path) -> None:
    """Values validation accepts that look like something else: numbers, booleans, dashes, a
    member name full of ARN punctuation, a data root with a dash- and dot-led segment."""
    data = base_data()
    names = {"research": "0", "training": "true", "production": "x--1e3"}
    for team in data["teams"]:
        team["name"] = names[team["name"]]
    for window in data["capacity_windows"]:
        window["team"] = names[window["team"]]
    data["teams"][0]["members"] = ["arn:aws:iam::444455556666:role/ml+ops/a+b=c,d.e@f_g"]
    data["organisation"] = "null"
    plan = slurm_plan(GovernanceModel.from_dict(data), "hyperpod-slurm", data_root="/fsx/-rf/.x")
    assert {"0", "true", "x--1e3", "a-b-c-d-e-f_g", "/fsx/-rf/.x/0"} <= strings_of(plan)
    assert_inert(plan, tmp_path)


# --- rendered inert: Kubernetes manifests --------------------------------------------------------

# Valid team names that YAML 1.1 or JSON readers could take for booleans, nulls or numbers.
YAML_LOOKALIKES = [
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "null",
    "0",
    "123",
    "1e3",
    "0x1f",
    "0o17",
    "nan",
    "inf",
    "1-2",
]


@pytest.mark.parametrize("team", YAML_LOOKALIKES)
def test_manifests_keep_lookalike_names_as_strings(team: str) -> None:
    GovernanceModel.from_dict(with_value(base_data(), ("teams", 0, "name"), team))  # valid, so it must be inert
    objects = kubernetes.team_objects(
        team, KubernetesTenancy(gpu_quota=8, dedicated_instance_groups=("research-p5",)), ("urgent",)
    )
    # CDK ships manifests as JSON; kubectl reads them as YAML. Either way the values stay strings.
    assert yaml.safe_load(json.dumps(objects)) == objects
    assert yaml.safe_load(yaml.safe_dump(objects)) == objects
    for manifest in objects:
        labels = manifest["metadata"].get("labels", {})
        assert all(isinstance(value, str) for value in labels.values())
        assert labels.get("gpu-governance/team", team) == team


# --- rendered inert: policies and resource names -------------------------------------------------

# Limits AWS sets on the names the library derives from the governance file.
NAME_LIMITS = {
    ("AWS::Batch::SchedulingPolicy", "Name"): 128,
    ("AWS::Batch::JobQueue", "JobQueueName"): 128,
    ("AWS::Batch::ServiceEnvironment", "ServiceEnvironmentName"): 128,
    ("AWS::Batch::QuotaShare", "QuotaShareName"): 128,
    ("AWS::IAM::Role", "RoleName"): 64,
    ("AWS::IAM::Policy", "PolicyName"): 128,
    ("AWS::KMS::Alias", "AliasName"): 256,
    ("AWS::SageMaker::ComputeQuota", "Name"): 63,
    ("AWS::CloudWatch::Dashboard", "DashboardName"): 255,
    ("AWS::Organizations::Policy", "Name"): 128,
    ("AWS::ECR::Repository", "RepositoryName"): 256,
    ("AWS::SSM::Parameter", "Name"): 1011
    - len("arn:aws:ssm:us-east-1:111122223333:parameter"),  # the limit counts the whole ARN
}
# A member ARN with every punctuation mark the pattern admits, and a path.
ODD_MEMBER = "arn:aws:iam::444455556666:role/ml+ops=a,b.c@d_e-f/Odd+Name=x,y.z@w_v-u"


def longest(model_class: type, field: str) -> int:
    """The longest value a name field admits, read from the field itself."""
    return next(m.max_length for m in model_class.model_fields[field].metadata if getattr(m, "max_length", None))


def longest_organisation() -> dict[str, Any]:
    """The base organisation with every name at the longest its fields (and Slurm, HyperPod)
    allow, and members full of ARN punctuation."""
    from constructs_lib.backends.hyperpod_slurm.layout import GROUP_PREFIX
    from constructs_lib.model import PriorityClass, Team
    from constructs_lib.model.capacity import CapacityWindow
    from constructs_lib.model.pools import BasePool as Pool

    data = base_data()
    data["organisation"] = "o" * longest(GovernanceModel, "organisation")
    data["priority_classes"][0]["name"] = "c" * longest(PriorityClass, "name")
    pools = {}
    for pool in data["pools"]:
        pools[pool["name"]] = (pool["name"] + "-" + "p" * 200)[: longest(Pool, "name")]
        pool["name"] = pools[pool["name"]]
    # Every team has a Slurm quota here, and gg-<team> is an OS group of at most 32 characters.
    team_length = min(longest(Team, "name"), 32 - len(GROUP_PREFIX))
    teams = {}
    for index, team in enumerate(data["teams"]):
        teams[team["name"]] = (team["name"] + "-" * team_length)[: team_length - 1] + str(index)
        team["name"] = teams[team["name"]]
        team["quotas"] = {pools[name]: quota for name, quota in team["quotas"].items()}
        team["kubernetes"] = {pools[name]: settings for name, settings in team.get("kubernetes", {}).items()}
        team["members"].append(ODD_MEMBER.replace("Odd", f"Odd{index}"))
    for window in data["capacity_windows"]:
        window["name"] = (window["name"][:2] + "w" * 100)[: longest(CapacityWindow, "name")]
        window["team"] = teams[window["team"]]
        if window["feeds"].get("pool"):
            window["feeds"]["pool"] = pools[window["feeds"]["pool"]]
    return data


@pytest.fixture(scope="module")
def longest_app(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    model = GovernanceModel.from_dict(longest_organisation())
    synthesize_reference(model, outdir)
    return model, {path.name: json.loads(path.read_text()) for path in outdir.glob("*.template.json")}


def test_the_longest_valid_names_fit_every_name_derived_from_them(longest_app) -> None:
    _, templates = longest_app
    seen = set()
    for template in templates.values():
        for resource in template["Resources"].values():
            for (kind, name_property), limit in NAME_LIMITS.items():
                value = resource["Properties"].get(name_property) if resource["Type"] == kind else None
                if isinstance(value, str):
                    seen.add((kind, name_property))
                    assert len(value) <= limit, (kind, value)
    assert seen == set(NAME_LIMITS)


def test_policies_carry_hostile_but_valid_values_verbatim_and_lint_clean(longest_app) -> None:
    from cfnlint.api import lint

    model, templates = longest_app
    for name, template in templates.items():
        errors = [str(m) for m in lint(json.dumps(template), regions=["us-east-1"]) if m.rule.id.startswith("E")]
        assert errors == [], name
    principals = json.dumps(
        [  # members are matched in the trust's aws:PrincipalArn condition
            s.get("Condition")
            for t in templates.values()
            for r in t["Resources"].values()
            if r["Type"] == "AWS::IAM::Role"
            for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        ]
    )
    for team in model.teams:
        assert json.dumps(team.members[-1]) in principals  # a whole JSON string, unchanged
