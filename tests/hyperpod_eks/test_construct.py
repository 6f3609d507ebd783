"""HyperPodEksGovernance synthesized once, with the standard packs, for a small organisation."""

import json
from pathlib import Path

import kubernetes_validate
import pytest
from aws_cdk import App, Environment, RemovalPolicy, Stack, aws_s3 as s3
from aws_cdk.assertions import Match, Template

from constructs_lib.backends.hyperpod_eks.kubernetes import USAGE_READER
from constructs_lib.cli.report import summarise
from constructs_lib.core.acknowledgements import acknowledge
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.vocabulary import GOVERNANCE_METADATA
from constructs_lib.hyperpod_eks import HyperPodEksGovernance
from constructs_lib.model import GovernanceModel, PriorityClass
from constructs_lib.organisation.compliance import apply_standard_packs
from constructs_lib.tenancy import TeamTenancy
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

CAPACITY = "111122223333"
CLUSTER_ARN = f"arn:aws:sagemaker:us-east-1:{CAPACITY}:cluster/abcd1234efgh"
STUDIO_PROJECT_ROLE = f"arn:aws:iam::{CAPACITY}:role/datazone_usr_role_abc123"


def org(**pool_overrides) -> GovernanceModel:
    pool = {
        "name": "hp",
        "backend": "hyperpod_eks",
        "capacity": {"ml.p5.48xlarge": 8, "ml.g5.12xlarge": 4},
        "cluster_arn": CLUSTER_ARN,
        "eks_cluster_name": "shared-gpu",
        **pool_overrides,
    }
    return GovernanceModel.from_dict(
        {
            "organisation": "acme",
            "capacity_account": {"account_id": CAPACITY, "region": "us-east-1"},
            "consumer_accounts": {"lab": {"account_id": "444455556666", "region": "us-east-1"}},
            "platform_admins": [f"arn:aws:iam::{CAPACITY}:role/Admin"],
            "priority_classes": [{"name": "urgent", "weight": 90}, {"name": "batch", "weight": 10}],
            "pools": [pool],
            "teams": [
                {
                    "name": "vision",
                    "account": "lab",
                    "preset": "background",
                    "cost_centre": "CC-1042",
                    "sharing": {"borrow_limit": 150},
                    "fair_share_weight": 60,
                    "members": ["arn:aws:iam::444455556666:role/Vision", STUDIO_PROJECT_ROLE],
                    "quotas": {"hp": {"ml.p5.48xlarge": 4, "ml.g5.12xlarge": 2}},
                    "kubernetes": {"hp": {"gpu_quota": 32, "dedicated_instance_groups": ["vision-p5"]}},
                },
                {
                    "name": "speech",
                    "account": "lab",
                    "preset": "steady",
                    "cost_centre": "Lab/Speech 7",
                    "members": ["arn:aws:iam::444455556666:role/Speech"],
                    "quotas": {"hp": {"ml.p5.48xlarge": 2}},
                    "kubernetes": {"hp": {"pod_security": "restricted", "priority_classes": ["batch"]}},
                },
                {
                    "name": "prod",
                    "account": "lab",
                    "preset": "critical",
                    "members": ["arn:aws:iam::444455556666:role/Prod"],
                    "quotas": {"hp": {"ml.p5.48xlarge": 2}},
                },
            ],
        }
    )


def build(stack: Stack, model: GovernanceModel) -> HyperPodEksGovernance:
    logs = s3.Bucket(
        stack,
        "Logs",
        enforce_ssl=True,
        versioned=True,
        removal_policy=RemovalPolicy.RETAIN,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
    )
    acknowledge(
        logs,
        "Test fixture: the access-log destination bucket of the tenants' buckets in this test.",
        "AwsSolutions-S1",
        "NIST.800.53.R5-S3BucketLoggingEnabled",
        "HIPAA.Security-S3BucketLoggingEnabled",
        "PCI.DSS.321-S3BucketLoggingEnabled",
        "NIST.800.53.R5-S3DefaultEncryptionKMS",
        "HIPAA.Security-S3DefaultEncryptionKMS",
        "PCI.DSS.321-S3DefaultEncryptionKMS",
        "NIST.800.53.R5-S3BucketReplicationEnabled",
        "HIPAA.Security-S3BucketReplicationEnabled",
        "PCI.DSS.321-S3BucketReplicationEnabled",
    )
    tenants = {
        t.name: TeamTenancy(
            stack,
            f"Team{t.name}",
            team=t,
            organisation=model.organisation,
            platform_admins=model.platform_admins,
            access_log_bucket=logs,
        )
        for t in model.teams
    }
    pool = model.pools[0]
    return HyperPodEksGovernance(
        stack,
        "HyperPod",
        pool=pool,
        teams=model.teams_in(pool.name),
        priority_classes=model.priority_classes,
        platform_admins=model.platform_admins,
        tenants=tenants,
    )


