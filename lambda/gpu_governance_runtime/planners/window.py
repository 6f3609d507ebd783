"""A capacity window as the controller reads it from the compiled policy, and its occurrences:
when it wants capacity, within what price, budget and zones, for whom, and how many reservations
its consumer can launch into at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from ..contract import CONSUMER_KARPENTER_NODE_POOL, TAG_COST_CENTRE, TAG_POOL, TAG_TEAM
from . import market
from .offers import HOUR

Mode = Literal["dry_run", "approval", "auto"]


# How many reservations (blocks, plans) one consumer can launch into at the same time; a kind not
# named here (SageMaker training jobs: each job names its own ``ResourceConfig.TrainingPlanArn``)
# can use any number. A launch template targets one ``CapacityReservationId``
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html). EC2 launches
# into Capacity Blocks in a Capacity Reservation group
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-groups-launch.html#cr-groups-launch-cb),
# but the EKS managed node group guide names only ``CapacityReservationId`` for a Capacity Block
# (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html), and so do AWS's blog and
# sample for Batch [aws: batch-ce.capacity-block-launch-template]: no group is used (docs/capacity.md,
# *What each consumer can use*). A HyperPod instance group
# names one ``TrainingPlanArn``
# (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterInstanceGroupSpecification.html).
RESERVATIONS_AT_ONCE = {"batch_compute_environment": 1, "eks_node_group": 1, "hyperpod_instance_group": 1}


@dataclass(frozen=True, kw_only=True)
class Window:
    """One capacity window as the compiled policy describes it (see constructs_lib.model.capacity)."""

    name: str
    market: str  # the kind of capacity it buys (kinds.KINDS)
    instance_type: str
    instance_count: int
    start: datetime
    duration_hours: int
    repeat_every_days: int | None
    availability_zones: tuple[str, ...]  # empty: any zone
    max_price_per_instance_hour: Decimal
    budget: Decimal
    budget_period: Literal["week", "month"]
    buy_ahead_days: int
    prefer_extension: bool
    mode: Mode
    consumer: Mapping[str, Any] = field(default_factory=dict)
    # The least share of a cover's instance-hours the window's own hours may use (``expected_yield``); 0: any.
    min_yield: Decimal = Decimal(0)
    fallback: Literal["on_demand", "none"] = "on_demand"
    # The owner: the compiled policy always names the team; the defaults serve tests and what-if runs.
    team: str = ""
    cost_centre: str | None = None
    # Set only on a requested window (capacity/requests.py): the declared window whose budget it spends.
    budget_window: str | None = None
    # CloudWatch alarms that request capacity for this window: {"alarm_name", "count", "hours"} each.
    alarm_requests: tuple[Mapping[str, Any], ...] = ()
    # Read from AWS each run, not from the policy (consumers.launch_zones): the zones the consumer's subnets are in,
    # where a block's instances can launch. None: not known or not bounded (what the declared zones allow).
    launch_zones: frozenset[str] | None = None

    def allows_zone(self, zone: str, *, launchable: bool = True) -> bool:
        """Whether a block or plan in ``zone`` serves the window: a zone it declares (any, when it declares none)
        that, with ``launchable``, its consumer can launch in."""
        declared = not self.availability_zones or zone in self.availability_zones
        return declared and (not launchable or self.launch_zones is None or zone in self.launch_zones)

    @property
    def zones_described(self) -> str:
        """The zones the window may buy in, as reasons name them."""
        if self.launch_zones is None:
            return ", ".join(self.availability_zones) or "any zone"
        usable = sorted(z for z in self.launch_zones if self.allows_zone(z))
        return (
            ", ".join(usable)
            if usable
            else (
                f"no zone: the consumer's subnets are in {', '.join(sorted(self.launch_zones)) or 'none'}"
                + (f", the window allows {', '.join(self.availability_zones)}" if self.availability_zones else "")
            )
        )

    @property
    def dry_run(self) -> bool:
        """``mode: dry_run``: every step of the window is planned and reported, none done."""
        return self.mode == "dry_run"

    @property
    def budget_key(self) -> str:
        """Whose budget a purchase for this window counts against."""
        return self.budget_window or self.name

    def serves_with(self, bought_for: str) -> bool:
        """Whether what was bought for window ``bought_for`` covers this window: its own, and, for a
        requested window, its declared window's too. A request overlapping the declared window's
        occurrence (pending or active) is served by the block or plan bought for that occurrence,
        extended or added to only for the hours and instances it leaves uncovered."""
        return bought_for in (self.name, self.budget_window)

    @property
    def reservations_at_once(self) -> int | None:
        """How many reservations the consumer can launch into at the same time (None: any number)."""
        return RESERVATIONS_AT_ONCE.get(self.consumer.get("kind", ""))

    @property
    def owner_fields(self) -> dict[str, str]:
        """Whom the window serves, as notifications and ``--json`` name it (unset fields left out)."""
        return {key: value for key, value in (("team", self.team), ("cost_centre", self.cost_centre)) if value}

    @property
    def owner_tags(self) -> dict[str, str]:
        """The owner's tags on every purchase for this window (contract.PURCHASE_TAG_KEYS), and the pool a
        Karpenter NodePool feeds, whose EC2NodeClass selects the purchase by it (docs/eks-kueue.md)."""
        keys = {"team": TAG_TEAM, "cost_centre": TAG_COST_CENTRE}
        pool = {TAG_POOL: self.consumer["pool"]} if self.consumer.get("kind") == CONSUMER_KARPENTER_NODE_POOL else {}
        return {**{keys[name]: value for name, value in self.owner_fields.items()}, **pool}

    @property
    def owner(self) -> str:
        """Whom the window serves, as reports name it."""
        return f"team {self.team or '?'}" + (f", cost centre {self.cost_centre}" if self.cost_centre else "")

    @classmethod
    def from_policy(cls, data: Mapping[str, Any]) -> Window:
        """A window from a compiled one; ``policy.read_policy`` validates it first."""
        return cls(
            **{
                **data,
                "start": market.utc(datetime.fromisoformat(data["start"])),
                "availability_zones": tuple(data["availability_zones"]),
                "alarm_requests": tuple(dict(a) for a in data.get("alarm_requests", ())),
                "max_price_per_instance_hour": Decimal(str(data["max_price_per_instance_hour"])),
                "budget": Decimal(str(data["budget"])),
                "min_yield": Decimal(str(data["min_yield"])),
            }
        )

    def occurrences(self, now: datetime) -> tuple[Occurrence, ...]:
        """Occurrences not yet over whose start is within the buying horizon."""
        horizon = now + min(timedelta(days=self.buy_ahead_days), market.MAX_START_AHEAD)
        length = self.duration_hours * HOUR
        if self.repeat_every_days is None:
            starts: Iterable[datetime] = [self.start]
        else:
            step = timedelta(days=self.repeat_every_days)
            skipped = max(0, (now - length - self.start) // step)  # occurrences long over
            starts = itertools.takewhile(
                lambda s: s <= horizon, (self.start + (skipped + i) * step for i in itertools.count())
            )
        return tuple(
            Occurrence(window=self.name, start=s, end=s + length) for s in starts if s + length > now and s <= horizon
        )

    def period_key(self, moment: datetime) -> str:
        """The budget period a purchase made at ``moment`` counts against."""
        if self.budget_period == "month":
            return f"{moment:%Y-%m}"
        year, week, _ = moment.isocalendar()
        return f"{year}-W{week:02d}"


@dataclass(frozen=True, kw_only=True, order=True)
class Occurrence:
    start: datetime
    end: datetime
    window: str

    @property
    def key(self) -> str:
        return f"{self.window}@{self.start:%Y%m%dT%H%MZ}"
