"""The Kubernetes objects a team gets, checked against the Kubernetes schema offline."""

import kubernetes_validate
import pytest

from constructs_lib.backends.hyperpod_eks import kubernetes
from constructs_lib.model import HyperPodEksPool, KubernetesTenancy, PodSecurityLevel
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

SUPPORTED_VERSIONS = HyperPodEksPool.model_fields["kubernetes_version"].annotation.__args__
CLASSES = ("urgent", "standard")
FULL = KubernetesTenancy(
    gpu_quota=16, dedicated_instance_groups=("p5-research",), pod_security=PodSecurityLevel.RESTRICTED
)


def by_kind_and_name(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_object_is_valid_for_every_supported_version(version):
    objects = kubernetes.team_objects("research", FULL, CLASSES) + kubernetes.pod_security_objects()
    # The team's 17 (priority classes: a policy and its binding) and the cluster's 7 (volume binding
    # and the tenant queue: the same).
    assert len(objects) == 17 + 7
    # Admission by ValidatingAdmissionPolicy only: MutatingAdmissionPolicy is alpha on every supported version.
    assert {o["kind"] for o in objects if "Admission" in o["kind"]} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for manifest in objects:
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_the_usage_reader_is_valid_and_may_only_get_and_list_cluster_queues(version):
    role, binding = kubernetes.usage_reader_objects()
    for manifest in (role, binding):
        kubernetes_validate.validate(manifest, version, strict=True)
    # cluster-scoped (ClusterQueues are), read only, no resourceNames: the observer lists them all
    assert "namespace" not in role["metadata"] and "namespace" not in binding["metadata"]
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get", "list"]}
    ]
    assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == ("ClusterRole", role["metadata"]["name"])
    assert [s["name"] for s in binding["subjects"]] == [EKS_USAGE_READER_GROUP]


def test_the_schema_check_catches_a_misspelt_field():
    role = kubernetes.rbac("research")[0]
    broken = {**role, "rules": [{**role["rules"][0], "verb": ["get"]}]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33", strict=True)


def test_optional_objects_only_where_declared():
    objects = kubernetes.team_objects("research", KubernetesTenancy(), CLASSES)
    kinds = [o["kind"] for o in objects]
    assert "ResourceQuota" not in kinds
    # Only the team's priority classes are its own policy: baseline is bound once for every tenant namespace.
    assert [o["metadata"]["name"] for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")] == [
        "gpu-governance-priority-research"
    ] * 2
    assert kinds.count("NetworkPolicy") == 6


def test_namespaced_objects_live_in_the_team_namespace_and_serve_its_group():
    objects = kubernetes.team_objects("research", FULL, CLASSES)
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"hyperpod-ns-research"}
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert len(bindings) == 2
    for binding in bindings:
        assert binding["subjects"] == [
            {
                "kind": "Group",
                "name": "hyperpod-ns-research-namespace-level-group",
                "apiGroup": "rbac.authorization.k8s.io",
            }
        ]


def test_team_role_submits_and_watches_jobs_but_never_touches_secrets():
    role = by_kind_and_name(kubernetes.rbac("research"))[("Role", "gpu-governance-team")]
    rules = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert {"create", "watch", "delete"} <= rules[("kubeflow.org", "pytorchjobs")]
    assert {"create", "watch"} <= rules[("batch", "jobs")]
    assert {"create", "watch"} <= rules[("sagemaker.amazonaws.com", "hyperpodpytorchjobs")]
    assert rules[("", "pods")] == {"get", "list", "watch"}
    assert rules[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch"}
    assert not any("secrets" in resource or resource == "*" for _, resource in rules)
    assert not any("*" in verbs for verbs in rules.values())


def test_no_team_object_lets_the_team_edit_a_namespace_or_an_admission_policy():
    # Pod security labels and admission policies hold only if a tenant cannot change them: no
    # rule names namespaces or the admission API, and nothing may be updated or patched.
    for rule in [r for o in kubernetes.rbac("research") if "rules" in o for r in o["rules"]]:
        assert "namespaces" not in rule["resources"] and "admissionregistration.k8s.io" not in rule["apiGroups"]
        assert not {"update", "patch", "*"} & set(rule["verbs"])


def test_pod_security_labels_enforce_audit_and_warn_pinned_to_the_cluster_version():
    labels = kubernetes.pod_security_labels(PodSecurityLevel.RESTRICTED, "1.33")
    assert labels == {
        **{f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")},
        **{f"pod-security.kubernetes.io/{mode}-version": "v1.33" for mode in ("enforce", "audit", "warn")},
    }


def test_restricted_is_bound_to_the_team_namespace_only():
    (binding,) = [
        o
        for o in kubernetes.team_objects("research", FULL, CLASSES)
        if o["metadata"]["name"].startswith("gpu-governance-pod-security")
    ]
    assert binding["spec"]["policyName"] == "gpu-governance-pod-security-restricted"
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["hyperpod-ns-research"]}
    ]


