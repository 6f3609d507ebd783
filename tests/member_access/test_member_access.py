"""What a team's members get to run and watch a real job: the team's image repository, its
secrets prefix, the discovery parameters (and `gpu-governance team show`, which prints the same
offline), and the new model field ``shared_image_repositories``.

Two syntheses: the reference organisation with two shared repositories declared (one of them,
hostile or mistaken, names a team's own repository), and a generated one in the per_team layout.
The member journey against every pair of teams is in tests/security/test_cross_tenant.py.
"""

from __future__ import annotations

import json

import pytest

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import TeamSetup
from constructs_lib.member.discovery import describe, describe_team, repository_name
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.limits import MAX_OUTPUTS, MAX_RESOURCES, TEAM_BASE, TEAM_PER_POOL, shared_resources
from gpu_governance_runtime.contract import (
    DISCOVERY_BACKEND_KEYS,
    DISCOVERY_KEYS,
    DISCOVERY_PRIORITY_KEY,
    discovery_parameter_name,
)
from tests.foundation.org import default_data, synthesize_reference
from tests.scale.generate import organisation as generated_organisation
from tests.security.iam_eval import Principal, Request, evaluate, load_assembly
from tests.security.tenants import read_organisation

TEAM_REPOSITORY = "arn:aws:ecr:us-east-1:111122223333:repository/acme-ml/research"
BASE_IMAGES = "arn:aws:ecr:us-east-1:999988887777:repository/base/pytorch"
STANDARD_PARAMETER_BYTES = 4096


def reference_data() -> dict:
    data = default_data()
    data["shared_image_repositories"] = [BASE_IMAGES, TEAM_REPOSITORY]
    return data


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model = GovernanceModel.from_dict(reference_data())
    outdir = tmp_path_factory.mktemp("reference")
    synthesize_reference(model, outdir)  # with the compliance packs: synthesis fails on any open finding
    templates = load_assembly(outdir)
    return model, templates, read_organisation(model, templates)


@pytest.fixture(scope="module")
def per_team(tmp_path_factory):
    model = GovernanceModel.from_dict(generated_organisation(3))
    outdir = tmp_path_factory.mktemp("per-team")
    synthesize_reference(model, outdir, packs=False)
    return model, load_assembly(outdir)


