"""FSx for Lustre: the Job mounts the file system at the mount root; the model is copied from modelLocation."""

from __future__ import annotations

from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Options
from warmstart.preload.sources.local import LocalSource


def source(config: ModelSourceConfig, options: Options) -> LocalSource:
    if config.fsx_storage is None:
        raise PreloadError(Reason.INVALID_SOURCE, "modelSourceType fsx requires fsxStorage")
    fsx = config.fsx_storage
    details = {"fileSystemId": fsx.file_system_id, "mountName": fsx.mount_name}
    return LocalSource.from_config("fsx", config, options, details)
