"""Issue 38 row 6: a capacity window buying on an alarm is only as safe as the metric the alarm
watches, and any metric a tenant may publish is the tenant's to set. ``validate`` warns of
alarms on the namespaces ``TENANT_METRIC_NAMESPACES`` lists; this proves, over every request,
that no role of any team may publish into a namespace the list leaves out (and that the list
names no namespace the roles cannot reach, so the warnings are not stale). The reference
organisation, synthesized as `make synth` does, holds every kind of team role: submission,
training, pods, members and Identity Center roles."""

from __future__ import annotations

import pytest
from cvc5 import Kind

from constructs_lib.core.vocabulary import TENANT_METRIC_NAMESPACES
from constructs_lib.model.loader import load_model
from tests.foundation.org import synthesize_reference

from .iam_eval import Principal, load_assembly
from .prover import Prover, principals_of
from .tenants import read_organisation

PUBLISH = "cloudwatch:putmetricdata"


@pytest.fixture(scope="module")
def prover(tmp_path_factory) -> Prover:
    model = load_model(None)
    outdir = tmp_path_factory.mktemp("reference")
    synthesize_reference(model, outdir, packs=False, cdk_json=True)
    return Prover(read_organisation(model, load_assembly(outdir)))


def declared_namespace(prover: Prover):
    """The request names one of TENANT_METRIC_NAMESPACES (false where no policy names the key:
    then every publication is outside the list)."""
    e = prover.encoder
    slots = e.keys.get("cloudwatch:namespace", [])
    return e.any_of(
        [
            e.t(Kind.AND, has, e.eq(value, e.s(namespace)))
            for has, value in slots
            for namespace in TENANT_METRIC_NAMESPACES
        ]
    )


def test_no_team_role_publishes_metrics_outside_the_declared_namespaces(prover):
    e = prover.encoder
    principals = principals_of(prover.org)
    kinds = {kind.partition(":")[0] for tenant in prover.org.tenants.values() for kind in tenant.roles}
    assert kinds == {"submit", "training", "pods", "member"}
    outside = e.t(Kind.NOT, declared_namespace(prover))
    witnesses = [
        (team, answer.witness)
        for team, principal in principals
        if (answer := prover.ask(f"{principal.arn} publishes outside", principal, [PUBLISH], outside)).satisfiable
    ]
    assert witnesses == []


def test_the_declared_namespaces_are_those_the_training_roles_publish_into(prover):
    for tenant in prover.org.tenants.values():
        training = Principal(arn=tenant.roles["training"])
        for namespace in TENANT_METRIC_NAMESPACES:
            answer = prover.reaches(training, "cloudwatch:PutMetricData", "*", **{"cloudwatch:namespace": namespace})
            assert answer.satisfiable, (tenant.name, namespace)


def test_the_proof_finds_a_role_that_publishes_anywhere(prover):
    """The same question on a world where one training role also holds an unconditioned
    PutMetricData: the solver names a namespace outside the list."""
    tenant = next(iter(prover.org.tenants.values()))
    training = tenant.roles["training"]
    world = prover.org.world
    world.add_identity(training, {"Statement": [{"Effect": "Allow", "Action": "cloudwatch:Put*", "Resource": "*"}]})
    try:
        widened = Prover(prover.org)
        e = widened.encoder
        answer = widened.ask("widened", Principal(arn=training), [PUBLISH], e.t(Kind.NOT, declared_namespace(widened)))
        assert answer.satisfiable
        assert answer.witness["context"].get("cloudwatch:namespace", [None])[0] not in TENANT_METRIC_NAMESPACES
    finally:
        world.identity[training].pop()
