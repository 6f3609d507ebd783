"""The nodes a training plan brings to a HyperPod Slurm pool: the owner's while the plan is
active, drained before it ends, their jobs requeued just before the instances go.

A window feeding an instance group of a ``hyperpod_slurm`` pool puts that group in its owner's
partition (``constructs_lib.model.slurm``) and ``hyperpod.py`` points the group at the window's
active plan. Slurm has no AWS API: this module acts on the head node over SSM Run Command
(``slurm.ssm.HeadNode``, the reclaim controller's transport), on the group's nodes as Slurm names
them (the instances' private DNS host names, ``ip-10-1-2-3``, from ``ListClusterNodes`` and, when
the listing lacks it, ``DescribeClusterNode``).

Per instance group, from its windows' plan that is active now (the latest starting):

- while the plan is active: a node of the group found in another governed partition (``borrow``
  or another team's) is taken out of it, live (``scontrol update PartitionName=P Nodes=...``);
- until ``requeue.SIGNAL_LEAD`` (50 minutes) before the plan ends: nodes the controller drained (their reason starts
  with ``MARKER``) are resumed, so a new occurrence's nodes take work; an admin's drain is left;
  nodes missing from the owner's partition ``<team>`` are added to it, live (HyperPod brings
  them after the governance script last listed the partition's nodes);
- from ``requeue.SIGNAL_LEAD`` before the end: every node without a reason is drained
  (``State=DRAIN Reason="gpu-governance: capacity window W ends T"``): running jobs go on, no new
  job starts there;
- from ``requeue.STOP_LEAD`` (40 minutes) before the end: jobs still running there are requeued,
  each only while it shows the state and restart count read (``slurm.ssm.if_unchanged``). The
  instances are terminated 30 minutes before the end (like a Capacity Block's), and the construct
  runs the controller at least every ``market.SCHEDULE_LIMIT`` (5 minutes), so two runs land
  between the first requeue and the nodes' end: a run that fails there (SSM throttled, a crash)
  leaves the next one, as for Batch jobs on a block (``requeue``). Jobs requeued go back to the
  queue whole instead of failing with their node;
- with no active plan nothing is done: the nodes are going away with their plan.

Like ``shares.converge``: each run reads the nodes and jobs and acts only on a difference, so a
repeated run or event changes nothing and a crash between call and record is put right by the
next run, which reads the result. Every command that changes Slurm is recorded in the ledger
before and after (``calling``, then ``done`` or ``failed``; ``abandoned`` with its command id when
the run stopped waiting and cancelled it, settled by the next run from SSM's answer); each node and job is checked again
on the head node right before the change, so one changed since the read (an admin drained it, a
job ended) is left alone. A throttled, failed or timed-out call is recorded ``failed`` and tried
again by the next run. In ``dry_run`` only the read is made (it changes nothing) and what would
change is reported.

A partition is changed by rewriting its whole node list (Slurm 22.05's ``scontrol update`` has no
``Nodes+=``), read and written in one shell command on the head node, so the list written is the
one found then plus or minus the group's nodes. Live changes last until slurmctld re-reads
slurm.conf (a restart or ``scontrol reconfigure``); the next run puts them back, and the
governance script keeps them when it reconfigures (``gg_keep_unmapped_nodes`` in apply-lib.sh).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..planners.offers import Reservation
from ..planners.window import Window
from ..slurm.plan import BORROW_PARTITION
from ..slurm.ssm import FINAL_STATUSES, SLURM_JOB_ID, SLURM_NAME, CommandAbandoned, HeadNode, checked, if_unchanged
from .ledger import Ledger
from .requeue import SIGNAL_LEAD, STOP_LEAD
from .shares import INSTANCE_GROUP

# The reason the controller gives a node it drains; only nodes whose reason starts with it are resumed.
MARKER = "gpu-governance: capacity window"
# Listed nodes in these states have no Slurm node to act on.
NOT_IN_SLURM = ("ShuttingDown", "NotFound")
END = "gg-end-of-nodes"  # the last output line: SSM returns only the first 24,000 characters
COMMENT = "gpu-governance capacity controller"


def current_plan(plans: Iterable[Reservation], windows: Iterable[str], now: datetime) -> Reservation | None:
    """The plan the group runs on now: the latest starting active plan of its windows."""
    names = set(windows)
    active = [p for p in plans if p.window in names and p.state == "active" and p.start <= now < p.end]
    return max(active, key=lambda p: p.start, default=None)


def phase(plan: Reservation | None, now: datetime) -> str:
    if plan is None:
        return "idle"
    if now < plan.end - SIGNAL_LEAD:
        return "serve"
    return "drain" if now < plan.end - STOP_LEAD else "requeue"


def node_names(sagemaker: Any, cluster_arn: str, group: str) -> list[str]:
    """Slurm names of the group's instances: the private DNS host name's first label."""
    names = []
    pages = sagemaker.get_paginator("list_cluster_nodes").paginate(
        ClusterName=cluster_arn, InstanceGroupNameContains=group
    )
    for node in (n for page in pages for n in page["ClusterNodeSummaries"]):
        if node["InstanceGroupName"] != group or node["InstanceStatus"]["Status"] in NOT_IN_SLURM:
            continue
        # A runtime botocore older than the summary's PrivateDnsHostname drops it: ask for the node.
        host = node.get("PrivateDnsHostname") or sagemaker.describe_cluster_node(
            ClusterName=cluster_arn, NodeId=node["InstanceId"]
        )["NodeDetails"].get("PrivateDnsHostname")
        if host:
            names.append(checked(host.split(".", 1)[0], SLURM_NAME))
    return sorted(set(names))


def read_commands(nodes: list[str]) -> list[str]:
    """Each node's state, partitions and reason as Slurm has them (nodes Slurm does not know are
    left out), then the jobs running on them; any failure fails the command."""
    listed = shlex.quote(",".join(nodes))
    return [
        "set -e",
        f"sinfo --noheader --Node --nodes={listed} --format='N|%N|%T|%P|%E'",
        f"known=$(sinfo --noheader --Node --nodes={listed} --format=%N | sort -u | paste -sd, -)",
        (
            'if [ -n "$known" ]; then running=$(squeue --noheader --array --states=RUNNING --nodelist="$known" '
            "--Format='JobArrayID:0|,RestartCnt:0'); printf '%s\\n' \"$running\" | sed '/^$/d; s/^/J|/'; fi"
        ),
        f"echo {END}",
    ]


def parse_read(output: str) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """(node -> {state, reason, partitions}, running job -> restart count) from ``read_commands``."""
    lines = output.splitlines()
    if not lines or lines[-1].strip() != END:
        raise RuntimeError(f"node read ends without {END!r}: cut short, not acting on part of it")
    nodes: dict[str, dict[str, Any]] = {}
    jobs: dict[str, int] = {}
    for line in lines[:-1]:
        kind, _, rest = line.strip().partition("|")
        if kind == "N":
            name, state, partition, reason = rest.split("|", 3)
            node = nodes.setdefault(name, {"state": state, "reason": reason, "partitions": []})
            node["partitions"] = sorted({*node["partitions"], partition.rstrip("*")})
        elif kind == "J":
            job_id, restarts = (rest.split("|") + [""])[:2]
            jobs[checked(job_id.strip(), SLURM_JOB_ID)] = int(restarts)
    return nodes, jobs


def drain_command(node: str, reason: str) -> str:
    """Drain ``node`` only while it has no reason (sinfo shows ``none``): an admin's drain stays."""
    return (
        f"r=$(sinfo --noheader --Node --nodes={shlex.quote(node)} --format=%E | head -n1); "
        f'if [ "$r" = none ]; then scontrol update {shlex.quote(f"NodeName={node}")} State=DRAIN {shlex.quote(f"Reason={reason}")} '
        f'&& echo {shlex.quote(node)} drained; else echo {shlex.quote(node)} now "$r"; fi'
    )


