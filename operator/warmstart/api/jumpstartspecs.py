"""Resolve a SageMaker JumpStart model to its S3 artifacts, image and environment, from JumpStart's own documents.

This follows the public layout the SageMaker Python SDK reads: `models_manifest.json` at the root of the
content bucket lists `{model_id, version, spec_key}`; the spec at `spec_key` is merged with its top-ranked
inference config; per-instance-type (or family) variants override the artifact key, the environment and
the image (an `$alias` resolved through `regional_aliases[region]`). Gated models live in the gated bucket
and need `acceptEula: true`.

The operator and the preloader both resolve with `resolve`. It does no I/O of its own: it reads the two
documents through the `Reader` its caller gives it (a get-object of the caller's S3 client), so the
caller's S3 errors reach the caller unchanged, to be classified (retry a network failure, not a bad spec).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from warmstart.api.sources import ModelSourceConfig

#: Environment variables that override the content bucket (the first one set wins).
CONTENT_BUCKET_ENV = ("WARMSTART_JUMPSTART_BUCKET", "AWS_JUMPSTART_CONTENT_BUCKET_OVERRIDE")
#: Environment variable that overrides the gated content bucket.
GATED_BUCKET_ENV = "AWS_JUMPSTART_GATED_CONTENT_BUCKET_OVERRIDE"
MANIFEST_KEY = "models_manifest.json"

#: (bucket, key) -> the object's bytes. Its errors propagate: the caller classifies them.
Reader = Callable[[str, str], bytes]


class ResolutionError(Exception):
    """A JumpStart model that cannot be resolved; the message says why, for a status condition."""


class ModelNotFound(ResolutionError):
    pass


class VersionNotFound(ResolutionError):
    pass


class EulaNotAccepted(ResolutionError):
    pass


class UnsupportedInstanceType(ResolutionError):
    pass


class SpecError(ResolutionError):
    """The manifest or spec is not valid JSON, or lacks a field we need (S3 errors are not wrapped in this)."""


@dataclasses.dataclass(frozen=True)
class Resolution:
    model_id: str
    version: str
    region: str
    bucket: str  # where the artifacts are: the gated bucket for gated models
    key: str  # an S3 prefix ending in '/' for S3Prefix artifacts, else one object key
    s3_data_type: str  # S3Prefix (an uncompressed folder) or S3Object
    image: str | None
    env: dict[str, str]
    gated: bool
    #: accelerators (GPUs) one replica needs, as the spec's resource requirements say (None: it does not say)
    accelerators: int | None
    eula_key: str | None  # in the content bucket
    content_bucket: str
    spec_key: str

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def to_json(self) -> dict[str, Any]:
        return {
            "modelId": self.model_id,
            "version": self.version,
            "region": self.region,
            "bucket": self.bucket,
            "key": self.key,
            "s3Uri": self.s3_uri,
            "s3DataType": self.s3_data_type,
            "image": self.image,
            "env": self.env,
            "gated": self.gated,
            "accelerators": self.accelerators,
            "eulaKey": self.eula_key,
            "contentBucket": self.content_bucket,
            "specKey": self.spec_key,
        }

    def model_source(self, endpoint_url: str | None = None) -> ModelSourceConfig:
        """The artifacts as a ModelSourceConfig, for the weights cache."""
        s3: dict[str, Any] = {"bucketName": self.bucket, "region": self.region}
        if endpoint_url:
            s3["endpointUrl"] = endpoint_url
        return ModelSourceConfig.model_validate({"modelSourceType": "s3", "s3Storage": s3, "modelLocation": self.key})


def buckets(
    region: str, env: Mapping[str, str], content: str | None = None, gated: str | None = None
) -> tuple[str, str]:
    """(content bucket, gated bucket) for a region: those given, else the overrides in `env`, else JumpStart's."""
    content = content or next(
        (env[name] for name in CONTENT_BUCKET_ENV if env.get(name)), f"jumpstart-cache-prod-{region}"
    )
    gated = gated or env.get(GATED_BUCKET_ENV) or f"jumpstart-private-cache-prod-{region}"
    return content, gated


def family(instance_type: str) -> str:
    """ml.g5.48xlarge -> g5."""
    parts = instance_type.split(".")
    return parts[1] if len(parts) >= 3 and parts[0] == "ml" else parts[0]


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def pick_version(model_id: str, requested: str | None, available: list[str]) -> str:
    """'*' or None: newest; '1.*': newest with that prefix; else an exact match."""

    def key(v: str) -> Version:
        try:
            return Version(v)
        except InvalidVersion:
            return Version("0")

    if not requested or requested == "*":
        candidates = available
    elif requested.endswith(".*"):
        prefix = requested[:-1]
        candidates = [v for v in available if v.startswith(prefix)]
    else:
        candidates = [v for v in available if v == requested]
    if not candidates:
        shown = ", ".join(sorted(available, key=key)[-5:])
        raise VersionNotFound(f"JumpStart model {model_id!r} has no version matching {requested!r} (newest: {shown})")
    return max(candidates, key=key)


