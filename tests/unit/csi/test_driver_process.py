"""`warmstart csi` as the DaemonSet runs it: a process that serves both sockets and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import yaml

from warmstart.csi import cli, nodeservice
from warmstart.csi.protos import csi_pb2, csi_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc


def _kubeconfig(path: pathlib.Path) -> pathlib.Path:
    """An API server that is not there (port 9): the driver starts without one and answers UNAVAILABLE."""
    cluster = {"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}
    user = {"name": "none", "user": {}}
    context = {"name": "none", "context": {"cluster": "none", "user": "none"}}
    body = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [user], "contexts": [context]}
    path.write_text(yaml.safe_dump({**body, "current-context": "none"}))
    return path


def _wait_for(path: pathlib.Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_the_driver_process_registers_serves_and_stops_on_sigterm(tmp_path: pathlib.Path) -> None:
    csi_socket, registration = tmp_path / "plugins" / "csi.sock", tmp_path / "plugins_registry" / "reg.sock"
    command = [
        sys.executable, "-m", "warmstart.cli", "csi", "--node-name", "gpu-1", "--csi-socket", str(csi_socket),
        "--registration-socket", str(registration), "--allowed-roots", '["/opt/dlami/nvme"]',
        "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig")),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != cli.SIGNING_KEY_ENV}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(registration, process)
        _wait_for(csi_socket, process)
        with grpc.insecure_channel(f"unix://{registration}") as channel:
            info = pluginregistration_pb2_grpc.RegistrationStub(channel).GetInfo(
                pluginregistration_pb2.InfoRequest(), timeout=30
            )
        assert (info.name, info.endpoint) == (nodeservice.DRIVER_NAME, str(csi_socket))
        with grpc.insecure_channel(f"unix://{csi_socket}") as channel:
            assert csi_pb2_grpc.NodeStub(channel).NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=30).node_id == (
                "gpu-1"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output.decode()
    assert b"no WARMSTART_JOB_SIGNING_KEY" in output  # said plainly: without the key no Job may write


def test_a_socket_path_too_long_for_a_unix_socket_is_named_before_anything_starts(tmp_path: pathlib.Path) -> None:
    long_root = tmp_path / ("k" * 80) / "kubelet"
    csi_socket = long_root / "plugins" / "warmstart-csi" / "csi.sock"
    command = [
        sys.executable, "-m", "warmstart.cli", "csi", "--node-name", "gpu-1", "--csi-socket", str(csi_socket),
        "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig")),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert done.returncode == 2, done
    assert f"socket path {csi_socket} has {len(str(csi_socket))} characters" in done.stderr.decode()
    assert "csi.kubeletDir" in done.stderr.decode()
    assert not csi_socket.exists()
