"""`warmstart router --mode epp` as a process: health and a pick on --grpc-port, no HTTP traffic port, a clean exit.

Real: the command line, the process, its gRPC server and admin port. The replica addresses are
never connected to (a picker only names them).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eppharness import Stream, completion, pick_of, request_body, request_headers
from routerprocess import free_port

FLEET = "http://10.0.0.1:8000,http://10.0.0.2:8000"


async def _ready(channel: grpc.aio.Channel, proc: subprocess.Popen[bytes]) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for _ in range(300):
        assert proc.poll() is None, f"the picker exited with {proc.returncode}"
        try:
            answer = await stub.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=2)
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the picker never became ready")


async def test_the_picker_process() -> None:
    grpc_port, admin_port, http_port = free_port(), free_port(), free_port()
    argv = [sys.executable, "-m", "warmstart.cli", "router", "--mode", "epp", "--host", "127.0.0.1"]
    argv += ["--grpc-port", str(grpc_port), "--admin-port", str(admin_port), "--port", str(http_port)]
    argv += ["--backends", FLEET, "--strategy", "prefixaware", "--drain-seconds", "5"]
    proc = subprocess.Popen(argv)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            await _ready(channel, proc)
            stream = Stream(channel)
            await stream.send(request_headers(), request_body(completion("from a process")))
            header, metadata = pick_of(await stream.read())
            assert header == metadata and set(header.split(",")) == {
                "10.0.0.1:8000",
                "10.0.0.2:8000",
            }  # with the fallback
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{admin_port}/router/status") as response,
            ):
                status = await response.json()
            assert status["inflight"] == 1 and status["strategy"] == "prefixaware"
            stream.cancel()
        with socket.socket() as sock:  # no HTTP traffic port in epp mode
            assert sock.connect_ex(("127.0.0.1", http_port)) != 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_unknown_mode_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "warmstart.cli", "router", "--mode", "sidecar"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice: 'sidecar'" in result.stderr
