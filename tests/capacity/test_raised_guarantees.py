"""The capacity controller publishes the guarantees it has raised (capacity/raised.py) for the
reclaim controller: only what the quotas show, until the raise is lowered; and an update of a
stack holding a raised quota (which put the declared quota back) is a plain run that raises it
again. moto for SSM and DynamoDB, Stubber for Batch (moto lacks quota shares)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime import contract, raised_guarantees
from gpu_governance_runtime.capacity import raised, shares
from gpu_governance_runtime.capacity.handler import Clients, process

from .builders import at, block
from .stubbed_aws import create_ledger_table, training_plan_summary
from .test_handler import WINDOW, env  # noqa: F401 - the handler's fixture: policy file, clients, settings
from .test_shares import JOBS, PLAN, POOL, environment_shows, share_shows

PARAMETER = contract.raised_guarantees_parameter("acme-ml")
ENTRY = {
    "pool": "sagemaker-training",
    "team": "research",
    "instance_type": "ml.p5.48xlarge",
    "instances": 4,
    "until": (PLAN.end - shares.LOWER_LEAD).isoformat(),
    "window": JOBS.name,
}
KINDS = {shares.TRAINING_JOBS: {POOL.name: POOL}, shares.INSTANCE_GROUP: {}}


@pytest.fixture
def aws():
    with mock_aws():
        batch = boto3.client("batch", region_name="us-east-1")
        with Stubber(batch) as stub:
            yield batch, stub, create_ledger_table(), boto3.client("ssm", region_name="us-east-1")


def applied_after(batch, ledger, now):
    desired = shares.desired_limits(windows={JOBS.name: JOBS}, owned=[PLAN], pools={POOL.name: POOL}, now=now)
    results = shares.apply_batch(desired=desired, pools={POOL.name: POOL}, batch=batch, ledger=ledger, now=now)
    return raised.applied(windows={JOBS.name: JOBS}, owned=[PLAN], pools=KINDS, results=results, now=now)


def test_what_the_quotas_show_is_published_until_it_is_lowered(aws):
    batch, stub, ledger, ssm = aws
    environment_shows(stub, 8, update_to=12)
    share_shows(stub, 2, update_to=6)
    entries = applied_after(batch, ledger, at(10, 12, 0))
    assert entries == [ENTRY]
    key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
    assert raised.publish(entries, ssm=ssm, name=PARAMETER, key_id=key) == {
        "parameter": PARAMETER,
        "raises": 1,
        "changed": True,
    }
    assert (
        raised.publish(entries, ssm=ssm, name=PARAMETER, key_id=key)["changed"] is False
    )  # a repeated run writes nothing
    assert raised_guarantees.read(ssm=ssm, name=PARAMETER, now=at(10, 12, 0)) == [ENTRY]
    # A parameter the controller stopped updating inflates nothing past the raise's end.
    assert raised_guarantees.read(ssm=ssm, name=PARAMETER, now=PLAN.end - shares.LOWER_LEAD) == []
    share_shows(stub, 6, update_to=2)
    environment_shows(stub, 12, update_to=8)
    assert applied_after(batch, ledger, PLAN.end - shares.LOWER_LEAD) == []  # lowered: nothing published
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("environment_update, share_error", [(12, "ThrottlingException"), (None, None)])
def test_a_raise_the_quota_does_not_show_is_not_published(aws, environment_update, share_error):
    batch, stub, ledger, _ = aws
    if environment_update:  # the environment is raised, the share's update throttled
        environment_shows(stub, 8, update_to=environment_update)
        share_shows(stub, 2, error=share_error)
    else:  # the service environment is missing: the share is raised, but the pool cannot hold it
        stub.add_response(
            "describe_service_environments",
            {"serviceEnvironments": []},
            {"serviceEnvironments": ["sagemaker-training"]},
        )
        share_shows(stub, 2, update_to=6)
    assert applied_after(batch, ledger, at(10, 12, 0)) == []
    stub.assert_no_pending_responses()


def test_no_parameter_yet_reads_as_no_raise_and_a_foreign_document_is_refused(aws):
    *_, ssm = aws
    assert raised_guarantees.read(ssm=ssm, name=PARAMETER, now=at(10, 12, 0)) == []
    for value in (
        '{"pool": "x"}',
        json.dumps([{**ENTRY, "instances": "4"}]),
        json.dumps([{**ENTRY, "until": "soon"}]),
        json.dumps([{**ENTRY, "instance_type": ["ml.p5.48xlarge"]}]),
        json.dumps([{**ENTRY, "until": "2026-12-10T12:00:00"}]),
        "not json",
    ):
        ssm.put_parameter(Name=PARAMETER, Value=value, Type="SecureString", Overwrite=True)
        with pytest.raises(RuntimeError, match="raised-guarantees"):
            raised_guarantees.read(ssm=ssm, name=PARAMETER, now=at(10, 12, 0))


@pytest.mark.parametrize(
    "entry",
    [
        {**ENTRY, "instances": 65},  # more than any block or plan holds
        {**ENTRY, "until": "2027-12-10T12:00:00+00:00"},  # lowered a year from now: no purchase lasts that long
    ],
)
def test_a_raise_beyond_what_any_purchase_holds_is_refused(aws, entry):
    *_, ssm = aws
    ssm.put_parameter(Name=PARAMETER, Value=json.dumps([entry]), Type="SecureString")
    with pytest.raises(RuntimeError, match="instances 1 to 64 and until ISO 8601 at most 238 days ahead"):
        raised_guarantees.read(ssm=ssm, name=PARAMETER, now=at(10, 12, 0))


def test_a_plain_string_written_by_someone_else_is_refused_and_the_controller_writes_it_back_encrypted(aws):
    *_, ssm = aws
    ssm.put_parameter(
        Name=PARAMETER, Value=json.dumps([{**ENTRY, "instances": 40}]), Type="String"
    )  # ssm:PutParameter on *
    with pytest.raises(RuntimeError, match="a String parameter - a SecureString under the capacity controller's key"):
        raised_guarantees.read(ssm=ssm, name=PARAMETER, now=at(10, 12, 0))
    key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
    assert raised.publish([ENTRY], ssm=ssm, name=PARAMETER, key_id=key)["changed"] is True
    assert raised.publish([{**ENTRY, "instances": 40}], ssm=ssm, name=PARAMETER, key_id=key)["changed"] is True
    ssm.put_parameter(
        Name=PARAMETER, Value=json.dumps([{**ENTRY, "instances": 40}], sort_keys=True), Type="String", Overwrite=True
    )
    assert (
        raised.publish([{**ENTRY, "instances": 40}], ssm=ssm, name=PARAMETER, key_id=key)["changed"] is True
    )  # same value, wrong type
    assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Type"] == "SecureString"


@pytest.mark.parametrize("mode", ["auto", "dry_run"])
def test_a_stack_update_that_reset_the_share_is_a_run_that_raises_it_again(env, tmp_path, mode):  # noqa: F811 - the fixture
    stubbed, clients, settings, _ = env
    window = {
        **WINDOW,
        "name": JOBS.name,
        "market": "training_plan",
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 4,
        "start": "2026-12-10T11:30:00+00:00",
        "duration_hours": 8,
        "mode": mode,
        "consumer": {"kind": "sagemaker_training_jobs", "pool": POOL.name},
    }
    pool = {
        "name": POOL.name,
        "backend": "batch_quota_share",
        "capacity": {"ml.p5.48xlarge": 8},
        "shares": [
            {
                "name": "research",
                "quota": {"ml.p5.48xlarge": 2},
                "strategy": "lend",
                "borrow_limit": None,
                "in_share_preemption": False,
                "fair_share_weight": 10,
            }
        ],
    }
    policy = tmp_path / "shares.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [pool],
                "capacity_windows": [window],
            }
        )
    )
    batch = boto3.client("batch", region_name="us-east-1")
    clients = Clients(**{**clients.__dict__, "batch": batch})
    plan = block("tpo-1", at(10), 1, per_hour="29", count=4, instance_type="ml.p5.48xlarge")
    stubbed.owned()
    stubbed.sm_stub.add_response(
        "list_training_plans",
        {"TrainingPlanSummaries": [training_plan_summary(plan, f"{JOBS.name}-202612101130-1", status="Active")]},
        {},
    )
    event = {
        "version": "0",
        "id": "3a3e2b1c-0000-4b1e-9d5e-6f2f1b7c9a10",
        "detail-type": "CloudFormation Stack Status Change",
        "source": "aws.cloudformation",
        "account": "111122223333",
        "time": "2026-12-10T12:00:00Z",
        "region": "us-east-1",
        "resources": [
            "arn:aws:cloudformation:us-east-1:111122223333:stack/acme-ml-capacity/5e1c2a40-d6f0-11ef-8d1e-0a1b2c3d4e5f"
        ],
        "detail": {
            "stack-id": "arn:aws:cloudformation:us-east-1:111122223333:stack/acme-ml-capacity/5e1c2a40-d6f0-11ef-8d1e-0a1b2c3d4e5f",
            "status-details": {"status": "UPDATE_COMPLETE", "status-reason": ""},
            "client-request-token": "exec-1",
        },
    }
    with Stubber(batch) as stub:  # the update put the declared 8 and 2 back
        if mode == "auto":
            environment_shows(stub, 8, update_to=12)
            share_shows(stub, 2, update_to=6)
        result = process(
            event,
            clients=clients,
            now=at(10, 12, 1),
            settings={
                **settings,
                "POLICY_PATH": str(policy),
                contract.ENV_RAISED_GUARANTEES: PARAMETER,
                contract.ENV_RAISED_GUARANTEES_KEY: boto3.client("kms", region_name="us-east-1").create_key()[
                    "KeyMetadata"
                ]["Arn"],
            },
        )
        stub.assert_no_pending_responses()  # in dry run: no quota call at all (issue 23, outcome 8)
    assert result["stack_update"] == event["detail"]["stack-id"]
    if mode == "dry_run":
        (note,) = result["shares"]
        assert note["dry_run"] is True and note["would"].startswith(
            "set {'ml.p5.48xlarge': 6} (declared {'ml.p5.48xlarge': 2})"
        )
        assert raised_guarantees.read(ssm=clients.ssm, name=PARAMETER, now=at(10, 12, 1)) == []
        stubbed.done()
        return
    assert [r["changed"] for r in result["shares"]] == [True, True]
    assert result["raised_guarantees"] == {"parameter": PARAMETER, "raises": 1, "changed": True}
    (entry,) = raised_guarantees.read(ssm=clients.ssm, name=PARAMETER, now=at(10, 12, 1))
    assert (entry["team"], entry["instances"], entry["until"]) == (
        "research",
        4,
        (plan.end - shares.LOWER_LEAD).isoformat(),
    )
    stubbed.done()
