"""What the library knows about one kind of capacity a window buys (a Capacity Block, a training
plan): the descriptor each kind's module declares and the registry (``capacity_kinds``) lists.

Pure Python: a kind's IAM statements import aws_cdk when they are built, so the model and the
commands that synthesize nothing load no CDK.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_cdk import aws_iam as iam


@dataclass(frozen=True, kw_only=True)
class KindGrant:
    """What a kind's IAM statements are built from: the capacity controller's ARN maker (``arn(service,
    resource)``: every resource of that type in the controller's region and account), the condition that
    a request carries the controller's own tags, and the controller's id (the value of its managed-by tag)."""

    arn: Callable[[str, str], str]
    tagged_by_us: dict[str, Any]
    managed_by_us: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class CapacityKind:
    """One kind of capacity a window buys.

    ``name``: the window's ``market`` in the model and the policy document (the runtime's kind of
    the same name buys it). ``label``: how `explain` and `validate` name it. ``feeds``: the consumer
    kinds (``contract.CONSUMER_*``) whose windows buy this kind; every consumer kind is bought by
    exactly one kind. ``window_problem(window)``: why the model refuses a window of this kind (its
    instance type, its count), or None. ``statements(grant)``: what the capacity controller's role
    needs to search, buy, extend and describe it. ``granted_always``: the role holds them whatever
    the windows buy (the controller lists this kind's reservations every run); otherwise only when a
    window buys it. ``docs``: the page that explains it."""

    name: str
    label: str
    feeds: tuple[str, ...]
    window_problem: Callable[[Any], str | None]
    statements: Callable[[KindGrant], list[iam.PolicyStatement]]
    granted_always: bool = False
    docs: str = "docs/capacity.md"
