"""FSx sources render as the CSI driver documents static provisioning: a PersistentVolume plus a claim bound to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import golden
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.sources import FsxStorage, ModelSourceConfig
from warmstart.render import deployments, endpoints, fsx, owners
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

GOLDEN = Path(__file__).parent / "golden" / "fsx"
CONTEXT = RenderContext(operator_image="warmstart:test")
STORAGE = FsxStorage.model_validate(
    {
        "fileSystemId": "fs-0123456789abcdef0",
        "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
        "mountName": "abcdefgh",
    }
)
OWNER = owners.owner_reference("InferenceEndpointConfig", "llama", "uid-1", controller=False)


def _spec() -> InferenceEndpointConfigSpec:
    return InferenceEndpointConfigSpec.model_validate(
        {
            "modelName": "llama",
            "instanceType": "ml.g5.8xlarge",
            "modelSourceConfig": {
                "modelSourceType": "fsx",
                "fsxStorage": STORAGE.to_api(),
                "modelLocation": "models/llama",
            },
            "worker": {
                "image": "vllm/vllm-openai:v0.8.0",
                "modelInvocationPort": {"containerPort": 8000},
                "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            },
        }
    )


def test_volume_and_claim_match_golden() -> None:
    golden.check_manifests(
        GOLDEN,
        "volume-and-claim",
        [fsx.persistent_volume("team-a", STORAGE), fsx.persistent_volume_claim("team-a", STORAGE, OWNER)],
    )


def test_claim_is_bound_to_its_volume_and_the_volume_is_reserved_for_it() -> None:
    volume, claim = fsx.persistent_volume("team-a", STORAGE), fsx.persistent_volume_claim("team-a", STORAGE, OWNER)
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == "" == volume["spec"]["storageClassName"]
    assert volume["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "team-a",
        "name": claim["metadata"]["name"],
    }
    csi = volume["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    assert csi["volumeHandle"] == "fs-0123456789abcdef0"
    assert csi["volumeAttributes"] == {"dnsname": STORAGE.dns_name, "mountname": "abcdefgh"}
    # Delete would ask the driver to delete the file system itself
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_volumes_of_two_namespaces_never_share_a_name() -> None:
    assert fsx.volume_name("team-a", STORAGE) != fsx.volume_name("team-b", STORAGE)
    assert fsx.claim_name(STORAGE) == fsx.persistent_volume_claim("team-b", STORAGE, OWNER)["metadata"]["name"]


def test_another_mount_name_is_another_claim_and_volume() -> None:
    other = STORAGE.model_copy(update={"mount_name": "zyxwvuts"})
    assert fsx.claim_name(other) != fsx.claim_name(STORAGE)
    assert fsx.volume_name("team-a", other) != fsx.volume_name("team-a", STORAGE)


def test_names_are_valid_kubernetes_names() -> None:
    for name in (fsx.claim_name(STORAGE), fsx.volume_name("a" * 63, STORAGE)):
        assert len(name) <= 63 and name.replace("-", "").isalnum() and name == name.lower()


def test_deployment_mounts_the_claim_read_only_and_no_inline_csi_volume() -> None:
    ref = ObjectRef(kind="InferenceEndpointConfig", name="llama", namespace="team-a", uid="uid-1")
    endpoint = endpoints.from_iec(ref, _spec())
    manifest = deployments.deployment(endpoint, Generation(endpoint.weights_key({}), endpoint.image_key()), CONTEXT)
    volumes: list[dict[str, Any]] = manifest["spec"]["template"]["spec"]["volumes"]
    assert not [v for v in volumes if "csi" in v]
    claims = [v["persistentVolumeClaim"] for v in volumes if "persistentVolumeClaim" in v]
    assert claims == [{"claimName": fsx.claim_name(STORAGE), "readOnly": True}]


def test_storage_of_only_for_fsx_sources() -> None:
    s3 = ModelSourceConfig.model_validate(
        {"modelSourceType": "s3", "s3Storage": {"bucketName": "models", "region": "us-west-2"}}
    )
    assert fsx.storage_of(s3) is None
    assert fsx.storage_of(_spec().model_source_config) == STORAGE
    assert not fsx.complete(FsxStorage(file_system_id="fs-0123456789abcdef0"))
