"""Every AWS call the capacity runtime makes is an operation of the installed botocore model."""

import ast
from pathlib import Path

import boto3
import pytest

import gpu_governance_runtime.capacity as package

# How the runtime names its clients -> the service each one is.
CLIENT_NAMES = {"ec2": "ec2", "purchase_ec2": "ec2", "sagemaker": "sagemaker", "purchase_sagemaker": "sagemaker", "_db": "dynamodb", "dynamodb": "dynamodb", "sns": "sns",
                "events": "events", "batch": "batch", "eks": "eks", "ecs": "ecs"}
NOT_OPERATIONS = {"get_paginator", "meta", "exceptions"}


def calls():
    found = set()
    for source in Path(package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
                if name in CLIENT_NAMES and node.func.attr not in NOT_OPERATIONS:
                    found.add((CLIENT_NAMES[name], node.func.attr))
                if node.func.attr == "get_paginator" and name in CLIENT_NAMES:
                    found.add((CLIENT_NAMES[name], node.args[0].value))
    return sorted(found)


def test_the_scan_finds_the_purchase_calls():
    assert {("ec2", "purchase_capacity_block"), ("ec2", "purchase_capacity_block_extension"),
            ("sagemaker", "create_training_plan"), ("dynamodb", "transact_write_items"),
            ("batch", "terminate_job"), ("batch", "submit_job"), ("ecs", "list_container_instances"), ("sagemaker", "update_cluster")} <= set(calls())


@pytest.mark.parametrize("service, operation", calls())
def test_operation_exists_in_botocore(service, operation):
    client = boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    assert operation in client.meta.method_to_api_mapping, f"{service}.{operation} is not in the installed botocore model"
