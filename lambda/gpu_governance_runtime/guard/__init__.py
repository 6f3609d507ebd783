"""The submission guard: what IAM cannot see in a Batch service job's SageMaker payload."""
