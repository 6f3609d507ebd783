"""The limits estimate (constructs_lib/organisation/limits.py) against real synthesis, and every limit refused
early with the usual one-line message, before anything is synthesized."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from constructs_lib.backends.batch_fair_share import MAX_SHARES_PER_FAIR_SHARE_QUEUE
from constructs_lib.backends.batch_quota_share import MAX_SHARES_PER_QUOTA_QUEUE
from constructs_lib.cli import main as cli_main
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.limits import (
    MARGIN,
    MAX_RESOURCES,
    MAX_TEMPLATE_BYTES,
    RECLAIM_DASHBOARD_WIDGETS,
    SHARED_PER_POOL,
    check_assembly,
    check_model,
    check_template,
    estimate,
    shared_resources,
    submission_role_policies,
    team_resources,
)

from .generate import organisation

ROOT = Path(__file__).resolve().parents[2]


def model_of(data: dict) -> GovernanceModel:
    return GovernanceModel.from_dict(data)


def without_slurm(data: dict) -> dict:
    """The organisation without its Slurm pool, whose own naming rules (POSIX user names, group
    ids) would refuse the extreme inputs these tests need first."""
    data["pools"] = [p for p in data["pools"] if p["backend"] != "hyperpod_slurm"]
    for t in data["teams"]:
        t["quotas"].pop("hyperpod-slurm", None)
    return data


def run_app(tmp_path: Path, data: dict) -> subprocess.CompletedProcess:
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}), "CDK_OUTDIR": str(tmp_path / "out")}
    env.pop("GPU_GOVERNANCE_CONFIG", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def small_per_team(tmp_path_factory):
    """Five teams on every backend, one stack each, synthesized by app.py (packs included)."""
    tmp = tmp_path_factory.mktemp("small")
    data = organisation(5)
    data["teams"][1]["members"].append("arn:aws:iam::111122223333:role/InClusterAccount")  # a second access entry
    result = run_app(tmp, data)
    assert result.returncode == 0, result.stderr[-3000:]
    return model_of(data), tmp / "out"


def resources_by_stack(outdir: Path) -> dict[str, int]:
    return {
        p.name.removesuffix(".template.json"): len(json.loads(p.read_text()).get("Resources", {}))
        for p in outdir.glob("*.template.json")
    }


def test_estimate_covers_every_stack_of_a_synthesis(small_per_team):
    model, outdir = small_per_team
    actual = resources_by_stack(outdir)
    for stack in estimate(model):
        assert actual[stack.name] <= stack.resources, stack
        assert (outdir / f"{stack.name}.template.json").stat().st_size <= stack.template_bytes, stack
        assert stack.resources <= actual[stack.name] * 2, f"estimate of {stack.name} is no longer derived from the code"


def test_per_team_counts_match_the_team_stacks(small_per_team):
    """The per-backend counts are what one team stack holds; tenant-isolation work that adds a
    resource per team fails here first, and the margin (MARGIN) covers it meanwhile."""
    model, outdir = small_per_team
    actual = resources_by_stack(outdir)
    for t in model.teams:
        synthesized = actual[f"{model.organisation}-team-{t.name}"]
        assert team_resources(model, t) <= synthesized <= team_resources(model, t) * MARGIN, t.name
    assert actual[f"{model.organisation}-capacity"] <= shared_resources(model) * MARGIN


def test_submission_role_policies_are_counted_as_synthesized(small_per_team):
    """validate's count of managed policies on a submission role is what the synthesized team
    stack attaches."""
    model, outdir = small_per_team
    template = json.loads((outdir / "scale-ml-team-team-000.template.json").read_text())
    role = next(
        lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role" and "SubmissionRole" in lid
    )
    attached = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and {"Ref": role} in r["Properties"].get("Roles", [])
    ]
    assert len(attached) == submission_role_policies(model, model.teams[0])


def test_synthesized_templates_pass_the_post_synthesis_check(small_per_team):
    assert check_assembly(small_per_team[1]) == []


def test_single_layout_too_large_is_refused_before_synthesis_with_exit_2(tmp_path):
    data = organisation(30, stack_layout="single")
    problems = check_model(model_of(data))
    assert any(
        p.path == "stack_layout" and f"at most {MAX_RESOURCES}" in p.allowed and "per_team" in p.allowed
        for p in problems
    )
    result = run_app(tmp_path, data)
    assert result.returncode == 2
    assert "stack_layout: stack scale-ml-capacity would hold about" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "manifest.json").exists()


def test_validate_reports_the_limit_before_any_synthesis(tmp_path, capsys):
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump(organisation(30, stack_layout="single")))
    assert cli_main(["validate", "--config", str(config)]) == 2
    assert "would hold about" in capsys.readouterr().err
    config.write_text(yaml.safe_dump(organisation(30)))
    assert cli_main(["validate", "--config", str(config)]) == 0
    assert "stack layout per_team: 31 capacity-account stacks" in capsys.readouterr().out


def test_team_names_that_cannot_name_a_stack_are_refused_with_per_team():
    data = organisation(5)
    data["teams"][1]["name"] = "team_one"
    for pool in ("hyperpod-eks", "hyperpod-slurm"):  # HyperPod wants DNS labels anyway
        del data["teams"][1]["quotas"][pool]
    del data["teams"][1]["kubernetes"]
    assert [str(p) for p in check_model(model_of(data))] == [
        "teams[1].name: not usable in a stack name (stack_layout per_team) ('team_one') - letters, digits and '-'"
    ]
    data["stack_layout"] = "single"
    assert check_model(model_of(data)) == []


def test_too_many_members_for_a_trust_policy_are_refused():
    data = without_slurm(organisation(5))
    data["teams"][0]["members"] = [
        f"arn:aws:iam::400000000000:role/ResearchScientistsOfTheLongNamedDepartment{i:03d}" for i in range(40)
    ]
    (problem,) = check_model(model_of(data))
    assert problem.path == "teams[0].members" and "trust policy" in problem.wrong and problem.value > 2048


def test_too_many_pools_for_one_role_are_refused():
    data = without_slurm(organisation(5))
    extra = [
        {"name": f"extra-{i}", "backend": "batch_quota_share", "capacity": {"ml.p5.48xlarge": 1}} for i in range(6)
    ]
    data["pools"] += extra
    data["teams"][0]["quotas"].update({p["name"]: {"ml.p5.48xlarge": 1} for p in extra})
    problems = check_model(model_of(data))
    assert [(p.path, p.value) for p in problems] == [("teams[0].quotas", 13)]  # 3 + 9 pools + its dashboard's


def test_a_thousand_teams_pass_validate_with_every_stack_within_cloudformation_limits():
    """The model-side computation for 1,000 teams (the full synthesis is benchmarks/synth_scale.py
    --teams 1000, too slow for the test suite). Before: the reclaim dashboard (2,000 widgets,
    3 MB in the capacity stack) and a Slurm group id collision were refused."""
    model = model_of(organisation(1000))
    assert check_model(model) == []
    stacks = estimate(model)
    assert len(stacks) == 1001
    assert all(s.resources <= MAX_RESOURCES and s.template_bytes <= MAX_TEMPLATE_BYTES for s in stacks)
    # the capacity stack grows by the pools (a quota-share queue per 20 teams), not by each team
    grown = shared_resources(model_of(organisation(1000 + MAX_SHARES_PER_QUOTA_QUEUE))) - shared_resources(model)
    assert grown == SHARED_PER_POOL["batch_quota_share"]


def test_the_reclaim_controllers_policy_does_not_grow_with_the_fair_share_teams():
    """It named every fair-share team: 500 teams of 40 characters were refused (24,000 characters
    estimated, IAM allows 10,240 inline per role); now only the Batch pools' queues count."""
    data = without_slurm(organisation(MAX_SHARES_PER_FAIR_SHARE_QUEUE))
    for t in data["teams"]:
        t["name"] = t["name"].replace("team-", "research-and-development-group-00000-")
    assert max(len(t["name"]) for t in data["teams"]) == 40
    model = model_of(data)
    assert len(model.teams_in("ec2-gpu")) == MAX_SHARES_PER_FAIR_SHARE_QUEUE
    assert not [p for p in check_model(model) if "reclaim controller" in p.wrong]