def new_stack(app: App, account: str = CAPACITY, region: str = "us-east-1") -> Stack:
    return Stack(app, "Gpu", env=Environment(account=account, region=region))


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stack = new_stack(app)
    governance = build(stack, org())
    apply_standard_packs(app)
    app.synth()  # raises ValidationFailed on any unacknowledged finding
    return governance, Template.from_stack(stack), outdir


def resources(template, kind):
    return template.find_resources(kind)


def test_compliance_packs_are_clean(synthesized):
    _, _, outdir = synthesized
    assert summarise(outdir).open_findings == []


def test_cfn_lint_reports_no_errors(synthesized):
    from cfnlint.api import lint

    _, _, outdir = synthesized
    (template,) = Path(outdir).glob("*.template.json")
    matches = lint(template.read_text(), regions=["us-east-1"])
    assert [str(m) for m in matches if m.rule.id.startswith("E")] == []
    # cfn-lint knows the ComputeQuota type and checks its properties (no "unknown type").
    assert not [m for m in matches if "ComputeQuota" in str(m)]


def test_one_scheduler_config_with_the_model_priority_classes(synthesized):
    _, template, _ = synthesized
    template.resource_count_is("AWS::SageMaker::ClusterSchedulerConfig", 1)
    template.has_resource_properties(
        "AWS::SageMaker::ClusterSchedulerConfig",
        {
            "ClusterArn": CLUSTER_ARN,
            "SchedulerConfig": {
                "PriorityClasses": [{"Name": "urgent", "Weight": 90}, {"Name": "batch", "Weight": 10}],
                "FairShare": "Enabled",
                "IdleResourceSharing": "Enabled",
            },
        },
    )


def test_scheduler_switches_follow_the_pool():
    stack = new_stack(App())
    build(stack, org(fair_share=False, idle_resource_sharing=False))
    Template.from_stack(stack).has_resource_properties(
        "AWS::SageMaker::ClusterSchedulerConfig",
        {"SchedulerConfig": Match.object_like({"FairShare": "Disabled", "IdleResourceSharing": "Disabled"})},
    )


def _quotas(template):
    return {
        r["Properties"]["ComputeQuotaTarget"]["TeamName"]: r
        for r in resources(template, "AWS::SageMaker::ComputeQuota").values()
    }


def test_every_team_gets_a_compute_quota_with_its_sharing_mapped(synthesized):
    _, template, _ = synthesized
    quotas = _quotas(template)
    assert set(quotas) == {"vision", "speech", "prod"}
    vision = quotas["vision"]["Properties"]
    assert vision["ClusterArn"] == CLUSTER_ARN and vision["ActivationState"] == "Enabled"
    assert vision["ComputeQuotaTarget"] == {"TeamName": "vision", "FairShareWeight": 60}
    assert vision["ComputeQuotaConfig"] == {
        "ComputeQuotaResources": [
            {"InstanceType": "ml.g5.12xlarge", "Count": 2},
            {"InstanceType": "ml.p5.48xlarge", "Count": 4},
        ],
        "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 150},
        "PreemptTeamTasks": "LowerPriority",
    }
    speech = quotas["speech"]["Properties"]["ComputeQuotaConfig"]
    assert speech["ResourceSharingConfig"] == {"Strategy": "Lend"}
    assert speech["PreemptTeamTasks"] == "Never"
    prod = quotas["prod"]["Properties"]["ComputeQuotaConfig"]
    assert prod["ResourceSharingConfig"] == {"Strategy": "DontLend"}
    assert prod["PreemptTeamTasks"] == "LowerPriority"


