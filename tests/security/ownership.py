"""What belongs to a team, per resource type, in one place: the prover (prover.py) asks whether a
team's role may act on anything here that is another team's.

Two kinds of ownership:

- by name: ARN patterns (IAM wildcards) of the team's own things: its key (and alias), bucket and
  objects, prefix in the shared access-log bucket, quota shares, roles, secrets, discovery and
  training-plan parameters, training jobs and their log streams, image repository;
- by tag: Batch jobs, service jobs and job definitions, and SageMaker training plans, belong to
  the team their ``gpu-governance:team`` tag names; a job definition or training plan without the
  tag belongs to the platform, never to a team (claiming it is an attack too). An existing job
  without the tag is no team's: the tags of a submission are authorised as batch:TagResource,
  which no documented condition key tells from tagging an existing job, so a team can claim such
  a job; none is in a governed queue, which test_prover proves apart (every submission there
  carries a team tag, no team removes it). A job being created belongs to the team its request
  tags and share identifier name.

Names come from the library's naming functions (``team_name_scopes``), resources from the
synthesized templates (tenants.read_organisation), never from logical ids."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from constructs_lib.batch import TEAM_TAG
from constructs_lib.model import team_name_scopes
from constructs_lib.tenancy import TRAINING_LOG_GROUP
from gpu_governance_runtime.contract import PLATFORM_TAG_KEYS, TAG_COST_CENTRE

from .tenants import Organisation, Tenant

OWNER_TAG = TEAM_TAG
# What creates a job (the job's ARN is new, it has no tags yet), and the tagging Batch authorises
# as part of the same call (the Service Authorization Reference lists batch:TagResource as a
# dependent action of both; docs/security.md).
CREATING_ACTIONS = ("batch:submitjob", "batch:submitservicejob", "batch:tagresource")
CREATED = ("batch job", "batch service job")
# What a job carries that no team may remove: its owner, who pays, and what the platform wrote.
OWNER_TAG_KEYS = (TEAM_TAG, TAG_COST_CENTRE, *PLATFORM_TAG_KEYS)


@dataclass(frozen=True)
class Reading:
    """One way Batch may build the context of the batch:TagResource it authorises inside a
    submission; no page says which (docs/aws-behaviour.md, batch-iam.tag-on-create-context)."""

    submission_keys: bool  # batch:ShareIdentifier / batch:SchedulingPriority are in it, as the submission sent them
    resource_tags: bool  # the new job's aws:ResourceTag/<key> holds the requested tags (else absent)

    def __str__(self) -> str:
        keys = "batch keys" if self.submission_keys else "no batch keys"
        return f"{keys}, {'resource tags = requested' if self.resource_tags else 'no resource tags'}"

    def tagging(self, tags: Mapping[str, str], sent: Mapping[str, str]) -> dict[str, list[str]]:
        """The context of that batch:TagResource for a submission of ``tags`` that sent ``sent``
        (its batch:ShareIdentifier / batch:SchedulingPriority)."""
        return {
            **{f"aws:RequestTag/{key}": [value] for key, value in tags.items()},
            "aws:TagKeys": list(tags),
            **({key: [value] for key, value in sent.items()} if self.submission_keys else {}),
            **({f"aws:ResourceTag/{key}": [value] for key, value in tags.items()} if self.resource_tags else {}),
        }


READINGS = tuple(Reading(keys, tags) for keys in (True, False) for tags in (False, True))


def owned_by_tag(org: Organisation) -> dict[str, str]:
    """ARN patterns of the resource types owned by tag, in the capacity account."""
    prefix = f"{org.capacity.region}:{org.capacity.account}"
    return {
        "batch job": f"arn:aws:batch:{prefix}:job/*",
        "batch service job": f"arn:aws:batch:{prefix}:service-job/*",
        "batch job definition": f"arn:aws:batch:{prefix}:job-definition/*",
        "training plan": f"arn:aws:sagemaker:{prefix}:training-plan/*",
    }


@dataclass(frozen=True)
class Owned:
    kind: str
    arns: tuple[str, ...]  # IAM wildcard patterns


def owned_by_name(org: Organisation, tenant: Tenant) -> list[Owned]:
    """Everything of ``tenant`` that its name or the templates identify."""
    capacity = org.capacity
    arn = lambda service, resource: f"arn:aws:{service}:{capacity.region}:{capacity.account}:{resource}"  # noqa: E731
    scopes = team_name_scopes(org.organisation, tenant.name)
    owned = [
        Owned("key", (tenant.key, arn("kms", f"alias/{org.organisation}/{tenant.name}"))),
        Owned("bucket", (f"arn:aws:s3:::{tenant.bucket}", f"arn:aws:s3:::{tenant.bucket}/*")),
        Owned("quota share", tuple(share for _, share in tenant.quota_shares)),
        Owned("role", tuple(role for kind, role in tenant.roles.items() if not kind.startswith("member:"))),
        Owned("secret", tuple(arn("secretsmanager", f"secret:{pattern}") for pattern in scopes["secrets"])),
        Owned(
            "discovery and training-plan parameters",
            tuple(arn("ssm", f"parameter{pattern}") for pattern in scopes["discovery parameters"]),
        ),
        Owned(
            "training job",
            tuple(
                arn("sagemaker", f"training-job/{pattern}") for pattern in scopes["training jobs and their log streams"]
            ),
        ),
        Owned(
            "training log stream",
            tuple(
                arn("logs", f"log-group:{TRAINING_LOG_GROUP}:log-stream:{pattern}")
                for pattern in scopes["training jobs and their log streams"]
            ),
        ),
        Owned("image repository", (tenant.repository,)),
    ]
    if tenant.access_log_bucket:
        owned.append(
            Owned(
                "access-log prefix",
                tuple(f"arn:aws:s3:::{tenant.access_log_bucket}/{p}" for p in scopes["access-log prefix"]),
            )
        )
    return [o for o in owned if all(o.arns)]