def test_validate_refuses_a_fair_share_pool_of_more_teams_than_batch_share_identifiers(tmp_path, capsys):
    """One line naming the pool, the count and the limit; exit 2. The generator stops at the limit."""
    data = without_slurm(organisation(MAX_SHARES_PER_FAIR_SHARE_QUEUE + 1))
    assert len(model_of(data).teams_in("ec2-gpu")) == MAX_SHARES_PER_FAIR_SHARE_QUEUE
    data["teams"][-1]["quotas"]["ec2-gpu"] = {"g6e.12xlarge": 1}
    next(p for p in data["pools"] if p["name"] == "ec2-gpu")["capacity"] = {
        "g6e.12xlarge": MAX_SHARES_PER_FAIR_SHARE_QUEUE + 1
    }
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    assert cli_main(["validate", "--config", str(config)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "fair-share identifiers" in line]
    assert len(lines) == 1 and "pool ec2-gpu's Batch job queue (501) - at most 500" in lines[0], lines


def test_the_reclaim_controllers_policy_is_still_checked_by_its_queues(monkeypatch):
    import constructs_lib.organisation.limits as limits

    monkeypatch.setattr(limits, "MAX_INLINE_CHARACTERS_PER_ROLE", limits.RECLAIM_POLICY_BASE + 100)
    problems = [p for p in check_model(model_of(organisation(100))) if "reclaim controller" in p.wrong]
    assert [(p.path, p.allowed) for p in problems] == [
        ("pools", f"at most {limits.RECLAIM_POLICY_BASE + 100} inline per role")
    ]


def test_the_reclaim_dashboards_are_still_checked_per_pool(monkeypatch):
    import constructs_lib.organisation.limits as limits

    monkeypatch.setattr(limits, "MAX_DASHBOARD_WIDGETS", 7)
    model = model_of(organisation(5))
    problems = [p for p in check_model(model) if "dashboard" in p.wrong]
    assert {p.path for p in problems} == {
        f"pools[{i}]" for i, pool in enumerate(model.pools) if pool.backend in ("batch_quota_share", "batch_fair_share")
    }
    assert all("widgets" in p.wrong and p.value == 8 for p in problems)


def test_one_reclaim_dashboard_per_pool_sized_as_validate_counts_and_naming_no_team(small_per_team):
    model, outdir = small_per_team
    template = json.loads((outdir / f"{model.organisation}-capacity.template.json").read_text())
    bodies = {
        r["Properties"]["DashboardName"]: json.dumps(r["Properties"]["DashboardBody"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Dashboard"
    }
    reclaim = {
        name.removeprefix(f"{model.organisation}-gpu-reclaim-"): body
        for name, body in bodies.items()
        if "-gpu-reclaim-" in name
    }
    governed = {p.name: p.backend for p in model.pools if p.backend in RECLAIM_DASHBOARD_WIDGETS}
    # every Batch pool; a HyperPod EKS pool when the controller observes it (the reference organisation's does)
    assert {p for p, backend in governed.items() if backend.startswith("batch_")} <= set(reclaim) <= set(governed)
    for pool, body in reclaim.items():
        assert body.count('\\"type\\":') == RECLAIM_DASHBOARD_WIDGETS[governed[pool]], pool
        assert not any(t.name in body for t in model.teams), pool  # a search draws the teams: no growth per team


def test_guardrail_documents_are_measured_by_validate():
    data = organisation(5)
    data["guardrails"] = {
        "management_account": {"account_id": "999999999999", "region": "us-east-1"},
        "target_ids": ["r-abcd"],
        "exempt_principals": [
            f"arn:aws:iam::111122223333:role/BreakGlassRole{i:03d}WithAVeryLongNameForTheAuditors" for i in range(100)
        ],
    }
    assert any(p.path == "guardrails" and "service control policy" in p.wrong for p in check_model(model_of(data)))


def _role(managed: int = 0, members: int = 1) -> dict:
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {"Principal": {"AWS": [f"arn:aws:iam::111122223333:role/r{i:060d}" for i in range(members)]}}
                ]
            },
            "ManagedPolicyArns": [f"arn:aws:iam::aws:policy/P{i}" for i in range(managed)],
        },
    }


