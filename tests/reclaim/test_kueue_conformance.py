"""Kueue's preemption tests as a conformance suite for the reclaim planner (issue 29).

The cases are our own translation of kubernetes-sigs/kueue at commit ff69552e79,
``pkg/scheduler/preemption/preemption_test.go`` (``TestPreemption``),
``preemption_hierarchical_test.go`` (``TestHierarchicalPreemptions``) and
``common/preemption_policy_test.go`` (``TestSatisfiesPreemptionPolicy``); each names its test,
case and line there. The mapping (docs/reclaim.md, *Where we differ from Kueue*):

* a ClusterQueue is a share, its cohort the pool, holding the sum of the cohort's nominal quotas;
  a ClusterQueue without a cohort is a pool of its own;
* nominal quota -> quota; ``borrowingLimit`` -> ``lend_and_borrow`` with that limit as a percent
  of the quota (none: unlimited); ``lendingLimit`` -> ``lending_limit``, the smallest percent of
  the quota that lends exactly as many; a ClusterQueue alone in its pool -> ``lend``;
* ``withinClusterQueue: LowerPriority`` -> in-share preemption; ``Never`` -> none;
  ``reclaimWithinCohort`` -> the planner's reclaim, which takes any borrower (``Any``);
* CPUs of the one flavor -> instances of one type; every admitted workload started together,
  ten minutes ago (Kueue's tests admit them all at ``now``).

Kueue's tests ask for the preemption targets of one incoming workload; the planner plans the
whole tick. Where the semantics agree the plan preempts exactly Kueue's targets and starts the
incoming job when it preempts; where the library differs on purpose the case asserts the
library's outcome and says why; cases that need a concept the library lacks are listed in
``MISSING`` with the concept. Every ported case also passes the safety properties of ``safety.py``
(a hierarchical case all but the one-level rule that a reclaiming job lands in its share's quota:
there a group's quota is guaranteed too). The session prints the summary.

Hierarchical cohorts (``TestHierarchicalPreemptions``, issue 43): a cohort with a parent is a
group (``ShareGroup``) whose quota is its own nominal quota plus its children's (the library's
group quota is what its members are guaranteed together, Kueue's cohort quota is added to its
children's), without a borrowing limit; the root cohort is the pool, its own quota capacity no
team is guaranteed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpu_governance_runtime.contract import lendable
from gpu_governance_runtime.planners.reclaim import (
    PendingJob,
    PoolState,
    RunningJob,
    Settings,
    Share,
    ShareGroup,
    Strategy,
    plan_tick,
)

from .safety import check_safety

PREEMPTION = "TestPreemption"
HIERARCHICAL = "TestHierarchicalPreemptions"
POLICY = "TestSatisfiesPreemptionPolicy"
AGREE, BY_DESIGN = "agree", "by design"
CPU = "default"  # Kueue's one flavor
NOW = 100_000.0
ADMITTED_AT = NOW - 600


def cq(
    name: str,
    nominal: int,
    *,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    in_share: bool = True,
    alone: bool = False,
) -> Share:
    if alone:
        return Share(name=name, quota={CPU: nominal}, strategy=Strategy.LEND, in_share_preemption=in_share)
    percent = borrowing_limit * 100 // nominal if borrowing_limit is not None and nominal else None
    lending = (
        None if lending_limit is None else -(-lending_limit * 100 // nominal)
    )  # the smallest percent lending that many
    assert lending is None or lendable(Strategy.LEND_AND_BORROW, nominal, lending) == lending_limit
    return Share(
        name=name,
        quota={CPU: nominal},
        strategy=Strategy.LEND_AND_BORROW,
        borrow_limit=percent,
        in_share_preemption=in_share,
        lending_limit=lending,
    )


# TestPreemption's defaultClusterQueues (line 72), by cohort.
COHORTS = {
    "standalone": (cq("standalone", 6, alone=True),),
    "cohort": (cq("c1", 6, borrowing_limit=6), cq("c2", 6, borrowing_limit=6, in_share=False)),
    "cohort-no-limits": (cq("d1", 6), cq("d2", 6, in_share=False)),
    "legion": (cq("l1", 6, borrowing_limit=12),),
    "with_shared_cq": (
        cq("a_standard", 1, borrowing_limit=12, in_share=False),
        cq("b_standard", 1, borrowing_limit=12),
        cq("a_best_effort", 1, borrowing_limit=12, in_share=False),
        cq("b_best_effort", 0, borrowing_limit=13, in_share=False),
        cq("shared", 10, in_share=False),
    ),
    "cohort-three": (cq("a", 2), cq("b", 2, in_share=False), cq("c", 2, in_share=False)),
    "cohort-lend": (cq("lend1", 6, lending_limit=4), cq("lend2", 6, lending_limit=2)),
    # TestSatisfiesPreemptionPolicy: one ClusterQueue (in-share), or a lender and a borrower (reclaim)
    "policy-within": (cq("q", 1, alone=True),),
    "policy-never": (cq("q", 1, alone=True, in_share=False),),
    "policy-reclaim": (cq("lender", 1, in_share=False), cq("borrower", 0, in_share=False)),
    # TestHierarchicalPreemptions: the ClusterQueues of each tree (every one LowerPriority within)
    "h-advantage": (cq("q", 0), cq("q_borrowing", 0)),
    "h-nominal": (cq("q_nominal", 2), cq("q", 0), cq("q_borrowing", 0)),
    "h-nominal-3": (cq("q", 0), cq("q_borrowing", 0), cq("q_nominal", 2)),
    "h-same-cohort": (cq("q", 0), cq("q_same_cohort", 0)),
    "h-forced": (cq("q", 0), cq("q_nominal", 2), cq("q_same_cohort", 0)),
    "h-fits-cq": (cq("q", 4), cq("q_borrowing", 0), cq("q_same_cohort", 0)),
    "h-r1": (cq("q", 0), cq("q_borrowing", 0), cq("q_same_cohort", 0)),
    "h-pruned": (cq("q_other", 0), cq("q", 0), cq("q_same_cohort", 0)),
    "h-lending": (cq("q", 3, lending_limit=2), cq("q_borrowing", 0)),
    "h-complex": tuple(cq(f"q{i}", 0) for i in range(1, 6)),
}


def cohort(name: str, quota: int, shares: tuple[str, ...], parent: str | None = None) -> ShareGroup:
    """A Kueue Cohort with a parent, its quota its own nominal quota plus its children's."""
    return ShareGroup(name=name, shares=shares, quota={CPU: quota}, parent=parent, borrowing_limit={})


