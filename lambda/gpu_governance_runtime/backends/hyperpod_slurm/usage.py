"""GPU usage of a HyperPod Slurm pool from Slurm's accounting (``sacct``), published once per hour.

Why accounting and not the queue: ``squeue`` shows a moment, so a tick that is missed (an SSM
timeout, a cold start, the controller down) loses what ran in between; slurmdbd keeps every job's
start and end, so any hour can be read again later and comes out the same.

Why ``sacct`` and not ``sreport``: sreport reads slurmdbd's hourly rollup, which runs on
slurmdbd's own schedule (an hour or more behind) and cannot say on which nodes a job ran, which
lending needs. sacct reads the job records themselves, written as jobs start and end.

One hour at a time, with the hour's start as the metric timestamp. CloudWatch does not overwrite a
datapoint sent twice: it keeps both, and a Sum counts the hour twice. So each (pool, hour) is
claimed in the reclaim ledger and recorded done before it is published: a later tick, a retried
one or a new container finds the claim and publishes nothing (at most once: an invocation killed
between recording and printing loses that hour; one that fails earlier leaves a claim that goes
stale after the function's timeout, and a later tick publishes the hour). An hour is read once
it is ``SETTLE_SECONDS`` old and slurmdbd has nothing queued (``sdiag``), and any unpublished hour
of the last ``LOOKBACK_HOURS`` is still read, so missed ticks and failed reads lose nothing.

Attribution (the mapping of ``constructs_lib.model.slurm``): a job in its team's partition runs on
the team's own nodes; a job anywhere else (the ``borrow`` partition, under the team's borrow QoS)
is borrowed on the nodes it ran on, except those of its own team, and lent by the team whose
partition holds each such node (its GPU-seconds split evenly over the job's nodes). Guaranteed is
the team's own nodes of the target's instance type for the whole hour. GPU-seconds become
instance-hours through the pool's GPUs per instance.
"""

from __future__ import annotations

import itertools
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...common.action_ledger import CLAIMED, DONE, ActionKey, Ledger
from ...common.log import write as log
from ...policy import PoolPolicy
from ...slurm.ssm import SLURM_NAME, checked  # the one check of names that go into a head node's shell
from ...usage import usage_records

HOUR = 3600
# Slurm sends a job's start and end to slurmdbd as they happen; an hour is read this long after it
# ends, and only while slurmdbd's agent queue is empty (sdiag), so its records are all in.
SETTLE_SECONDS = 600
# The oldest unpublished hour still read: a controller down longer loses those hours. Within the
# ledger's retention (a week), which is what keeps an hour from being published twice.
LOOKBACK_HOURS = 24
# Hours read by one SSM command: bounds its output below SSM's 24,000 characters.
HOURS_PER_COMMAND = 4
END_OF_USAGE = "gg-end-of-usage"
PARTITIONS, DBD_QUEUE, JOBS = "partition", "dbd-queue", "gpu-seconds"
# A job's total GPUs in sacct's AllocTRES (the untyped gres/gpu; typed ones are gres/gpu:<type>).
GPU_TRES = "gres/gpu="
# Per started job (allocations, with the earlier runs of requeued jobs): its GPU-seconds within
# each hour of [S, E), summed by hour, account, partition and, off the team's own partition, nodes.
_AGGREGATE = (
    "{ if ($5 !~ /^[0-9]+$/ || !match($3, /gres\\/gpu=[0-9]+/)) next; "
    f"gpus = substr($3, RSTART + {len(GPU_TRES)}, RLENGTH - {len(GPU_TRES)}) + 0; "
    's = $5 + 0; e = ($6 ~ /^[0-9]+$/) ? $6 + 0 : E; nodes = ($2 == $1) ? "" : $4; '
    f"for (h = S; h < E; h += {HOUR}) {{ a = s > h ? s : h; b = e < h + {HOUR} ? e : h + {HOUR}; "
    'if (b > a) t[sprintf("%.0f", h) "|" $1 "|" $2 "|" nodes] += gpus * (b - a) } } '
    f'END {{ for (k in t) printf "{JOBS}|%s|%.0f\\n", k, t[k] }}'
)


