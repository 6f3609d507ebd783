"""The controllers' pure decisions, under the policy document and the backends that read them: the
reclaim planner, the capacity planner and the Capacity Block market's published rules it follows."""
