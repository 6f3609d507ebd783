"""Reclaim / preemption: the pure planner, the backend adapters and the Lambda handler."""