# Each tree's cohorts below the root (line: TestHierarchicalPreemptions' diagram of the case);
# the root's own nominal quota is capacity on top of the ClusterQueues' and cohorts'.
TREES = {
    "h-advantage": ((cohort("c", 2, ("q",)),), 0),  # R; C(2): q; q_borrowing
    "h-nominal": ((cohort("c", 2, ("q",)),), 0),
    "h-nominal-3": ((cohort("c", 3, ("q",)),), 0),
    "h-same-cohort": ((cohort("c", 3, ("q", "q_same_cohort")),), 0),
    "h-forced": ((cohort("c", 2, ("q", "q_same_cohort")),), 0),
    "h-fits-cq": ((cohort("c", 6, ("q", "q_same_cohort")),), 0),  # C(2) + q(4)
    "h-r1": ((cohort("c", 4, ("q", "q_same_cohort")),), 1),  # R(1)
    "h-pruned": ((cohort("c", 2, ("q", "q_same_cohort")), cohort("c_other", 2, ("q_other",))), 0),
    "h-lending": ((cohort("c", 5, ("q",)),), 0),  # C(2) + q(3)
    # r: c11 (c21 (c31: q5, c32: q4), c22: q3, c23: q2), c12: q1; every cohort 4 of its own
    "h-complex": (
        (
            cohort("c11", 24, ()),
            cohort("c12", 4, ("q1",)),
            cohort("c21", 12, (), parent="c11"),
            cohort("c22", 4, ("q3",), parent="c11"),
            cohort("c23", 4, ("q2",), parent="c11"),
            cohort("c31", 4, ("q5",), parent="c21"),
            cohort("c32", 4, ("q4",), parent="c21"),
        ),
        0,
    ),
}