def test_compute_quotas_record_team_and_preset_and_follow_the_scheduler_config(synthesized):
    _, template, _ = synthesized
    (scheduler_id,) = resources(template, "AWS::SageMaker::ClusterSchedulerConfig")
    for team, quota in _quotas(template).items():
        assert quota["Metadata"][GOVERNANCE_METADATA]["team"] == team
        assert quota["Metadata"][GOVERNANCE_METADATA]["preset"] in {"background", "steady", "critical"}
        assert scheduler_id in quota["DependsOn"]


def _entries(template):
    return list(resources(template, "AWS::EKS::AccessEntry").values())


def test_team_principals_map_to_the_team_group_only(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    team_entries = [e["Properties"] for e in _entries(template) if "KubernetesGroups" in e["Properties"]]
    by_group = {}
    for entry in team_entries:
        assert entry["ClusterName"] == "shared-gpu" and entry["Type"] == "STANDARD"
        assert "AccessPolicies" not in entry  # no EKS access policy: Kubernetes RBAC in the namespace decides
        (group,) = entry["KubernetesGroups"]
        by_group.setdefault(group, []).append(entry["PrincipalArn"])
    assert set(by_group) == {f"hyperpod-ns-{t}-namespace-level-group" for t in ("vision", "speech", "prod")}
    # The team's submission role, plus the Unified Studio project role listed among its members in
    # the cluster's account; members in other accounts come through the submission role.
    vision = by_group["hyperpod-ns-vision-namespace-level-group"]
    assert STUDIO_PROJECT_ROLE in vision and len(vision) == 2
    submission = stack.resolve(governance.node.scope.node.find_child("Teamvision").submission_role.role_arn)
    assert submission in vision
    assert len(by_group["hyperpod-ns-speech-namespace-level-group"]) == 1


def test_only_platform_admins_and_the_kubectl_provider_are_cluster_admins(synthesized):
    governance, template, _ = synthesized
    admins = [e for e in _entries(template) if "AccessPolicies" in e["Properties"]]
    assert len(admins) == 2
    principals = [e["Properties"]["PrincipalArn"] for e in admins]
    assert f"arn:aws:iam::{CAPACITY}:role/Admin" in principals
    for entry in admins:
        (policy,) = entry["Properties"]["AccessPolicies"]
        assert policy == {
            "PolicyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            "AccessScope": {"Type": "cluster"},
        }
        assert entry["Metadata"][GOVERNANCE_METADATA]["platformAdmin"] is True
    assert len(_entries(template)) == 2 + 4  # admins + (vision: 2, speech: 1, prod: 1)


def test_pod_identity_binds_each_team_service_account_to_its_own_role(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    associations = {
        a["Properties"]["Namespace"]: a["Properties"]
        for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert set(associations) == {"hyperpod-ns-vision", "hyperpod-ns-speech", "hyperpod-ns-prod"}
    for team, role in governance.workload_roles.items():
        association = associations[f"hyperpod-ns-{team}"]
        assert association["ServiceAccount"] == "gpu-workload" and association["ClusterName"] == "shared-gpu"
        assert association["RoleArn"] == stack.resolve(role.role_arn)


def test_workload_role_trusts_only_its_namespace_service_account_on_this_cluster(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    role = resources(template, "AWS::IAM::Role")[
        stack.get_logical_id(governance.workload_roles["vision"].node.default_child)
    ]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(statement["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    assert statement["Condition"]["StringEquals"] == {
        "aws:SourceAccount": CAPACITY,
        "aws:RequestTag/eks-cluster-name": "shared-gpu",
        "aws:RequestTag/kubernetes-namespace": "hyperpod-ns-vision",
        "aws:RequestTag/kubernetes-service-account": "gpu-workload",
    }


def test_workload_role_uses_only_its_own_teams_data(synthesized):
    # its own bucket and key, and (issue 13) its own team's secrets and discovery parameters
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    tenancy = governance.node.scope.node.find_child("Teamvision")
    role_id = stack.get_logical_id(governance.workload_roles["vision"].node.default_child)
    attached = [
        p
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        if {"Ref": role_id} in p["Properties"].get("Roles", [])
    ]
    assert len(attached) == 1
    statements = attached[0]["Properties"]["PolicyDocument"]["Statement"]
    allowed = {
        json.dumps(r, sort_keys=True)
        for s in statements
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    }
    expected = {
        json.dumps(stack.resolve(arn), sort_keys=True)
        for arn in (
            tenancy.bucket.arn_for_objects("*"),
            tenancy.bucket.bucket_arn,
            tenancy.key.key_arn,
            tenancy._secrets_arn(),
            tenancy._discovery_arn(),
            tenancy._discovery_arn("/*"),
        )
    }
    assert allowed == expected
    assert not [
        p
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"].get("Roles", [])
    ]
    key = resources(template, "AWS::KMS::Key")[stack.get_logical_id(tenancy.key.node.default_child)]
    key_principals = [s["Principal"] for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert {"AWS": {"Fn::GetAtt": [role_id, "Arn"]}} in key_principals
    other_key = resources(template, "AWS::KMS::Key")[
        stack.get_logical_id(governance.node.scope.node.find_child("Teamspeech").key.node.default_child)
    ]
    assert {"AWS": {"Fn::GetAtt": [role_id, "Arn"]}} not in [
        s["Principal"] for s in other_key["Properties"]["KeyPolicy"]["Statement"]
    ]


def _applied(template):
    """Team -> (manifest resource, the Kubernetes objects it applies); None -> the cluster-wide pod
    security manifest, USAGE_READER -> the cluster-wide usage reader."""
    out = {}
    for logical_id, resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").items():
        objects = json.loads(resource["Properties"]["Manifest"])
        first = objects[0]["metadata"]
        team = first["labels"].get("gpu-governance/team", USAGE_READER if first["name"] == USAGE_READER else None)
        assert team not in out
        out[team] = (logical_id, resource, objects)
    return out


def test_every_applied_object_is_valid_for_the_cluster_version(synthesized):
    _, template, _ = synthesized
    applied = _applied(template)
    assert set(applied) == {"vision", "speech", "prod", None, USAGE_READER}
    count = 0
    for _, _, objects in applied.values():
        for manifest in objects:
            kubernetes_validate.validate(manifest, "1.33", strict=True)
            count += 1
    # Each team's priority-class policy and binding; speech is restricted: its binding; 3 cluster-wide pod security objects,
    # the volume binding and the tenant queue policies with their bindings; the usage reader.
    assert count == 16 + 14 + 13 + 7 + 2


def test_gpu_quota_and_admission_policy_only_where_declared(synthesized):
    _, template, _ = synthesized
    applied = _applied(template)
    kinds = {team: [o["kind"] for o in objects] for team, (_, _, objects) in applied.items()}
    policies = {
        team: [o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
        for team, (_, _, objects) in applied.items()
    }
    assert "ResourceQuota" in kinds["vision"] and policies["vision"] == [
        "gpu-governance-priority-vision",
        "gpu-governance-dedicated-vision",
    ]
    assert "ResourceQuota" not in kinds["speech"] and policies["speech"] == ["gpu-governance-priority-speech"]


def test_each_team_may_use_only_the_priority_classes_it_is_granted(synthesized):
    _, template, _ = synthesized
    applied = _applied(template)
    allowed = {
        team: next(o for o in objects if o["metadata"]["name"] == f"gpu-governance-priority-{team}")["spec"][
            "validations"
        ][0]["message"]
        for team, (_, _, objects) in applied.items()
        if team in ("vision", "speech", "prod")
    }
    assert (
        allowed["speech"]
        == "team speech may use only the priority classes batch (label kueue.x-k8s.io/priority-class: batch-priority)"
    )
    assert "urgent, batch" in allowed["vision"] and "urgent, batch" in allowed["prod"]  # no grant: every declared class


def test_pod_security_is_in_force_before_any_tenant_namespace_exists(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    applied = _applied(template)
    cluster_id, cluster_manifest, objects = applied.pop(None)
    del applied[USAGE_READER]  # cluster-wide, grants only reads of Kueue's quotas: no tenant namespace waits for it
    assert [o["metadata"]["name"] for o in objects] == [
        "gpu-governance-pod-security-baseline",
        "gpu-governance-pod-security-baseline",
        "gpu-governance-pod-security-restricted",
        "gpu-governance-volume-binding",
        "gpu-governance-volume-binding",
        "gpu-governance-tenant-queue",
        "gpu-governance-tenant-queue",
    ]
    assert stack.get_logical_id(governance.node.find_child("AccessKubectlProvider")) in cluster_manifest["DependsOn"]
    # HyperPod makes a team's namespace from its compute quota: no quota before the policies.
    for quota in resources(template, "AWS::SageMaker::ComputeQuota").values():
        assert cluster_id in quota["DependsOn"]
    for _, manifest, _ in applied.values():
        assert cluster_id in manifest["DependsOn"]
    bindings = {
        team: [o["spec"]["policyName"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        for team, (_, _, objects) in applied.items()
    }
    assert bindings == {
        "vision": ["gpu-governance-priority-vision", "gpu-governance-dedicated-vision"],
        "speech": ["gpu-governance-priority-speech", "gpu-governance-pod-security-restricted"],
        "prod": ["gpu-governance-priority-prod"],
    }


def test_each_team_namespace_gets_pod_security_labels_it_loses_again_on_delete(synthesized):
    _, template, _ = synthesized
    patches = {
        r["Properties"]["ResourceName"]: r for r in resources(template, "Custom::AWSCDK-EKS-KubernetesPatch").values()
    }
    assert set(patches) == {f"namespace/hyperpod-ns-{team}" for team in ("vision", "speech", "prod")}
    waits = {
        r["Properties"]["ObjectName"]: lid
        for lid, r in resources(template, "Custom::AWSCDK-EKS-KubernetesObjectValue").items()
    }
    for team, level in (("vision", "baseline"), ("speech", "restricted"), ("prod", "baseline")):
        patch = patches[f"namespace/hyperpod-ns-{team}"]
        metadata = json.loads(patch["Properties"]["ApplyPatchJson"])["metadata"]
        labels = metadata["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == labels["pod-security.kubernetes.io/warn"] == level
        assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.33"  # the pool's Kubernetes version
        # A JSON merge patch deletes keys set to null: the namespace itself stays (HyperPod owns it).
        assert json.loads(patch["Properties"]["RestorePatchJson"]) == {
            "metadata": {k: dict.fromkeys(v) for k, v in metadata.items()}
        }
        assert patch["Properties"]["PatchType"] == "merge"
        assert waits[f"hyperpod-ns-{team}"] in patch["DependsOn"]


def test_each_team_namespace_carries_its_team_and_cost_centre_for_cost_tools(synthesized):
    _, template, _ = synthesized
    patches = {
        r["Properties"]["ResourceName"]: json.loads(r["Properties"]["ApplyPatchJson"])["metadata"]
        for r in resources(template, "Custom::AWSCDK-EKS-KubernetesPatch").values()
    }
    cost = {
        team: {
            k: v
            for k, v in patches[f"namespace/hyperpod-ns-{team}"]["labels"].items()
            if k.startswith("gpu-governance/")
        }
        for team in ("vision", "speech", "prod")
    }
    assert cost == {
        "vision": {"gpu-governance/team": "vision", "gpu-governance/cost-centre": "CC-1042"},
        # "Lab/Speech 7" is a valid tag value but not a label value: kept as an annotation only
        "speech": {"gpu-governance/team": "speech"},
        "prod": {"gpu-governance/team": "prod"},
    }
    assert patches["namespace/hyperpod-ns-speech"]["annotations"] == {"gpu-governance/cost-centre": "Lab/Speech 7"}
    assert patches["namespace/hyperpod-ns-vision"]["annotations"] == {"gpu-governance/cost-centre": "CC-1042"}
    assert "annotations" not in patches["namespace/hyperpod-ns-prod"]


def test_dedicated_groups_are_labelled_and_tainted_by_one_custom_resource(synthesized):
    governance, template, outdir = synthesized
    stack = Stack.of(governance)
    (resource,) = resources(template, "Custom::HyperPodDedicatedNodes").values()
    assert resource["Properties"]["ClusterArn"] == CLUSTER_ARN
    assert resource["Properties"]["Groups"] == {"vision-p5": "vision"}  # speech and prod dedicate nothing
    handler = resources(template, "AWS::Lambda::Function")[
        stack.get_logical_id(governance.node.find_child("DedicatedNodesHandler").node.default_child)
    ]
    assert handler["Properties"]["Handler"] == "gpu_governance_runtime.dedicated_nodes.handler"
    # The framework in front of it is the one the custom resource calls.
    provider = governance.node.find_child("DedicatedNodesProvider")
    assert resource["Properties"]["ServiceToken"] == stack.resolve(provider.service_token)
    # The asset is the runtime package without a policy: its code does not change with the model.
    asset_hash = handler["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    asset = Path(outdir) / f"asset.{asset_hash}" / "gpu_governance_runtime"
    assert (asset / "dedicated_nodes.py").is_file() and (asset / "hyperpod_cluster.py").is_file()
    assert not (asset / "policy.json").exists()
    assert not template.find_outputs("*")  # nothing left for a human to apply by hand


def test_dedicated_nodes_role_reads_and_updates_only_this_cluster(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    role_id = stack.get_logical_id(governance.node.find_child("DedicatedNodesRole").node.default_child)
    (policy,) = [
        p
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assert not [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assert "ManagedPolicyArns" not in resources(template, "AWS::IAM::Role")[role_id]["Properties"]
    statements = {json.dumps(s["Action"]): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {
        '["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"]',
        '"iam:PassRole"',
        '["logs:CreateLogStream", "logs:PutLogEvents"]',
    }
    assert statements['["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"]']["Resource"] == CLUSTER_ARN
    pass_role = statements['"iam:PassRole"']
    # UpdateCluster resends each group's ExecutionRole: roles of this account, to SageMaker only.
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert pass_role["Resource"] == {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::{CAPACITY}:role/*"]]}
    log_group = stack.get_logical_id(governance.node.find_child("DedicatedNodesLogs").node.default_child)
    assert statements['["logs:CreateLogStream", "logs:PutLogEvents"]']["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [log_group, "Arn"]}, ":*"]]
    }


def test_no_custom_resource_without_dedicated_groups():
    model = org()
    stack = new_stack(App())
    undedicated = model.model_copy(
        update={"teams": tuple(t.model_copy(update={"kubernetes": {}}) for t in model.teams)}
    )
    governance = build(stack, undedicated)
    assert governance.dedicated_nodes is None
    template = Template.from_stack(stack)
    template.resource_count_is("Custom::HyperPodDedicatedNodes", 0)
    assert not [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "gpu_governance_runtime.dedicated_nodes.handler"
    ]


def test_nothing_is_applied_before_the_team_namespace_exists(synthesized):
    governance, template, _ = synthesized
    stack = Stack.of(governance)
    waits = resources(template, "Custom::AWSCDK-EKS-KubernetesObjectValue")
    quotas = {
        r["Properties"]["ComputeQuotaTarget"]["TeamName"]: lid
        for lid, r in resources(template, "AWS::SageMaker::ComputeQuota").items()
    }
    applied = _applied(template)
    del applied[None], applied[USAGE_READER]  # cluster-wide: need no team namespace
    for team, (_, manifest, _) in applied.items():
        (wait_id,) = [lid for lid in manifest["DependsOn"] if lid in waits]
        wait = waits[wait_id]["Properties"]
        assert wait["ObjectType"] == "namespace" and wait["ObjectName"] == f"hyperpod-ns-{team}"
        assert quotas[team] in waits[wait_id]["DependsOn"]
        # ...and the kubectl provider can act on the cluster by then.
        provider_entry = stack.get_logical_id(governance.node.find_child("AccessKubectlProvider"))
        assert provider_entry in waits[wait_id]["DependsOn"]


def test_the_usage_reader_group_may_only_read_cluster_queues_once_the_provider_can_apply(synthesized):
    governance, template, _ = synthesized
    manifest_id, manifest, objects = _applied(template)[USAGE_READER]
    assert (
        Stack.of(governance).get_logical_id(governance.node.find_child("AccessKubectlProvider"))
        in manifest["DependsOn"]
    )
    role, binding = objects
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get", "list"]}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "Group", "name": EKS_USAGE_READER_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    # No access entry of this construct maps the group: only the reclaim controller's role gets it.
    assert not [
        e
        for e in resources(template, "AWS::EKS::AccessEntry").values()
        if EKS_USAGE_READER_GROUP in e["Properties"].get("KubernetesGroups", [])
    ]


def test_manifests_are_applied_idempotently(synthesized):
    _, template, _ = synthesized
    for _, manifest, _ in _applied(template).values():
        assert manifest["Properties"]["Overwrite"] is True


def test_a_cluster_in_another_account_is_refused():
    # Admins of the stack's own account, so that only the cluster's account is wrong.
    model = org().model_copy(update={"platform_admins": ("arn:aws:iam::999988887777:role/Admin",)})
    with pytest.raises(GovernanceError) as error:
        build(new_stack(App(), account="999988887777"), model)
    assert "pool.cluster_arn" in str(error.value) and "account 999988887777" in str(error.value)


def refused(pool, teams, stack: Stack | None = None, **props) -> GovernanceError:
    """The construct's error for these props, after checking that it left nothing in the stack."""
    model = org()
    stack = stack or new_stack(App())
    with pytest.raises(GovernanceError) as raised:
        HyperPodEksGovernance(
            stack,
            "HyperPod",
            pool=pool,
            teams=teams,
            **{"priority_classes": model.priority_classes, "platform_admins": model.platform_admins, "tenants": {}}
            | props,
        )
    assert stack.node.try_find_child("HyperPod") is None  # nothing half-built
    return raised.value


def test_a_team_without_tenancy_is_refused():
    model = org()
    error = refused(model.pools[0], model.teams)
    assert "teams[1]: no TeamTenancy given for the team ('speech')" in str(error)


def test_a_cluster_in_another_region_is_refused_before_anything_is_built():
    model = org()
    error = refused(model.pools[0], model.teams, new_stack(App(), region="eu-west-1"))
    assert "pool.cluster_arn: cluster is in another region than the stack" in str(error)


def test_a_pool_of_another_backend_is_refused_naming_pool():
    from constructs_lib.model import BatchQuotaSharePool

    error = refused(BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 1}), org().teams)
    # every problem at once: the missing tenancies are wrong whatever the pool
    assert str(error).splitlines() == [
        "pool: not a hyperpod_eks pool ('q (batch_quota_share)') - a pool with backend hyperpod_eks",
        "teams[0]: no TeamTenancy given for the team ('vision') - one of []",
        "teams[1]: no TeamTenancy given for the team ('speech') - one of []",
        "teams[2]: no TeamTenancy given for the team ('prod') - one of []",
    ]


ADMIN = "arn:aws:iam::111122223333:role/Admin"


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        # One ARN where a list belongs: before, tuple() split it into characters (a TypeError for None).
        ({"platform_admins": ADMIN}, "platform_admins: not a list of IAM role or user ARNs ('str')"),
        ({"platform_admins": None}, "platform_admins: not a list of IAM role or user ARNs ('NoneType')"),
        (
            {"platform_admins": [ADMIN, "Admin"]},
            "platform_admins[1]: not an IAM role or user ARN ('Admin') - arn:aws:iam::<account>:role/<name> or :user/<name>",
        ),
        ({"priority_classes": "high"}, "priority_classes: not a list of priority classes ('str')"),
        ({"priority_classes": []}, "priority_classes: fewer than 1 priority classes (0) - at least 1"),
        (
            {"priority_classes": [PriorityClass(name=f"p{i}", weight=i) for i in range(11)]},
            "priority_classes: more than 10 priority classes (11) - at most 10",
        ),
        ({"priority_classes": [{"name": "high", "weight": 90}]}, "priority_classes[0]: not a PriorityClass ('dict')"),
    ],
)
def test_props_of_the_wrong_shape_are_refused_naming_the_field(props, expected):
    model = org()
    error = refused(model.pools[0], model.teams, **props)  # no tenancies: those problems follow the field's
    assert str(error).splitlines()[0].startswith(expected)


def test_a_paused_team_gets_a_disabled_compute_quota():
    from constructs_lib.backends.hyperpod_eks.construct import compute_quota_properties
    from constructs_lib.model import HyperPodEksPool, Team

    pool = HyperPodEksPool(
        name="hp", capacity={"ml.p5.48xlarge": 4}, cluster_arn=CLUSTER_ARN, eks_cluster_name="hp-eks"
    )
    team = Team(name="vision", preset="steady", quotas={"hp": {"ml.p5.48xlarge": 2}})
    assert compute_quota_properties(pool, team)["ActivationState"] == "Enabled"
    assert compute_quota_properties(pool, team.model_copy(update={"paused": True}))["ActivationState"] == "Disabled"
