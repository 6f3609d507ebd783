"""Instance types are checked against the service models botocore ships (issue 26, item 7): a
well-formed name AWS does not know is refused with the path, the value and the nearest names;
a type newer than the installed botocore is allowed by listing it."""

from __future__ import annotations

import json

import pytest

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel

from .org import default_data

UNKNOWN = "ml.g9x.12xlarge"


def renamed(data: dict, pool: str, old: str, new: str) -> dict:
    """``data`` with instance type ``old`` of ``pool`` renamed everywhere the pool uses it."""
    text = json.dumps(data)
    target = next(p for p in data["pools"] if p["name"] == pool)
    assert old in target["capacity"]
    return json.loads(text.replace(f'"{old}"', f'"{new}"'))


def problems(data: dict) -> list[str]:
    with pytest.raises(GovernanceError) as refused:
        GovernanceModel.from_dict(data)
    return [f"{p.path}: {p.wrong}" for p in refused.value.problems]


def test_an_instance_type_sagemaker_does_not_know_is_refused_naming_the_nearest(tmp_path, capsys):
    data = renamed(default_data(), "sagemaker-training", "ml.g6e.12xlarge", UNKNOWN)
    config = tmp_path / "governance.json"
    config.write_text(json.dumps(data))
    assert main(["validate", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert (
        f"pools[0].capacity.{UNKNOWN}: not an instance type AWS knows (sagemaker TrainingInstanceType in botocore"
        in error
    )
    assert f"('{UNKNOWN}') - e.g. ml.g" in error and "allow_unlisted_instance_types" in error  # the nearest real names


def test_a_type_newer_than_botocore_is_allowed_when_listed():
    data = renamed(default_data(), "sagemaker-training", "ml.g6e.12xlarge", UNKNOWN)
    for team in data["teams"]:
        team.pop("gpu_hour_limit", None)  # a limit counts GPUs, which the library cannot know of a newer type
    model = GovernanceModel.from_dict({**data, "allow_unlisted_instance_types": [UNKNOWN]})
    assert UNKNOWN in model.pool("sagemaker-training").capacity


def test_a_listed_new_type_needs_its_gpus_only_where_a_gpu_hour_limit_counts_them():
    # The reference's research has a GPU-hour limit, counted on the quota-share pool in GPUs: the
    # library cannot know a newer type's GPUs, so validate asks for them, naming the field.
    data = renamed(default_data(), "sagemaker-training", "ml.g6e.12xlarge", UNKNOWN)
    with pytest.raises(GovernanceError) as caught:
        GovernanceModel.from_dict({**data, "allow_unlisted_instance_types": [UNKNOWN]})
    assert "gpu_hour_limit: counted in GPU hours, but the GPUs of one ml.g9x.12xlarge are not known" in str(
        caught.value
    )


def test_each_backend_is_checked_against_the_api_that_takes_its_instances():
    data = default_data()
    fair_share = next(p for p in data["pools"] if p["backend"] == "batch_fair_share")
    ec2_type = next(iter(fair_share["capacity"]))
    # an EC2 pool takes EC2 names
    assert "pools[1].capacity.g9x.12xlarge: not an instance type AWS knows (ec2 InstanceType in botocore" in "\n".join(
        problems(renamed(data, fair_share["name"], ec2_type, "g9x.12xlarge"))
    )
    # a HyperPod cluster takes ClusterInstanceType: ml.c4.xlarge trains jobs but is no HyperPod node
    slurm = next(p for p in data["pools"] if p["backend"] == "hyperpod_slurm")
    old = next(iter(slurm["capacity"]))
    assert any(
        "not an instance type AWS knows (sagemaker ClusterInstanceType" in line and "ml.c4.xlarge" in line
        for line in problems(renamed(data, slurm["name"], old, "ml.c4.xlarge"))
    )


def test_the_shipped_examples_use_only_types_aws_knows():
    from pathlib import Path

    from constructs_lib.model.loader import load_model

    root = Path(__file__).resolve().parents[2]
    for path in [
        *root.glob("examples/*.yaml"),
        *root.glob("benchmarks/*.yaml"),
        root / "constructs_lib" / "data" / "default-governance.yaml",
    ]:
        assert load_model(path).allow_unlisted_instance_types == (), path


def test_the_enumerations_read_are_botocores_own():
    import botocore.session

    from constructs_lib.model.instance_types import CLUSTER, EC2, TRAINING, known

    session = botocore.session.get_session()
    for service, shape in (TRAINING, CLUSTER, EC2):
        assert known((service, shape)) == set(session.get_service_model(service).shape_for(shape).enum), shape
