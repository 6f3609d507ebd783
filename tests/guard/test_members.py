"""The guard's table of CreateTrainingJob members (gpu_governance_runtime/guard/members.py) against
botocore's request shape, walked recursively: every member SageMaker accepts is classified, either
itself or under a structure refused or checked whole; the table names nothing SageMaker lacks; an
allowed member is always a leaf (so a member added under it would be a new, unclassified path);
and each checked member has its check. The same walk over a model with one member added fails,
which is what keeps a new SageMaker field from slipping by."""

from __future__ import annotations

import copy
from pathlib import Path

import botocore
from botocore.model import ServiceModel

from gpu_governance_runtime.guard import checks
from gpu_governance_runtime.guard.members import ALLOWED, CHECKED, KINDS, MEMBERS, REFUSED, containers

from .request_shape import is_structure, paths, sagemaker


def unclassified(model: ServiceModel) -> list[str]:
    """The leaves neither in the table nor under a member classified whole."""
    whole = {path.replace("[]", "") for path in MEMBERS}

    def covered(path: str) -> bool:
        parts = path.replace("[]", "").split(".")
        return path in MEMBERS or any(".".join(parts[:end]) in whole for end in range(1, len(parts)))

    return sorted(path for path, shape in paths(model).items() if not is_structure(shape) and not covered(path))


def test_every_member_botocore_knows_is_classified_and_the_table_names_no_other():
    known = paths(sagemaker())
    assert unclassified(sagemaker()) == []
    assert sorted(set(MEMBERS) - set(known)) == []
    # The structures the runtime walks into are exactly the botocore structures above classified members.
    assert containers() <= {p for p, s in known.items() if s.type_name in ("structure", "list")} | {
        f"{p}[]" for p, s in known.items() if s.type_name == "list"
    }


def test_a_member_sagemaker_adds_fails_the_walk_until_it_is_classified():
    """What happens when botocore learns a new member: anywhere except under a member refused or
    checked whole, it is unclassified."""
    loader = botocore.loaders.create_loader()
    document = copy.deepcopy(loader.load_service_model("sagemaker", "service-2"))
    shapes = document["shapes"]
    shapes["ResourceConfig"]["members"]["BorrowedCapacityArn"] = {"shape": "String"}  # under an allowed structure
    shapes["CreateTrainingJobRequest"]["members"]["SharedClusterArn"] = {"shape": "String"}  # at the top
    shapes["DebugRuleConfiguration"]["members"]["ExtraInstances"] = {"shape": "String"}  # under a refused whole
    assert unclassified(ServiceModel(document, "sagemaker")) == [
        "ResourceConfig.BorrowedCapacityArn",
        "SharedClusterArn",
    ]


def test_only_refused_or_checked_members_are_classified_whole_and_every_member_has_a_kind():
    known = paths(sagemaker())
    for path, member in MEMBERS.items():
        assert member.kind in KINDS and member.verdict in (ALLOWED, REFUSED, CHECKED), path
        if is_structure(known[path]):
            assert member.verdict in (REFUSED, CHECKED), f"{path} is allowed whole: list its members instead"


def test_each_checked_member_has_its_check_and_no_check_reads_another():
    assert set(checks.CHECKS) == {path for path, member in MEMBERS.items() if member.verdict == CHECKED}


def test_the_classification_table_in_the_docs_is_the_table():
    """docs/security.md lists each kind's members: generated from MEMBERS, so it cannot drift."""
    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    for path, member in MEMBERS.items():
        assert f"| `{path}` | {member.kind} | {member.verdict} |" in text, path
