"""The model server container: image, command, ports, volumes, resources, probes and request limits."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.base import ApiModel

IntOrString = int | str


class EnvironmentVariable(ApiModel):
    """An environment variable, as in a core/v1 EnvVar."""

    name: str = Field(
        min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="Value from a ConfigMap, Secret or field (core/v1 EnvVarSource)."
    )


class ModelInvocationPort(ApiModel):
    """The port the model server listens on."""

    container_port: int = Field(ge=1, le=65535, description="Container port, 1-65535.")
    name: str = Field(
        default="http", pattern=r"^http$|^grpc$", description="Protocol name of the port: http or grpc, as HyperPod."
    )


class ModelVolumeMount(ApiModel):
    """Where the model files appear in the container."""

    name: str = Field(
        min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Volume name."
    )
    mount_path: str = Field(
        default="/opt/ml/model",
        max_length=512,
        description="Absolute mount path in the container.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.startsWith('/')", "message": "mountPath must be an absolute path"}
            ]
        },
    )


class Resources(ApiModel):
    """Container resources."""

    limits: dict[str, IntOrString] | None = Field(default=None, description="Resource limits, e.g. nvidia.com/gpu: 4.")
    requests: dict[str, IntOrString] | None = Field(default=None, description="Resource requests.")
    claims: list[dict[str, Any]] | None = Field(default=None, description="Dynamic resource claims.")


class RequestLimits(ApiModel):
    """Per-replica request limits, used by the router as its concurrency cap."""

    max_concurrent_requests: int | None = Field(
        default=None, ge=1, description="In-flight requests one replica should serve at once."
    )
    max_queue_size: int | None = Field(default=None, ge=0, description="Queue size before overflow.")
    overflow_status_code: int | None = Field(
        default=None, ge=400, le=599, description="HTTP status returned on overflow."
    )


class Probes(ApiModel):
    """Container probes (core/v1 Probe objects)."""

    liveness_probe: dict[str, Any] | None = Field(default=None, description="Liveness probe.")
    readiness_probe: dict[str, Any] | None = Field(default=None, description="Readiness probe.")
    startup_probe: dict[str, Any] | None = Field(default=None, description="Startup probe.")


class Worker(ApiModel):
    """The inference server container."""

    image: str = Field(min_length=1, max_length=1024, description="Inference server image.")
    args: list[str] | None = Field(default=None, description="Container args.")
    command: list[str] | None = Field(default=None, description="Container command.")
    working_dir: str | None = Field(default=None, description="Working directory.")
    environment_variables: list[EnvironmentVariable] | None = Field(default=None, description="Environment variables.")
    model_invocation_port: ModelInvocationPort = Field(description="Port the model server listens on.")
    model_volume_mount: ModelVolumeMount = Field(description="Where the model files are mounted.")
    resources: Resources = Field(default_factory=Resources, description="CPU, memory and GPU resources.")
    probes: Probes | None = Field(default=None, description="Liveness, readiness and startup probes.")
    request_limits: RequestLimits | None = Field(default=None, description="Per-replica request limits.")
