"""Deliver the Slurm governance of one HyperPod pool: the apply script as an S3 asset (the
lifecycle-script fragment HyperPod runs at cluster creation) and an SSM document that re-runs
the same script on the cluster's nodes when the policy changes."""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from aws_cdk import CfnOutput, aws_iam as iam, aws_s3_assets as s3_assets, aws_ssm as ssm
from constructs import Construct

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import Backend
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model import GovernanceModel, HyperPodSlurmPool, Team
from constructs_lib.model.props import PoolGovernanceProps
from gpu_governance_runtime.slurm import render_apply_script
from gpu_governance_runtime.slurm.render import plan_digest

from . import BACKEND
from .layout import InstanceGroup, hyperpod_instance_groups
from .plan import DEFAULT_DATA_ROOT, slurm_plan

SCRIPT_NAME = "gpu-governance-slurm.sh"
# Where the lifecycle step and the SSM document put the script on a node.
NODE_DIRECTORY = "/opt/gpu-governance"
APPLY_TIMEOUT_SECONDS = 900


@dataclass(frozen=True, kw_only=True)
class HyperPodSlurmGovernanceProps(PoolGovernanceProps):
    """Props of :class:`HyperPodSlurmGovernance`: a ``hyperpod_slurm`` pool of ``model`` and its
    teams (``model.teams_in(pool.name)``), the governance model, and where the teams' data
    directories go on the cluster.

    Unlike the other backends' props these carry the whole ``model``: the Slurm plan reads the
    organisation beyond the pool. A team's OS group id is allocated among all the organisation's
    teams (the same id on every Slurm pool, ``team_gids``); its groups become parent accounts;
    capacity windows feeding the pool's instance groups join their team's partition; the
    priority classes become QoS; the organisation's name is the Slurm account above the teams,
    and the plan's checks (``slurm_problems``) name the model's paths."""

    BACKEND: ClassVar[Backend] = BACKEND
    pool: HyperPodSlurmPool
    model: GovernanceModel
    data_root: str = DEFAULT_DATA_ROOT

    def problems(self) -> list[Problem]:
        problems = super().problems()
        if problems:
            return problems
        if self.pool not in self.model.pools:
            slurm_pools = sorted(p.name for p in self.model.pools if backend_of(p) is self.BACKEND)
            return [
                Problem(
                    path="pool",
                    wrong="not a pool of model",
                    value=self.pool.name,
                    allowed=f"one of model.pools with backend {self.BACKEND.name}: {slurm_pools}",
                )
            ]
        expected = self.model.teams_in(self.pool.name)
        if self.teams != expected:
            # The plan is the model's plan for the pool: every team with a quota in it.
            return [
                Problem(
                    path="teams",
                    wrong=f"not the teams of pool {self.pool.name} in model",
                    value=[t.name for t in self.teams],
                    allowed=f"model.teams_in({self.pool.name!r}): {[t.name for t in expected]}",
                )
            ]
        return []


