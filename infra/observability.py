"""One dashboard and the alarms for an environment, built from names, never from exports.

Per-adapter panels use CloudWatch SEARCH expressions over the ``InferenceComponentName``
dimension, so the dashboard has the same size for 7 adapters or 1,000 and adding an adapter
changes nothing here. Adapter load latency comes from the runtime's JSON trace lines (one per
promotion) through a metric filter on the endpoint's log group.
"""

from __future__ import annotations

import functools
import itertools

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subs
from constructs import Construct

from config import Deployment, layout
from contracts.metrics import NAMESPACE
from infra.lifecycle import removal_policy
from infra.serving import base_log_groups

PERIOD = Duration.minutes(5)


def _gateway(api: dict[str, str], name: str, stat: str) -> cw.Metric:
    return cw.Metric(
        namespace="AWS/ApiGateway",
        metric_name=name,
        dimensions_map=api,
        statistic=stat,
        period=PERIOD,
    )


def _per_adapter(prefix: str, metric: str, stat: str, label: str) -> cw.MathExpression:
    """A SageMaker metric for every component of the environment (one line per adapter)."""
    return cw.MathExpression(
        expression=(
            "SEARCH('{AWS/SageMaker,InferenceComponentName} MetricName=\""
            + metric
            + '" InferenceComponentName="'
            + prefix
            + "-\"', '"
            + stat
            + "', 300)"
        ),
        label=label,
        period=PERIOD,
    )


def _router(name: str, prefix: str) -> cw.Metric:
    """A count this environment's router emits (Powertools EMF, its own service dimension)."""
    return cw.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        statistic="Sum",
        dimensions_map={"service": layout.router_service(prefix)},
        period=PERIOD,
    )


#: The dashboard's per-tenant panels: CloudWatch Logs Insights over the router's usage records.
TENANT_QUERIES = {
    "Top tenants by tokens": [
        'filter message = "usage"',
        "stats sum(usage.output_tokens) as tokens_out, sum(usage.input_tokens) as tokens_in, "
        "count(*) as requests by usage.tenant",
        "sort tokens_out desc",
        "limit 10",
    ],
    "Top tenants by errors": [
        'filter message = "usage" and usage.status >= 400',
        "stats count(*) as errors by usage.tenant, usage.status",
        "sort errors desc",
        "limit 10",
    ],
}


