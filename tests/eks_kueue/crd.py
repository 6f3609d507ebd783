"""An offline stand-in for the API server's validation of a custom resource against its CRD, so
the Kueue and Karpenter objects the library makes are checked against their projects' own CRDs.

The CRDs are those projects' files, not this one's, so they are not in the repository: the five
``config/components/crd/bases/kueue.x-k8s.io_<plural>.yaml`` of Kueue's release ``KUEUE_RELEASE``
(clusterqueues, cohorts, localqueues, resourceflavors, workloadpriorityclasses) are read from
``$KUEUE_CRDS``, else ``../shared/kueue-crds`` beside the checkout (as the openb trace is), and
Karpenter's ``pkg/apis/crds/karpenter.sh_nodepools.yaml`` and
``karpenter.k8s.aws_ec2nodeclasses.yaml`` of its release ``KARPENTER.release`` from
``$KARPENTER_CRDS``, else ``../shared/karpenter-crds``; the tests that need them say so when they
are missing (docs/eks-kueue.md, "Kueue's schemas").

What it reproduces, for a create: the structural schema of the served version (type, properties,
required, enum, pattern, lengths and counts, minimum and maximum, int-or-string, maps, list types
``set`` and ``map`` with their keys) with strict field validation (an unknown field is an error,
as ``kubectl apply --validate=strict`` makes it; the API server would otherwise drop it silently),
and the ``x-kubernetes-validations`` CEL rules, evaluated with a real CEL implementation
(cel-expr-python, with the strings extension and the regex ``find`` of Kubernetes' CEL libraries)
with ``self`` bound to the value at the rule's place. Transition rules (those
naming ``oldSelf``) do not run on a create, as in Kubernetes, and are skipped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CrdRelease:
    """One project's CRDs at a release: where they are read from, and the objects they validate."""

    project: str
    release: str
    env: str  # the variable naming their folder
    shared: str  # else this folder under ../shared beside the checkout
    marker: str  # a file the folder must hold
    groups: tuple[str, ...]  # the API groups the CRDs serve

    @cached_property
    def directory(self) -> Path | None:
        candidates = (
            Path(os.environ.get(self.env, "/nonexistent")),
            *(base / "shared" / self.shared for base in (ROOT.parent, ROOT.parent.parent)),
        )
        return next((path for path in candidates if (path / self.marker).exists()), None)

    @property
    def needed(self) -> pytest.MarkDecorator:
        return pytest.mark.skipif(
            self.directory is None,
            reason=f"needs {self.project} {self.release}'s CRDs in ${self.env} or ../shared/{self.shared} (docs/eks-kueue.md)",
        )

    @cache  # noqa: B019 - the releases are module constants
    def schema_of(self, kind: str, version: str) -> dict[str, Any]:
        """The openAPIV3Schema of ``kind`` at ``version``, from its CRD; a version not served raises."""
        for path in sorted(self.directory.glob("*.yaml")) if self.directory else ():
            crd = yaml.safe_load(path.read_text())
            if crd["spec"]["names"]["kind"] == kind:
                served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
                if version not in served:
                    raise LookupError(
                        f"{kind} {version} is not served by {self.project} {self.release}: {sorted(served)}"
                    )
                return served[version]["schema"]["openAPIV3Schema"]
        raise LookupError(f"no CRD for kind {kind} in {self.directory}")

    def validate(self, manifest: dict[str, Any]) -> list[str]:
        """What the API server would refuse in ``manifest`` (an object of the project's), as ``path: reason``."""
        group, _, version = manifest["apiVersion"].partition("/")
        if group not in self.groups:
            return [f"apiVersion: {manifest['apiVersion']} is not {self.project}'s"]
        errors: list[str] = []
        _check(manifest, self.schema_of(manifest["kind"], version), "", errors, top=True)
        return errors


