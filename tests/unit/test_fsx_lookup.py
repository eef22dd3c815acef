"""An FSx source without dnsName or mountName is completed by DescribeFileSystems, or fails asking for them.

moto's FSx mock stands in for AWS. It does not generate a Lustre MountName (AWS does, at creation): the test sets it
on the mocked file system, as AWS would have.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.fsx.models import fsx_backends

from warmstart.api.sources import FsxStorage, ModelSourceConfig
from warmstart.controllers import fsx
from warmstart.controllers.resolving import ResolutionFailed

REGION = "us-west-2"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def _lustre(mount_name: str | None = "abcdefgh") -> str:
    client = boto3.client("fsx", region_name=REGION)
    created = client.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=["subnet-0123456789abcdef0"],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2"},
    )["FileSystem"]
    if mount_name:
        system = fsx_backends[DEFAULT_ACCOUNT_ID][REGION].file_systems[created["FileSystemId"]]
        system.lustre_configuration["MountName"] = mount_name
    return str(created["FileSystemId"])


def _source(storage: dict[str, str]) -> ModelSourceConfig:
    return ModelSourceConfig.model_validate({"modelSourceType": "fsx", "fsxStorage": storage, "modelLocation": "m"})


@pytest.mark.usefixtures("aws")
def test_missing_names_are_filled_from_describe_file_systems() -> None:
    fs_id = _lustre()
    done = fsx.completed_source(_source({"fileSystemId": fs_id}), REGION, fsx.Lookups.empty())
    assert done.fsx_storage == FsxStorage(
        file_system_id=fs_id, dns_name=f"{fs_id}.fsx.{REGION}.amazonaws.com", mount_name="abcdefgh"
    )


@pytest.mark.usefixtures("aws")
def test_names_given_in_the_spec_win_over_the_lookup() -> None:
    fs_id = _lustre()
    done = fsx.completed_source(_source({"fileSystemId": fs_id, "mountName": "mine"}), REGION, fsx.Lookups.empty())
    assert done.fsx_storage is not None and done.fsx_storage.mount_name == "mine"
    assert done.fsx_storage.dns_name == f"{fs_id}.fsx.{REGION}.amazonaws.com"


@pytest.mark.usefixtures("aws")
def test_a_complete_spec_makes_no_call() -> None:
    source = _source({"fileSystemId": "fs-0123456789abcdef0", "dnsName": "d", "mountName": "m"})
    assert fsx.completed_source(source, REGION, fsx.Lookups.empty()) is source


@pytest.mark.usefixtures("aws")
def test_lookups_are_cached_per_file_system() -> None:
    fs_id = _lustre()
    lookups = fsx.Lookups.empty()
    fsx.completed_source(_source({"fileSystemId": fs_id}), REGION, lookups)
    fsx_backends[DEFAULT_ACCOUNT_ID][REGION].file_systems.clear()  # a second call would now find nothing
    again = fsx.completed_source(_source({"fileSystemId": fs_id}), REGION, lookups)
    assert again.fsx_storage is not None and again.fsx_storage.mount_name == "abcdefgh"


@pytest.mark.usefixtures("aws")
def test_an_unknown_file_system_fails_with_a_message_asking_for_the_names() -> None:
    with pytest.raises(ResolutionFailed) as failed:
        fsx.completed_source(_source({"fileSystemId": "fs-00000000deadbeef"}), REGION, fsx.Lookups.empty())
    assert failed.value.reason == "FsxDetailsMissing" and not failed.value.retryable
    assert "dnsName and mountName" in failed.value.message and "fs-00000000deadbeef" in failed.value.message


@pytest.mark.usefixtures("aws")
def test_a_file_system_without_a_lustre_mount_name_fails_clearly() -> None:
    fs_id = _lustre(mount_name=None)
    with pytest.raises(ResolutionFailed) as failed:
        fsx.completed_source(_source({"fileSystemId": fs_id}), REGION, fsx.Lookups.empty())
    assert "not an FSx for Lustre file system with a mount name" in failed.value.message


def test_no_credentials_fails_without_retrying(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ResolutionFailed) as failed:
        fsx.completed_source(_source({"fileSystemId": "fs-0123456789abcdef0"}), REGION, fsx.Lookups.empty())
    assert "no AWS credentials" in failed.value.message and not failed.value.retryable
