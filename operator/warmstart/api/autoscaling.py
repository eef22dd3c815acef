"""autoScalingSpec: HyperPod's KEDA settings (replica bounds, timings, Prometheus and CloudWatch triggers).

Field names, defaults and bounds are those of AWS's InferenceEndpointConfig CRD (inference-operator chart of the
public HyperPod CLI repository). warmstart renders them into a KEDA ScaledObject (render/autoscaling.py).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from warmstart.api.base import ApiModel

#: AWS's pattern: an Amazon Managed Prometheus workspace, or empty
AMP_ADDRESS = (
    r"^https:\/\/aps-workspaces\.[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*\.amazonaws\.com\/workspaces\/ws-[a-zA-Z0-9-]+$"
)
#: warmstart also takes any in-cluster or self-hosted Prometheus (an extension: AWS takes AMP only)
SERVER_ADDRESS = rf"{AMP_ADDRESS}|^$|^https?://[^\s]+$"


class MetricType(StrEnum):
    """How the HPA compares the metric: per pod (Average, KEDA's AverageValue) or as a whole (Value)."""

    VALUE = "Value"
    AVERAGE = "Average"


class PrometheusTrigger(ApiModel):
    """A Prometheus query that drives autoscaling."""

    name: str | None = Field(default=None, max_length=63, description="Name for the Prometheus trigger.")
    query: str | None = Field(default=None, max_length=4096, description="PromQL query for the metric.")
    server_address: str | None = Field(
        default=None,
        max_length=2048,
        pattern=SERVER_ADDRESS,
        description="Server address of the AMP workspace (requests are SigV4-signed by KEDA's identity). "
        "warmstart extension: any http(s) Prometheus URL, e.g. an in-cluster one.",
    )
    target_value: float | None = Field(default=None, description="Target metric value for scaling.")
    activation_target_value: float = Field(
        default=0,
        description="Activation value to scale from 0 to 1. Only applicable if minReplicaCount = 0.",
    )
    metric_type: MetricType = Field(
        default=MetricType.AVERAGE, description="Average (per pod, HPA AverageValue) or Value (absolute)."
    )
    custom_headers: str | None = Field(
        default=None, max_length=4096, description="Custom headers for the query, e.g. 'X-Scope-OrgID=tenant'."
    )
    namespace: str | None = Field(default=None, max_length=253, description="Namespace for namespaced queries.")
    use_cached_metrics: bool = Field(default=True, description="Cache metric values during the polling interval.")


class CloudWatchDimension(ApiModel):
    """One CloudWatch metric dimension."""

    name: str = Field(max_length=255, description="CloudWatch metric dimension name.")
    value: str = Field(max_length=1024, description="CloudWatch metric dimension value.")


class CloudWatchTrigger(ApiModel):
    """A CloudWatch metric that drives autoscaling (queried in the operator's region with KEDA's identity)."""

    name: str | None = Field(default=None, max_length=63, description="Name for the CloudWatch trigger.")
    namespace: str | None = Field(default=None, max_length=255, description="AWS CloudWatch namespace of the metric.")
    metric_name: str | None = Field(default=None, max_length=255, description="Metric name to query.")
    dimensions: list[CloudWatchDimension] | None = Field(default=None, description="Dimensions of the metric.")
    target_value: float | None = Field(default=None, description="Target value of the metric.")
    activation_target_value: float = Field(
        default=0,
        description="Activation value to scale from 0 to 1. Only applicable if minReplicaCount = 0.",
    )
    min_value: float = Field(default=0, description="Metric value used when CloudWatch returns nothing.")
    metric_stat: str = Field(default="Average", max_length=64, description="Statistic of the query, e.g. Average.")
    metric_type: MetricType = Field(
        default=MetricType.AVERAGE, description="Average (per pod, HPA AverageValue) or Value (absolute)."
    )
    metric_collection_period: int = Field(default=300, description="Period of the CloudWatch query, seconds.")
    metric_collection_start_time: int = Field(
        default=300, description="How far back the CloudWatch query starts, seconds."
    )
    use_cached_metrics: bool = Field(default=True, description="Cache metric values during the polling interval.")


class AutoScalingSpec(ApiModel):
    """Autoscaling through KEDA: a ScaledObject that drives the endpoint's scale subresource."""

    min_replica_count: int = Field(default=1, ge=0, description="The minimum number of model pods. Default 1.")
    max_replica_count: int = Field(default=5, ge=0, description="The maximum number of model pods. Default 5.")
    polling_interval: int = Field(default=30, ge=0, description="Seconds between trigger checks. Default 30.")
    cooldown_period: int = Field(
        default=300, ge=0, description="Seconds after the last active trigger before scaling to 0. Default 300."
    )
    initial_cooldown_period: int = Field(
        default=300, ge=0, description="Delay before the cooldown starts after the ScaledObject is created."
    )
    scale_down_stabilization_time: int = Field(
        default=300, ge=0, description="HPA stabilization window before scaling down, seconds. Default 300."
    )
    scale_up_stabilization_time: int = Field(
        default=0, ge=0, description="HPA stabilization window before scaling up, seconds. Default 0."
    )
    prometheus_trigger: PrometheusTrigger | None = Field(
        default=None, description="Prometheus metric trigger to use for autoscaling."
    )
    prometheus_trigger_list: list[PrometheusTrigger] | None = Field(
        default=None,
        max_length=100,
        description="Several Prometheus triggers; takes priority over prometheusTrigger if both are given.",
    )
    cloud_watch_trigger: CloudWatchTrigger | None = Field(
        default=None, description="CloudWatch metric trigger to use for autoscaling."
    )
    cloud_watch_trigger_list: list[CloudWatchTrigger] | None = Field(
        default=None,
        max_length=100,
        description="Several CloudWatch triggers; takes priority over cloudWatchTrigger if both are given.",
    )

    def prometheus_triggers(self) -> list[PrometheusTrigger]:
        """The Prometheus triggers in force: the list when given, else the single one."""
        if self.prometheus_trigger_list:
            return list(self.prometheus_trigger_list)
        return [self.prometheus_trigger] if self.prometheus_trigger else []

    def cloud_watch_triggers(self) -> list[CloudWatchTrigger]:
        """The CloudWatch triggers in force: the list when given, else the single one."""
        if self.cloud_watch_trigger_list:
            return list(self.cloud_watch_trigger_list)
        return [self.cloud_watch_trigger] if self.cloud_watch_trigger else []