# (pool, hour) this container has seen published, by itself or (a refused claim) by another: not read again.
PUBLISHED: set[tuple[str, int]] = set()


@dataclass(frozen=True, kw_only=True)
class ShareHour:
    """One share's mean instances over one hour (a :class:`gpu_governance_runtime.usage.ShareObservation`)."""

    share: str
    guaranteed: float
    in_use: float
    borrowed: float
    lent: float


def accounting_command(accounts: Iterable[str], start: int, end: int) -> str:
    """The head node's partitions, slurmdbd's backlog and the governed accounts' GPU-seconds per
    hour from ``start`` to ``end`` (epoch seconds), ending with :data:`END_OF_USAGE` only when
    every part was read (sacct's output is kept in a variable: the head node's sh has no pipefail)."""
    names = ",".join(checked(a, SLURM_NAME) for a in sorted(accounts))
    window = " ".join(
        f"--{flag}={time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(t))}"
        for flag, t in (("starttime", start), ("endtime", end))
    )
    return (
        f"sinfo --noheader --all --format='{PARTITIONS}|%R|%N' && "
        f"sdiag | awk -F: '/DBD Agent queue size/ {{ print \"{DBD_QUEUE}|\" $2 + 0 }}' && "
        f"jobs=$(TZ=UTC SLURM_TIME_FORMAT=%s sacct --noheader --parsable2 --allocations --duplicates --allusers "
        f"--accounts={shlex.quote(names)} {window} --format=Account,Partition,AllocTRES,NodeList,Start,End) && "
        f"printf '%s\\n' \"$jobs\" | awk -F'|' -v S={int(start)} -v E={int(end)} {shlex.quote(_AGGREGATE)} && echo {END_OF_USAGE}"
    )


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list (``gpu-[1-3,5],ip-10-0-0-[07-09]``) as host names."""
    hosts = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", hostlist):
        parts = re.split(r"\[([^\]]*)\]", item)
        hosts += [
            "".join(p)
            for p in itertools.product(*([part] if i % 2 == 0 else _ranges(part) for i, part in enumerate(parts)))
        ]
    return hosts


def _ranges(text: str) -> list[str]:
    names = []
    for piece in text.split(","):
        low, _, high = piece.partition("-")
        names += [f"{n:0{len(low)}d}" for n in range(int(low), int(high or low) + 1)]
    return names


@dataclass(frozen=True, kw_only=True)
class Accounting:
    node_owners: dict[str, str]  # node -> the team whose partition holds it
    dbd_queue: int  # records slurmctld has not yet sent to slurmdbd
    gpu_seconds: tuple[tuple[int, str, str, str, float], ...]  # (hour, account, partition, nodes or "", GPU-seconds)


def parse_accounting(output: str, teams: Iterable[str]) -> Accounting:
    lines = output.splitlines()
    if not lines or lines[-1].strip() != END_OF_USAGE:
        raise RuntimeError(
            f"Slurm accounting output ends without {END_OF_USAGE!r}: a command failed, or more than SSM's "
            "24,000 characters; no hour is published from part of it"
        )
    teams = set(teams)
    owners, dbd_queue, rows = {}, None, []
    try:
        for line in lines[:-1]:
            kind, _, rest = line.strip().partition("|")
            if kind == PARTITIONS:
                partition, nodes = rest.split("|")
                owners.update(dict.fromkeys(expand_hostlist(nodes), partition) if partition in teams else {})
            elif kind == DBD_QUEUE:
                dbd_queue = int(rest)
            elif kind == JOBS:
                hour, account, partition, nodes, seconds = rest.split("|")
                rows.append((int(hour), account, partition, nodes, float(seconds)))
    except ValueError as error:
        raise RuntimeError(f"Slurm accounting line {line!r}: {error}") from None
    if dbd_queue is None:
        raise RuntimeError("sdiag printed no 'DBD Agent queue size': cannot tell whether slurmdbd has every job record")
    return Accounting(node_owners=owners, dbd_queue=dbd_queue, gpu_seconds=tuple(rows))


def share_hours(
    accounting: Accounting, hours: Iterable[int], *, pool: PoolPolicy, instance_type: str, gpus_per_instance: int
) -> dict[int, tuple[ShareHour, ...]]:
    """Per hour, every share's mean guaranteed, used, borrowed and lent instances."""
    hours = sorted(hours)
    names = {s.name for s in pool.shares}
    totals = {h: {n: dict(in_use=0.0, borrowed=0.0, lent=0.0) for n in names} for h in hours}
    for hour, account, partition, nodes, gpu_seconds in accounting.gpu_seconds:
        if hour not in totals or account not in names:
            continue
        instances = gpu_seconds / gpus_per_instance / HOUR
        totals[hour][account]["in_use"] += instances
        if partition == account:
            continue  # the team's own partition holds only its own nodes
        hosts = expand_hostlist(nodes) or [""]
        for host in hosts:
            owner = accounting.node_owners.get(host)
            if owner != account:
                totals[hour][account]["borrowed"] += instances / len(hosts)
                if owner in names:
                    totals[hour][owner]["lent"] += instances / len(hosts)
    return {
        h: tuple(
            ShareHour(share=s.name, guaranteed=float(s.quota.get(instance_type, 0)), **totals[h][s.name])
            for s in sorted(pool.shares, key=lambda s: s.name)
        )
        for h in hours
    }