class Observability(Construct):
    """The alarm topic, the runtime's trace lines as metrics, the dashboard and the alarms."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dep: Deployment,
        api_name: str,
        stage: str,
        function_name: str,
    ) -> None:
        super().__init__(scope, id)
        self.dep = dep
        self.api = {"ApiName": api_name, "Stage": stage}
        self.function_name = function_name
        self._topic()
        self._trace_metrics()
        self._dashboard()
        self._alarms(function_name)

    def _topic(self) -> None:
        prefix = self.dep.env.prefix
        # The topic's own key: CloudWatch must be allowed to use it, and that grant belongs here.
        self.key = kms.Key(
            self,
            "AlarmKey",
            description=f"{prefix}: alarm topic",
            enable_key_rotation=True,
            removal_policy=removal_policy(self.dep.env),
        )
        self.key.grant(
            iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*"
        )
        self.topic = sns.Topic(
            self, "Alarms", display_name=f"{prefix} alarms", master_key=self.key, enforce_ssl=True
        )
        # Who is paged: an alarm on a topic nobody subscribes to notifies no one. SNS asks each
        # address to confirm its subscription before it delivers to it.
        for address in self.dep.env.observability.alarm_emails:
            self.topic.add_subscription(sns_subs.EmailSubscription(address))

    def _trace_metrics(self) -> None:
        """The runtime's trace lines (one JSON line per adapter load and eviction) as metrics,
        from the base component's container (adapter components run inside it);
        infra/serving.py says why there are two groups."""
        dep = self.dep
        groups = [
            logs.LogGroup.from_log_group_name(self, f"ContainerLogs{i}", name)
            for i, name in enumerate(base_log_groups(dep))
        ]
        for (metric, event, value, unit), (i, group) in itertools.product(
            (
                ("AdapterLoadLatency", "adapter_load", "$.latency_ms", cw.Unit.MILLISECONDS),
                ("AdapterEvictions", "adapter_evict", "1", None),
            ),
            enumerate(groups),
        ):
            logs.MetricFilter(
                self,
                f"{metric}{'' if i == 0 else 'Endpoint'}",
                log_group=group,
                filter_pattern=logs.FilterPattern.string_value("$.event", "=", event),
                metric_namespace=NAMESPACE,
                metric_name=metric,
                metric_value=value,
                dimensions={"Endpoint": dep.endpoint_name, "Source": "$.source"},
                unit=unit,
            )

    def _dashboard(self) -> None:
        dep, prefix, api = self.dep, self.dep.env.prefix, self.api
        hit_rate = cw.MathExpression(
            expression="100 * hit / (hit + miss)",
            using_metrics={
                "hit": _router("CacheHit", prefix),
                "miss": _router("CacheMiss", prefix),
            },
            label="cache hit rate (%)",
            period=PERIOD,
        )
        load = [
            cw.Metric(
                namespace=NAMESPACE,
                metric_name="AdapterLoadLatency",
                statistic="p99",
                dimensions_map={"Endpoint": dep.endpoint_name, "Source": source},
                label=f"from {source}",
                period=PERIOD,
            )
            for source in ("host", "disk")
        ]
        gpu_memory = cw.Metric(
            namespace="/aws/sagemaker/InferenceComponents",
            metric_name="GPUMemoryUtilizationNormalized",
            dimensions_map={"InferenceComponentName": dep.base_component_name},
            statistic="Maximum",
            period=PERIOD,
        )
        gw = functools.partial(_gateway, api)
        per_adapter = functools.partial(_per_adapter, prefix)
        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"{prefix}-lora-fleet")
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Router requests and errors",
                width=12,
                left=[gw("Count", "Sum"), gw("4XXError", "Sum"), gw("5XXError", "Sum")],
            ),
            cw.GraphWidget(
                title="Router latency (ms)",
                width=12,
                left=[gw("Latency", "p50"), gw("Latency", "p99")],
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Invocations per adapter",
                width=8,
                left=[per_adapter("Invocations", "Sum", "invocations")],
            ),
            cw.GraphWidget(
                title="Errors per adapter",
                width=8,
                left=[
                    per_adapter("Invocation5XXErrors", "Sum", "5xx"),
                    per_adapter("Invocation4XXErrors", "Sum", "4xx"),
                ],
            ),
            cw.GraphWidget(
                title="Model latency per adapter, p99 (µs)",
                width=8,
                left=[per_adapter("ModelLatency", "p99", "p99")],
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Adapter load latency, p99 (ms)", width=8, left=load),
            cw.GraphWidget(title="Response cache hit rate (%)", width=8, left=[hit_rate]),
            cw.GraphWidget(title="Base component GPU memory (%)", width=8, left=[gpu_memory]),
        )
        self._tenant_widgets()

    def _tenant_widgets(self) -> None:
        """Per tenant, from the router's usage log lines (``lambda_proxy.usage``): the tenant
        dimension of the metrics is bounded, the log lines name every caller."""
        self.dashboard.add_widgets(
            *(
                cw.LogQueryWidget(
                    title=title,
                    width=12,
                    log_group_names=[f"/aws/lambda/{self.function_name}"],
                    query_lines=lines,
                )
                for title, lines in TENANT_QUERIES.items()
            )
        )

    def _alarm(self, metric: cw.IMetric, cid: str, name: str, **options: object) -> cw.Alarm:
        """An alarm that pages through the topic when it fires and when it clears."""
        alarm = metric.create_alarm(
            self,
            cid,
            alarm_name=f"{self.dep.env.prefix}-{name}",
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            **options,
        )
        action = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm

    def _alarms(self, function_name: str) -> None:
        dep, o = self.dep, self.dep.env.observability
        at_least = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        five_xx = {"threshold": o.error_alarm_5xx_per_5min, "evaluation_periods": 1}
        self.alarms = {
            "Router5xx": self._alarm(
                _gateway(self.api, "5XXError", "Sum"),
                "Router5xxAlarm",
                "router-5xx",
                **five_xx,
                comparison_operator=at_least,
                alarm_description="Router answered 5xx (SageMaker errors, timeouts, crashes).",
            ),
            # A stream that fails after its 200 status is not in API Gateway's 5XXError;
            # the router counts those itself (lambda_proxy.streaming).
            "RouterStream5xx": self._alarm(
                _router("StreamServerError", self.dep.env.prefix),
                "RouterStream5xxAlarm",
                "router-stream-5xx",
                **five_xx,
                comparison_operator=at_least,
                alarm_description="Streams that failed after they began (SageMaker errors, "
                "timeouts) with a 5xx status.",
            ),
            # The router switched a canary off (lambda_proxy.canary): its error rate passed the
            # entry's threshold. The router's log holds the adapter, version and reason.
            "CanaryRollback": self._alarm(
                _router("CanaryRollback", self.dep.env.prefix),
                "CanaryRollbackAlarm",
                "canary-rollback",
                threshold=1,
                evaluation_periods=1,
                comparison_operator=at_least,
                alarm_description="The router rolled a canary back to its stable version (its "
                "5xx rate passed the entry's max_error_rate); the router log's 'canary rolled "
                "back' line names it. Remove or replace the canary: make rollback ADAPTER=NAME.",
            ),
            "RouterLatency": self._alarm(
                _gateway(self.api, "Latency", "p99"),
                "RouterLatencyAlarm",
                "router-latency-p99",
                threshold=o.latency_alarm_p99_ms,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                alarm_description="Router p99 latency over the environment's threshold.",
            ),
            "Endpoint5xx": self._alarm(
                cw.Metric(
                    namespace="AWS/SageMaker",
                    metric_name="Invocation5XXErrors",
                    statistic="Sum",
                    dimensions_map={
                        "EndpointName": dep.endpoint_name,
                        "VariantName": "AllTraffic",
                    },
                    period=PERIOD,
                ),
                "Endpoint5xxAlarm",
                "endpoint-5xx",
                **five_xx,
                comparison_operator=at_least,
                alarm_description="The endpoint's container answered 5xx.",
            ),
            "RouterErrors": self._alarm(
                cw.Metric(
                    namespace="AWS/Lambda",
                    metric_name="Errors",
                    statistic="Sum",
                    dimensions_map={"FunctionName": function_name},
                    period=PERIOD,
                ),
                "RouterErrorsAlarm",
                "router-errors",
                threshold=1,
                evaluation_periods=1,
                comparison_operator=at_least,
                alarm_description="The router function raised (its handler catches every "
                "request error, so any is a bug).",
            ),
        }