def test_post_synthesis_check_finds_each_limit():
    resources = {f"R{i}": {"Type": "AWS::SNS::Topic"} for i in range(501)}
    resources["Crowded"] = _role(managed=9)
    resources["Trusting"] = _role(members=40)
    resources["Extra1"] = {
        "Type": "AWS::IAM::ManagedPolicy",
        "Properties": {"Roles": [{"Ref": "Crowded"}], "PolicyDocument": {}},
    }
    resources["Extra2"] = {
        "Type": "AWS::IAM::ManagedPolicy",
        "Properties": {"Roles": [{"Ref": "Crowded"}], "PolicyDocument": {"Statement": ["x" * 7000]}},
    }
    problems = {(p.path, p.wrong) for p in check_template("big", {"Resources": resources}, 2_000_000)}
    assert problems == {
        ("big.Resources", "too many in one stack"),
        ("big", "template too large (bytes)"),
        ("big.Crowded", "too many managed policies on one role"),
        ("big.Trusting", "trust policy too long (characters)"),
        ("big.Extra2", "managed policy too long (characters)"),
    }


def test_every_synthesis_failure_is_one_line_with_an_exit_code():
    from constructs_lib.deployment.app import synthesis_failure

    jsii = RuntimeError(
        "Error: TooManyResourcesInStack: Number of resources in stack 'x-capacity': 541 is greater than allowed maximum of 500\n    at Stack.synthesize (/tmp/jsii/stack.js:1:1)"
    )
    message, code = synthesis_failure(jsii)
    assert code == 2 and "\n" not in message and "541 is greater" in message and "per_team" in message
    message, code = synthesis_failure(RuntimeError("Error: Something else broke\n    at foo (bar.js:1:1)"))
    assert (message, code) == ("synthesis failed: Error: Something else broke", 1)
    assert synthesis_failure(RuntimeError("ValidationFailed: 2 findings"))[1] == 1


def test_a_real_jsii_failure_in_synthesis_is_one_line_and_exit_2(tmp_path):
    """With the estimate switched off, 30 teams in one stack reach the CDK's own
    TooManyResourcesInStack inside jsii: one line and exit 2, no traceback."""
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump(organisation(30, stack_layout="single")))
    script = "import sys; from constructs_lib.deployment import app; app.check_model = lambda model: []; sys.exit(app.main())"
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}), "CDK_OUTDIR": str(tmp_path / "out")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "TooManyResourcesInStack" in line and "is greater than allowed maximum of 500" in line and "per_team" in line


def test_the_controllers_package_with_the_compiled_policy_is_measured(monkeypatch):
    import constructs_lib.organisation.limits as limits

    model = model_of(organisation(5))
    assert check_model(model) == []
    monkeypatch.setattr(limits, "MAX_LAMBDA_UNZIPPED_BYTES", 1_000)
    assert [(p.path, p.wrong) for p in check_model(model)] == [
        ("teams", "compiled policy document and controller code too large for Lambda (bytes)")
    ]
