"""A small model of a HyperPod Slurm cluster as the capacity controller's window sees it:
SageMaker's ``list_cluster_nodes`` (paginated, [aws: hyperpod.list-cluster-nodes]) for an instance
group whose nodes come with a training plan and go 30 minutes before its end
([aws: hyperpod.training-plan-termination]), and a head node whose shell applies the
commands ``capacity/slurm_window.py`` sends over SSM (:class:`tests.aws_model.ssm.FakeSsm` delivers
them). The real Slurm daemons run these commands in tests/slurm; here the SSM conversation and its
timing matter, so the shell is played by recognising each command the controller builds.

Slurm's rules kept (https://slurm.schedmd.com/scontrol.html, https://slurm.schedmd.com/slurm.conf.html):
a drained node runs its jobs on but starts none; ``scontrol requeue`` puts a running job back to
PENDING and counts a restart; a job on a node that goes away is requeued by slurmctld itself
(``JobRequeue=1``, the default) and counted here as killed with its node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpu_governance_runtime.capacity.slurm_window import END

from .batch import Clock, Faults


@dataclass
class Node:
    name: str
    instance_id: str
    partitions: set[str]
    reason: str = "none"
    gone: bool = False


@dataclass
class Job:
    job_id: str
    partition: str
    work: float  # seconds left
    state: str = "PENDING"
    node: str | None = None
    restarts: int = 0
    nodes_run_on: list[str] = field(default_factory=list)


class HeadNode:
    """slurmctld's view of nodes and jobs, and the head node's shell for the controller's commands."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.nodes: dict[str, Node] = {}
        self.jobs: dict[str, Job] = {}
        self.killed_with_node: list[str] = []  # jobs running on a node when it went away
        self.requeued: list[tuple[float, str]] = []  # (when, job) for every scontrol requeue applied
        self.ran: list[tuple[float, str]] = []  # (when, command) for every command that changed something
        self._last = clock.now

    # --- slurmctld --------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        self.nodes[node.name] = node

    def remove_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        node.gone = True
        for job in self.jobs.values():
            if job.state == "RUNNING" and job.node == name:
                self.killed_with_node.append(job.job_id)
                job.state, job.node, job.restarts = "PENDING", None, job.restarts + 1

    def submit(self, job_id: str, partition: str, work: float) -> None:
        self.jobs[job_id] = Job(job_id, partition, work)

    def advance(self) -> None:
        """Running jobs work and complete; pending jobs start on free nodes of their partition that are not drained."""
        elapsed, self._last = self.clock.now - self._last, self.clock.now
        for job in self.jobs.values():
            if job.state == "RUNNING":
                job.work -= elapsed
                if job.work <= 0:
                    job.state, job.node = "COMPLETED", None
        busy = {j.node for j in self.jobs.values() if j.state == "RUNNING"}
        for job in sorted((j for j in self.jobs.values() if j.state == "PENDING"), key=lambda j: j.job_id):
            free = [
                n
                for n in self.nodes.values()
                if job.partition in n.partitions and n.reason == "none" and n.name not in busy
            ]
            if free:
                job.state, job.node = "RUNNING", free[0].name
                job.nodes_run_on.append(free[0].name)
                busy.add(free[0].name)

    def running_on(self, name: str) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "RUNNING" and j.node == name]

    # --- the shell ----------------------------------------------------------------------------

    def run(self, commands: list[str]) -> str:
        self.advance()
        out: list[str] = []
        for command in commands:
            out += self._one(command)
        return "".join(f"{line}\n" for line in out)

    def _one(self, command: str) -> list[str]:
        if command == "set -e" or command.startswith(("known=$(", 'if [ -n "$known" ]')):
            return self._running() if command.startswith("if [") else []
        if command.startswith("sinfo --noheader --Node --nodes="):
            listed = _listed(command)
            return [
                f"N|{n.name}|{self._state(n)}|{p}|{n.reason}"
                for n in self._known(listed)
                for p in sorted(n.partitions) or [""]
            ]
        if command == f"echo {END}":
            return [END]
        if (drain := re.search(r"NodeName=([\w.-]+)'? State=DRAIN '?Reason=([^']*)'?", command)) is not None:
            node = self.nodes.get(drain[1])
            if node is None or node.reason != "none":
                return [f"{drain[1]} now {node.reason if node else ''}"]
            node.reason = drain[2]
            self.ran.append((self.clock.now, f"drain {node.name}"))
            return [f"{node.name} drained"]
        if (resume := re.search(r"NodeName=([\w.-]+)'? State=RESUME", command)) is not None:
            marker = re.search(r"case \"\$r\" in '?([^'*]*)'?\*\)", command)[1]
            node = self.nodes.get(resume[1])
            if node is None or not node.reason.startswith(marker):
                return [f"{resume[1]} now {node.reason if node else ''}"]
            node.reason = "none"
            self.ran.append((self.clock.now, f"resume {node.name}"))
            return [f"{node.name} resumed"]
        if (
            requeue := re.search(r"--jobs=(\d+) .* = '?RUNNING\|(\d+)'? \]; then scontrol requeue", command)
        ) is not None:
            job = self.jobs.get(requeue[1])
            now = f"{job.state}|{job.restarts}" if job is not None and job.state in ("RUNNING", "PENDING") else ""
            if now != f"RUNNING|{requeue[2]}":
                return [f"{requeue[1]} now {now or 'gone'}"]
            job.state, job.node, job.restarts = "PENDING", None, job.restarts + 1
            self.requeued.append((self.clock.now, job.job_id))
            self.ran.append((self.clock.now, f"requeue {job.job_id}"))
            return [f"{job.job_id} done"]
        if (
            partition := re.search(
                r"scontrol -o show partition '?([\w.-]+)'?\); .* -v ours='?([\w.,-]+)'? -v join=([01])", command
            )
        ) is not None:
            name, ours, join = partition[1], partition[2].split(","), partition[3] == "1"
            changed = False
            for node in (self.nodes.get(n) for n in ours):
                if node is not None and (name in node.partitions) != join:
                    node.partitions ^= {name}
                    changed = True
            if changed:
                self.ran.append((self.clock.now, f"{'join' if join else 'leave'} {name}"))
            return [f"{name} done" if changed else f"{name} now {'has' if join else 'lacks'} them"]
        raise NotImplementedError(f"the head node model does not know the command {command[:200]!r}")

    def _known(self, listed: Iterable[str]) -> list[Node]:
        return [self.nodes[n] for n in listed if n in self.nodes]

    def _state(self, node: Node) -> str:
        busy = bool(self.running_on(node.name))
        if node.reason != "none":
            return "draining" if busy else "drained"
        return "allocated" if busy else "idle"

    def _running(self) -> list[str]:
        # the read's node list is the one its sinfo was given; the model reads the nodes it knows
        return [
            f"J|{j.job_id}|{j.restarts}"
            for j in sorted(self.jobs.values(), key=lambda j: j.job_id)
            if j.state == "RUNNING" and j.node in self.nodes
        ]


