"""Read the compiled policy document (``constructs_lib.policy.compile_policy``) into the
planner's own value types. Plain Python: this runs inside the Lambda function."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .reclaim.planner import Share, Strategy

SUPPORTED_VERSION = 1
BACKENDS = ("batch_quota_share", "batch_fair_share", "hyperpod_eks", "hyperpod_slurm")


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


@dataclass(frozen=True, kw_only=True)
class Policy:
    organisation: str
    priority_classes: tuple[PriorityClass, ...]
    pools: tuple[PoolPolicy, ...]

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
            return Policy(organisation="", priority_classes=(), pools=())
        if document.get("version") != SUPPORTED_VERSION:
            self.problems.append(f"version: {document.get('version')!r} - this controller reads version {SUPPORTED_VERSION}")
        self.expect(document.get("organisation"), str, "organisation", "a string")
        classes = document.get("priority_classes", [])
        pools = document.get("pools", [])
        self.expect(classes, list, "priority_classes", "a list")
        self.expect(pools, list, "pools", "a list")
        return Policy(
            organisation=str(document.get("organisation", "")),
            priority_classes=tuple(
                PriorityClass(name=str(c.get("name")), weight=self.count(c.get("weight"), f"priority_classes[{i}].weight", 0))
                for i, c in enumerate(classes if isinstance(classes, list) else [])
                if self.expect(c, dict, f"priority_classes[{i}]", "an object with name and weight")
            ),
            pools=tuple(
                self.pool(p, f"pools[{i}]")
                for i, p in enumerate(pools if isinstance(pools, list) else [])
                if self.expect(p, dict, f"pools[{i}]", "an object")
            ),
        )

    def pool(self, data: dict, path: str) -> PoolPolicy:
        if data.get("backend") not in BACKENDS:
            self.problems.append(f"{path}.backend: {data.get('backend')!r} - one of {', '.join(BACKENDS)}")
        self.expect(data.get("name"), str, f"{path}.name", "a string")
        shares = data.get("shares", [])
        self.expect(shares, list, f"{path}.shares", "a list")
        return PoolPolicy(
            name=str(data.get("name")),
            backend=str(data.get("backend")),
            capacity=self.counts(data.get("capacity"), f"{path}.capacity", 1),
            shares=tuple(
                self.share(s, f"{path}.shares[{i}]")
                for i, s in enumerate(shares if isinstance(shares, list) else [])
                if self.expect(s, dict, f"{path}.shares[{i}]", "an object")
            ),
        )

    def share(self, data: dict, path: str) -> Share:
        try:
            strategy = Strategy(data.get("strategy"))
        except ValueError:
            self.problems.append(f"{path}.strategy: {data.get('strategy')!r} - one of {', '.join(s.value for s in Strategy)}")
            strategy = Strategy.RESERVE
        borrow_limit = data.get("borrow_limit")
        if borrow_limit is not None:
            self.count(borrow_limit, f"{path}.borrow_limit", 0)
            if strategy is not Strategy.LEND_AND_BORROW:
                self.problems.append(f"{path}.borrow_limit: {borrow_limit!r} - only lend_and_borrow shares borrow; use null")
        in_share = data.get("in_share_preemption", False)
        self.expect(in_share, bool, f"{path}.in_share_preemption", "true or false")
        self.expect(data.get("name"), str, f"{path}.name", "a string")
        return Share(
            name=str(data.get("name")),
            quota=self.counts(data.get("quota"), f"{path}.quota", 0),
            strategy=strategy,
            borrow_limit=borrow_limit if isinstance(borrow_limit, int) else None,
            in_share_preemption=bool(in_share),
            fair_share_weight=self.count(data.get("fair_share_weight", 10), f"{path}.fair_share_weight", 1),
        )
