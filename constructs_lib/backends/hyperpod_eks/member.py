"""A training job for the team's namespace on a HyperPod EKS cluster: a ``batch/v1`` Job that
HyperPod task governance (Kueue) admits through the team's local queue at its priority class
(``constructs_lib.member.kueue``, which every Kueue backend shares)."""

from __future__ import annotations

from constructs_lib.member.kueue import training_job_manifest

# What constructs_lib.member re-exports.
__all__ = ["training_job_manifest"]
