"""The driver's gRPC services over a real unix socket, as the kubelet calls them (grpcio client, no API server).

What needs no API read is answered here for real: plugin registration, node info, and the refusals that come from the
request alone. With the API server unreachable, a mount is UNAVAILABLE (the kubelet retries), never granted.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from kubernetes import client

from warmstart.csi import decisions, lookups, nodeservice
from warmstart.csi.protos import csi_pb2, csi_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc


@pytest.fixture
def channel(tmp_path: pathlib.Path) -> Iterator[grpc.Channel]:
    socket = tmp_path / "csi.sock"
    settings = nodeservice.Settings(
        node="gpu-1", allowed_roots=("/opt/dlami/nvme",), groups={}, signing_key=b"k", csi_endpoint=str(socket)
    )
    unreachable = client.Configuration()
    unreachable.host = "http://127.0.0.1:9"  # discard port: nothing listens
    unreachable.retries = False
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    csi_pb2_grpc.add_IdentityServicer_to_server(nodeservice.Identity(), server)
    reads = lookups.Lookups(client.ApiClient(unreachable))
    csi_pb2_grpc.add_NodeServicer_to_server(nodeservice.Node(settings, reads), server)
    pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(nodeservice.Registration(settings), server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{socket}") as opened:
            yield opened
    finally:
        server.stop(grace=None)


def publish(channel: grpc.Channel, context: dict[str, str], target: str) -> grpc.RpcError:
    request = csi_pb2.NodePublishVolumeRequest(
        volume_id="csi-1", target_path=target, readonly=True, volume_context=context
    )
    with pytest.raises(grpc.RpcError) as refused:
        csi_pb2_grpc.NodeStub(channel).NodePublishVolume(request, timeout=30)
    return refused.value


def test_the_kubelet_learns_the_driver_name_endpoint_and_node(channel: grpc.Channel) -> None:
    info = pluginregistration_pb2_grpc.RegistrationStub(channel).GetInfo(pluginregistration_pb2.InfoRequest())
    assert (info.type, info.name, list(info.supported_versions)) == ("CSIPlugin", nodeservice.DRIVER_NAME, ["1.0.0"])
    assert info.endpoint.endswith("csi.sock")
    node = csi_pb2_grpc.NodeStub(channel).NodeGetInfo(csi_pb2.NodeGetInfoRequest())
    assert node.node_id == "gpu-1"
    plugin = csi_pb2_grpc.IdentityStub(channel).GetPluginInfo(csi_pb2.GetPluginInfoRequest())
    assert plugin.name == nodeservice.DRIVER_NAME


def test_a_request_without_pod_information_is_permission_denied(channel: grpc.Channel, tmp_path: pathlib.Path) -> None:
    refused = publish(channel, {decisions.KEY_ATTRIBUTE: "0" * 32}, str(tmp_path / "target"))
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "podInfoOnMount" in (refused.details() or "")
    assert not (tmp_path / "target").exists()


def test_an_unreachable_api_server_makes_the_kubelet_retry_never_mount(
    channel: grpc.Channel, tmp_path: pathlib.Path
) -> None:
    context = {
        decisions.POD_NAME: "model-0",
        decisions.POD_NAMESPACE: "team-a",
        decisions.POD_UID: "uid",
        decisions.KEY_ATTRIBUTE: "0" * 32,
    }
    refused = publish(channel, context, str(tmp_path / "target"))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused.details()
    assert not (tmp_path / "target").exists()
