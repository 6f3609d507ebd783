"""The deploy-time handler that labels and taints dedicated instance groups. SageMaker goes
through botocore's Stubber (moto has no UpdateCluster; the Stubber checks every request and
response against the installed service model); the retry test sends real botocore requests to a
fake endpoint so botocore's own retry handling runs."""

import json

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from hypothesis import given, strategies as st

from gpu_governance_runtime.dedicated_nodes import (
    DEDICATED_NODE_KEY,
    RETRY_CONFIG,
    dedicate,
    handler,
    physical_id,
    same,
    wanted_groups,
)
from gpu_governance_runtime.hyperpod_cluster import MissingInstanceGroup

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
OURS_VISION = {"Key": DEDICATED_NODE_KEY, "Value": "vision", "Effect": "NoSchedule"}
OTHER_TAINT = {"Key": "nvidia.com/gpu", "Value": "present", "Effect": "NoSchedule"}
# Described groups: desired and current values, status fields the request shape lacks.
VISION = {
    "InstanceGroupName": "vision-p5",
    "InstanceType": "ml.p5.48xlarge",
    "CurrentCount": 2,
    "TargetCount": 2,
    "ExecutionRole": "arn:aws:iam::111122223333:role/hyperpod-nodes",
    "ThreadsPerCore": 1,
    "Status": "InService",
    "LifeCycleConfig": {"SourceS3Uri": "s3://acme-lifecycle/", "OnCreate": "on_create.sh"},
    "CurrentImageId": "ami-0aaaaaaaaaaaaaaa1",
    "DesiredImageId": "ami-0aaaaaaaaaaaaaaa1",
    "KubernetesConfig": {
        "CurrentLabels": {"tier": "gold"},
        "DesiredLabels": {"tier": "gold"},
        "CurrentTaints": [OTHER_TAINT],
        "DesiredTaints": [OTHER_TAINT],
    },
}
SPEECH = {**VISION, "InstanceGroupName": "speech-g5", "InstanceType": "ml.g5.12xlarge", "KubernetesConfig": {}}
SHARED = {**VISION, "InstanceGroupName": "shared", "InstanceType": "ml.g5.12xlarge"}
# What UpdateCluster must receive for vision-p5 apart from KubernetesConfig: no status fields.
VISION_SPEC = {
    "InstanceGroupName": "vision-p5",
    "InstanceType": "ml.p5.48xlarge",
    "InstanceCount": 2,
    "ExecutionRole": "arn:aws:iam::111122223333:role/hyperpod-nodes",
    "ThreadsPerCore": 1,
    "LifeCycleConfig": {"SourceS3Uri": "s3://acme-lifecycle/", "OnCreate": "on_create.sh"},
    "ImageId": "ami-0aaaaaaaaaaaaaaa1",
}
VISION_DEDICATED = {"Labels": {"tier": "gold", DEDICATED_NODE_KEY: "vision"}, "Taints": [OTHER_TAINT, OURS_VISION]}


def event(request_type, groups, old_groups=None, cluster=CLUSTER, old_cluster=CLUSTER):
    body = {
        "RequestType": request_type,
        "ResourceProperties": {"ServiceToken": "arn", "ClusterArn": cluster, "Groups": groups},
    }
    if old_groups is not None:
        body["OldResourceProperties"] = {"ServiceToken": "arn", "ClusterArn": old_cluster, "Groups": old_groups}
    return body


def with_config(group, labels, taints):
    return {
        **group,
        "KubernetesConfig": {
            "CurrentLabels": labels,
            "DesiredLabels": labels,
            "CurrentTaints": taints,
            "DesiredTaints": taints,
        },
    }


