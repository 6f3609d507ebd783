"""The one validating reader of the compiled policy document (``constructs_lib.model.policy.compile_policy``),
used by both controllers: pools and shares become the reclaim planner's value types, capacity
windows the capacity planner's. Every bad field is named before anything acts on the document.
Plain Python: this runs inside the Lambda function. The names it reads are in ``contract``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, get_args

from .contract import (
    BACKENDS,
    CONSUMER_FIELDS,
    DEFAULT_REBORROW_BACKOFF_S,
    ENV_POLICY_PATH,
    POLICY_FILE_NAME,
    POLICY_VERSION,
    SharingStrategy,
)
from .limits import PERIODS
from .planners.kinds import KINDS
from .planners.reclaim import Settings, Share, ShareGroup, group_tree_problems
from .planners.window import Mode, Window


class PolicyError(ValueError):
    """The policy document is not one this code understands; names every bad field."""


@dataclass(frozen=True, kw_only=True)
class PriorityClass:
    name: str
    weight: int


@dataclass(frozen=True, kw_only=True)
class PoolPolicy:
    name: str
    backend: str
    capacity: dict[str, int]
    shares: tuple[Share, ...]
    # the pool's anti-thrash settings (governance file ``reclaim``); absent: the planner defaults
    reborrow_backoff_s: float = DEFAULT_REBORROW_BACKOFF_S
    borrow_horizon_s: float | None = None
    grace_s: float = 0.0
    # set: borrowers and victims ordered by usage decayed with this half-life (reclaim/fair_share.py)
    usage_half_life_s: float | None = None
    groups: tuple[ShareGroup, ...] = ()  # groups of its shares with a quota here (docs/governance-file.md#groups)

    def settings(self, base: Settings = Settings()) -> Settings:
        """``base`` (the controller's tick-wide limits) with this pool's reclaim settings."""
        return replace(
            base,
            reborrow_backoff_s=self.reborrow_backoff_s,
            borrow_horizon_s=self.borrow_horizon_s,
            grace_s=self.grace_s,
            usage_half_life_s=self.usage_half_life_s,
        )


@dataclass(frozen=True, kw_only=True)
class Policy:
    organisation: str
    priority_classes: tuple[PriorityClass, ...]
    pools: tuple[PoolPolicy, ...]
    capacity_windows: tuple[Window, ...]

    def pool(self, name: str) -> PoolPolicy:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise PolicyError(f"pools: no pool named {name!r} (one of {[p.name for p in self.pools]})")

    def priority_weight(self, class_name: str) -> int:
        for priority_class in self.priority_classes:
            if priority_class.name == class_name:
                return priority_class.weight
        raise PolicyError(
            f"priority_classes: no class named {class_name!r} (one of {[p.name for p in self.priority_classes]})"
        )


def policy_path(environment: Mapping[str, str]) -> Path:
    """Where a controller finds its policy: ``POLICY_PATH`` if set, else the document bundled in the asset."""
    return Path(environment.get(ENV_POLICY_PATH) or Path(__file__).resolve().parent / POLICY_FILE_NAME)


def read_policy(environment: Mapping[str, str]) -> Policy:
    return read_policy_file(policy_path(environment))


def read_policy_file(path: str | Path) -> Policy:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PolicyError(f"{path}: cannot read a JSON policy document ({error})") from None
    return parse_policy(document)


def parse_policy(document: Any) -> Policy:
    reader = _Reader()
    policy = reader.policy(document)
    if reader.problems:
        raise PolicyError("invalid policy document:\n" + "\n".join(reader.problems))
    return policy


class _Reader:
    """Collects every problem before raising once."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def expect(self, value: Any, kind: type | tuple[type, ...], path: str, allowed: str) -> bool:
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int,)))
        if not ok:
            self.problems.append(f"{path}: {value!r} - {allowed}")
        return ok

    def count(self, value: Any, path: str, minimum: int) -> int:
        if self.expect(value, int, path, f"a whole number >= {minimum}") and value < minimum:
            self.problems.append(f"{path}: {value!r} - a whole number >= {minimum}")
        return value if isinstance(value, int) else 0

    def counts(self, value: Any, path: str, minimum: int) -> dict[str, int]:
        if not self.expect(value, dict, path, "a mapping of instance type to count"):
            return {}
        return {str(k): self.count(v, f"{path}.{k}", minimum) for k, v in value.items()}

    def policy(self, document: Any) -> Policy:
        if not self.expect(document, dict, "<root>", "a JSON object"):
            return Policy(organisation="", priority_classes=(), pools=(), capacity_windows=())
        if document.get("version") != POLICY_VERSION:
            self.problems.append(
                f"version: {document.get('version')!r} - this controller reads version {POLICY_VERSION}"
            )
        self.expect(document.get("organisation"), str, "organisation", "a string")
        classes = document.get("priority_classes")
        pools = document.get("pools")
        windows = document.get("capacity_windows")
        self.expect(classes, list, "priority_classes", "a list")
        self.expect(pools, list, "pools", "a list")
        self.expect(windows, list, "capacity_windows", "a list")
        return Policy(
            organisation=str(document.get("organisation", "")),
            priority_classes=tuple(
                PriorityClass(
                    name=str(c.get("name")), weight=self.count(c.get("weight"), f"priority_classes[{i}].weight", 0)
                )
                for i, c in enumerate(classes if isinstance(classes, list) else [])
                if self.expect(c, dict, f"priority_classes[{i}]", "an object with name and weight")
            ),
            pools=tuple(
                self.pool(p, f"pools[{i}]")
                for i, p in enumerate(pools if isinstance(pools, list) else [])
                if self.expect(p, dict, f"pools[{i}]", "an object")
            ),
            capacity_windows=tuple(
                window
                for i, w in enumerate(windows if isinstance(windows, list) else [])
                if self.expect(w, dict, f"capacity_windows[{i}]", "an object")
                and (window := self.window(w, f"capacity_windows[{i}]")) is not None
            ),
        )

    def pool(self, data: dict, path: str) -> PoolPolicy:
        if data.get("backend") not in BACKENDS:
            self.problems.append(f"{path}.backend: {data.get('backend')!r} - one of {', '.join(BACKENDS)}")
        self.expect(data.get("name"), str, f"{path}.name", "a string")
        shares = data.get("shares", [])
        self.expect(shares, list, f"{path}.shares", "a list")
        reclaim = data.get("reclaim", {})
        if not self.expect(
            reclaim,
            dict,
            f"{path}.reclaim",
            "an object with reborrow_backoff_s, borrow_horizon_s, grace_s and usage_half_life_s",
        ):
            reclaim = {}
        backoff = self.seconds(
            reclaim.get("reborrow_backoff_s", DEFAULT_REBORROW_BACKOFF_S),
            f"{path}.reclaim.reborrow_backoff_s",
            positive=False,
        )
        horizon = reclaim.get("borrow_horizon_s")
        half_life = reclaim.get("usage_half_life_s")
        pool = PoolPolicy(
            name=str(data.get("name")),
            backend=str(data.get("backend")),
            capacity=self.counts(data.get("capacity"), f"{path}.capacity", 1),
            shares=tuple(
                self.share(s, f"{path}.shares[{i}]")
                for i, s in enumerate(shares if isinstance(shares, list) else [])
                if self.expect(s, dict, f"{path}.shares[{i}]", "an object")
            ),
            reborrow_backoff_s=backoff,
            borrow_horizon_s=None
            if horizon is None
            else self.seconds(horizon, f"{path}.reclaim.borrow_horizon_s", positive=True),
            grace_s=self.seconds(reclaim.get("grace_s", 0), f"{path}.reclaim.grace_s", positive=False),
            usage_half_life_s=None
            if half_life is None
            else self.seconds(half_life, f"{path}.reclaim.usage_half_life_s", positive=True),
            groups=self.groups(data.get("groups", []), f"{path}.groups"),
        )
        if not self.problems:  # the tree against the pool's shares and capacity, named as the planner names it
            self.problems += [
                f"{path}.{problem}" for problem in group_tree_problems(pool.capacity, pool.shares, pool.groups)
            ]
        return pool

    def groups(self, value: Any, path: str) -> tuple[ShareGroup, ...]:
        """The pool's group tree (docs/reclaim.md#groups): each entry ``{name, shares, quota,
        parent?, borrowing_limit?, lending_limit?}``, a parent listed before its children; an
        absent limit is no limit."""
        if not self.expect(
            value, list, path, "a list of {name, shares, quota, parent?, borrowing_limit?, lending_limit?}"
        ):
            return ()
        groups: list[ShareGroup] = []
        for i, data in enumerate(value):
            where = f"{path}[{i}]"
            if not self.expect(data, dict, where, "an object") or not self.expect(
                data.get("name"), str, f"{where}.name", "a string"
            ):
                continue
            parent = data.get("parent")
            earlier = [g.name for g in groups]
            if parent is not None and parent not in earlier:
                self.problems.append(f"{where}.parent: {parent!r} - the name of a group listed before it {earlier}")
            shares = data.get("shares")
            if self.expect(shares, list, f"{where}.shares", "a list of share names") and all(
                self.expect(n, str, f"{where}.shares", "share names") for n in shares
            ):
                groups.append(
                    ShareGroup(
                        name=data["name"],
                        shares=tuple(shares),
                        quota=self.counts(data.get("quota"), f"{where}.quota", 1),
                        parent=parent if isinstance(parent, str) else None,
                        borrowing_limit=self.counts(data.get("borrowing_limit", {}), f"{where}.borrowing_limit", 0),
                        lending_limit=self.counts(data.get("lending_limit", {}), f"{where}.lending_limit", 0),
                    )
                )
        return tuple(groups)

    def seconds(self, value: Any, path: str, *, positive: bool) -> float:
        allowed = "a finite number of seconds " + ("> 0" if positive else ">= 0")
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is None or not math.isfinite(number) or number < 0 or (positive and number == 0):
            self.problems.append(f"{path}: {value!r} - {allowed}")
            return 0.0
        return float(number)

    def share(self, data: dict, path: str) -> Share:
        try:
            strategy = SharingStrategy(data.get("strategy"))
        except ValueError:
            self.problems.append(
                f"{path}.strategy: {data.get('strategy')!r} - one of {', '.join(s.value for s in SharingStrategy)}"
            )
            strategy = SharingStrategy.RESERVE
        borrow_limit = data.get("borrow_limit")
        if borrow_limit is not None:
            self.count(borrow_limit, f"{path}.borrow_limit", 0)
            if strategy is not SharingStrategy.LEND_AND_BORROW:
                self.problems.append(
                    f"{path}.borrow_limit: {borrow_limit!r} - only lend_and_borrow shares borrow; use null"
                )
        in_share = data.get("in_share_preemption", False)
        self.expect(in_share, bool, f"{path}.in_share_preemption", "true or false")
        lending_limit = data.get("lending_limit")
        if lending_limit is not None and self.count(lending_limit, f"{path}.lending_limit", 0) > 100:
            self.problems.append(
                f"{path}.lending_limit: {lending_limit!r} - a percent 0-100, or null to lend all idle quota"
            )
        paused = data.get("paused", False)
        self.expect(paused, bool, f"{path}.paused", "true or false")
        self.expect(data.get("name"), str, f"{path}.name", "a string")
        max_run, by_priority = self.max_run(data.get("max_run"), f"{path}.max_run")
        return Share(
            max_run_s=max_run,
            max_run_by_priority=by_priority,
            gpu_hour_limit=self.gpu_hour_limit(data.get("gpu_hour_limit"), f"{path}.gpu_hour_limit"),
            name=str(data.get("name")),
            quota=self.counts(data.get("quota"), f"{path}.quota", 0),
            strategy=strategy,
            borrow_limit=borrow_limit if isinstance(borrow_limit, int) else None,
            in_share_preemption=bool(in_share),
            fair_share_weight=self.count(data.get("fair_share_weight", 10), f"{path}.fair_share_weight", 1),
            lending_limit=lending_limit
            if isinstance(lending_limit, int) and not isinstance(lending_limit, bool)
            else None,
            paused=paused is True,
            borrow_limit_instances=self.counts(
                data.get("borrow_limit_instances", {}), f"{path}.borrow_limit_instances", 0
            ),
        )

    def max_run(self, value: Any, path: str) -> tuple[float | None, dict[int, float]]:
        """A share's run-time limits (``{seconds, by_priority}``, absent: none): any job's, and by priority."""
        if value is None or not self.expect(value, dict, path, "{seconds, by_priority} or absent"):
            return None, {}
        seconds = value.get("seconds")
        overall = None if seconds is None else self.seconds(seconds, f"{path}.seconds", positive=True)
        by_priority = value.get("by_priority", {})
        if not self.expect(by_priority, dict, f"{path}.by_priority", "a mapping of priority to seconds"):
            return overall, {}
        limits = {}
        for priority, limit in by_priority.items():
            if not str(priority).lstrip("-").isdigit():
                self.problems.append(f"{path}.by_priority: {priority!r} - a whole-number scheduling priority")
                continue
            limits[int(priority)] = self.seconds(limit, f"{path}.by_priority.{priority}", positive=True)
        return overall, limits

    def gpu_hour_limit(self, value: Any, path: str) -> tuple[int, str] | None:
        if value is None:
            return None
        if not self.expect(value, dict, path, "{hours, period} or null"):
            return None
        hours = self.count(value.get("hours"), f"{path}.hours", 1)
        if value.get("period") not in PERIODS:
            self.problems.append(f"{path}.period: {value.get('period')!r} - one of {', '.join(PERIODS)}")
            return None
        return hours, value["period"]

    def window(self, data: dict, path: str) -> Window | None:
        """A capacity window: every field the compiler writes, none it does not; None if any is bad."""
        before = len(self.problems)
        # Only requested windows have a budget window; launch zones are read from AWS each run (capacity/consumers.py).
        fields = set(Window.__dataclass_fields__) - {"budget_window", "launch_zones"}
        for name in sorted(fields - data.keys()):
            self.problems.append(f"{path}.{name}: missing - the compiled policy always sets it")
        for name in sorted(data.keys() - fields):
            self.problems.append(
                f"{path}.{name}: {data[name]!r} - not a window field (one of {', '.join(sorted(fields))})"
            )
        checks = {
            "name": lambda v, p: self.expect(v, str, p, "a string"),
            "team": lambda v, p: (
                self.expect(v, str, p, "a team name") and (v != "" or self.problems.append(f"{p}: '' - a team name"))
            ),
            "cost_centre": lambda v, p: v is None or self.expect(v, str, p, "a string or null"),
            "instance_type": lambda v, p: self.expect(v, str, p, "an instance type"),
            "market": lambda v, p: self.one_of(v, p, tuple(KINDS)),
            "mode": lambda v, p: self.one_of(v, p, get_args(Mode)),
            "budget_period": lambda v, p: self.one_of(v, p, ("week", "month")),
            "fallback": lambda v, p: self.one_of(v, p, ("on_demand", "none")),
            "instance_count": lambda v, p: self.count(v, p, 1),
            "duration_hours": lambda v, p: self.count(v, p, 1),
            "buy_ahead_days": lambda v, p: self.count(v, p, 1),
            "repeat_every_days": lambda v, p: v is None or self.count(v, p, 1),
            "prefer_extension": lambda v, p: self.expect(v, bool, p, "true or false"),
            "availability_zones": lambda v, p: (
                self.expect(v, list, p, "a list of zone names")
                and all(self.expect(zone, str, f"{p}[{i}]", "a zone name") for i, zone in enumerate(v))
            ),
            "max_price_per_instance_hour": lambda v, p: self.amount(v, p, positive=True),
            "budget": lambda v, p: self.amount(v, p, positive=False),
            "min_yield": lambda v, p: self.amount(v, p, positive=False, most=Decimal(1)),
            "start": self.timestamp,
            "consumer": self.consumer,
            "alarm_requests": self.alarm_requests,
        }
        for name in sorted(fields & data.keys()):
            checks[name](data[name], f"{path}.{name}")
        return Window.from_policy(data) if len(self.problems) == before else None

    def alarm_requests(self, value: Any, path: str) -> None:
        if not self.expect(value, list, path, "a list of {alarm_name, count, hours}"):
            return
        for i, spec in enumerate(value):
            where = f"{path}[{i}]"
            if not self.expect(spec, dict, where, "an object"):
                continue
            if set(spec) != {"alarm_name", "count", "hours"}:
                self.problems.append(f"{where}: {sorted(spec)} - exactly alarm_name, count, hours")
                continue
            self.expect(spec["alarm_name"], str, f"{where}.alarm_name", "an alarm name")
            self.count(spec["count"], f"{where}.count", 1)
            self.count(spec["hours"], f"{where}.hours", 1)

    def one_of(self, value: Any, path: str, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            self.problems.append(f"{path}: {value!r} - one of {', '.join(allowed)}")

    def amount(self, value: Any, path: str, *, positive: bool, most: Decimal | None = None) -> None:
        allowed = "a decimal string " + ("> 0" if positive else ">= 0") + ("" if most is None else f" and <= {most}")
        try:
            number = Decimal(value) if isinstance(value, str) else None
        except InvalidOperation:
            number = None
        if (
            number is None
            or not number.is_finite()
            or number < 0
            or (positive and number == 0)
            or (most is not None and number > most)
        ):
            self.problems.append(f"{path}: {value!r} - {allowed}")

    def timestamp(self, value: Any, path: str) -> None:
        try:
            aware = isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
        except ValueError:
            aware = False
        if not aware:
            self.problems.append(f"{path}: {value!r} - an ISO 8601 time with a UTC offset")

    def consumer(self, value: Any, path: str) -> None:
        if not self.expect(value, dict, path, "an object with a kind"):
            return
        wanted = CONSUMER_FIELDS.get(value.get("kind"))
        if wanted is None:
            self.problems.append(f"{path}.kind: {value.get('kind')!r} - one of {', '.join(CONSUMER_FIELDS)}")
            return
        for name in wanted:
            self.expect(value.get(name), str, f"{path}.{name}", f"a string (a {value['kind']} names it)")