def test_cluster_queue_access_is_read_only_and_limited_to_its_own_queue():
    cluster_role = by_kind_and_name(kubernetes.rbac("research"))[
        ("ClusterRole", "gpu-governance-research-clusterqueue-reader")
    ]
    (rule,) = cluster_role["rules"]
    assert rule["resources"] == ["clusterqueues"]
    assert rule["resourceNames"] == ["hyperpod-ns-research-clusterqueue"]
    assert set(rule["verbs"]) == {"get", "list", "watch"}


def _policies(team="research"):
    return {p["metadata"]["name"]: p["spec"] for p in kubernetes.network_policies(team)}


def test_default_deny_covers_every_pod_both_ways():
    deny = _policies()["default-deny"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_allows_are_exactly_the_documented_ones():
    assert set(_policies()) == {
        "default-deny",
        "allow-dns",
        "allow-same-namespace",
        "allow-operators",
        "allow-pod-identity-agent",
        "allow-https-egress",
    }
    docs = (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "hyperpod-eks.md").read_text()
    for name in _policies():
        assert f"`{name}`" in docs, f"docs/hyperpod-eks.md does not explain {name}"


def test_dns_allow_reaches_only_coredns_on_port_53():
    (rule,) = _policies()["allow-dns"]["egress"]
    (peer,) = rule["to"]
    assert peer["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("UDP", 53), ("TCP", 53)}


def test_same_namespace_allow_names_no_other_namespace():
    spec = _policies()["allow-same-namespace"]
    # A bare podSelector (no namespaceSelector) matches pods of the policy's own namespace only.
    assert spec["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert spec["egress"] == [{"to": [{"podSelector": {}}]}]


def test_operator_allow_names_the_kueue_and_training_operator_namespaces():
    spec = _policies()["allow-operators"]
    (ingress_peer,) = spec["ingress"][0]["from"]
    namespaces = ingress_peer["namespaceSelector"]["matchExpressions"][0]["values"]
    assert {"kueue-system", "kubeflow", "aws-hyperpod"} == set(namespaces)
    assert "podSelector" not in ingress_peer or ingress_peer["podSelector"] == {}


def test_no_allow_lets_another_tenant_namespace_in():
    for name, spec in _policies().items():
        for rule in spec.get("ingress", []):
            for peer in rule["from"]:
                selected = peer.get("namespaceSelector", {}).get("matchExpressions", [{}])[0].get("values", [])
                assert not any(ns.startswith("hyperpod-ns-") for ns in selected), name
                assert "ipBlock" not in peer, name


def test_egress_to_the_world_is_https_only_and_pod_identity_agent_is_reachable():
    policies = _policies()
    (https,) = policies["allow-https-egress"]["egress"]
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    (agent,) = policies["allow-pod-identity-agent"]["egress"]
    assert [peer["ipBlock"]["cidr"] for peer in agent["to"]] == ["169.254.170.23/32", "fd00:ec2::23/128"]
    assert agent["ports"] == [{"protocol": "TCP", "port": 80}]


def test_gpu_quota_uses_the_only_form_kubernetes_accepts():
    quota = kubernetes.gpu_quota("research", 16)
    assert quota["spec"] == {"hard": {"requests.nvidia.com/gpu": "16"}}


def test_dedicated_nodes_policy_guards_both_directions():
    policy, binding = kubernetes.dedicated_node_admission("research")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["pods"]
    others, own = spec["validations"]
    assert others["expression"] == "variables.ownNamespace || !variables.toleratesTaint"
    assert "variables.selectsNodes && variables.toleratesTaint" in own["expression"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["ownNamespace"] == "request.namespace == 'hyperpod-ns-research'"
    assert (
        "'gpu-governance/dedicated-team'" in variables["toleratesTaint"] and "'research'" in variables["toleratesTaint"]
    )
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    exempt = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert exempt["operator"] == "NotIn" and "kube-system" in exempt["values"]
    assert not any(ns.startswith("hyperpod-ns-") for ns in exempt["values"])


def test_dedicated_node_config_matches_the_admission_policy():
    config = kubernetes.dedicated_node_config("research")
    assert config == {
        "Labels": {"gpu-governance/dedicated-team": "research"},
        "Taints": [{"Key": "gpu-governance/dedicated-team", "Value": "research", "Effect": "NoSchedule"}],
    }
