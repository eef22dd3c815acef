"""FSx sources are mounted only from the admin's allowlist for the namespace; the operator never asks AWS for names.

A Lustre mount is authorized by the network, not by the tenant's IAM identity: without the list a tenant could mount
any file system the nodes reach, by id or by DNS and mount name.
"""

from __future__ import annotations

import pytest

from warmstart.api.sources import FsxStorage, ModelSourceConfig
from warmstart.controllers import fsx, settings
from warmstart.controllers.resolving import ResolutionFailed
from warmstart.render.context import RenderContext

ALLOWED = {
    "team-a": (
        FsxStorage.model_validate(
            {"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs-a.fsx.local", "mountName": "abcd"}
        ),
    )
}


def source(**storage: str) -> ModelSourceConfig:
    return ModelSourceConfig.model_validate(
        {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0", **storage}}
    )


def test_an_allowed_file_system_gets_the_admins_names() -> None:
    done = fsx.completed_source(source(), "team-a", ALLOWED)
    assert done.fsx_storage is not None
    assert (done.fsx_storage.dns_name, done.fsx_storage.mount_name) == ("fs-a.fsx.local", "abcd")


@pytest.mark.parametrize(
    ("namespace", "storage", "why"),
    [
        ("team-b", {}, "not allowed here (allowed: none)"),
        ("team-b", {"dnsName": "fs-a.fsx.local", "mountName": "abcd"}, "not allowed here"),
        ("team-a", {"dnsName": "other-server.internal"}, "dnsName 'other-server.internal' differs"),
        ("team-a", {"mountName": "other"}, "mountName 'other' differs"),
    ],
    ids=["other-namespace", "other-namespace-with-names", "another-server", "another-mount"],
)
def test_anything_else_is_fsx_not_allowed_permanently(namespace: str, storage: dict[str, str], why: str) -> None:
    with pytest.raises(ResolutionFailed) as refused:
        fsx.completed_source(source(**storage), namespace, ALLOWED)
    assert refused.value.reason == "FsxNotAllowed" and not refused.value.retryable
    assert why in refused.value.message and "fsx.allowedFileSystems" in refused.value.message


def test_the_operator_reads_the_allowlist_from_its_settings_and_needs_complete_entries() -> None:
    raw = '{"team-a": [{"fileSystemId": "fs-0123456789abcdef0", "dnsName": "d", "mountName": "m"}]}'
    read = settings.from_env({"WARMSTART_FSX_FILE_SYSTEMS": raw}).render.fsx_file_systems
    assert read["team-a"][0].dns_name == "d"
    with pytest.raises(ValueError, match="needs dnsName and mountName"):
        RenderContext.model_validate({"fsx_file_systems": {"team-a": [{"fileSystemId": "fs-0123456789abcdef0"}]}})
