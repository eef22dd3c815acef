"""Where model weights come from: S3, FSx for Lustre, the Hugging Face Hub or a Kubernetes volume."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from warmstart.api.base import ApiModel, SecretKeyRef, api_config

NO_DOTDOT = "!self.matches('(^|/)[.][.](/|$)')"
#: an IAM role ARN, as HyperPod's CRD checks it
ROLE_ARN = r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$"


class ModelSourceType(StrEnum):
    S3 = "s3"
    FSX = "fsx"
    HUGGINGFACE = "huggingface"
    KUBERNETES_VOLUME = "kubernetesVolume"


class S3Storage(ApiModel):
    """An S3 bucket (or an S3-compatible store) holding the model."""

    bucket_name: str = Field(
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$",
        description="Name of the S3 bucket (3-63 lowercase letters, digits, dots and hyphens).",
    )
    region: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]+$",
        description="AWS region of the bucket, e.g. us-west-2.",
    )
    endpoint_url: str | None = Field(
        default=None,
        max_length=2048,
        description="warmstart extension: endpoint URL of an S3-compatible store. Leave unset for AWS S3.",
    )
    role_arn: str | None = Field(
        default=None,
        min_length=20,
        max_length=2048,
        pattern=ROLE_ARN,
        description="warmstart extension: IAM role the preload assumes (through STS, with the pod's own credentials) "
        "to read the bucket. A JumpStartModel's gatedModelDownloadRole lands here.",
    )


class FsxStorage(ApiModel):
    """An FSx for Lustre file system holding the model."""

    file_system_id: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^fs-[0-9a-f]{8,}$",
        description="FSx file system ID, e.g. fs-0123456789abcdef0.",
    )
    dns_name: str | None = Field(default=None, max_length=253, description="DNS name of the file system.")
    mount_name: str | None = Field(default=None, max_length=64, description="Lustre mount name of the file system.")


class HuggingFaceModel(ApiModel):
    """A model repository on the Hugging Face Hub (or a mirror)."""

    model_id: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$",
        description="Repository id, e.g. meta-llama/Llama-3.1-8B-Instruct.",
    )
    commit_sha: str | None = Field(
        default=None,
        alias="commitSHA",
        max_length=40,
        description="Full 40-hex-character commit to pin. Strongly recommended: the cache key includes it.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.matches('^[0-9a-f]{40}$')",
                    "message": "commitSHA must be a full 40-character lowercase hex git commit SHA",
                }
            ]
        },
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a Hub access token, for gated or private models. Never logged."
    )
    allow_patterns: list[str] | None = Field(
        default=None,
        max_length=64,
        description="warmstart extension: only download files matching these glob patterns.",
    )
    ignore_patterns: list[str] | None = Field(
        default=None,
        max_length=64,
        description="warmstart extension: skip files matching these glob patterns, e.g. '*.pth'.",
    )


class KubernetesVolume(ApiModel):
    """A PersistentVolumeClaim holding the model."""

    claim_name: str = Field(
        min_length=1, max_length=253, description="Name of the PersistentVolumeClaim in the endpoint's namespace."
    )


class ModelSourceConfig(ApiModel):
    """Where the model weights are, and which block describes them."""

    model_source_type: ModelSourceType = Field(description="One of s3, fsx, huggingface, kubernetesVolume.")
    s3_storage: S3Storage | None = Field(default=None, description="Required when modelSourceType is s3.")
    fsx_storage: FsxStorage | None = Field(default=None, description="Required when modelSourceType is fsx.")
    hugging_face_model: HuggingFaceModel | None = Field(
        default=None, description="Required when modelSourceType is huggingface."
    )
    kubernetes_volume: KubernetesVolume | None = Field(
        default=None,
        description="With modelSourceType kubernetesVolume: the claim holding the model, preloaded like any source. "
        "Without it, the model volume is the kubernetes.volumes entry named worker.modelVolumeMount.name, used as is.",
    )
    model_location: str | None = Field(
        default=None,
        max_length=1024,
        description="Path of the model inside the source: an S3 prefix or key, or a directory on the file system. "
        "No '..' segments.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": NO_DOTDOT, "message": "modelLocation must not contain a '..' path segment"},
                {
                    "rule": "!self.startsWith('/')",
                    "message": "modelLocation must be relative to the source (no leading '/')",
                },
            ]
        },
    )
    prefetch_enabled: bool | None = Field(
        default=None, description="Accepted for compatibility: pre-fetch the model into RAM before the server loads it."
    )

    model_config = api_config(
        {
            "rule": "self.modelSourceType != 's3' || has(self.s3Storage)",
            "message": "modelSourceType s3 requires s3Storage",
        },
        {
            "rule": "self.modelSourceType != 'fsx' || has(self.fsxStorage)",
            "message": "modelSourceType fsx requires fsxStorage",
        },
        {
            "rule": "self.modelSourceType != 'huggingface' || has(self.huggingFaceModel)",
            "message": "modelSourceType huggingface requires huggingFaceModel",
        },
    )


#: an endpoint's kubernetesVolume source needs a claim to preload from, or (HyperPod's semantics) its own volume
VOLUME_SOURCE_NEEDS_A_VOLUME = {
    "rule": "self.modelSourceConfig.modelSourceType != 'kubernetesVolume'"
    " || has(self.modelSourceConfig.kubernetesVolume)"
    " || (has(self.kubernetes) && has(self.kubernetes.volumes)"
    " && self.kubernetes.volumes.exists(v, has(v.name) && v.name == self.worker.modelVolumeMount.name))",
    "message": "modelSourceType kubernetesVolume requires kubernetesVolume (a claim), or a kubernetes.volumes entry "
    "named as worker.modelVolumeMount.name (the model volume)",
}
#: a model already on the endpoint's own volume has nothing to preload
VOLUME_SOURCE_NOT_CACHED = {
    "rule": "self.modelSourceConfig.modelSourceType != 'kubernetesVolume'"
    " || has(self.modelSourceConfig.kubernetesVolume)"
    " || !has(self.modelCacheConfig) || !has(self.modelCacheConfig.weightsCache)"
    " || !has(self.modelCacheConfig.weightsCache.enabled) || !self.modelCacheConfig.weightsCache.enabled",
    "message": "modelSourceType kubernetesVolume without kubernetesVolume reads the model from the kubernetes.volumes "
    "entry named worker.modelVolumeMount.name: there is nothing to preload, so modelCacheConfig.weightsCache "
    "cannot be enabled",
}
#: a weights cache (the child) preloads from a claim
CACHE_VOLUME_SOURCE_NEEDS_A_CLAIM = {
    "rule": "self.modelSourceConfig.modelSourceType != 'kubernetesVolume'"
    " || has(self.modelSourceConfig.kubernetesVolume)",
    "message": "modelSourceType kubernetesVolume requires kubernetesVolume",
}
