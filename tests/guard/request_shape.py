"""botocore's CreateTrainingJob request shape, walked the way the guard's table names its members
(``Parent.Member``, ``List[].Member``): what tests/guard/test_members.py compares the table with and
tests/guard/test_guard.py fills example payloads from."""

from __future__ import annotations

import botocore.session
from botocore.model import ServiceModel

OPERATION = "CreateTrainingJob"


def sagemaker() -> ServiceModel:
    return botocore.session.get_session().get_service_model("sagemaker")


def paths(model: ServiceModel) -> dict[str, object]:
    """Every member of the request at every depth, by the table's path syntax -> its shape."""
    found: dict[str, object] = {}

    def walk(shape, prefix: str) -> None:
        for name, member in shape.members.items():
            path = f"{prefix}.{name}" if prefix else name
            found[path] = member
            if is_structure(member):
                inner = member.member if member.type_name == "list" else member
                walk(inner, f"{path}[]" if member.type_name == "list" else path)

    walk(model.operation_model(OPERATION).input_shape, "")
    return found


def is_structure(shape) -> bool:
    """A structure, or a list of structures: walked into, its members classified one by one."""
    return (shape.member if shape.type_name == "list" else shape).type_name == "structure"
