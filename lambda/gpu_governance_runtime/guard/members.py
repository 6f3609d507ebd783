"""Every member of a SageMaker ``CreateTrainingJob`` request, what it names and what the guard does
with it: one table, ``MEMBERS``, read by ``checks.py``.

tests/guard/test_members.py keeps the table equal to botocore's ``CreateTrainingJob`` input shape,
walked recursively: a member SageMaker adds fails that test until it is classified here, and
until then ``checks`` refuses a payload that names it (a member the table lacks is refused).

A path is ``Parent.Member``; ``List[].Member`` is a member of a list's structures. A leaf is a
scalar, a list of scalars or a map. A structure or list may be classified whole only when it is
refused or checked whole: nothing under it is then allowed on its own, so a member SageMaker adds
under it cannot slip by either. An allowed member is always a leaf.

Kinds say what a member names: ``capacity`` (instances, and what counts them), ``identity`` (who
the job acts as, and whose resources it names), ``image`` (the code that runs), ``cost`` (where
the spend goes), ``network``, ``data`` (read or written with the execution role: ``RoleArn`` is
checked, and the execution role's IAM reaches only its own team's bucket and key, which the
cross-tenant proof shows) and ``run`` (how the team's own container runs on its own instances).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CAPACITY, IDENTITY, IMAGE, COST, NETWORK, DATA, RUN = "capacity", "identity", "image", "cost", "network", "data", "run"
KINDS = (CAPACITY, IDENTITY, IMAGE, COST, NETWORK, DATA, RUN)
ALLOWED, REFUSED, CHECKED = "allowed", "refused", "checked"


@dataclass(frozen=True)
class Member:
    """``why`` ends a violation's message for a refused member (what is allowed, and why), and says
    for the others why the member is harmless or which check reads it. ``unless``: the values of a
    refused member that start nothing (compared with their type: ``False`` is not ``0``)."""

    kind: str
    verdict: str
    why: str
    unless: tuple[Any, ...] = ()

    def refuses(self, value: Any) -> bool:
        return self.verdict == REFUSED and not any(value == v and type(value) is type(v) for v in self.unless)


def allowed(kind: str, why: str) -> Member:
    return Member(kind, ALLOWED, why)


def refused(kind: str, why: str, *unless: Any) -> Member:
    return Member(kind, REFUSED, why, unless)


def checked(kind: str, why: str) -> Member:
    return Member(kind, CHECKED, why)


_OWN_RUN = "how the team's own image runs on the job's own instances"
# [aws: sm-job.execution-role-reads-data]
_DATA = "read or written with the execution role (RoleArn, checked), which reaches only its team's bucket"
_KEY = "used for the execution role (RoleArn, checked), which only its own team's key policy admits"
_COUNTED = "the quota share counts the job by ResourceConfig.InstanceType and InstanceCount"
# [aws: sm-job.share-counts-the-instance-type]; how Batch counts a job without it is undocumented
# [aws: sm-job.uncounted-without-instance-type]: refused, safe whichever way Batch counts.
_NOT_COUNTED = "none: the payload then has no ResourceConfig.InstanceType, the unit the quota share counts"
# [aws: sm-job.rule-jobs-start-instances]
_RULE_JOBS = (
    "none: each rule runs a processing job on an instance of its own (any processing type, GPUs "
    "included) beside the training job, which no quota share counts"
)
_UNATTRIBUTED = "none: it names a resource the guard cannot attribute to the team"

MEMBERS: dict[str, Member] = {
    # --- who the job runs as, and whose things it names
    "TrainingJobName": allowed(IDENTITY, "the execution role's trust runs only jobs named after the team"),
    "RoleArn": checked(IDENTITY, "the team's own execution role, exactly"),
    "SessionChainingConfig.EnableSessionTagChaining": refused(
        IDENTITY,
        "absent or false: it carries the session tags of the job's creator (Batch's service-linked role, "
        "not the member) into the execution role's session",
        False,
    ),
    "RemoteDebugConfig.EnableRemoteDebug": allowed(
        IDENTITY, "opens the team's own job to SSM sessions, which IAM authorises"
    ),
    "ExperimentConfig.ExperimentName": checked(IDENTITY, "an experiment named after the team"),
    "ExperimentConfig.TrialName": checked(IDENTITY, "a trial named after the team"),
    "ExperimentConfig.TrialComponentDisplayName": allowed(RUN, "a label of the job's own trial component"),
    "ExperimentConfig.RunName": allowed(RUN, "a label of the job's own run"),
    "MlflowConfig": refused(IDENTITY, _UNATTRIBUTED + " (an MLflow tracking server)"),
    "ModelPackageConfig": refused(IDENTITY, _UNATTRIBUTED + " (model package groups)"),
    # --- the code that runs
    "AlgorithmSpecification.TrainingImage": checked(IMAGE, "an image of the team's repository or a shared one"),
    "AlgorithmSpecification.AlgorithmName": refused(
        IMAGE, "none: an algorithm resource runs its own image, not one of the team's repository"
    ),
    "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAccessMode": refused(
        IMAGE,
        "absent or Platform: Vpc pulls the image from a private registry, not from the team's repository",
        "Platform",
    ),
    "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAuthConfig": refused(
        IMAGE, "none: a Lambda function that hands SageMaker private registry credentials"
    ),
    "AlgorithmSpecification.TrainingInputMode": allowed(RUN, _OWN_RUN),
    "AlgorithmSpecification.MetricDefinitions[].Name": allowed(RUN, _OWN_RUN),
    "AlgorithmSpecification.MetricDefinitions[].Regex": allowed(RUN, _OWN_RUN),
    "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries": allowed(RUN, _OWN_RUN),
    "AlgorithmSpecification.ContainerEntrypoint": allowed(RUN, _OWN_RUN),
    "AlgorithmSpecification.ContainerArguments": allowed(RUN, _OWN_RUN),
    "HyperParameters": allowed(RUN, _OWN_RUN),
    "Environment": allowed(RUN, _OWN_RUN),
    "RetryStrategy.MaximumRetryAttempts": allowed(
        CAPACITY, "SageMaker runs the job again on its own, counted instances"
    ),
    "InfraCheckConfig.EnableInfraCheck": allowed(RUN, "a health check on the job's own instances"),
    # --- capacity: what runs, on whose capacity, and what counts it
    "ResourceConfig.InstanceType": allowed(CAPACITY, _COUNTED),
    "ResourceConfig.InstanceCount": allowed(CAPACITY, _COUNTED),
    "ResourceConfig.VolumeSizeInGB": allowed(COST, "storage of the job's own instances, billed with the job"),
    "ResourceConfig.VolumeKmsKeyId": allowed(IDENTITY, _KEY),
    "ResourceConfig.KeepAlivePeriodInSeconds": refused(  # [aws: sm-job.warm-pools-outlive-the-job]
        CAPACITY,
        "absent or 0: a warm pool keeps the instances, billed, after the service job ends, when the quota "
        "share no longer counts them",
        0,
    ),
    "ResourceConfig.InstanceGroups": refused(CAPACITY, _NOT_COUNTED),
    "ResourceConfig.TrainingPlanArn": checked(CAPACITY, "a training plan bought for the team"),
    "ResourceConfig.InstancePlacementConfig.EnableMultipleJobs": allowed(
        CAPACITY, "shares the job's own UltraServer capacity with other jobs"
    ),
    "ResourceConfig.InstancePlacementConfig.PlacementSpecifications": refused(
        CAPACITY, _UNATTRIBUTED + " (UltraServers by id)"
    ),
    "ResourceConfig.InstancePreferences[].InstanceType": refused(CAPACITY, _NOT_COUNTED),
    "ResourceConfig.InstancePreferences[].InstanceCount": refused(CAPACITY, _NOT_COUNTED),
    "ResourceConfig.InstancePreferences[].TrainingPlanArns": checked(CAPACITY, "training plans bought for the team"),
    "ResourceConfig.SelectedInstanceType": refused(CAPACITY, "none: read-only, CreateTrainingJob does not accept it"),
    "ResourceConfig.SelectedInstanceCount": refused(CAPACITY, "none: read-only, CreateTrainingJob does not accept it"),
    "EnableManagedSpotTraining": allowed(CAPACITY, "the same instances on Spot, " + _COUNTED),
    "StoppingCondition.MaxRuntimeInSeconds": checked(
        COST, "at most the team's run-time limit (max_run_minutes), where it has one"
    ),
    "StoppingCondition.MaxWaitTimeInSeconds": allowed(COST, "bounds the job's own run"),
    "StoppingCondition.MaxPendingTimeInSeconds": allowed(COST, "bounds the job's own wait"),
    "DebugRuleConfigurations": refused(CAPACITY, _RULE_JOBS),
    "ProfilerRuleConfigurations": refused(CAPACITY, _RULE_JOBS),
    "ServerlessJobConfig": refused(
        CAPACITY, "none: serverless training runs on capacity SageMaker chooses, which no quota share counts"
    ),
    # --- where the spend goes
    "Tags": checked(
        COST,
        "the team's own team and cost-centre tags where named, no key of the platform's (contract.PLATFORM_TAG_KEYS), "
        "each key once; the training job itself must carry the team's tags",
    ),
    # --- network
    "VpcConfig": refused(
        NETWORK,
        "none: the platform gives teams no VPC in the capacity account; a job in one reaches what that VPC reaches",
    ),
    "EnableNetworkIsolation": allowed(NETWORK, "cuts the job's own network"),
    "EnableInterContainerTrafficEncryption": allowed(NETWORK, "encrypts the job's own traffic"),
    # --- data, through the execution role
    "InputDataConfig[].ChannelName": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].ContentType": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].CompressionType": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].RecordWrapperType": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].InputMode": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].ShuffleConfig.Seed": allowed(RUN, _OWN_RUN),
    "InputDataConfig[].DataSource.S3DataSource.S3DataType": allowed(DATA, _DATA),
    "InputDataConfig[].DataSource.S3DataSource.S3Uri": allowed(DATA, _DATA),
    "InputDataConfig[].DataSource.S3DataSource.S3DataDistributionType": allowed(DATA, _DATA),
    "InputDataConfig[].DataSource.S3DataSource.AttributeNames": allowed(DATA, _DATA),
    "InputDataConfig[].DataSource.S3DataSource.InstanceGroupNames": allowed(DATA, _DATA),
    "InputDataConfig[].DataSource.S3DataSource.ModelAccessConfig.AcceptEula": allowed(
        DATA, "accepts the licence of a model the execution role reads"
    ),
    "InputDataConfig[].DataSource.S3DataSource.HubAccessConfig": refused(
        IDENTITY, _UNATTRIBUTED + " (private hub content)"
    ),
    "InputDataConfig[].DataSource.FileSystemDataSource": refused(
        NETWORK, "none: an EFS or FSx file system is reached through a VPC (refused), not through the execution role"
    ),
    "InputDataConfig[].DataSource.DatasetSource": refused(IDENTITY, _UNATTRIBUTED + " (a hub dataset)"),
    "OutputDataConfig.KmsKeyId": allowed(IDENTITY, _KEY),
    "OutputDataConfig.S3OutputPath": allowed(DATA, _DATA),
    "OutputDataConfig.CompressionType": allowed(RUN, _OWN_RUN),
    "CheckpointConfig.S3Uri": allowed(DATA, _DATA),
    "CheckpointConfig.LocalPath": allowed(RUN, _OWN_RUN),
    "DebugHookConfig.LocalPath": allowed(RUN, _OWN_RUN),
    "DebugHookConfig.S3OutputPath": allowed(DATA, _DATA),
    "DebugHookConfig.HookParameters": allowed(RUN, _OWN_RUN),
    "DebugHookConfig.CollectionConfigurations[].CollectionName": allowed(RUN, _OWN_RUN),
    "DebugHookConfig.CollectionConfigurations[].CollectionParameters": allowed(RUN, _OWN_RUN),
    "TensorBoardOutputConfig.LocalPath": allowed(RUN, _OWN_RUN),
    "TensorBoardOutputConfig.S3OutputPath": allowed(DATA, _DATA),
    "ProfilerConfig.S3OutputPath": allowed(DATA, _DATA),
    "ProfilerConfig.ProfilingIntervalInMilliseconds": allowed(RUN, _OWN_RUN),
    "ProfilerConfig.ProfilingParameters": allowed(RUN, _OWN_RUN),
    "ProfilerConfig.DisableProfiler": allowed(RUN, _OWN_RUN),
}


def containers(paths: Any = MEMBERS) -> frozenset[str]:
    """The structures the classified paths lie in: ``A`` and ``A.B[]`` for ``A.B[].C`` (a path
    ending in ``[]`` is the structure of a list's items)."""
    found = set()
    for path in paths:
        parts = path.split(".")
        found.update(".".join(parts[:end]) for end in range(1, len(parts)))
    return frozenset(found)


CONTAINERS = containers()
