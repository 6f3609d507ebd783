"""An offline stand-in for the Kubernetes API server's ValidatingAdmissionPolicy plugin, so tests
run the CEL of the policies the library ships with a real CEL implementation (cel-expr-python,
Google's C++ runtime) against sample objects.

What it reproduces: resource rules (group, version, resource/subresource, operation), the
binding's namespace selector (``kubernetes.io/metadata.name`` is on every namespace), match
conditions, variables (composited in order under ``variables``), validations, and
``failurePolicy: Fail`` (a rule that cannot be evaluated denies). Like the API server it declares
``object``, ``oldObject`` and ``request`` as dynamic values. It enables only CEL's standard
library and the optional syntax (``.?field``, ``orValue``): an expression that needs a Kubernetes
extension function fails to compile here, so the policies must not use one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

# kind -> (API group, version, resource)
RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "Job": ("batch", "v1", "jobs"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "HyperPodPyTorchJob": ("sagemaker.amazonaws.com", "v1", "hyperpodpytorchjobs"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "TFJob": ("kubeflow.org", "v1", "tfjobs"),
    "XGBoostJob": ("kubeflow.org", "v1", "xgboostjobs"),
    "PaddleJob": ("kubeflow.org", "v1", "paddlejobs"),
    "JAXJob": ("kubeflow.org", "v1", "jaxjobs"),
    "PersistentVolume": ("", "v1", "persistentvolumes"),
}
TENANT = "arn:aws:sts::111122223333:assumed-role/research-gpu-submit/alice"
"""The user EKS names a tenant by (its access entry sets no username: the assumed role's session)."""
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
"""The user the job controller makes a Job's pods as."""

_ENV = cel.NewEnv(
    variables={name: cel.Type.DYN for name in ("object", "oldObject", "request", "variables")},
    extensions=[ext_optional.ExtOptional()],
)


class CelError(Exception):
    """An expression did not compile or did not evaluate to a value of the expected type."""


@cache
def compile_expression(expression: str):
    try:
        return _ENV.compile(expression)
    except Exception as error:  # the runtime raises its own status type
        raise CelError(f"{expression}: {error}") from None


def evaluate(expression: str, data: dict[str, Any]) -> Any:
    result = compile_expression(expression).eval(data=data)
    if result.type() == cel.Type.ERROR:
        raise CelError(f"{expression}: {result.value()}")
    return result.plain_value()


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for requirement in selector.get("matchExpressions", []):
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values", [])
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels[key] not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not ok:
            return False
    return True


def _rule_matches(rule: dict[str, Any], group: str, version: str, resource: str, operation: str) -> bool:
    def has(field: str, value: str) -> bool:
        return "*" in rule[field] or value in rule[field]

    return (
        has("apiGroups", group)
        and has("apiVersions", version)
        and has("resources", resource)
        and has("operations", operation)
    )


@dataclass(frozen=True)
class Denial:
    policy: str
    message: str


class Admission:
    """The admission policies and bindings among ``objects`` (anything else is ignored)."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        objects = list(objects)
        self.policies = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
        self.bindings = [o["spec"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]

    def expressions(self) -> list[str]:
        """Every CEL expression of every policy."""
        out = []
        for spec in self.policies.values():
            out += [c["expression"] for c in spec.get("matchConditions", [])]
            out += [v["expression"] for v in spec.get("variables", [])]
            out += [v["expression"] for v in spec["validations"]]
        return out

    def review(
        self,
        obj: dict[str, Any],
        namespace: str,
        operation: str = "CREATE",
        subresource: str = "",
        namespace_labels: dict[str, str] | None = None,
        old_object: dict[str, Any] | None = None,
        username: str = TENANT,
    ) -> list[Denial]:
        """The denials the API server would return for ``obj`` (empty: admitted) when ``username``
        sends it; an UPDATE's old object is ``old_object``, or ``obj`` itself when not given."""
        group, version, resource = RESOURCES[obj["kind"]]
        request = {
            "operation": operation,
            "namespace": namespace,
            "name": obj.get("metadata", {}).get("name", ""),
            "subResource": subresource,
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": resource},
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
        }
        labels = {**(namespace_labels or {}), "kubernetes.io/metadata.name": namespace}
        path = f"{resource}/{subresource}" if subresource else resource
        data = {"object": obj, "oldObject": (old_object or obj) if operation == "UPDATE" else None, "request": request}
        denials = []
        for binding in self.bindings:
            name = binding["policyName"]
            spec = self.policies[name]
            if not any(
                _rule_matches(r, group, version, path, operation) for r in spec["matchConstraints"]["resourceRules"]
            ):
                continue
            if not _selects(binding.get("matchResources", {}).get("namespaceSelector"), labels):
                continue
            assert spec["failurePolicy"] == "Fail" and binding["validationActions"] == ["Deny"]
            if not all(self._bool(c["expression"], data) for c in spec.get("matchConditions", [])):
                continue
            variables: dict[str, Any] = {}
            for variable in spec.get("variables", []):
                variables[variable["name"]] = evaluate(variable["expression"], {**data, "variables": variables})
            denials += [
                Denial(name, v["message"])
                for v in spec["validations"]
                if not self._bool(v["expression"], {**data, "variables": variables})
            ]
        return denials

    @staticmethod
    def _bool(expression: str, data: dict[str, Any]) -> bool:
        value = evaluate(expression, data)
        if not isinstance(value, bool):
            raise CelError(f"{expression}: evaluated to {value!r}, not a bool")
        return value