class SlurmUsageObserver:
    """Publishes each settled hour of one Slurm pool once. ``run`` runs shell commands on the head
    node and returns their output (the reclaim controller's SSM runner, ``SlurmAdapter.run``)."""

    def __init__(
        self,
        run: Callable[[list[str]], str],
        *,
        pool: PoolPolicy,
        instance_type: str,
        gpus_per_instance: int,
        ledger: Ledger,
        namespace: str,
        emit: Callable[[Mapping[str, Any]], None] = log,
        published: set | None = None,
    ):
        self.run, self.pool, self.instance_type, self.gpus_per_instance = run, pool, instance_type, gpus_per_instance
        self.ledger, self.namespace, self.emit = ledger, namespace, emit
        self.published = PUBLISHED if published is None else published

    def unpublished_hours(self, now: float) -> list[int]:
        """Up to HOURS_PER_COMMAND settled, unpublished hours of the lookback, oldest first."""
        last = (int(now) - SETTLE_SECONDS) // HOUR * HOUR - HOUR
        hours = [last - HOUR * i for i in reversed(range(LOOKBACK_HOURS))]
        return [h for h in hours if (self.pool.name, h) not in self.published][:HOURS_PER_COMMAND]

    def observe(self, now: float) -> list[int]:
        """Reads and publishes the unpublished hours; returns those this call published."""
        hours = self.unpublished_hours(now)
        if not hours:
            return []
        shares = [s.name for s in self.pool.shares]
        accounting = parse_accounting(self.run([accounting_command(shares, hours[0], hours[-1] + HOUR)]), shares)
        if accounting.dbd_queue:
            log(
                {
                    "event": "usage_deferred",
                    "pool": self.pool.name,
                    "reason": f"{accounting.dbd_queue} job records not yet in slurmdbd",
                }
            )
            return []
        published = []
        for hour, rows in share_hours(
            accounting,
            hours,
            pool=self.pool,
            instance_type=self.instance_type,
            gpus_per_instance=self.gpus_per_instance,
        ).items():
            key = ActionKey(pool=self.pool.name, job_id=f"usage-{hour}", attempt="0", action="usage")
            if self.ledger.claim(key, now=now, reason=f"Slurm usage of the hour from {hour}"):
                # Recorded done before printing: a failure up to here leaves a claim that goes
                # stale and a later tick publishes the hour; only dying between the two loses it.
                self.ledger.record(key, status=DONE)
                # Each row is a mean over one hour: its instance-hours are its instances.
                for record in usage_records(
                    self.pool.name, rows, tick_seconds=HOUR, namespace=self.namespace, now=hour
                ):
                    self.emit(record)
                published.append(hour)
            elif (self.ledger.get(key.id) or {}).get("status") == CLAIMED:
                # Claimed, not done: by an invocation at work or killed, or by this one, its claim's answer lost
                # and the client's resend refused by its own write. Read again next tick, taken once stale.
                continue
            self.published.add((self.pool.name, hour))
        log({"event": "usage_published", "pool": self.pool.name, "hours": published})
        return published