def resume_command(node: str) -> str:
    """Resume ``node`` only while the reason is the controller's own."""
    return (
        f"r=$(sinfo --noheader --Node --nodes={shlex.quote(node)} --format=%E | head -n1); "
        f'case "$r" in {shlex.quote(MARKER)}*) scontrol update {shlex.quote(f"NodeName={node}")} State=RESUME '
        f'&& echo {shlex.quote(node)} resumed;; *) echo {shlex.quote(node)} now "$r";; esac'
    )


def requeue_command(job_id: str, restarts: int) -> str:
    return f"printf '%s ' {shlex.quote(job_id)}; " + if_unchanged(
        job_id, f"RUNNING|{restarts}", f"scontrol requeue {shlex.quote(job_id)}"
    )


def partition_command(partition: str, nodes: list[str], *, join: bool) -> str:
    """Add ``nodes`` to (``join``) or take them out of ``partition``: its node list is read on the
    head node (hostlist expanded), changed only if it lacks (holds) one of them, and written whole."""
    name = shlex.quote(partition)
    # awk prints the new list, comma separated, and exits 1 when it is the list read.
    change = (
        f"awk -v ours={shlex.quote(','.join(nodes))} -v join={int(join)} '"
        'BEGIN { n = split(ours, o, ","); for (i = 1; i <= n; i++) mine[o[i]] = 1 } '
        'NF { if (!join && ($0 in mine)) { changed = 1; next } out = out sep $0; sep = ","; seen[$0] = 1 } '
        'END { if (join) for (i = 1; i <= n; i++) if (!(o[i] in seen)) { out = out sep o[i]; sep = ","; changed = 1 } '
        "print out; exit !changed }'"
    )
    return (
        f"if p=$(scontrol -o show partition {name}); then "
        "have=$(printf '%s\\n' \"$p\" | sed -n 's/.* Nodes=\\([^ ]*\\).*/\\1/p'); "
        'if [ -n "$have" ] && [ "$have" != \'(null)\' ]; then have=$(scontrol show hostnames "$have"); else have=; fi; '
        f"if new=$(printf '%s\\n' \"$have\" | {change}); then "
        f'scontrol update {shlex.quote(f"PartitionName={partition}")} "Nodes=$new" && echo {name} done; '
        f"else echo {name} now {'has' if join else 'lacks'} them; fi; "
        f"else echo {name} now missing; fi"
    )


