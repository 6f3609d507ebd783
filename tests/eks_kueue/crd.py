"""An offline stand-in for the API server's validation of a custom resource against its CRD, so
the Kueue objects the library makes are checked against Kueue's own CRDs.

The CRDs are Kueue's files, not this project's, so they are not in the repository: the five
``config/components/crd/bases/kueue.x-k8s.io_<plural>.yaml`` of Kueue's release ``KUEUE_RELEASE``
(clusterqueues, cohorts, localqueues, resourceflavors, workloadpriorityclasses) are read from
``$KUEUE_CRDS``, else ``../shared/kueue-crds`` beside the checkout (as the openb trace is); the
tests that need them say so when they are missing (docs/eks-kueue.md, "Kueue's schemas").

What it reproduces, for a create: the structural schema of the served version (type, properties,
required, enum, pattern, lengths and counts, minimum and maximum, int-or-string, maps, list types
``set`` and ``map`` with their keys) with strict field validation (an unknown field is an error,
as ``kubectl apply --validate=strict`` makes it; the API server would otherwise drop it silently),
and the ``x-kubernetes-validations`` CEL rules, evaluated with a real CEL implementation
(cel-expr-python) with ``self`` bound to the value at the rule's place. Transition rules (those
naming ``oldSelf``) do not run on a create, as in Kubernetes, and are skipped.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

ROOT = Path(__file__).resolve().parents[2]
KUEUE_RELEASE = "v0.15.8"
"""The Kueue release the CRDs come from (the oldest minor that serves v1beta2)."""
CRDS = next(
    (
        path
        for path in (
            Path(os.environ.get("KUEUE_CRDS", "/nonexistent")),
            *(base / "shared" / "kueue-crds" for base in (ROOT.parent, ROOT.parent.parent)),
        )
        if (path / "kueue.x-k8s.io_clusterqueues.yaml").exists()
    ),
    None,
)
needs_kueue_crds = pytest.mark.skipif(
    CRDS is None,
    reason=f"needs Kueue {KUEUE_RELEASE}'s CRDs in $KUEUE_CRDS or ../shared/kueue-crds (docs/eks-kueue.md)",
)

_ENV = cel.NewEnv(variables={"self": cel.Type.DYN}, extensions=[ext_optional.ExtOptional()])
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


@cache
def schema_of(kind: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of ``kind`` at ``version``, from its CRD; a version not served raises."""
    for path in sorted(CRDS.glob("*.yaml")) if CRDS else ():
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
            if version not in served:
                raise LookupError(f"{kind} {version} is not served by Kueue {KUEUE_RELEASE}: {sorted(served)}")
            return served[version]["schema"]["openAPIV3Schema"]
    raise LookupError(f"no CRD for kind {kind} in {CRDS}")


def validate(manifest: dict[str, Any]) -> list[str]:
    """What the API server would refuse in ``manifest`` (a Kueue object), as ``path: reason``."""
    group, _, version = manifest["apiVersion"].partition("/")
    if group != "kueue.x-k8s.io":
        return [f"apiVersion: {manifest['apiVersion']} is not Kueue's"]
    errors: list[str] = []
    _check(manifest, schema_of(manifest["kind"], version), "", errors, top=True)
    return errors


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
