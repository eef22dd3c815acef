"""A Kubernetes volume (PVC): the Job mounts the claim at the mount root; the model is copied from modelLocation."""

from __future__ import annotations

from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Options
from warmstart.preload.sources.local import LocalSource


def source(config: ModelSourceConfig, options: Options) -> LocalSource:
    if config.kubernetes_volume is None:
        raise PreloadError(Reason.INVALID_SOURCE, "modelSourceType kubernetesVolume requires kubernetesVolume")
    return LocalSource.from_config(
        "kubernetesVolume", config, options, {"claimName": config.kubernetes_volume.claim_name}
    )