def apply(
    *,
    windows: Mapping[str, Window],
    owned: Iterable[Reservation],
    slurm_pools: Mapping[str, Iterable[str]],
    head_nodes: Mapping[str, str],
    sagemaker: Any,
    ssm: Any,
    ledger: Ledger,
    now: datetime,
    time_left: Callable[[], float] = lambda: float("inf"),
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """One result per instance group that windows of ``slurm_pools`` (pool -> its teams) feed."""
    owned, pools = list(owned), dict(slurm_pools)
    read_back(ssm=ssm, ledger=ledger, now=now)
    groups: dict[tuple[str, str, str], list[Window]] = {}
    for window in windows.values():
        consumer = window.consumer
        if consumer.get("kind") == INSTANCE_GROUP and consumer.get("pool") in pools:
            groups.setdefault((consumer["pool"], consumer["cluster_arn"], consumer["instance_group"]), []).append(
                window
            )
    results = []
    for (pool, cluster, group), fed in sorted(groups.items()):
        label = {"pool": pool, "instance_group": group, "windows": sorted(w.name for w in fed)}
        if pool not in head_nodes:
            results.append(
                {**label, "error": f"no head node for Slurm pool {pool}: give the CapacityController slurm_head_nodes"}
            )
            continue
        head = HeadNode(ssm, instance_id=head_nodes[pool], comment=COMMENT, time_left=time_left, sleep=sleep)
        try:
            # The partitions the governance script makes: one per team of the pool, and borrow.
            governed = {*pools[pool], BORROW_PARTITION}
            results.append(_converge(label, cluster, group, fed, owned, head, sagemaker, ledger, now, governed))
        except (
            ClientError,
            BotoCoreError,
            RuntimeError,
            ValueError,
        ) as error:  # throttled, timed out, unreadable: the next run
            results.append({**label, "error": f"{type(error).__name__}: {error}"})
    return results


def _converge(
    label: dict[str, Any],
    cluster: str,
    group: str,
    fed: list[Window],
    owned: list[Reservation],
    head: HeadNode,
    sagemaker: Any,
    ledger: Ledger,
    now: datetime,
    governed: set[str],
) -> dict[str, Any]:
    plan = current_plan(owned, (w.name for w in fed), now)
    step = phase(plan, now)
    label = {**label, "phase": step}
    if step == "idle":
        return {**label, "changed": False}
    names = node_names(sagemaker, cluster, group)
    if not names:
        return {**label, "nodes": [], "changed": False}
    nodes, jobs = parse_read(head.run(read_commands(names)))
    window = next(w for w in fed if w.name == plan.window)
    result: dict[str, Any] = {
        **label,
        "window": window.name,
        "plan": plan.id,
        "ends": plan.end.isoformat(),
        "nodes": names,
    }
    errors = []
    if step == "serve":
        changes = {n: resume_command(n) for n, s in sorted(nodes.items()) if s["reason"].startswith(MARKER)}
    else:
        reason = f"{MARKER} {window.name} ends {plan.end:%Y-%m-%dT%H:%MZ}"
        changes = {n: drain_command(n, reason) for n, s in sorted(nodes.items()) if s["reason"] == "none"}
        result["left_alone"] = {
            n: s["reason"]
            for n, s in sorted(nodes.items())
            if s["reason"] != "none" and not s["reason"].startswith(MARKER)
        }
    acted = {("resume" if step == "serve" else "drain"): (f"slurm-nodes#{cluster}/{group}", changes, None)}
    # Bought capacity is the owner's alone: out of borrow and other teams' partitions whenever found there.
    elsewhere: dict[str, list[str]] = {}
    for name, state in sorted(nodes.items()):
        for partition in sorted(set(state["partitions"]) & (governed - {window.team})):
            elsewhere.setdefault(partition, []).append(name)
    acted["leave"] = (
        f"slurm-leave#{cluster}/{group}",
        {p: partition_command(p, n, join=False) for p, n in elsewhere.items()},
        elsewhere,
    )
    # HyperPod brought them after the governance script last listed the partition's nodes: the owner could not use them.
    outside = sorted(n for n, s in nodes.items() if window.team not in s["partitions"])
    if step == "serve" and outside:
        acted["join"] = (
            f"slurm-join#{cluster}/{group}",
            {window.team: partition_command(window.team, outside, join=True)},
            {window.team: outside},
        )
    if step == "requeue":
        acted["requeue"] = (
            f"slurm-requeue#{cluster}/{group}",
            {job: requeue_command(job, n) for job, n in sorted(jobs.items())},
            None,
        )
    for verb, (key, commands, what) in acted.items():
        result[verb] = _act(key, verb, commands, window, head, ledger, now, what)
        errors += [result[verb]["error"]] if "error" in result[verb] else []
    result["changed"] = any(result[verb].get("done") for verb in acted)
    return {**result, **({"error": "; ".join(errors)} if errors else {})}


def read_back(*, ssm: Any, ledger: Ledger, now: datetime) -> None:
    """Settle the commands earlier runs gave up on and cancelled: ``done`` (with their output) if
    they ran after all, ``failed`` if SSM cancelled or timed them out; one SSM still holds stays."""
    for action, _, details in ledger.actions("slurm-", ("abandoned",)):
        invocation = HeadNode(ssm, instance_id=details["head_node"], comment=COMMENT).outcome(details["command_id"])
        if invocation["Status"] in FINAL_STATUSES:
            ledger.record_action(
                action,
                status="done" if invocation["Status"] == "Success" else "failed",
                now=now,
                details={
                    **details,
                    "status": invocation["Status"],
                    "output": invocation.get("StandardOutputContent", "")[:2000],
                },
            )


def _act(
    key: str,
    verb: str,
    commands: Mapping[str, str],
    window: Window,
    head: HeadNode,
    ledger: Ledger,
    now: datetime,
    what: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Send ``commands`` (one per node, job or partition) as one SSM command, recorded before and
    after; ``what`` names the nodes of each partition command."""
    if not commands:
        return {}
    if window.mode == "dry_run":
        return {f"would_{verb}": dict(what) if what else sorted(commands)}
    action = f"{key}@{now:%Y%m%dT%H%M%SZ}"
    details = {verb: dict(what) if what else sorted(commands), "window": window.name, "head_node": head.instance_id}
    ledger.record_action(action, status="calling", details=details, now=now)
    try:
        output = head.run(list(commands.values()))
    except CommandAbandoned as abandoned:  # cancelled, so it cannot run late; the next run reads back whether it ran
        ledger.record_action(
            action, status="abandoned", details={**details, "command_id": abandoned.command_id}, now=now
        )
        return {"error": f"{verb}: {abandoned}"}
    except (
        ClientError,
        BotoCoreError,
        RuntimeError,
    ) as error:  # nothing known to have changed: the next run reads and tries again
        ledger.record_action(action, status="failed", details={**details, "error": str(error)}, now=now)
        return {"error": f"{verb}: {error}"}
    outcome = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    done = sorted(k for k, v in outcome.items() if v.strip() in ("drained", "resumed", "done"))
    skipped = {k: v.strip() for k, v in sorted(outcome.items()) if k in commands and k not in done}
    unanswered = sorted(set(commands) - set(outcome))  # its scontrol failed: the next run reads it and tries again
    ledger.record_action(
        action, status="done", details={**details, "done": done, "skipped": skipped, "failed": unanswered}, now=now
    )
    return {
        "done": done,
        **({"skipped": skipped} if skipped else {}),
        **({"failed": unanswered, "error": f"{verb} failed for {unanswered}"} if unanswered else {}),
    }
