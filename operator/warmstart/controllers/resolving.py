"""Turn an endpoint body into the one pipeline model, resolving JumpStart ids through the JumpStart manifest."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from warmstart.api import jumpstartspecs
from warmstart.api.endpoints import KIND as IEC_KIND
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.render import endpoints, hostpaths, passthrough
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint, JumpStartResolution, ObjectRef

RESOLUTION_TTL_SECONDS = 300.0


class ResolutionFailed(Exception):
    """The spec cannot be deployed as it is; `reason` is one CamelCase word."""

    def __init__(self, reason: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable


@dataclass
class JumpStartCache:
    """Resolutions by (model, version, instance type, region), kept for a few minutes to spare S3 reads."""

    entries: dict[tuple[str, ...], tuple[float, JumpStartResolution]]
    lock: threading.Lock

    @classmethod
    def empty(cls) -> JumpStartCache:
        return cls({}, threading.Lock())


def object_ref(kind: str, body: Mapping[str, Any]) -> ObjectRef:
    meta = body["metadata"]
    return ObjectRef(
        kind=kind, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"], generation=meta.get("generation", 1)
    )


def resolve(kind: str, body: Mapping[str, Any], context: RenderContext, cache: JumpStartCache) -> Endpoint:
    """The Endpoint for an IEC or JumpStartModel body; a weights cache on a refused root fails it."""
    endpoint = _endpoint(kind, body, context, cache)
    refused = hostpaths.refusal(endpoint.host_path, context.allowed_host_paths) if endpoint.weights_enabled else None
    if refused:
        raise ResolutionFailed(hostpaths.REASON, refused)
    missing = passthrough.missing_model_volume(endpoint)
    if missing:
        raise ResolutionFailed(passthrough.VOLUME_REASON, missing)
    return endpoint


def _endpoint(kind: str, body: Mapping[str, Any], context: RenderContext, cache: JumpStartCache) -> Endpoint:
    ref = object_ref(kind, body)
    try:
        if kind == IEC_KIND:
            return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(body.get("spec", {})))
        spec = JumpStartModelSpec.model_validate(body.get("spec", {}))
    except ValidationError as error:
        raise ResolutionFailed(
            "InvalidSpec", f"spec does not validate: {error.errors()[0].get('msg')} at {error.errors()[0].get('loc')}"
        ) from error
    return endpoints.from_jumpstart(ref, spec, _jumpstart(spec, context, cache))


def _jumpstart(spec: JumpStartModelSpec, context: RenderContext, cache: JumpStartCache) -> JumpStartResolution:
    model = spec.model
    key = (
        model.model_id,
        model.model_version or "*",
        spec.server.instance_type,
        context.jumpstart_region,
        str(model.accept_eula),
    )
    with cache.lock:
        hit = cache.entries.get(key)
        if hit and time.monotonic() - hit[0] < RESOLUTION_TTL_SECONDS:
            return hit[1]
    resolution = _resolve_jumpstart(spec, context)
    with cache.lock:
        cache.entries[key] = (time.monotonic(), resolution)
    return resolution


def _resolve_jumpstart(spec: JumpStartModelSpec, context: RenderContext) -> JumpStartResolution:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = boto3.client("s3", region_name=context.jumpstart_region)

    def read(bucket: str, key: str) -> bytes:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    content, gated = jumpstartspecs.buckets(
        context.jumpstart_region, os.environ, context.jumpstart_bucket, context.jumpstart_gated_bucket
    )
    try:
        result = jumpstartspecs.resolve(
            spec.model.model_id,
            spec.model.model_version,
            context.jumpstart_region,
            spec.server.instance_type,
            spec.model.accept_eula,
            read,
            content_bucket=content,
            gated_bucket=gated,
        )
    except jumpstartspecs.EulaNotAccepted as error:
        raise ResolutionFailed("EulaNotAccepted", str(error)) from error
    except jumpstartspecs.ModelNotFound as error:
        raise ResolutionFailed("ModelNotFound", str(error)) from error
    except jumpstartspecs.VersionNotFound as error:
        raise ResolutionFailed("VersionNotFound", str(error)) from error
    except (jumpstartspecs.UnsupportedInstanceType, jumpstartspecs.SpecError) as error:
        raise ResolutionFailed(type(error).__name__, str(error)) from error
    except (BotoCoreError, ClientError) as error:
        raise ResolutionFailed(
            "JumpStartUnavailable", f"cannot read the JumpStart manifest: {error}", retryable=True
        ) from error
    image = spec.server.image or result.image
    if not image:
        raise ResolutionFailed(
            "ImageNotResolved",
            f"JumpStart has no image for {spec.model.model_id} on {spec.server.instance_type}: set spec.server.image",
        )
    return JumpStartResolution(
        bucket=result.bucket,
        prefix=result.key,
        region=result.region,
        image=image,
        env=dict(result.env),
        gated=result.gated,
        accelerators=result.accelerators,
    )