def _listed(command: str) -> list[str]:
    return re.search(r"--nodes='?([\w.,-]+)'?", command)[1].split(",")


class FakeSageMakerNodes:
    """``list_cluster_nodes`` for one instance group: the head node's nodes, as HyperPod lists them."""

    def __init__(self, head: HeadNode, *, group: str, faults: Faults | None = None, page_size: int = 2):
        self.head, self.group, self.faults, self.page_size = head, group, faults or Faults(), page_size

    def get_paginator(self, operation: str) -> Any:
        assert operation == "list_cluster_nodes", operation
        return self

    def paginate(self, *, ClusterName: str, InstanceGroupNameContains: str) -> Iterable[dict[str, Any]]:
        # a page at a time [aws: hyperpod.list-cluster-nodes]
        self.faults.check("ListClusterNodes", "before", throttle_code="ThrottlingException", service="sagemaker")
        nodes = [
            {
                "InstanceGroupName": self.group,
                "InstanceId": n.instance_id,
                "InstanceStatus": {"Status": "Running", "Message": ""},
                "PrivateDnsHostname": f"{n.name}.ec2.internal",
            }
            for n in self.head.nodes.values()
            if n.instance_id.startswith("i-")
        ]
        for start in range(0, max(len(nodes), 1), self.page_size):
            yield {"ClusterNodeSummaries": nodes[start : start + self.page_size]}
