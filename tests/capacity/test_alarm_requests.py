"""A window's CloudWatch alarm requests capacity when it goes to ALARM: once per transition
(EventBridge may deliver an event twice), within the window's limits, through the handler with
events shaped as CloudWatch sends them (Amazon CloudWatch User Guide, "Alarm events and
EventBridge", single metric alarm)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from gpu_governance_runtime.capacity import requests
from gpu_governance_runtime.capacity.handler import process
from gpu_governance_runtime.capacity.ledger import Ledger

from .builders import NOW
from .stubbed_aws import TABLE
from .test_handler import WINDOW, env  # noqa: F401 - the handler's fixture: policy file, clients, settings

ALARM = "inference-p99-latency-high"
WINDOW_WITH_ALARM = {**WINDOW, "alarm_requests": [{"alarm_name": ALARM, "count": 2, "hours": 4}]}


def alarm_event(value, timestamp, event_id, previous="OK"):
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "CloudWatch Alarm State Change",
        "source": "aws.cloudwatch",
        "account": "123456789012",
        "time": timestamp[:19] + "Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{ALARM}"],
        "detail": {
            "alarmName": ALARM,
            "configuration": {
                "description": "p99 latency above 2 s",
                "metrics": [
                    {
                        "id": "30b6c6b2-a864-43a2-4877-c09a1afc3b87",
                        "returnData": True,
                        "metricStat": {
                            "metric": {
                                "dimensions": {"Endpoint": "chat"},
                                "name": "ModelLatency",
                                "namespace": "AWS/SageMaker",
                            },
                            "period": 60,
                            "stat": "p99",
                        },
                    }
                ],
            },
            "previousState": {
                "reason": "Threshold Crossed",
                "timestamp": "2026-12-01T08:40:40.985+0000",
                "value": previous,
            },
            "state": {
                "reason": "Threshold Crossed: 1 datapoint [2500.0 (01/12/26 08:59:00)] was greater than the threshold (2000.0).",
                "reasonData": '{"version":"1.0"}',
                "timestamp": timestamp,
                "value": value,
            },
        },
    }


@pytest.fixture
def alarmed(env, tmp_path):  # noqa: F811 - the fixture
    stubbed, clients, settings, _ = env
    policy = tmp_path / "alarm.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [],
                "capacity_windows": [WINDOW_WITH_ALARM],
            }
        )
    )
    return stubbed, clients, {**settings, "POLICY_PATH": str(policy)}


def run(stubbed, clients, settings, event, now, requested_open):
    stubbed.owned()
    for _ in range(1 + requested_open):  # the declared window, then each open request in the horizon
        stubbed.offerings()
    return process(event, clients=clients, settings=settings, now=now)


def open_requests():
    import boto3

    ledger = Ledger(client=boto3.client("dynamodb", region_name="us-east-1"), table_name=TABLE)
    return [details for _, _, details in ledger.actions(requests.ACTION_PREFIX, (requests.OPEN,))]


def test_each_transition_to_alarm_requests_once(alarmed, capsys):
    stubbed, clients, settings = alarmed
    first = alarm_event("ALARM", "2026-12-01T09:00:40.985+0000", "c4c1c1c9-6542-e61b-6ef0-8c4d36933a92")
    result = run(stubbed, clients, settings, first, NOW, requested_open=1)
    asked = result["alarm_request"]
    assert (
        asked["new"] is True
        and asked["team"] == "research"
        and asked["token"] == f"alarm:{ALARM}@2026-12-01T09:00:40.985+0000"
    )
    (recorded,) = open_requests()
    assert (recorded["window"], recorded["instance_type"], recorded["count"], recorded["hours"]) == (
        "launch-load-test",
        "p5.48xlarge",
        2,
        4,
    )
    assert f"{asked['window']}@20261201T0900Z" in [o for o, _ in result["run"]["uncovered"]]  # planned like any window

    # EventBridge delivers the same event again, minutes later: the same window, nothing new.
    again = run(stubbed, clients, settings, first, NOW + timedelta(minutes=3), requested_open=1)
    assert again["alarm_request"] == {**asked, "new": False}
    # Back to OK: nothing is requested (the rule sends only ALARM; the handler checks anyway).
    ok = run(
        stubbed,
        clients,
        settings,
        alarm_event("OK", "2026-12-01T09:20:40.101+0000", "e1", previous="ALARM"),
        NOW + timedelta(minutes=20),
        requested_open=1,
    )
    assert ok["alarm_request"] == {"ignored": "not a change to ALARM"}
    # ALARM again 40 minutes later (the alarm flaps): a new transition, but it overlaps the open
    # request, which is extended to the later end instead of a second window buying again.
    second = run(
        stubbed,
        clients,
        settings,
        alarm_event("ALARM", "2026-12-01T09:40:12.000+0000", "e2"),
        NOW + timedelta(minutes=40),
        requested_open=1,
    )
    assert second["alarm_request"] == {**asked, "new": False}
    (extended,) = open_requests()
    assert (extended["token"], extended["count"], extended["hours"]) == (
        asked["token"],
        2,
        5,
    )  # 09:00 to 13:40, in whole hours
    stubbed.done()


def test_an_alarm_no_window_declares_is_refused_and_reported(alarmed):
    stubbed, clients, settings = alarmed
    event = alarm_event("ALARM", "2026-12-01T09:00:40.985+0000", "e3")
    event["detail"]["alarmName"] = "someone-elses-alarm"
    notes = []
    clients.sns.publish = lambda **message: notes.append(message["Subject"])  # the topic's subjects
    result = run(stubbed, clients, settings, event, NOW, requested_open=0)
    assert result["alarm_request"] == {
        "refused": "detail.alarmName: 'someone-elses-alarm' - an alarm a capacity window declares in alarm_requests"
    }
    assert notes[0] == "Capacity request refused" and open_requests() == []


def test_the_token_of_a_long_alarm_name_stays_within_the_ledgers_limit():
    from gpu_governance_runtime.planners.capacity import Window

    name = "x" * 255
    declared = Window.from_policy({**WINDOW, "alarm_requests": [{"alarm_name": name, "count": 1, "hours": 1}]})
    event = alarm_event("ALARM", "2026-12-01T09:00:40.985+0000", "e4")
    event["detail"]["alarmName"] = name
    token = requests.from_alarm(event, [declared])["token"]
    later = {
        **event,
        "detail": {
            **event["detail"],
            "state": {**event["detail"]["state"], "timestamp": "2026-12-01T10:00:00.000+0000"},
        },
    }
    assert len(token) <= requests.MAX_TOKEN and token != requests.from_alarm(later, [declared])["token"]
