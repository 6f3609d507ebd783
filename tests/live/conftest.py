"""Probes run offline against botocore's Stubber (which checks every request against the real
service model): a Context whose clients are stubbed, one per (service, role) asked for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import ExitStack

import boto3
import pytest
from botocore.stub import Stubber

from tests.live import framework, probes
from tests.live.framework import Context

ACCOUNT = "111122223333"
TICK = 15  # seconds the probes' clock moves at each reading


class Stubs:
    """Stubbed clients by (service, role): ``stubs("batch", role)`` gives the Stubber to script."""

    def __init__(self, exits: ExitStack) -> None:
        self._exits = exits
        self.clients: dict[tuple[str, str | None], object] = {}
        self.stubbers: dict[tuple[str, str | None], Stubber] = {}

    def client(self, service: str, role: str | None):
        key = (service, role)
        if key not in self.clients:
            client = boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
            self.clients[key] = client
            self.stubbers[key] = self._exits.enter_context(Stubber(client))
        return self.clients[key]

    def __call__(self, service: str, role: str | None = None) -> Stubber:
        self.client(service, role)
        return self.stubbers[(service, role)]


def arguments(**given) -> argparse.Namespace:
    """Every option of every probe module at its default, then ``given``."""
    options = framework.discover(probes).options
    return argparse.Namespace(**{**{o.dest: o.default for o in options}, **given})


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    with ExitStack() as exits:
        stubs = Stubs(exits)
        yield stubs
        for stubber in stubs.stubbers.values():
            stubber.assert_no_pending_responses()


@pytest.fixture
def context(stubs):
    """``context(**args)``: a Context of the sandbox account whose clients are ``stubs``'."""

    def make(**given) -> Context:
        ticks = iter(range(0, 10**6, TICK))
        return Context(
            arguments(**given),
            ACCOUNT,
            "aws",
            "us-east-1",
            stubs.client,
            sleep=lambda s: None,
            clock=lambda: next(ticks),
        )

    return make


def role(team: str, kind: str = "submit") -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/{team}-gpu-{kind}"