class HyperPodSlurmGovernance(Construct):
    """The Slurm governance of one ``hyperpod_slurm`` pool (props: :class:`HyperPodSlurmGovernanceProps`).

    Wiring (capacity-account stack): give the HyperPod cluster the ``instance_groups``, call
    ``grant_read_script`` for the cluster's execution role, and have the lifecycle
    ``on_create.sh`` run ``lifecycle_command(os_only=...)`` after Slurm is up (full on the
    controller, ``os_only=True`` on login and compute nodes). Platform admins re-apply with
    ``aws ssm send-command --document-name <document_name>`` (dry run by default).

    ``pool_name`` (with ``model``, instead of ``pool`` and ``teams``) is the constructor's former
    shape, deprecated: it still works, with a DeprecationWarning, and goes in a later version.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pool: HyperPodSlurmPool | None = None,
        teams: Sequence[Team] | None = None,
        model: GovernanceModel,
        data_root: str = DEFAULT_DATA_ROOT,
        pool_name: str | None = None,
    ) -> None:
        if pool_name is not None:
            pool, teams = _deprecated_pool_name(model, pool_name, pool, teams)
        missing = [name for name, value in (("pool", pool), ("teams", teams)) if value is None]
        if missing:
            raise GovernanceError(
                Problem(path=name, wrong="missing", value=None, allowed="required") for name in missing
            )
        props = HyperPodSlurmGovernanceProps(pool=pool, teams=teams, model=model, data_root=data_root)
        # Before any construct exists: nothing half-built on bad props.
        props.check()
        plan = slurm_plan(model, pool.name, data_root=data_root)
        super().__init__(scope, id)
        self.pool = pool
        self.teams = props.teams
        self.policy_digest = plan_digest(plan)
        self.instance_groups: tuple[InstanceGroup, ...] = hyperpod_instance_groups(model, pool.name)
        # The asset is hashed by content, so an unchanged policy keeps the same S3 object.
        script = Path(tempfile.mkdtemp(prefix="gpu-governance-slurm-")) / SCRIPT_NAME
        text = render_apply_script(plan).encode()
        script.write_bytes(text)
        # Nodes run the script as root: they check it against this digest before running it, so
        # whoever can write the asset bucket still cannot change what runs.
        self.script_sha256 = hashlib.sha256(text).hexdigest()
        self.script = s3_assets.Asset(self, "ApplyScript", path=str(script))
        self.document = ssm.CfnDocument(
            self,
            "ApplyDocument",
            document_type="Command",
            document_format="JSON",
            update_method="NewVersion",
            content=self._document_content(model.organisation, pool.name),
        )

    @property
    def document_name(self) -> str:
        return self.document.ref

    def lifecycle_command(self, *, os_only: bool = False) -> str:
        """Shell line for HyperPod's on_create.sh: fetch the fragment and apply it."""
        return self._fetch_and_apply(" --os-only" if os_only else "")

    def _fetch_and_apply(self, flags: str) -> str:
        """Download, verify, then run: a script whose digest differs is deleted and never runs,
        and the command fails (fail closed)."""
        script = f"{NODE_DIRECTORY}/{SCRIPT_NAME}"
        download = f"{script}.download"
        return (
            f"mkdir -p -m 0700 {NODE_DIRECTORY} && aws s3 cp {self.script.s3_object_url} {download}"
            f" && {{ echo '{self.script_sha256}  {download}' | sha256sum --check --strict - || {{ rm -f {download}; false; }}; }}"
            f" && mv {download} {script} && bash {script}{flags}"
        )

    def grant_read_script(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let the cluster's nodes (their execution role) download the script: GetObject on
        this one object, nothing else in the asset bucket."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[self.script.bucket.arn_for_objects(self.script.s3_object_key)],
        )

    def _document_content(self, organisation: str, pool_name: str) -> dict:
        return {
            "schemaVersion": "2.2",
            "description": (
                f"Re-apply the Slurm governance of {organisation}, pool {pool_name} (policy {self.policy_digest}). "
                "Idempotent; removing a team never cancels its jobs."
            ),
            "parameters": {
                # Changing QoS preemption or partitions can requeue running jobs: look first.
                "Mode": {
                    "type": "String",
                    "allowedValues": ["dry-run", "apply"],
                    "default": "dry-run",
                    "description": "dry-run reports what would change; apply changes it.",
                },
                "Scope": {
                    "type": "String",
                    "allowedValues": ["controller", "os-only"],
                    "default": "controller",
                    "description": "controller on the Slurm head node; os-only on login and compute nodes.",
                },
            },
            "mainSteps": [
                {
                    "action": "aws:runShellScript",
                    "name": "ApplyGovernance",
                    "inputs": {
                        "timeoutSeconds": str(APPLY_TIMEOUT_SECONDS),
                        "runCommand": [
                            "set -eu",
                            "flags=''",
                            "[ '{{ Mode }}' = dry-run ] && flags=--dry-run",
                            "[ '{{ Scope }}' = os-only ] && flags=\"$flags --os-only\"",
                            self._fetch_and_apply(" $flags"),
                        ],
                    },
                },
            ],
        }


def build_pool(
    scope: Construct, model: GovernanceModel, pool: HyperPodSlurmPool, tenants: Mapping[str, Any]
) -> HyperPodSlurmGovernance:
    """The hyperpod_slurm backend's construct builder (constructs_lib/backends/), with the outputs
    the platform team puts into the cluster's on_create.sh and runs to re-apply."""
    slurm = HyperPodSlurmGovernance(scope, f"Pool{pool.name}", pool=pool, teams=model.teams_in(pool.name), model=model)
    CfnOutput(scope, f"SlurmLifecycle{pool.name}", value=slurm.lifecycle_command())
    CfnOutput(scope, f"SlurmApplyDocument{pool.name}", value=slurm.document_name)
    return slurm


def _deprecated_pool_name(
    model: GovernanceModel, pool_name: str, pool: HyperPodSlurmPool | None, teams: Sequence[Team] | None
) -> tuple[HyperPodSlurmPool, tuple[Team, ...]]:
    """The pool and teams the former ``pool_name=`` keyword meant."""
    warnings.warn(
        "HyperPodSlurmGovernance(pool_name=...) is deprecated and goes in a later version: "
        "pass pool=<the model's pool> and teams=model.teams_in(pool.name)",
        DeprecationWarning,
        stacklevel=4,  # the caller's line: past this function, the constructor and jsii's metaclass call
    )
    if pool is not None or teams is not None:
        raise GovernanceError.single(
            "pool_name", "given with pool or teams", pool_name, "pool and teams, or (deprecated) pool_name alone"
        )
    slurm_pools = {p.name: p for p in model.pools if backend_of(p) is BACKEND}
    if pool_name not in slurm_pools:
        raise GovernanceError.single(
            "pool_name", "no hyperpod_slurm pool of this name", pool_name, f"one of {sorted(slurm_pools)}"
        )
    return slurm_pools[pool_name], model.teams_in(pool_name)
