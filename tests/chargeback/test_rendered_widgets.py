"""A team dashboard's graphs per pool are rendered in Python (no ``Metric`` or ``GraphWidget``
object crosses jsii: about 25 round trips per team and pool) and render exactly as the CDK's own
widgets do (issue 27, item 5; docs/performance.md)."""

from __future__ import annotations

import pytest
from aws_cdk import App, Duration, Stack, aws_cloudwatch as cloudwatch

from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.chargeback import _Heading, _Line, _ShareGraph
from gpu_governance_runtime.contract import RECLAIM_NAMESPACE, SHARE_DIMENSIONS
from tests.foundation.org import default_data, synthesize_reference

SHARE = {"Pool": "training", "Share": "team-a"}


def _cdk_metric(line: _Line) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=RECLAIM_NAMESPACE,
        metric_name=line.metric_name,
        dimensions_map=SHARE,
        statistic=line.statistic,
        period=Duration.seconds(line.period),
    )


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ([_Line("Guaranteed", "Maximum", 60), _Line("InUse", "Maximum", 60)], []),
        ([_Line("Pending", "Maximum", 120)], [_Line("StarvedBelowGuarantee", "Maximum", 120)]),
        # CloudWatch's defaults (300 s, Average) are left out of a line, as the CDK leaves them out.
        ([_Line("Lent", "Average", 300), _Line("Borrowed", "Sum", 300)], [_Line("Pending", "Average", 60)]),
    ],
)
def test_a_rendered_graph_and_heading_synthesize_to_the_cdks_own_dashboard_body(left, right):
    stack = Stack(App(), "s")
    title = "guarantee vs use (instances)"
    cdk = cloudwatch.Dashboard(stack, "Cdk")
    cdk.add_widgets(cloudwatch.TextWidget(markdown="## Team team-a in pool training", width=24, height=1))
    cdk.add_widgets(  # three to a row: the third wraps below the first
        *(
            cloudwatch.GraphWidget(
                title=title, width=12, left=[_cdk_metric(m) for m in left], right=[_cdk_metric(m) for m in right]
            )
            for _ in range(3)
        )
    )
    rendered = cloudwatch.Dashboard(stack, "Rendered")
    rendered.add_widgets(_Heading("## Team team-a in pool training"))
    share = [part for pair in zip(SHARE_DIMENSIONS, SHARE.values(), strict=True) for part in pair]
    mine = [_ShareGraph(title, left, right, share=share, namespace=RECLAIM_NAMESPACE) for _ in range(3)]
    rendered.add_widgets(*mine)

    def body(dashboard: cloudwatch.Dashboard):
        return stack.resolve(dashboard.node.default_child.dashboard_body)

    assert body(rendered) == body(cdk)
    assert '"x":12,"y":1' in str(body(rendered)) and '"x":0,"y":7' in str(body(rendered))


def test_team_dashboards_create_no_metric_objects_across_jsii(monkeypatch, tmp_path):
    created = []
    metric_init = cloudwatch.Metric.__init__

    def counting(self, *args, **kwargs):
        created.append(kwargs.get("metric_name"))
        metric_init(self, *args, **kwargs)

    monkeypatch.setattr(cloudwatch.Metric, "__init__", counting)
    synthesize_reference(GovernanceModel.from_dict(default_data()), tmp_path, packs=False)
    assert {"StarvedBelowGuarantee"} <= set(created)  # the counting sees what is created
    share_metrics = {"Guaranteed", "InUse", "Borrowed", "Lent", "Pending", "LostCapacitySeconds"}
    # The reclaim controller's own alarms still draw on a share's StarvedBelowGuarantee metric.
    assert not share_metrics & set(created)
