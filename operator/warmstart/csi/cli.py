"""`warmstart csi`: run the cache CSI node plugin on one node (the chart's DaemonSet, the only privileged pod).

Settings come from flags and the environment the chart sets: the node name (downward API), the allowed cache roots,
the trust groups and the Job signing key (a Secret in the operator's namespace).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from concurrent import futures

import grpc
from kubernetes import client, config

from warmstart.csi import lookups, nodeservice
from warmstart.csi.protos import csi_pb2_grpc, pluginregistration_pb2_grpc

logger = logging.getLogger(__name__)

SIGNING_KEY_ENV = "WARMSTART_JOB_SIGNING_KEY"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="warmstart csi", description=__doc__)
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), help="this node (default $NODE_NAME)")
    parser.add_argument("--csi-socket", required=True, help="path of the CSI socket (as the kubelet sees it)")
    parser.add_argument(
        "--registration-socket", default="", help="socket in the kubelet's plugins_registry directory (empty: none)"
    )
    parser.add_argument(
        "--allowed-roots",
        default=os.environ.get("WARMSTART_ALLOWED_HOST_PATHS", "[]"),
        help="JSON list of allowed cache roots (default $WARMSTART_ALLOWED_HOST_PATHS)",
    )
    parser.add_argument(
        "--groups",
        default=os.environ.get("WARMSTART_CACHE_SHARING_GROUPS", "{}"),
        help="JSON trust groups {name: [namespace, ...]} (default $WARMSTART_CACHE_SHARING_GROUPS)",
    )
    parser.add_argument("--kubeconfig", default="", help="kubeconfig (default: in-cluster)")
    return parser.parse_args(argv)


#: sun_path holds 108 bytes with the terminating NUL: a longer socket path cannot be bound or dialled
MAX_SOCKET_PATH = 107


def socket_path_error(path: str) -> str:
    """Why `path` cannot be a unix socket, or "" when it can."""
    if len(path) > MAX_SOCKET_PATH:
        return (
            f"socket path {path} has {len(path)} characters; a unix socket path has at most {MAX_SOCKET_PATH}"
            " (a shorter kubelet root dir, Helm value csi.kubeletDir, fixes it)"
        )
    return ""


def _listen(path: str) -> str:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)  # a stale socket of a previous run
    return f"unix://{path}"


def main(argv: list[str]) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.node_name:
        logger.error("no node name: pass --node-name or set NODE_NAME")
        return 2
    for path in (args.csi_socket, args.registration_socket):
        problem = socket_path_error(path)
        if problem:
            logger.error("%s", problem)
            return 2
    signing_key = os.environ.get(SIGNING_KEY_ENV, "").encode()
    if not signing_key:
        logger.warning("no %s: no Job will be allowed to write a cache", SIGNING_KEY_ENV)
    settings = nodeservice.Settings(
        node=args.node_name,
        allowed_roots=tuple(json.loads(args.allowed_roots)),
        groups=json.loads(args.groups),
        signing_key=signing_key,
        csi_endpoint=args.csi_socket,
    )
    if args.kubeconfig:
        api = config.new_client_from_config(config_file=args.kubeconfig)
    else:
        config.load_incluster_config()
        api = client.ApiClient()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    csi_pb2_grpc.add_IdentityServicer_to_server(nodeservice.Identity(), server)  # type: ignore[no-untyped-call]
    csi_pb2_grpc.add_NodeServicer_to_server(nodeservice.Node(settings, lookups.Lookups(api)), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(_listen(args.csi_socket))
    registration = None
    if args.registration_socket:
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        servicer = nodeservice.Registration(settings)
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(servicer, registration)  # type: ignore[no-untyped-call]
        registration.add_insecure_port(_listen(args.registration_socket))
    server.start()
    if registration is not None:
        registration.start()
    logger.info("serving %s on node %s at %s", nodeservice.DRIVER_NAME, settings.node, args.csi_socket)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    if registration is not None:
        registration.stop(grace=None)
    server.stop(grace=5).wait()
    return 0
