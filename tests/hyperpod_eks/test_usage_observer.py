"""The HyperPod EKS usage observer (gpu_governance_runtime.backends.kueue_usage) against a real local
HTTPS server speaking the Kubernetes API (tests/hyperpod_eks/kube_api.py), with DescribeCluster
stubbed by botocore's Stubber (which checks request and response against the EKS model)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import urllib.parse

import boto3
import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from gpu_governance_runtime import contract
from gpu_governance_runtime.backends import kueue_usage
from gpu_governance_runtime.planners.reclaim import Share, Strategy
from gpu_governance_runtime.policy import PoolPolicy, parse_policy

from .kube_api import Reply, cluster_queue, pages, serve, status_object

P5, G5 = "ml.p5.48xlarge", "ml.g5.12xlarge"
GPUS = {P5: 8, G5: 4}
CLUSTER = "acme-hyperpod"
CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
POOL = PoolPolicy(
    name="hp",
    backend=contract.HYPERPOD_EKS,
    capacity={P5: 10, G5: 4},
    shares=tuple(
        Share(name=name, quota=quota, strategy=strategy)
        for name, quota, strategy in (
            ("vision", {P5: 4, G5: 2}, Strategy.LEND_AND_BORROW),
            ("speech", {P5: 2}, Strategy.LEND),
            ("prod", {P5: 2}, Strategy.LEND),
            ("absent", {P5: 1}, Strategy.LEND),  # task governance has not made its queue (yet)
        )
    ),
)
TARGET = {"pool": "hp", "eks_cluster": CLUSTER, "gpus_per_instance": GPUS}


def queues():
    """One cohort: vision borrows 2 p5 (16 GPUs); a platform queue of no governed team has 1 idle p5,
    prod 1 idle p5 and speech 2 idle p5. Another cohort borrows too, which none of ours lent."""
    return [
        cluster_queue(
            "hyperpod-ns-vision-clusterqueue",
            cohort="shared",
            flavors={
                P5: {"nominal": 32, "total": 48, "borrowed": 16, "borrowing_limit": 48},
                G5: {"nominal": 8, "total": 6, "borrowed": 0},
                "ml.m5.2xlarge": {"nominal": 0, "total": 0, "borrowed": 0},
            },
        ),  # a CPU flavor: no GPUs, not an instance type of the pool
        cluster_queue(
            "hyperpod-ns-speech-clusterqueue", cohort="shared", flavors={P5: {"nominal": 16, "total": 0, "borrowed": 0}}
        ),
        cluster_queue(
            "hyperpod-ns-prod-clusterqueue",
            cohort="shared",
            flavors={P5: {"nominal": 16, "total": 8, "borrowed": 0, "lending_limit": 16}},
        ),
        cluster_queue(
            "platform-clusterqueue", cohort="shared", flavors={P5: {"nominal": 8, "total": 0, "borrowed": 0}}
        ),
        cluster_queue(
            "hyperpod-ns-outsider-clusterqueue",
            cohort="elsewhere",
            flavors={
                P5: {"nominal": 8, "total": 16, "borrowed": 8},
                "default-flavor": {"nominal": 4, "total": 0, "borrowed": 0},
            },
        ),
        cluster_queue(
            "hyperpod-ns-solo-clusterqueue", cohort=None, flavors={P5: {"nominal": 8, "total": 0, "borrowed": 0}}
        ),
    ]


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    api, stop = serve(tmp_path_factory.mktemp("tls"))
    yield api
    stop()


@pytest.fixture
def api(kube):
    kube.requests.clear()
    kube.respond = pages(queues(), size=2)
    return kube


def eks_client(api, *, ca=None, public=True, error=None):
    client = boto3.client("eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    if error:
        stubber.add_client_error(
            "describe_cluster", service_error_code=error, http_status_code=404, expected_params={"name": CLUSTER}
        )
    else:
        stubber.add_response(
            "describe_cluster",
            {
                "cluster": {
                    "name": CLUSTER,
                    "arn": f"arn:aws:eks:us-east-1:111122223333:cluster/{CLUSTER}",
                    "version": "1.33",
                    "status": "ACTIVE",
                    "endpoint": api.url,
                    "certificateAuthority": {"data": ca or api.ca.eks_data},
                    "resourcesVpcConfig": {
                        "subnetIds": ["subnet-0a"],
                        "securityGroupIds": ["sg-0a"],
                        "vpcId": "vpc-0a",
                        "endpointPublicAccess": public,
                        "endpointPrivateAccess": True,
                        "publicAccessCidrs": ["0.0.0.0/0"],
                    },
                    "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"},
                }
            },
            {"name": CLUSTER},
        )
    stubber.activate()
    return client, stubber


def run(api, **options):
    eks, stubber = eks_client(api, **{k: options.pop(k) for k in ("ca", "public", "error") if k in options})
    records = []
    published = kueue_usage.tick(
        TARGET,
        options.pop("pool", POOL),
        eks=eks,
        namespace=contract.RECLAIM_NAMESPACE,
        now=1.8e9,
        tick_seconds=60,
        emit=records.append,
        credentials=CREDENTIALS,
        **options,
    )
    stubber.assert_no_pending_responses()
    return published, records


def metric_records(records):
    return {(r["Pool"], r.get("Share")): r for r in records if "_aws" in r}


def rows_by_share():
    return {(r.share, r.instance_type): r for r in kueue_usage.share_usage(queues(), POOL, GPUS)}


# --- the token -------------------------------------------------------------------------------------


def _sigv4(secret: str, date: str, region: str, string_to_sign: str) -> str:
    key = ("AWS4" + secret).encode()
    for part in (date, region, "sts", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _signature_for(url: str, cluster_header: str) -> str:
    """SigV4 of a presigned GET, computed here from the specification, for a given x-k8s-aws-id."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "X-Amz-Signature"]
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted(query)
    )
    canonical = "\n".join(
        [
            "GET",
            "/",
            canonical_query,
            f"host:{parts.netloc}",
            f"x-k8s-aws-id:{cluster_header}",
            "",
            "host;x-k8s-aws-id",
            hashlib.sha256(b"").hexdigest(),
        ]
    )
    fields = dict(query)
    date = fields["X-Amz-Date"]
    scope = fields["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    return _sigv4(CREDENTIALS.secret_key, date[:8], scope.split("/")[1], to_sign)


def test_the_token_is_a_presigned_get_caller_identity_that_signs_the_cluster_name_in():
    token = kueue_usage.eks_token(CLUSTER, CREDENTIALS, "us-east-1", "https://sts.us-east-1.amazonaws.com")
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    encoded = token.removeprefix("k8s-aws-v1.")
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")  # base64url
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "sts.us-east-1.amazonaws.com", "/")
    assert (query["Action"], query["Version"]) == ("GetCallerIdentity", "2011-06-15")
    assert query["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id" and query["X-Amz-Expires"] == "60"
    assert query["X-Amz-Credential"].startswith("AKIDEXAMPLE/") and query["X-Amz-Credential"].endswith(
        "/us-east-1/sts/aws4_request"
    )
    assert query["X-Amz-Security-Token"] == "session-token"
    signed_at = datetime.datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    assert abs((datetime.datetime.now(datetime.UTC) - signed_at).total_seconds()) < 60
    # The signature covers the cluster's name: the same URL is worthless for another cluster.
    assert query["X-Amz-Signature"] == _signature_for(url, CLUSTER)
    assert query["X-Amz-Signature"] != _signature_for(url, "another-cluster")


def test_the_token_goes_to_the_sts_endpoint_of_the_clusters_region_and_partition(api):
    published, _ = run(api)
    assert published
    (_, _, headers), *_ = api.requests
    token = headers["authorization"].removeprefix("Bearer k8s-aws-v1.")
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    assert url.startswith("https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity")
    china = boto3.client("eks", region_name="cn-north-1", aws_access_key_id="x", aws_secret_access_key="x")
    assert kueue_usage.sts_endpoint(china) == "https://sts.cn-north-1.amazonaws.com.cn"


# --- reading the cluster -------------------------------------------------------------------------


def test_every_page_is_read_with_the_token_over_the_clusters_own_tls(api):
    published, records = run(api)
    assert published
    assert [(p, q.get("limit"), "continue" in q) for p, q, _ in api.requests] == [
        ("/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "100", False),
        *[("/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "100", True)] * 2,
    ]
    assert all(
        h["authorization"].startswith("Bearer k8s-aws-v1.") and h["accept"] == "application/json"
        for _, _, h in api.requests
    )
    assert {r["Share"] for r in records if contract.USED_HOURS in r} == {
        "vision",
        "speech",
        "prod",
    }  # prod came on page 2


def test_each_team_is_reported_in_instances_with_lending_attributed_as_share_usage_does(api):
    rows = rows_by_share()
    vision, vision_g5, speech, prod = rows["vision", P5], rows["vision", G5], rows["speech", P5], rows["prod", P5]
    # Kueue's GPUs divided by the instance type's GPUs
    assert (vision.guaranteed, vision.in_use, vision.borrowed) == (4, 6, 2)
    assert (vision_g5.guaranteed, vision_g5.in_use, vision_g5.borrowed) == (
        2,
        1.5,
        0,
    )  # 6 of 4-GPU instances: half an instance counts half
    # vision borrowed 2 p5: 1 from the platform queue (no team's guarantee, attributed first), then
    # prod before speech (team-name order), prod's 1 idle p5; speech lent nothing.
    assert (prod.lent, speech.lent, vision.lent) == (1, 0, 0)
    # the other cohort's borrowing was lent by none of ours; a queue outside any cohort lends nothing
    assert sum(r.lent for r in rows.values()) == 1
    assert {share for share, _ in rows} == {"vision", "speech", "prod"}  # no row for other queues, nor the CPU flavor


def test_lent_is_bounded_as_share_usage_expects_whatever_kueue_says():
    """Per team: lent <= its idle guarantee (and lending limit); per cohort and flavor: what the
    governed teams lent <= what the cohort's queues borrowed."""
    import itertools

    for borrowed, platform_idle, prod_limit in itertools.product((0, 8, 16, 40), (0, 8), (None, 0, 4)):
        items = [
            cluster_queue(
                "hyperpod-ns-vision-clusterqueue",
                cohort="c",
                flavors={P5: {"nominal": 32, "total": 32 + borrowed, "borrowed": borrowed}},
            ),
            cluster_queue(
                "hyperpod-ns-speech-clusterqueue", cohort="c", flavors={P5: {"nominal": 16, "total": 4, "borrowed": 0}}
            ),
            cluster_queue(
                "hyperpod-ns-prod-clusterqueue",
                cohort="c",
                flavors={P5: {"nominal": 16, "total": 0, "borrowed": 0, "lending_limit": prod_limit}},
            ),
            cluster_queue(
                "platform-clusterqueue", cohort="c", flavors={P5: {"nominal": platform_idle, "total": 0, "borrowed": 0}}
            ),
        ]
        rows = {r.share: r for r in kueue_usage.share_usage(items, POOL, GPUS)}
        for row in rows.values():
            assert 0 <= row.lent <= max(0.0, row.guaranteed - row.in_use)
        assert rows["prod"].lent <= (prod_limit if prod_limit is not None else 16) / 8
        lent_gpus = sum(r.lent for r in rows.values()) * 8
        assert lent_gpus == min(max(0, borrowed - platform_idle), 12 + (prod_limit if prod_limit is not None else 16))


def test_the_tick_emits_gauges_and_instance_hours_per_team_and_nothing_for_teams_without_a_queue(api):
    published, records = run(api)
    assert published
    by_share = metric_records(records)
    assert ("hp", "absent") not in by_share and ("hp", None) not in by_share
    assert {"event": "cluster_queues_missing", "pool": "hp", "teams": ["absent"]} in records
    gauges = [r for r in records if "_aws" in r and "InUse" in r]
    usage = [r for r in records if "_aws" in r and contract.USED_HOURS in r]
    assert {r["Share"] for r in gauges} == {r["Share"] for r in usage} == {"vision", "speech", "prod"}
    rows = rows_by_share()
    for record in usage:
        team = [r for (share, _), r in rows.items() if share == record["Share"]]
        assert record[contract.USED_HOURS] == pytest.approx(sum(r.in_use for r in team) * 60 / 3600)
        assert record[contract.GUARANTEED_HOURS] == pytest.approx(sum(r.guaranteed for r in team) * 60 / 3600)
        assert record[contract.BORROWED_HOURS] == pytest.approx(sum(r.borrowed for r in team) * 60 / 3600)
        assert record[contract.LENT_HOURS] == pytest.approx(sum(r.lent for r in team) * 60 / 3600)
        directive = record["_aws"]["CloudWatchMetrics"][0]
        assert directive["Namespace"] == contract.RECLAIM_NAMESPACE and directive["Dimensions"] == [
            list(contract.SHARE_DIMENSIONS)
        ]
        assert record["_aws"]["Timestamp"] == 1.8e12
    vision = next(r for r in gauges if r["Share"] == "vision")
    assert (vision["Guaranteed"], vision["InUse"], vision["Borrowed"], vision["Lent"]) == (
        6,
        7.5,
        2,
        0,
    )  # p5 + g5, in instances
    assert set(kueue_usage.GAUGES) <= set(contract.SHARE_METRICS)
    assert not [r for r in records if r.get("event") == "pool_failed"]


# --- waiting work and starvation ------------------------------------------------------------------


def waiting_queues():
    """vision waits with every flavor's guarantee in use (borrowing besides); speech's workloads
    hold their quota while admission checks run; prod waits for quota with half its guarantee idle;
    research has no GPU quota at all and waits; a queue of no governed team waits too."""
    return [
        cluster_queue(
            "hyperpod-ns-vision-clusterqueue",
            cohort="shared",
            workloads=(3, 4, 4),
            flavors={P5: {"nominal": 32, "total": 48, "borrowed": 16}, G5: {"nominal": 8, "total": 8, "borrowed": 0}},
        ),
        cluster_queue(
            "hyperpod-ns-speech-clusterqueue",
            cohort="shared",
            workloads=(0, 2, 0),
            flavors={P5: {"nominal": 16, "total": 0, "borrowed": 0, "reserved": 16}},
        ),
        cluster_queue(
            "hyperpod-ns-prod-clusterqueue",
            cohort="shared",
            workloads=(1, 1, 1),
            flavors={P5: {"nominal": 16, "total": 8, "borrowed": 0}},
        ),
        cluster_queue(
            "hyperpod-ns-research-clusterqueue",
            cohort="shared",
            workloads=(2, 0, 0),
            flavors={"cpu-only": {"nominal": 0, "total": 0, "borrowed": 0}},
        ),
        cluster_queue(
            "platform-clusterqueue",
            cohort="shared",
            workloads=(7, 0, 0),
            flavors={P5: {"nominal": 8, "total": 0, "borrowed": 0}},
        ),
    ]


WAITING_POOL = PoolPolicy(
    name="hp",
    backend=contract.HYPERPOD_EKS,
    capacity=POOL.capacity,
    shares=(*POOL.shares, Share(name="research", quota={}, strategy=Strategy.LEND_AND_BORROW)),
)


def test_waiting_work_counts_workloads_and_starvation_is_waiting_for_quota_below_guarantee():
    waiting = {w.share: (w.pending, w.starved) for w in kueue_usage.waiting_work(waiting_queues(), WAITING_POOL)}
    assert waiting == {
        "vision": (3, False),  # waits, but uses all it is guaranteed on every flavor
        "speech": (2, False),  # 2 workloads hold their quota, admission checks pending: waiting, not for quota
        "prod": (1, True),  # waits for quota with 8 of its 16 GPUs idle
        "research": (2, False),  # no guarantee, so never below it
    }  # absent has no queue; the platform queue is no governed team's


def test_a_kueue_without_flavors_reservation_reserves_what_it_admits():
    items = waiting_queues()
    for queue in items:
        queue["status"].pop("flavorsReservation")
    waiting = {w.share: w.starved for w in kueue_usage.waiting_work(items, WAITING_POOL)}
    assert waiting == {
        "vision": False,
        "speech": False,
        "prod": True,
        "research": False,
    }  # speech admitted nothing: 0 < 16, but waits for no quota


def test_the_tick_publishes_pending_and_starvation_per_team_with_the_other_backends_names(api):
    api.respond = pages(waiting_queues(), size=2)
    published, records = run(api, pool=WAITING_POOL)
    assert published
    by_share = {r["Share"]: r for r in records if "_aws" in r and "Pending" in r}
    assert {share: (r["Pending"], r["StarvedBelowGuarantee"]) for share, r in by_share.items()} == {
        "vision": (3, 0),
        "speech": (2, 0),
        "prod": (1, 1),
        "research": (2, 0),
    }
    for record in by_share.values():
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == contract.RECLAIM_NAMESPACE and directive["Dimensions"] == [
            list(contract.SHARE_DIMENSIONS)
        ]
        assert (
            {"Pending", "StarvedBelowGuarantee"}
            <= {m["Name"] for m in directive["Metrics"]}
            <= set(contract.SHARE_METRICS) | set(contract.USAGE_METRICS)
        )
    assert by_share["prod"]["Guaranteed"] == 2 and by_share["prod"]["InUse"] == 1  # one document with the gauges
    assert "Guaranteed" not in by_share["research"]  # no GPUs: waiting work only


# --- a bad day: every failure is a PoolErrors metric and no usage ----------------------------------


def assert_failed(records, *words):
    (failure,) = [r for r in records if r.get("event") == "pool_failed"]
    assert all(w in failure["error"] for w in words), failure["error"]
    assert "k8s-aws-v1" not in failure["error"]  # the token is never logged
    (metric,) = [r for r in records if "_aws" in r]
    assert metric[contract.POOL_ERRORS] == 1 and metric["Pool"] == "hp" and "Share" not in metric


@pytest.mark.parametrize(
    "status, reason, message",
    [
        (401, "Unauthorized", "Unauthorized"),
        (
            403,
            "Forbidden",
            'clusterqueues.kueue.x-k8s.io is forbidden: User "arn:aws:sts::1:assumed-role/r/x" cannot list resource "clusterqueues"',
        ),
    ],
)
def test_a_refused_token_or_missing_rbac_reports_an_error_and_no_usage(api, status, reason, message):
    api.respond = lambda path, query, headers: Reply(status, status_object(status, reason, message))
    published, records = run(api)
    assert not published
    assert_failed(records, f"HTTP {status}", message[:40])


def test_a_continue_token_that_expired_mid_list_publishes_nothing_of_the_pages_read(api):
    first = pages(queues(), size=2)
    api.respond = lambda path, query, headers: (
        first(path, query, headers)
        if "continue" not in query
        else Reply(
            410,
            status_object(
                410, "Expired", "The provided continue parameter is too old to display a consistent list result."
            ),
        )
    )
    published, records = run(api)
    assert not published and len(api.requests) == 2
    assert_failed(records, "HTTP 410", "too old")


def test_a_server_that_repeats_its_continue_token_is_not_followed_forever(api):
    first = pages(queues(), size=2)
    api.respond = lambda path, query, headers: first(path, {}, headers)  # always the first page, with its token
    published, records = run(api)
    assert not published and len(api.requests) == 2
    assert_failed(records, "continue token repeated")


def test_a_timeout_reports_an_error_and_no_usage(api, monkeypatch):
    monkeypatch.setattr(kueue_usage, "REQUEST_TIMEOUT_S", 0.3)
    api.respond = lambda path, query, headers: Reply(200, {"items": []}, delay=1.0)
    published, records = run(api)
    assert not published
    assert_failed(records, "GET /apis/kueue.x-k8s.io/v1beta1/clusterqueues", "timed out")


def test_a_server_whose_certificate_the_clusters_ca_did_not_sign_is_refused(api):
    from .kube_api import authority

    published, records = run(api, ca=authority("someone-else").eks_data)
    assert not published and api.requests == []  # the TLS handshake failed: nothing was sent, the token included
    assert_failed(records, "CERTIFICATE_VERIFY_FAILED")


def test_a_private_endpoint_is_named_as_the_reason_not_timed_out_on(api):
    published, records = run(api, public=False)
    assert not published and api.requests == []
    assert_failed(records, f"EKS cluster {CLUSTER}", "private", "outside any VPC", "vpc", "docs/hyperpod-eks.md")


def test_a_function_in_a_vpc_reads_a_private_endpoint(api):
    published, records = run(api, public=False, in_vpc=True)
    assert published and len(api.requests) == 3
    assert {r["Share"] for r in records if contract.USED_HOURS in r} == {"vision", "speech", "prod"}


def test_a_missing_cluster_reports_an_error(api):
    published, records = run(api, error="ResourceNotFoundException")
    assert not published and api.requests == []
    assert_failed(records, "ResourceNotFoundException")


@pytest.mark.parametrize(
    "breakage, words",
    [
        (
            lambda q: q[0]["status"]["flavorsUsage"][0]["resources"][2].update(total="eight"),
            ("hyperpod-ns-vision-clusterqueue", "total", "'eight'"),
        ),
        (
            lambda q: q[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(nominalQuota="-8"),
            ("nominalQuota", "'-8'"),
        ),
        (
            lambda q: q[0]["status"]["flavorsUsage"].append(
                {"name": "default-flavor", "resources": [{"name": "nvidia.com/gpu", "total": "8"}]}
            ),
            ("'default-flavor'", "gpus_per_instance"),
        ),
        (lambda q: q[2]["metadata"].pop("name"), ("clusterqueues[2].metadata.name",)),
        (
            lambda q: q[1]["status"].update(pendingWorkloads=-1),
            ("hyperpod-ns-speech-clusterqueue.status.pendingWorkloads", "-1"),
        ),
        (
            lambda q: q[2]["status"].update(admittedWorkloads="1"),
            ("hyperpod-ns-prod-clusterqueue.status.admittedWorkloads", "'1'"),
        ),
        (
            lambda q: q[0]["status"]["flavorsReservation"][0]["resources"][2].update(total="x"),
            ("flavorsReservation", "'x'"),
        ),
    ],
)
def test_figures_the_observer_cannot_convert_are_an_error_not_a_guess(api, breakage, words):
    items = queues()
    breakage(items)
    api.respond = pages(items, size=10)
    published, records = run(api)
    assert not published
    assert_failed(records, *words)


def test_with_too_little_time_left_the_pool_waits_for_the_next_tick(api):
    eks = boto3.client("eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    records = []
    with Stubber(eks):  # no call expected: the stubber would refuse one
        assert not kueue_usage.tick(
            TARGET,
            POOL,
            eks=eks,
            namespace="n",
            now=0,
            tick_seconds=60,
            emit=records.append,
            time_left=lambda: kueue_usage.READ_SECONDS - 1,
            credentials=CREDENTIALS,
        )
    assert [r["event"] for r in records] == ["pool_deferred"] and api.requests == []


def test_running_out_of_time_between_pages_is_an_error(api):
    left = iter([100.0, 100.0, 2.0])
    published, records = run(api, time_left=lambda: next(left))
    assert not published and len(api.requests) == 1
    assert_failed(records, "ran out of time")


@pytest.mark.parametrize(
    "text, gpus", [("8", 8), (8, 8), ("8000m", 8), ("1e1", 10), ("0", 0), ("1Ki", 1024), ("0.5", 0.5)]
)
def test_quantities_are_read_as_kubernetes_writes_them(text, gpus):
    assert kueue_usage.quantity(text, "x") == gpus


@pytest.mark.parametrize("text", ["-1", "eight", "8 GPUs", True, None, 8.5, "1e"])
def test_anything_else_is_refused(text):
    with pytest.raises(kueue_usage.EksUsageError, match="x: .* - a non-negative Kubernetes quantity"):
        kueue_usage.quantity(text, "x")


# --- the reclaim handler runs it for every HyperPod EKS pool ---------------------------------------


@pytest.mark.parametrize("public, in_vpc", [(True, None), (False, "true")])  # IN_VPC: the construct was given a vpc
def test_the_reclaim_handler_observes_each_hyperpod_eks_target(api, tmp_path, monkeypatch, capsys, public, in_vpc):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import
    from gpu_governance_runtime.reclaim import handler

    policy = {
        "version": 1,
        "organisation": "acme",
        "priority_classes": [],
        "capacity_windows": [],
        "pools": [
            {
                "name": "hp",
                "backend": "hyperpod_eks",
                "capacity": POOL.capacity,
                "shares": [
                    {"name": s.name, "quota": s.quota, "strategy": s.strategy.value, "borrow_limit": None}
                    for s in POOL.shares
                ],
            }
        ],
    }
    assert parse_policy(policy).pool("hp").shares == POOL.shares
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    eks, stubber = eks_client(api, public=public)
    monkeypatch.setattr(handler, "eks", eks)
    if in_vpc:
        monkeypatch.setenv(contract.ENV_IN_VPC, in_vpc)
    for name, value in {
        "POLICY_PATH": str(tmp_path / "policy.json"),
        "RECLAIM_TARGETS": json.dumps([TARGET]),
        "LEDGER_TABLE": "unused",
        "TICK_SECONDS": "120",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }.items():
        monkeypatch.setenv(name, value)
    result = handler.handler({}, None)
    stubber.assert_no_pending_responses()
    assert result["pools"] == []  # nothing planned or acted on: usage only
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    usage = {r["Share"]: r for r in lines if contract.USED_HOURS in r}
    assert set(usage) == {"vision", "speech", "prod"}
    assert usage["vision"][contract.USED_HOURS] == pytest.approx(
        7.5 * 120 / 3600
    )  # TICK_SECONDS is the time a tick covers
    # ... and each team's waiting work, which its starvation alarm reads (fixture: 2 pending, 1 reserving and admitted)
    assert {r["Share"]: (r["Pending"], r["StarvedBelowGuarantee"]) for r in lines if "Pending" in r} == {
        "vision": (2, 1),
        "speech": (2, 1),
        "prod": (2, 1),
    }  # each has a flavor below its guarantee


def test_the_tick_hands_the_rows_it_read_to_the_gpu_hour_limits_and_a_failed_read_hands_none(api):
    # Issue 28, item 5: the teams' GPU hours are counted from what this tick read (reclaim/gpu_hours.py)
    counted = []
    published, _ = run(api, hour_limits=counted.append)
    assert published and len(counted) == 1
    assert {(r.share, r.instance_type, r.in_use) for r in counted[0]} == {
        (r.share, r.instance_type, r.in_use) for r in rows_by_share().values()
    }
    failed = []
    assert run(api, error="ResourceNotFoundException", hour_limits=failed.append)[0] is False
    assert failed == []  # a cluster not read counts nothing: the count runs under, never over