@pytest.fixture
def sagemaker():
    client = boto3.client("sagemaker", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()  # every queued call was made, and no other (the Stubber refuses unqueued ones)


def described(stub, *groups):
    stub.add_response(
        "describe_cluster",
        {"ClusterArn": CLUSTER, "ClusterStatus": "InService", "InstanceGroups": list(groups)},
        {"ClusterName": CLUSTER},
    )


def updated(stub, *specs):
    stub.add_response(
        "update_cluster", {"ClusterArn": CLUSTER}, {"ClusterName": CLUSTER, "InstanceGroups": list(specs)}
    )


def test_create_sends_the_declared_group_only_with_ours_merged_into_its_config(sagemaker, capsys):
    client, stub = sagemaker
    described(stub, SHARED, VISION)
    updated(stub, {**VISION_SPEC, "KubernetesConfig": VISION_DEDICATED})
    result = handler(event("Create", {"vision-p5": "vision"}), sagemaker=client)
    assert result == {"PhysicalResourceId": f"{CLUSTER}/dedicated-nodes", "Data": {"UpdatedGroups": "vision-p5"}}
    log, metric = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert log["updated"] == ["vision-p5"] and log["request"] == "Create"
    assert (
        metric["DedicatedGroupsUpdated"] == 1
        and metric["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "GpuGovernance/HyperPod"
    )


def test_groups_already_right_and_duplicate_events_make_no_call(sagemaker):
    client, stub = sagemaker
    # Ours first this time: the order of taints does not make a difference.
    right = with_config(VISION, {"tier": "gold", DEDICATED_NODE_KEY: "vision"}, [OURS_VISION, OTHER_TAINT])
    for request_type in ("Create", "Update", "Update"):
        described(stub, right)
        result = handler(
            event(request_type, {"vision-p5": "vision"}, {"vision-p5": "vision"} if request_type == "Update" else None),
            sagemaker=client,
        )
        assert result["Data"] == {"UpdatedGroups": ""}


def test_a_group_given_to_another_team_loses_the_old_team_and_keeps_the_rest(sagemaker):
    client, stub = sagemaker
    described(
        stub,
        with_config(
            VISION, {"tier": "gold", DEDICATED_NODE_KEY: "speech"}, [OTHER_TAINT, {**OURS_VISION, "Value": "speech"}]
        ),
    )
    updated(stub, {**VISION_SPEC, "KubernetesConfig": VISION_DEDICATED})
    assert (
        handler(event("Update", {"vision-p5": "vision"}, {"vision-p5": "speech"}), sagemaker=client)["Data"][
            "UpdatedGroups"
        ]
        == "vision-p5"
    )


def test_delete_removes_only_our_label_and_taint(sagemaker):
    client, stub = sagemaker
    described(
        stub, with_config(VISION, {"tier": "gold", DEDICATED_NODE_KEY: "vision"}, [OURS_VISION, OTHER_TAINT]), SPEECH
    )
    updated(stub, {**VISION_SPEC, "KubernetesConfig": {"Labels": {"tier": "gold"}, "Taints": [OTHER_TAINT]}})
    result = handler(event("Delete", {"vision-p5": "vision", "speech-g5": "speech"}), sagemaker=client)
    assert result["Data"]["UpdatedGroups"] == "vision-p5"  # speech-g5 carried nothing of ours


def test_update_clears_groups_no_longer_declared_in_the_same_call(sagemaker):
    client, stub = sagemaker
    speech_dedicated = with_config(SPEECH, {DEDICATED_NODE_KEY: "speech"}, [{**OURS_VISION, "Value": "speech"}])
    described(stub, VISION, speech_dedicated)
    speech_spec = {**VISION_SPEC, "InstanceGroupName": "speech-g5", "InstanceType": "ml.g5.12xlarge"}
    updated(
        stub,
        {**VISION_SPEC, "KubernetesConfig": VISION_DEDICATED},
        {**speech_spec, "KubernetesConfig": {"Labels": {}, "Taints": []}},
    )
    result = handler(event("Update", {"vision-p5": "vision"}, {"speech-g5": "speech"}), sagemaker=client)
    assert result["Data"]["UpdatedGroups"] == "speech-g5,vision-p5"


def test_moving_to_another_cluster_leaves_the_old_groups_to_the_delete_of_the_old_resource():
    other = "arn:aws:sagemaker:us-east-1:111122223333:cluster/zzzz9999yyyy"
    assert wanted_groups(event("Update", {"vision-p5": "vision"}, {"speech-g5": "speech"}, cluster=other)) == {
        "vision-p5": "vision"
    }
    assert physical_id(other) != physical_id(
        CLUSTER
    )  # so CloudFormation deletes the old resource, clearing the old cluster


def test_a_declared_group_missing_from_the_cluster_fails_with_a_clear_message(sagemaker):
    client, stub = sagemaker
    described(stub, SHARED)
    with pytest.raises(MissingInstanceGroup) as error:
        handler(event("Create", {"vision-p5": "vision", "speech-g5": "speech"}), sagemaker=client)
    assert str(error.value) == (
        f"HyperPod cluster {CLUSTER} has no instance group 'vision-p5', 'speech-g5'; it has ['shared']. "
        "Fix dedicated_instance_groups in the governance model, or create the group first."
    )


def test_delete_tolerates_groups_and_clusters_that_are_gone(sagemaker):
    client, stub = sagemaker
    described(stub, SHARED)  # the dedicated group was removed by hand: nothing of ours left on it
    assert handler(event("Delete", {"vision-p5": "vision"}), sagemaker=client)["Data"]["UpdatedGroups"] == ""
    stub.add_client_error("describe_cluster", service_error_code="ResourceNotFound", http_status_code=400)
    assert (
        handler(event("Delete", {"vision-p5": "vision"}), sagemaker=client)["PhysicalResourceId"]
        == f"{CLUSTER}/dedicated-nodes"
    )
    stub.add_client_error("describe_cluster", service_error_code="ResourceNotFound", http_status_code=400)
    with pytest.raises(ClientError):  # ...but creating on a cluster that does not exist fails
        handler(event("Create", {"vision-p5": "vision"}), sagemaker=client)


def test_an_update_refused_after_retries_fails_the_deployment_clearly(sagemaker):
    client, stub = sagemaker
    described(stub, VISION)
    stub.add_client_error(
        "update_cluster",
        service_error_code="ConflictException",
        service_message="Cluster is Updating",
        http_status_code=400,
    )
    with pytest.raises(
        RuntimeError,
        match=r"instance groups \['vision-p5'\] failed after retries \(ConflictException: Cluster is "
        r"Updating\); nothing was changed\. .*deploy again once it is InService",
    ):
        handler(event("Create", {"vision-p5": "vision"}), sagemaker=client)


def test_throttling_is_retried_by_botocore_and_the_update_goes_through():
    """Real requests through botocore's retry handler, answered by a fake endpoint: the first
    UpdateCluster is throttled, botocore resends it, and the deployment succeeds."""
    client = boto3.client(
        "sagemaker",
        region_name="us-east-1",
        config=RETRY_CONFIG,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    sent = []

    def answer(request, **_):
        operation = request.headers["X-Amz-Target"].decode().split(".")[-1]
        sent.append((operation, json.loads(request.body)))
        if operation == "DescribeCluster":
            return _response(200, {"ClusterArn": CLUSTER, "ClusterStatus": "InService", "InstanceGroups": [VISION]})
        if [name for name, _ in sent].count("UpdateCluster") == 1:
            return _response(400, {"__type": "ThrottlingException", "message": "Rate exceeded"})
        return _response(200, {"ClusterArn": CLUSTER})

    client.meta.events.register("before-send.sagemaker", answer)
    assert handler(event("Create", {"vision-p5": "vision"}), sagemaker=client)["Data"]["UpdatedGroups"] == "vision-p5"
    assert [name for name, _ in sent] == ["DescribeCluster", "UpdateCluster", "UpdateCluster"]
    assert (
        sent[1][1]
        == sent[2][1]
        == {"ClusterName": CLUSTER, "InstanceGroups": [{**VISION_SPEC, "KubernetesConfig": VISION_DEDICATED}]}
    )


def _response(status, body):
    return AWSResponse(
        "https://api.sagemaker.us-east-1.amazonaws.com/",
        status,
        {"Content-Type": "application/x-amz-json-1.1"},
        _Raw(json.dumps(body).encode()),
    )


class _Raw:
    def __init__(self, content):
        self.content = content

    def stream(self, **_):
        yield self.content


_label_keys = st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?", fullmatch=True).filter(lambda k: k != DEDICATED_NODE_KEY)
_teams = st.from_regex(r"[a-z]{1,10}", fullmatch=True)
_configs = st.fixed_dictionaries(
    {
        "Labels": st.dictionaries(_label_keys, _teams, max_size=4),
        "Taints": st.lists(
            st.builds(
                lambda k, v, e: {"Key": k, "Value": v, "Effect": e},
                _label_keys,
                _teams,
                st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            ),
            max_size=4,
        ),
    }
)


@given(config=_configs, team=_teams, other_team=_teams)
def test_dedicating_keeps_everything_not_ours_and_is_undone_by_clearing(config, team, other_team):
    dedicated = dedicate(config, team)
    assert same(dedicate(dedicated, team), dedicated)  # idempotent: a second run finds nothing to change
    assert dedicated["Labels"][DEDICATED_NODE_KEY] == team
    assert [t for t in dedicated["Taints"] if t["Key"] == DEDICATED_NODE_KEY] == [
        {"Key": DEDICATED_NODE_KEY, "Value": team, "Effect": "NoSchedule"}
    ]
    assert same(
        dedicate(dedicate(config, other_team), team), dedicated
    )  # re-dedication leaves no trace of the old team
    assert same(dedicate(dedicated, None), config)  # clearing restores exactly what was not ours