def test_each_team_repository_is_encrypted_immutable_scanned_and_closed(reference):
    model, templates, org = reference
    repositories = [(t, props) for t in templates for _, props in t.of_type("AWS::ECR::Repository")]
    assert len(repositories) == len(model.teams)
    for team in model.teams:
        tenant = org.tenants[team.name]
        template, props = next(
            (t, p) for t, p in repositories if p["RepositoryName"] == repository_name(model.organisation, team.name)
        )
        assert props["ImageTagMutability"] == "IMMUTABLE" and props["ImageScanningConfiguration"] == {
            "ScanOnPush": True
        }
        assert template.resolve(props["EncryptionConfiguration"]) == {"EncryptionType": "KMS", "KmsKey": tenant.key}
        rules = json.loads(props["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
        assert [(r["selection"]["tagStatus"], r["action"]["type"]) for r in rules] == [("untagged", "expire")]
        (statement,) = template.resolve(props["RepositoryPolicyText"])["Statement"]
        assert (statement["Effect"], statement["Principal"]) == ("Deny", {"AWS": "*"})
        assert {"ecr:BatchGetImage", "ecr:PutImage", "ecr:BatchDeleteImage"} <= set(statement["Action"])
        assert set(statement["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]) == {
            tenant.roles["training"],
            tenant.roles["submit"],
        }


def test_a_shared_repository_naming_a_team_repository_stays_closed(reference):
    """Every execution role's own IAM allows pulling the declared shared repositories, one of
    which is research's repository: its repository policy still refuses every other team."""
    _, _, org = reference
    research = org.tenants["research"]
    assert research.repository == TEAM_REPOSITORY
    for tenant in org.tenants.values():
        training = Principal(arn=tenant.roles["training"])
        for repository in (BASE_IMAGES, TEAM_REPOSITORY):
            pull = Request(training, "ecr:BatchGetImage", repository)
            assert evaluate(org.world.identity[training.arn], pull).allowed
        assert org.world.is_allowed(Request(training, "ecr:BatchGetImage", TEAM_REPOSITORY)) == (tenant is research)
        assert not org.world.is_allowed(Request(Principal(arn=tenant.roles["submit"]), "ecr:PutImage", BASE_IMAGES))


def test_discovery_parameters_name_the_deployed_resources(reference):
    """Each parameter holds the contract's keys for its backend, and its values are the
    resources the templates deploy (resolved), not a second computation of them."""
    model, templates, org = reference
    parameters = {
        props["Name"]: json.loads(t.resolve(props["Value"]))
        for t in templates
        for _, props in t.of_type("AWS::SSM::Parameter")
    }
    assert set(parameters) == {
        discovery_parameter_name(model.organisation, t.name, p) for t in model.teams for p in t.quotas
    }
    capacity = next(t for t in templates if t.name.endswith("-capacity"))
    queues = {
        props["JobQueueName"]: capacity.get_att(k, "JobQueueArn")
        for k, props in capacity.of_type("AWS::Batch::JobQueue")
    }
    for name, document in parameters.items():
        tenant, backend = org.tenants[document["team"]], document["backend"]
        assert list(document) == [*DISCOVERY_KEYS[:-1], *DISCOVERY_BACKEND_KEYS[backend], DISCOVERY_KEYS[-1]], name
        assert (document["submission_role_arn"], document["execution_role_arn"]) == (
            tenant.roles["submit"],
            tenant.roles["training"],
        )
        assert (document["bucket"], document["kms_key_arn"]) == (tenant.bucket, tenant.key)
        registry, repository = document["ecr_repository_uri"].split("/", 1)
        assert tenant.repository == f"arn:aws:ecr:{document['region']}:{document['account']}:repository/{repository}"
        assert registry == f"{document['account']}.dkr.ecr.{document['region']}.amazonaws.com"
        assert all(set(c) == {"name", "weight", DISCOVERY_PRIORITY_KEY[backend]} for c in document["priority_classes"])
        if backend == "batch_quota_share":
            assert (queues[document["job_queue"]], document["quota_share_arn"]) in tenant.quota_shares
        if backend == "batch_fair_share":
            assert queues[document["job_queue"]] in tenant.fair_share_queues
        # `team show` prints the same offline; only what the deployment generates is unknown there.
        offline = describe_team(model, document["team"])[name]
        assert offline == {**document, "bucket": None, "kms_key_arn": None}


def test_each_synthesized_parameter_reads_as_the_teams_setup(reference):
    """The published value (tokens resolved to the deployed bucket and key) is what members read:
    ``TeamSetup.from_parameter`` takes it and gives the setup ``describe`` makes with those values."""
    model, templates, _ = reference
    values = [t.resolve(props["Value"]) for t in templates for _, props in t.of_type("AWS::SSM::Parameter")]
    assert values
    for value in values:
        setup = TeamSetup.from_parameter(value)
        assert setup == TeamSetup.from_document(
            describe(model, setup.team, setup.pool, bucket=setup.bucket, kms_key_arn=setup.kms_key_arn)
        )
        assert setup.bucket and setup.kms_key_arn


def test_a_teams_settings_reach_its_own_backend_names(reference):
    model, _, _ = reference
    eks = describe(model, "research", "hyperpod-eks")
    assert (eks["namespace"], eks["local_queue"]) == ("hyperpod-ns-research", "hyperpod-ns-research-localqueue")
    assert [c["kueue_priority_class"] for c in eks["priority_classes"]] == [
        "urgent-priority",
        "standard-priority",
        "opportunistic-priority",
    ]
    slurm = {t.name: describe(model, t.name, "hyperpod-slurm") for t in model.teams if "hyperpod-slurm" in t.quotas}
    for team, document in slurm.items():
        assert document["slurm_account"] == document["partition"] == team
        assert document["default_qos"] == document["priority_classes"][-1]["qos"]  # no class named: the least urgent
        borrows = next(t for t in model.teams if t.name == team).sharing.borrows
        assert (document["borrow_qos"] in document["qos"]) if borrows else document["borrow_qos"] is None


def test_per_team_layout_keeps_parameters_and_outputs_in_the_team_stacks(per_team):
    model, templates = per_team
    capacity = next(t for t in templates if t.name == f"{model.organisation}-capacity")
    assert not list(capacity.of_type("AWS::SSM::Parameter", "AWS::ECR::Repository"))
    assert not [o for o in capacity.outputs if "Discovery" in o or "BucketName" in o]
    for team in model.teams:
        stack = next(t for t in templates if t.name == f"{model.organisation}-team-{team.name}")
        names = {props["Name"] for _, props in stack.of_type("AWS::SSM::Parameter")}
        assert names == {discovery_parameter_name(model.organisation, team.name, pool) for pool in team.quotas}
        assert len(list(stack.of_type("AWS::ECR::Repository"))) == 1
        assert len(stack.outputs) == 2  # the bucket name and the discovery path


def test_outputs_stay_within_the_stack_limit_wherever_the_resources_fit(reference):
    """The single layout holds two outputs per team; the resource limit (the estimate refuses
    more than 500) is met long before the 200 outputs."""
    model, templates, _ = reference
    capacity = next(t for t in templates if t.name.endswith("-capacity"))
    per_team_outputs = 2
    assert (
        len(capacity.outputs)
        == per_team_outputs * len(model.teams) + 2 * sum(p.backend == "hyperpod_slurm" for p in model.pools) + 1
    )
    smallest_team = TEAM_BASE + min(TEAM_PER_POOL.values())
    most_teams = (MAX_RESOURCES - shared_resources(model)) // smallest_team
    assert per_team_outputs * most_teams + len(capacity.outputs) <= MAX_OUTPUTS


def test_the_longest_document_fits_a_standard_parameter():
    from tests.security.test_hostile_inputs import longest_organisation

    model = GovernanceModel.from_dict(longest_organisation())
    key = f"arn:aws:kms:{model.capacity_account.region}:{model.capacity_account.account_id}:key/{'0' * 8}-0000-0000-0000-{'0' * 12}"
    sizes = [
        len(json.dumps(describe(model, t.name, p, bucket="b" * 63, kms_key_arn=key), separators=(",", ":")))
        for t in model.teams
        for p in t.quotas
    ]
    assert max(sizes) <= STANDARD_PARAMETER_BYTES


# --- the model field and the names -------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "arn:aws:ecr:us-east-1:111122223333:repository/*",
        "arn:aws:ecr:us-east-1:111122223333:repository/Base/PyTorch",
        "arn:aws:s3:::base-images",
        "arn:aws:ecr:us-east-1:111122223333:repository/base/",
        "arn:aws:ecr:us-east-1:11112222333:repository/base",
        "arn:aws:ecr:us-east-1:111122223333:repository/base\n",
        "arn:aws:ecr:us-east-1:111122223333:repository/a",
    ],
)
def test_shared_repositories_must_be_ecr_repository_arns(value, tmp_path, capsys):
    data = default_data()
    data["shared_image_repositories"] = [BASE_IMAGES, value]
    with pytest.raises(GovernanceError) as refused:
        GovernanceModel.from_dict(data)
    (problem,) = refused.value.problems
    assert problem.path == "shared_image_repositories[1]" and "ECR repository ARN without wildcards" in problem.allowed
    config = tmp_path / "governance.json"
    config.write_text(json.dumps(data))
    assert main(["validate", "--config", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == ["gpu-governance validate: invalid input", str(problem)]


def test_a_team_name_ecr_cannot_take_is_refused_in_one_line(capsys, tmp_path):
    """Team names may end in '_' or '-'; ECR repository names may not. The team's repository
    would be unnamable: refused by `team show` and by the construct before any resource."""
    from aws_cdk import App, Stack, aws_s3 as s3

    from constructs_lib.tenancy import TeamTenancy

    data = default_data()
    training = data["teams"][1]
    training["name"] = "training_"  # valid on the Batch pools (HyperPod teams are DNS labels)
    training["quotas"] = {
        pool: quota for pool, quota in training["quotas"].items() if pool in ("sagemaker-training", "ec2-gpu")
    }
    config = tmp_path / "governance.json"
    config.write_text(json.dumps(data))
    assert main(["team", "show", "training_", "--config", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0] == "gpu-governance team: invalid input"
        and err[1].startswith("teams.name: cannot name an ECR repository")
        and len(err) == 2
    )
    model = GovernanceModel.from_dict(data)
    stack = Stack(App(), "Tenancy", env={"account": "111122223333", "region": "us-east-1"})
    with pytest.raises(GovernanceError, match="cannot name an ECR repository"):
        TeamTenancy(
            stack,
            "Team",
            team=model.teams[1],
            organisation=model.organisation,
            platform_admins=(),
            access_log_bucket=s3.Bucket(stack, "Logs"),
        )
    assert stack.node.try_find_child("Team") is None


def test_team_show_prints_every_pool_and_refuses_an_unknown_team(capsys):
    assert main(["team", "show", "research", "--example", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    model = GovernanceModel.from_dict(default_data())
    assert printed == describe_team(model, "research") and len(printed) == 4
    assert main(["team", "show", "research", "--example"]) == 0
    text = capsys.readouterr().out
    assert all(f"SSM parameter {name}" in text for name in printed)
    assert "bucket: (known after deployment: read the parameter)" in text
    assert main(["team", "show", "nobody", "--example"]) == 2
    assert (
        capsys.readouterr().err.splitlines()[1]
        == "team: no such team ('nobody') - one of ['research', 'training', 'production']"
    )