# Why the library differs (docs/reclaim.md, "Where we differ from Kueue", one row each).
EQUAL_PRIORITY = (
    "in-share preemption takes only strictly lower priority: no LowerOrNewerEqualPriority, "
    "two jobs of one priority never displace each other"
)
NO_BORROW_RECLAIM = (
    "no reclaim for a borrowing job: capacity is taken from another team only for a guarantee, "
    "never to borrow (no borrowWithinCohort)"
)
OUTSIDE_THE_GROUP = (
    "a job only a group's quota covers reclaims from borrowers outside that group, never from its "
    "members (inside the group its headroom is first come), and the victims are chosen by least work "
    "lost before priority (reclaim_order); Kueue also takes a lower-priority member that borrows"
)
RECLAIM_ANY = (
    "a guarantee is reclaimed from any borrower whatever its priority: the library's reclaim is "
    "reclaimWithinCohort: Any, there is no LowerPriority reclaim"
)


@dataclass(frozen=True)
class Case:
    test: str
    name: str
    line: int
    cohort: str
    admitted: tuple[tuple[str, str, int, int], ...]  # (workload, ClusterQueue, priority, CPUs)
    incoming: tuple[str, int, int]  # (ClusterQueue, priority, CPUs)
    kueue: frozenset[str]  # Kueue's preemption targets
    library: frozenset[str] | None = None  # by design: the library's targets instead
    why: str = ""
    starts: bool | None = None  # whether the incoming job starts (default: when it preempts)
    note: str = ""
    ages: tuple[tuple[str, float], ...] = ()  # workloads admitted later than the rest: seconds later
    created: float = 0.0  # the incoming workload's creation, seconds after the admitted ones'

    @property
    def verdict(self) -> str:
        return AGREE if self.library is None else BY_DESIGN

    @property
    def expected(self) -> frozenset[str]:
        return self.kueue if self.library is None else self.library

    def state(self) -> PoolState:
        shares = COHORTS[self.cohort]
        later = dict(self.ages)
        running = tuple(
            RunningJob(
                job_id=name,
                share=queue,
                instance_type=CPU,
                count=cpus,
                priority=priority,
                started_at=ADMITTED_AT + later.get(name, 0.0),
            )
            for name, queue, priority, cpus in self.admitted
        )
        queue, priority, cpus = self.incoming
        pending = (
            PendingJob(
                job_id="in",
                share=queue,
                instance_type=CPU,
                count=cpus,
                priority=priority,
                submitted_at=ADMITTED_AT + self.created,
            ),
        )
        groups, root = TREES.get(self.cohort, ((), 0))
        # the pool: the ClusterQueues' and the cohorts' own nominal quotas (a top group's quota
        # holds its members' and its own), and the root cohort's
        outside = sum(s.quota[CPU] for s in shares if not any(s.name in g.shares for g in groups))
        tops = sum(g.quota[CPU] for g in groups if g.parent is None)
        capacity = {CPU: outside + tops + root if groups else sum(s.quota[CPU] for s in shares)}
        return PoolState(capacity=capacity, shares=shares, running=running, pending=pending, now=NOW, groups=groups)


def case(test, name, line, cohort, admitted, incoming, kueue, library=None, **extra) -> Case:
    extra["library"] = None if library is None else frozenset(library)
    return Case(
        test=test,
        name=name,
        line=line,
        cohort=cohort,
        admitted=tuple(admitted),
        incoming=incoming,
        kueue=frozenset(kueue),
        **extra,
    )


FITS_FREE = "Kueue's test forces Preempt mode; the pool has room, so the job starts without preemption, as Kueue's flavor assigner (Fit) would admit it"