def _get_json(read: Reader, bucket: str, key: str) -> Any:
    body = read(bucket, key)  # S3 errors propagate: the caller classifies them
    try:
        return json.loads(body)
    except ValueError as exc:
        raise SpecError(f"s3://{bucket}/{key} is not valid JSON") from exc


def merged_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The base spec with its top-ranked inference config's components merged over it."""
    rankings = (spec.get("inference_config_rankings") or {}).get("overall", {}).get("rankings") or []
    if not rankings:
        return spec
    top = rankings[0]
    configs = spec.get("inference_configs") or {}
    names = (configs.get(top) or {}).get("component_names") or [top]
    components = spec.get("inference_config_components") or {}
    merged = spec
    for name in names:
        if name in components:
            merged = deep_merge(merged, components[name])
    return merged


def _variant(variants: Mapping[str, Any], instance_type: str, field: str) -> Any:
    """A variant field for the exact instance type, else for its family."""
    for name in (instance_type, family(instance_type)):
        value = (variants.get(name) or {}).get(field)
        if value:
            return value
    return None


def _accelerators(*requirements: Any) -> int | None:
    """`num_accelerators` of the first resource requirements that give a positive one (variant, then model)."""
    for found in requirements:
        count = found.get("num_accelerators") if isinstance(found, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return count
    return None


def resolve(
    model_id: str,
    version: str | None,
    region: str,
    instance_type: str,
    accept_eula: bool,
    read: Reader,
    *,
    content_bucket: str,
    gated_bucket: str,
) -> Resolution:
    """Resolve a JumpStart model for an instance type in a region (the buckets come from `buckets`).

    Raises a ResolutionError subclass for what the manifest and spec say; errors of `read` (for an S3 client,
    botocore's ClientError or BotoCoreError) propagate unchanged, so the caller can retry a network failure.
    """
    manifest = _get_json(read, content_bucket, MANIFEST_KEY)
    entries = [e for e in manifest if isinstance(e, dict) and e.get("model_id") == model_id]
    if not entries:
        raise ModelNotFound(f"JumpStart model {model_id!r} is not in s3://{content_bucket}/{MANIFEST_KEY}")
    chosen = pick_version(model_id, version, [str(e.get("version")) for e in entries])
    spec_key = next(e["spec_key"] for e in entries if str(e.get("version")) == chosen)
    spec = merged_spec(_get_json(read, content_bucket, spec_key))

    variants_root = spec.get("hosting_instance_type_variants") or {}
    variants = variants_root.get("variants") or {}
    props = _variant(variants, instance_type, "properties") or {}
    key = (
        props.get("prepacked_artifact_key")
        or props.get("artifact_key")
        or spec.get("hosting_prepacked_artifact_key")
        or spec.get("hosting_artifact_key")
    )
    if not key:
        raise SpecError(f"JumpStart model {model_id!r} {chosen}: the spec has no hosting artifact key")
    data_type = spec.get("hosting_artifact_s3_data_type") or ("S3Prefix" if str(key).endswith("/") else "S3Object")
    if data_type == "S3Prefix" and not key.endswith("/"):
        key += "/"

    env = {
        e["name"]: str(e.get("default", ""))
        for e in spec.get("inference_environment_variables") or []
        if isinstance(e, dict) and e.get("required_for_model_class") and "name" in e
    }
    env.update({k: str(v) for k, v in (props.get("environment_variables") or {}).items()})

    image = None
    regional = _variant(variants, instance_type, "regional_properties") or {}
    if uri := regional.get("image_uri"):
        if uri.startswith("$"):
            aliases = (variants_root.get("regional_aliases") or {}).get(region) or {}
            if uri[1:] not in aliases:
                raise UnsupportedInstanceType(
                    f"JumpStart model {model_id!r} {chosen}: image alias {uri} has no value in region {region}"
                )
            uri = aliases[uri[1:]]
        image = uri
    elif variants:
        raise UnsupportedInstanceType(
            f"JumpStart model {model_id!r} {chosen} has no image for instance type {instance_type} "
            f"(nor family {family(instance_type)})"
        )

    eula_key = spec.get("hosting_eula_key") or None
    accelerators = _accelerators(props.get("resource_requirements"), spec.get("hosting_resource_requirements"))
    gated = bool(spec.get("gated_bucket")) or eula_key is not None
    if gated and not accept_eula:
        where = f" (the EULA is at s3://{content_bucket}/{eula_key})" if eula_key else ""
        raise EulaNotAccepted(
            f"JumpStart model {model_id!r} {chosen} is gated: set spec.model.acceptEula: true to accept its EULA{where}"
        )
    return Resolution(
        model_id=model_id,
        version=chosen,
        region=region,
        bucket=gated_bucket if gated else content_bucket,
        key=key,
        s3_data_type=data_type,
        image=image,
        env=env,
        gated=gated,
        accelerators=accelerators,
        eula_key=eula_key,
        content_bucket=content_bucket,
        spec_key=spec_key,
    )