KUEUE = CrdRelease(
    "Kueue", "v0.15.8", "KUEUE_CRDS", "kueue-crds", "kueue.x-k8s.io_clusterqueues.yaml", ("kueue.x-k8s.io",)
)
"""The Kueue release the CRDs come from (the oldest minor that serves v1beta2)."""
KARPENTER = CrdRelease(
    "Karpenter",
    "v1.14.1",
    "KARPENTER_CRDS",
    "karpenter-crds",
    "karpenter.sh_nodepools.yaml",
    ("karpenter.sh", "karpenter.k8s.aws"),
)
"""A current Karpenter v1 release (capacity blocks are selected since v1.6)."""
KUEUE_RELEASE = KUEUE.release
CRDS = KUEUE.directory
needs_kueue_crds = KUEUE.needed
schema_of = KUEUE.schema_of
validate = KUEUE.validate


def _find(text: str, pattern: str) -> str:
    """Kubernetes' regex library: the first match of ``pattern`` in ``text``, or ""."""
    match = re.search(pattern, text)
    return match.group(0) if match else ""


_ENV = cel.NewEnv(
    variables={"self": cel.Type.DYN},
    extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()],
    functions=[
        cel.FunctionDecl(
            "find",
            [cel.Overload("string_find_string", cel.Type.STRING, [cel.Type.STRING] * 2, is_member=True, impl=_find)],
        )
    ],
)
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


@cache
def _program(rule: str):
    return _ENV.compile(rule)


def _check(value: Any, schema: dict[str, Any], path: str, errors: list[str], top: bool = False) -> None:
    where = path or "<root>"
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{where}: null is not allowed")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            errors.append(f"{where}: {value!r} is neither an integer nor a string")
            return
    elif "type" in schema:
        expected = schema["type"]
        if expected == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif expected == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, _TYPES[expected])
        if not ok:
            errors.append(f"{where}: {value!r} is not of type {expected}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: {value!r} has a length outside the schema's bounds")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and (value < schema.get("minimum", value) or value > schema.get("maximum", value)):
        errors.append(f"{where}: {value!r} is outside [{schema.get('minimum')}, {schema.get('maximum')}]")
    if isinstance(value, list):
        _check_list(value, schema, where, path, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, errors, top)
    for validation in schema.get("x-kubernetes-validations", ()):
        rule = validation["rule"]
        if "oldSelf" in rule:
            continue  # a transition rule: not run on a create
        try:
            result = _program(rule).eval(data={"self": value})
            holds = result.value() if result.type() == cel.Type.ERROR else result.plain_value()
        except Exception as error:  # a rule that cannot be evaluated refuses the object
            holds = error
        if holds is not True:
            errors.append(f"{where}: {validation.get('message', rule)} [{rule}]")


def _check_list(value: list, schema: dict[str, Any], where: str, path: str, errors: list[str]) -> None:
    if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
        errors.append(f"{where}: {len(value)} items, outside the schema's bounds")
    kind = schema.get("x-kubernetes-list-type")
    if kind == "set" and len({repr(v) for v in value}) != len(value):
        errors.append(f"{where}: duplicate items in a set")
    if kind == "map":
        keys = schema.get("x-kubernetes-list-map-keys", ())
        seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
        if len(set(seen)) != len(seen):
            errors.append(f"{where}: duplicate {'/'.join(keys)} in a map list")
    for index, item in enumerate(value):
        _check(item, schema.get("items", {}), f"{path}[{index}]", errors)


def _check_object(value: dict, schema: dict[str, Any], path: str, errors: list[str], top: bool) -> None:
    if len(value) > schema.get("maxProperties", len(value)) or len(value) < schema.get("minProperties", 0):
        errors.append(f"{path or '<root>'}: {len(value)} fields, outside the schema's bounds")
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"{path}.{name}: required")
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        if top and name in ("apiVersion", "kind", "metadata"):
            continue  # the API server's own (ObjectMeta), not the CRD's
        child = f"{path}.{name}" if path else name
        if properties is not None and name in properties:
            _check(item, properties[name], child, errors)
        elif isinstance(extra, dict):
            _check(item, extra, child, errors)
        elif not schema.get("x-kubernetes-preserve-unknown-fields") and (properties is not None or extra is False):
            errors.append(f'{child}: unknown field "{name}"')
