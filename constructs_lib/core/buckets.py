"""The one hardened S3 bucket every construct makes: TLS only, no ACLs, no public access,
versioned and retained; the caller chooses its encryption and where its access logs go."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, aws_kms as kms, aws_s3 as s3
from constructs import Construct


def hardened_bucket(
    scope: Construct,
    id: str,
    *,
    encryption: s3.BucketEncryption,
    encryption_key: kms.IKey | None = None,
    bucket_key_enabled: bool | None = None,
    server_access_logs_bucket: s3.IBucket | None = None,
    server_access_logs_prefix: str | None = None,
) -> s3.Bucket:
    return s3.Bucket(
        scope,
        id,
        encryption=encryption,
        encryption_key=encryption_key,
        bucket_key_enabled=bucket_key_enabled,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        versioned=True,
        server_access_logs_bucket=server_access_logs_bucket,
        server_access_logs_prefix=server_access_logs_prefix,
        removal_policy=RemovalPolicy.RETAIN,  # stateful resources are retained (DESIGN.md)
    )
