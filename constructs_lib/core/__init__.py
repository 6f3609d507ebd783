"""What every construct shares: errors (``errors``), the vocabulary of metadata keys, IAM
action sets and HyperPod strategy names (``vocabulary``), the acknowledgement helper for every
nag pack (``acknowledgements``), where a team's resources go (``placement``), the controllers'
Lambda asset (``runtime_asset``), the one hardened bucket (``buckets``), the IAM statements for changing a HyperPod cluster
(``hyperpod_cluster_iam``) and the plural of a count in sentences (``wording``).

This package imports nothing on its own: ``errors`` and ``vocabulary`` are pure Python, and the
model builds on ``errors`` without starting aws_cdk.
"""