FLAT_CASES = (
    case(
        PREEMPTION,
        "preempt lowest priority",
        293,
        "standalone",
        [("low", "standalone", -1, 2), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 2)],
        ("standalone", 1, 2),
        {"low"},
    ),
    case(
        PREEMPTION,
        "preempt multiple",
        397,
        "standalone",
        [("low", "standalone", -1, 2), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 2)],
        ("standalone", 1, 3),
        {"low", "mid"},
    ),
    case(
        PREEMPTION,
        "no preemption for low priority",
        516,
        "standalone",
        [("low", "standalone", -1, 3), ("mid", "standalone", 0, 3)],
        ("standalone", -1, 1),
        set(),
    ),
    case(
        PREEMPTION,
        "not enough low priority workloads",
        580,
        "standalone",
        [("low", "standalone", -1, 3), ("mid", "standalone", 0, 3)],
        ("standalone", 0, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "some free quota, preempt low priority",
        643,
        "standalone",
        [("low", "standalone", -1, 1), ("mid", "standalone", 0, 1), ("high", "standalone", 1, 3)],
        ("standalone", 1, 2),
        {"low"},
    ),
    case(
        PREEMPTION,
        "minimal set excludes low priority",
        747,
        "standalone",
        [("low", "standalone", -1, 1), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 3)],
        ("standalone", 1, 2),
        {"mid"},
    ),
    case(
        PREEMPTION,
        "reclaim quota from borrower",
        960,
        "cohort",
        [("c1-low", "c1", -1, 3), ("c2-mid", "c2", 0, 3), ("c2-high", "c2", 1, 6)],
        ("c1", 1, 3),
        {"c2-mid"},
    ),
    case(
        PREEMPTION,
        "no workloads borrowing",
        1133,
        "cohort",
        [("c1-high", "c1", 1, 4), ("c2-low-1", "c2", -1, 4)],
        ("c1", 1, 4),
        set(),
        starts=True,
        note=FITS_FREE,
    ),
    case(
        PREEMPTION,
        "not enough workloads borrowing",
        1199,
        "cohort",
        [("c1-high", "c1", 1, 4), ("c2-low-1", "c2", -1, 4), ("c2-low-2", "c2", -1, 4)],
        ("c1", 1, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "preempting locally and borrowing same resource in cohort",
        1400,
        "cohort",
        [("c1-med", "c1", 0, 4), ("c1-low", "c1", -1, 4), ("c2-low-1", "c2", -1, 4)],
        ("c1", 1, 4),
        {"c1-low"},
    ),
    case(
        PREEMPTION,
        "preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort",
        1506,
        "cohort-no-limits",
        [("d1-med", "d1", 0, 4), ("d1-low", "d1", -1, 4), ("d2-low-1", "d2", -1, 4)],
        ("d1", 1, 4),
        {"d1-low"},
    ),
    case(
        PREEMPTION,
        "preempting locally and not borrowing same resource in 1-queue cohort",
        1747,
        "legion",
        [("l1-med", "l1", 0, 4), ("l1-low", "l1", -1, 2)],
        ("l1", 1, 4),
        {"l1-med"},
    ),
    case(
        PREEMPTION,
        "do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority",
        1829,
        "cohort",
        [("c1", "c1", 0, 2), ("c2-1", "c2", 0, 4), ("c2-2", "c2", 0, 4)],
        ("c1", 0, 4),
        set(),
        library={"c2-1"},
        why=RECLAIM_ANY,
    ),
    case(
        PREEMPTION,
        "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny",
        1912,
        "cohort",
        [("c1-1", "c1", 0, 4), ("c1-2", "c1", 1, 4), ("c2", "c2", 0, 2)],
        ("c2", 0, 4),
        {"c1-1"},
    ),
    case(
        PREEMPTION,
        "preempt from all ClusterQueues in cohort",
        2013,
        "cohort",
        [("c1-low", "c1", -1, 3), ("c1-mid", "c1", 0, 2), ("c2-low", "c2", -1, 3), ("c2-mid", "c2", 0, 4)],
        ("c1", 0, 4),
        {"c1-low", "c2-low"},
    ),
    case(
        PREEMPTION,
        "can't preempt workloads in ClusterQueue for withinClusterQueue=Never",
        2153,
        "cohort",
        [("c2-low", "c2", -1, 3)],
        ("c2", 1, 4),
        set(),
        starts=True,
        note=FITS_FREE,
    ),
    case(
        PREEMPTION,
        "preempt newer workloads with the same priority",
        2314,
        "standalone",
        [("wl1", "standalone", 2, 2), ("wl2", "standalone", 1, 2), ("wl3", "standalone", 1, 2)],
        ("standalone", 1, 2),
        {"wl2"},
        library=set(),
        why=EQUAL_PRIORITY,
        ages=(("wl2", 1.0),),
        note="ClusterQueue preventStarvation (LowerOrNewerEqualPriority), 6 CPUs, as standalone",
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing",
        2435,
        "with_shared_cq",
        [("a_best_effort_low", "a_best_effort", -1, 10), ("b_best_effort_low", "b_best_effort", -1, 1)],
        ("a_standard", 0, 10),
        {"a_best_effort_low"},
        library=set(),
        why=NO_BORROW_RECLAIM,
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above MaxPriorityThreshold, "
        "if borrowing is required even after the preemption",
        2516,
        "with_shared_cq",
        [("b_standard", "b_standard", 1, 10)],
        ("a_standard", 2, 10),
        set(),
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; allow preempting a lower-priority workload with priority above MaxPriorityThreshold, "
        "if borrowing is not required after the preemption",
        2558,
        "with_shared_cq",
        [("b_standard", "b_standard", 1, 13)],
        ("a_standard", 2, 1),
        {"b_standard"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same ClusterQueue",
        2619,
        "with_shared_cq",
        [("a_standard", "a_standard", 1, 13)],
        ("a_standard", 2, 1),
        set(),
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal",
        2661,
        "with_shared_cq",
        [
            ("a_standard_1", "a_standard", 1, 10),
            ("a_standard_2", "a_standard", 1, 1),
            ("b_standard_1", "b_standard", 1, 1),
            ("b_standard_2", "b_standard", 2, 1),
        ],
        ("b_standard", 3, 1),
        {"b_standard_1"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
        2791,
        "with_shared_cq",
        [
            ("b_standard_high", "b_standard", 2, 10),
            ("b_standard_mid", "b_standard", 1, 1),
            ("a_best_effort_low", "a_best_effort", -1, 1),
            ("a_best_effort_lower", "a_best_effort", -2, 1),
        ],
        ("b_standard", 2, 2),
        {"a_best_effort_lower", "b_standard_mid"},
        library=set(),
        why=NO_BORROW_RECLAIM,
    ),
    # cohort-lend: lending limits bound what lend1 (4 of 6) and lend2 (2 of 6) lend to each other.
    case(
        PREEMPTION,
        "reclaim quota from lender",
        2936,
        "cohort-lend",
        [("lend1-low", "lend1", -1, 3), ("lend2-mid", "lend2", 0, 3), ("lend2-high", "lend2", 1, 4)],
        ("lend1", 1, 3),
        {"lend2-mid"},
    ),
    case(
        PREEMPTION,
        "preempt from all ClusterQueues in cohort-lend",
        3040,
        "cohort-lend",
        [
            ("lend1-low", "lend1", -1, 3),
            ("lend1-mid", "lend1", 0, 2),
            ("lend2-low", "lend2", -1, 3),
            ("lend2-mid", "lend2", 0, 4),
        ],
        ("lend1", 0, 4),
        {"lend1-low", "lend2-low"},
    ),
    case(
        PREEMPTION,
        "cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit",
        3180,
        "cohort-lend",
        [("lend2-low", "lend2", -1, 10)],
        ("lend1", 0, 9),
        set(),
    ),
    case(
        PREEMPTION,
        "preemptions from cq when target queue is exhausted for the single requested resource",
        3221,
        "cohort-three",
        [
            ("a1", "a", -2, 1),
            ("a2", "a", -2, 1),
            ("a3", "a", -1, 1),
            ("b1", "b", 0, 1),
            ("b2", "b", 0, 1),
            ("b3", "b", 0, 1),
        ],
        ("a", 0, 2),
        {"a1", "a2"},
    ),
    case(
        PREEMPTION,
        "allow preemption from other cluster queues if target cq is not exhausted for the requested resource",
        3834,
        "cohort-three",
        [
            ("a1", "a", -1, 1),
            ("b1", "b", 0, 1),
            ("b2", "b", 0, 1),
            ("b3", "b", 0, 1),
            ("b4", "b", 0, 1),
            ("b5", "b", -1, 1),
        ],
        ("a", 0, 2),
        {"a1", "b5"},
    ),
    # TestSatisfiesPreemptionPolicy: the preemptor pending, the candidate running, the pool full.
    case(
        POLICY,
        "LowerPriority: preemptor has higher priority",
        49,
        "policy-within",
        [("candidate", "q", 5, 1)],
        ("q", 10, 1),
        {"candidate"},
    ),
    case(
        POLICY,
        "LowerPriority: preemptor has same priority",
        55,
        "policy-within",
        [("candidate", "q", 10, 1)],
        ("q", 10, 1),
        set(),
    ),
    case(
        POLICY,
        "LowerOrNewerEqualPriority: preemptor has same priority, same timestamp",
        61,
        "policy-within",
        [("candidate", "q", 10, 1)],
        ("q", 10, 1),
        set(),
    ),
    case(
        POLICY,
        "LowerOrNewerEqualPriority: preemptor has same priority, newer timestamp (within 5min buffer)",
        67,
        "policy-within",
        [("candidate", "q", 10, 1)],
        ("q", 10, 1),
        set(),
        created=60.0,
    ),
    case(
        POLICY,
        "LowerOrNewerEqualPriority: preemptor has same priority, older timestamp (within 5min buffer)",
        73,
        "policy-within",
        [("candidate", "q", 10, 1)],
        ("q", 10, 1),
        {"candidate"},
        library=set(),
        why=EQUAL_PRIORITY,
        ages=(("candidate", 60.0),),
    ),
    case(
        POLICY,
        "PreemptionPolicyAny",
        79,
        "policy-reclaim",
        [("candidate", "borrower", 10, 1)],
        ("lender", 10, 1),
        {"candidate"},
        note="Any is the library's reclaim: the lender takes back its quota from a borrower of the same priority",
    ),
    case(POLICY, "PreemptionPolicyNever", 85, "policy-never", [("candidate", "q", 10, 1)], ("q", 10, 1), set()),
)

HIERARCHY_CASES = (
    case(
        HIERARCHICAL,
        "preempt with hierarchical advantage",
        66,
        "h-advantage",
        [("admitted2", "q_borrowing", 0, 2)],
        ("q", 0, 2),
        {"admitted2"},
    ),
    case(
        HIERARCHICAL,
        "avoid queues within nominal quota",
        143,
        "h-nominal",
        [("admitted1", "q_nominal", -10, 2), ("admitted2", "q_borrowing", 0, 2)],
        ("q", 0, 2),
        {"admitted2"},
    ),
    case(
        HIERARCHICAL,
        "preempt multiple with hierarchical advantage",
        242,
        "h-advantage",
        [("admitted1", "q_borrowing", 1, 1), ("admitted2", "q_borrowing", 2, 1)],
        ("q", 0, 2),
        {"admitted1", "admitted2"},
    ),
    case(
        HIERARCHICAL,
        "preempt in cohort and own CQ",
        348,
        "h-same-cohort",
        [
            ("admitted_not_preemptible", "q_same_cohort", 1, 1),
            ("admitted_preemptible", "q_same_cohort", 0, 1),
            ("admitted_own_queue", "q", -1, 1),
        ],
        ("q", 1, 2),
        {"admitted_own_queue", "admitted_preemptible"},
        library=set(),
        why=NO_BORROW_RECLAIM,
        note="C is full: the job is beyond every guarantee, and its own lower-priority job alone makes too little room",
    ),
    case(
        HIERARCHICAL,
        "prefer to preempt hierarchical candidate",
        472,
        "h-advantage",
        [("admitted_borrowing", "q_borrowing", 1, 1), ("admitted_same_queue", "q", -2, 1)],
        ("q", 0, 1),
        {"admitted_borrowing"},
    ),
    case(
        HIERARCHICAL,
        "forced to preempt priority candidate",
        563,
        "h-forced",
        [("admitted_nominal", "q_nominal", -10, 2), ("admitted_same_cohort", "q_same_cohort", -1, 2)],
        ("q", 0, 2),
        {"admitted_same_cohort"},
        library=set(),
        why=NO_BORROW_RECLAIM,
        note="C's quota is held by q_same_cohort: the job is beyond C's guarantee, so it borrows or waits",
    ),
    case(
        HIERARCHICAL,
        "incoming workload fits in CQ nominal quota",
        668,
        "h-fits-cq",
        [("admitted_borrowing", "q_borrowing", 10, 3), ("admitted_same_cohort", "q_same_cohort", 10, 3)],
        ("q", 0, 4),
        {"admitted_borrowing", "admitted_same_cohort"},
    ),
    case(
        HIERARCHICAL,
        "preempt hierarchical and priority candidates",
        782,
        "h-r1",
        [
            ("admitted_borrowing", "q_borrowing", -1, 2),
            ("admitted_same_cohort_preemptible", "q_same_cohort", -1, 1),
            ("admitted_borrowing_not_preemptible", "q_borrowing", 1, 2),
        ],
        ("q", 0, 3),
        {"admitted_borrowing", "admitted_same_cohort_preemptible"},
        library={"admitted_borrowing", "admitted_borrowing_not_preemptible"},
        why=OUTSIDE_THE_GROUP,
    ),
    case(
        HIERARCHICAL,
        "preempt hierarchical candidates and inside CQ",
        916,
        "h-r1",
        [
            ("admitted_borrowing", "q_borrowing", -1, 2),
            ("admitted_same_queue_preemptible", "q", -1, 1),
            ("admitted_borrowing_not_preemptible", "q_borrowing", 1, 2),
        ],
        ("q", 0, 3),
        {"admitted_borrowing", "admitted_same_queue_preemptible"},
        library={"admitted_borrowing", "admitted_borrowing_not_preemptible"},
        why=RECLAIM_ANY,
        note="other teams' borrowed jobs go before the team's own lower-priority job (docs/reclaim.md, victims)",
    ),
    case(
        HIERARCHICAL,
        "reclaim nominal quota from lowest priority workload, excluding non-borrowing",
        1049,
        "h-nominal-3",
        [
            ("admitted_borrowing_prio_8", "q_borrowing", 8, 1),
            ("admitted_borrowing_prio_9", "q_borrowing", 9, 1),
            ("admitted_borrowing_prio_10", "q_borrowing", 9, 1),
            ("admitted_nominal", "q_nominal", -2, 2),
        ],
        ("q", 0, 1),
        {"admitted_borrowing_prio_8"},
    ),
    case(
        HIERARCHICAL,
        "infeasible preemption all available workloads in pruned subtrees",
        1176,
        "h-pruned",
        [
            ("admitted_other_1", "q_other", -10, 1),
            ("admitted_other_2", "q_other", -10, 1),
            ("admitted_same_cohort", "q_same_cohort", 0, 2),
        ],
        ("q", 0, 2),
        set(),
    ),
    case(
        HIERARCHICAL,
        "respect lending limits",
        1491,
        "h-lending",
        [("admitted_borrowing", "q_borrowing", 0, 4)],
        ("q", -2, 5),
        {"admitted_borrowing"},
    ),
    case(
        HIERARCHICAL,
        "reclaim in complex hierarchy",
        1575,
        "h-complex",
        [
            ("admitted_borrowing_1", "q1", -6, 4),
            ("admitted_borrowing_2", "q1", -5, 4),
            ("admitted_borrowing_3", "q2", -9, 4),
            ("admitted_borrowing_4", "q2", -10, 4),
            ("admitted_borrowing_5", "q3", -4, 4),
            ("admitted_borrowing_6", "q3", -3, 3),
            ("admitted_borrowing_7", "q4", 4, 2),
            ("admitted_borrowing_8", "q4", 2, 3),
        ],
        ("q5", -2, 7),
        {"admitted_borrowing_1", "admitted_borrowing_4", "admitted_borrowing_8"},
        library={"admitted_borrowing_1", "admitted_borrowing_6"},
        why=OUTSIDE_THE_GROUP,
        note="q5's job is covered by c21's quota only: q4 (in c21) keeps its jobs, c11 must get 3 back from c22 or c23, q3's 3-CPU job loses least",
    ),
)
CASES = FLAT_CASES + HIERARCHY_CASES

HIERARCHY = "not translated yet: cohorts with parents are planned (TREES above), this case's tree is not ported"
RESOURCES = "several resources per job (CPU and memory together): a job asks for instances of one type"
PODSETS = "several pod sets per job, each on its own flavor: a job asks for instances of one type"
FLAVORS = "flavors with resource groups of their own in one queue: quotas are per instance type and a job names one"
EVICTED = "a workload being evicted as a victim candidate: a job the controller stopped is no longer running"
BOOST = "priority boost (the PriorityBoost feature gate's annotation): priorities are fixed"

# (test, case, line, the concept the library lacks)
MISSING = (
    (PREEMPTION, "only preempt workloads using the chosen flavor", 851, FLAVORS),
    (PREEMPTION, "reclaim quota if workload requests 0 resources for a resource at nominal quota", 1064, RESOURCES),
    (
        PREEMPTION,
        "preempting locally and borrowing other resources in cohort, without cohort candidates",
        1289,
        RESOURCES,
    ),
    (PREEMPTION, "preempting locally and borrowing other resources in cohort, with cohort candidates", 1612, RESOURCES),
    (PREEMPTION, "each podset preempts a different flavor", 2195, PODSETS),
    (PREEMPTION, "preemptions from cq when target queue is exhausted for two requested resources", 3414, RESOURCES),
    (
        PREEMPTION,
        "preemptions from cq when target queue is exhausted for one requested resource, but not the other",
        3636,
        RESOURCES,
    ),
    (PREEMPTION, "long range preemption", 4026, HIERARCHY),
    (HIERARCHICAL, "hiearchical preemption with multiple resources", 1277, RESOURCES),
    (HIERARCHICAL, "prefer to preempt evicted workloads", 1393, EVICTED),
    *(
        (POLICY, name, line, BOOST)
        for name, line in (
            ("LowerPriority: boost makes low-priority immune to medium-priority preemption", 91),
            ("LowerPriority: boost on preemptor enables preemption of higher raw priority", 101),
            ("LowerOrNewerEqualPriority: boost equalizes priorities, older preemptor can preempt newer candidate", 111),
            (
                "LowerOrNewerEqualPriority: equal effective priority, newer preemptor cannot preempt older candidate",
                123,
            ),
            ("Any: always satisfies regardless of priority or boost", 135),
        )
    ),
)


def summary() -> str:
    agree = sum(c.verdict == AGREE for c in CASES)
    return (
        f"Kueue conformance: {len(CASES)} ported ({agree} agree, {len(CASES) - agree} by design), "
        f"{len(MISSING)} missing concept"
    )


@pytest.mark.parametrize("kueue_case", CASES, ids=lambda c: f"{c.test}:{c.line}")
def test_the_planner_preempts_what_kueue_does_or_differs_by_design(kueue_case):
    state = kueue_case.state()
    plan = plan_tick(state, Settings())
    assert {p.job_id for p in plan.preemptions} == kueue_case.expected, kueue_case.name
    starts = bool(kueue_case.expected) if kueue_case.starts is None else kueue_case.starts
    assert [s.job_id for s in plan.starts] == (["in"] if starts else [])
    check_safety(state, Settings(), plan)


def test_every_difference_has_a_reason_and_every_case_is_cited_once():
    cited = [(c.test, c.name) for c in CASES] + [(test, name) for test, name, _, _ in MISSING]
    assert len(cited) == len(set(cited))
    for c in CASES:
        assert (c.verdict == BY_DESIGN) == bool(c.why), c.name
        assert c.library is None or c.library != c.kueue, f"{c.name}: marked as a difference but the outcomes agree"
    assert all(concept for *_, concept in MISSING)
