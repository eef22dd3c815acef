"""`warmstart router`: parse flags, build the router, its discovery sources and the HTTP server, run.

Outside a cluster::

    warmstart router --backends http://127.0.0.1:9000,http://127.0.0.1:9001 --config router.yaml

In a cluster (what the operator's router Deployment runs)::

    warmstart router --namespace NS --service MODEL_SERVICE --configmap ROUTER_CONFIGMAP

As a Gateway API Inference Extension endpoint picker (a gateway's ext_proc filter asks it, over
gRPC, which replica gets each request; there is no HTTP traffic port)::

    warmstart router --mode epp --grpc-port 9002 --namespace NS --service MODEL_SERVICE --configmap CM
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from warmstart.api import strategies
from warmstart.api.routers import RouterConfig
from warmstart.router import admin, discovery, electing, extproc, peerdiscovery, peersync, proxying
from warmstart.router.routing import Router

log = logging.getLogger("warmstart.router")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warmstart router", description="Prefix-aware router for LLM replicas.")
    p.add_argument(
        "--mode",
        choices=("proxy", "epp"),
        default="proxy",
        help="proxy: serve HTTP traffic (default); epp: be a gateway's endpoint picker over ext_proc gRPC",
    )
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="traffic listen port in proxy mode (default 8080)")
    p.add_argument(
        "--grpc-port", type=int, default=9002, help="ext_proc and gRPC health port in epp mode (default 9002; 0 = any)"
    )
    p.add_argument(
        "--admin-port", type=int, default=9090, help="port of /metrics and /router/status (default 9090; 0 = any)"
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=15.0,
        help="seconds a connection may take to send a request's headers; also the idle keep-alive (default 15)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=25.0,
        help="epp mode: on SIGTERM, seconds open streams (responses in progress) may take to finish (default 25)",
    )
    p.add_argument("--backends", default="", help="comma-separated replica URLs (outside a cluster)")
    p.add_argument("--backends-file", help="file of replica URLs, re-read when it changes")
    p.add_argument("--config", help="RouterConfig YAML/JSON file, re-read when it changes")
    p.add_argument("--strategy", help="strategy when no --config/--configmap is given (default random)")
    p.add_argument("--reload-interval", type=float, default=1.0, help="seconds between file checks")
    p.add_argument("--namespace", help="in-cluster: namespace of the model Service and ConfigMap")
    p.add_argument("--service", help="in-cluster: model Service whose EndpointSlices list the replicas")
    p.add_argument("--configmap", help="in-cluster: ConfigMap holding router.yaml")
    p.add_argument("--port-name", help="in-cluster: EndpointSlice port name to use (default: first port)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")
    p.add_argument(
        "--lease",
        help="epp mode: elect a leader through this coordination.k8s.io Lease (in --namespace); only the leader is "
        "ready (router/electing.py)",
    )
    p.add_argument("--lease-identity", help="this candidate's name in the Lease (the pod's name)")
    p.add_argument(
        "--sync-port",
        type=int,
        default=None,
        help="share picks and in-flight counts with peer routers on this port (ZMQ; 0 = any free port; "
        "default: no sync); needs --sync-key-file and --peers-service or --peers-file",
    )
    p.add_argument("--sync-key-file", help="file holding the endpoint's sync key (HMAC-SHA256; at least 16 bytes)")
    p.add_argument("--peers-service", help="in-cluster: the routers' Service whose EndpointSlices list the peers")
    p.add_argument("--peers-file", help="file of peer addresses (tcp://host:port), re-read when it changes")
    p.add_argument("--sync-advertise", help="this router's own IP as peers list it (left out of its peers)")
    p.add_argument(
        "--sync-heartbeat", type=float, default=0.5, help="seconds between heartbeats to peers (default 0.5)"
    )
    p.add_argument("--log-level", default="INFO")
    return p


def build_sync(args: argparse.Namespace, router: Router) -> peersync.PeerSync | None:
    """The peer sync the flags ask for; None without ``--sync-port``."""
    if args.sync_port is None:
        return None
    if not args.sync_key_file or not (args.peers_service or args.peers_file):
        raise SystemExit("warmstart router: --sync-port needs --sync-key-file and --peers-service or --peers-file")
    try:
        key = Path(args.sync_key_file).read_bytes().strip()
        return peersync.PeerSync(router, key, args.sync_port, args.host, heartbeat_seconds=args.sync_heartbeat)
    except (OSError, ValueError) as exc:  # the router still routes, on its own view
        log.error("peer sync off: no usable sync key in %s (%s)", args.sync_key_file, type(exc).__name__)
        return None


def sync_sources(args: argparse.Namespace, sync: peersync.PeerSync) -> list[discovery.Source]:
    """Where the peers come from (after the sync port is bound, so its own address is known)."""
    own = peerdiscovery.own_address(args.sync_advertise, sync.port)
    if args.peers_service:
        if not args.namespace:
            raise SystemExit("warmstart router: --peers-service needs --namespace")
        return [peerdiscovery.PeerWatcher(_api_client(args.kubeconfig), args.namespace, args.peers_service, sync, own)]
    return [peerdiscovery.PeerFile(args.peers_file, sync, own or f"tcp://127.0.0.1:{sync.port}", args.reload_interval)]


def build_sources(args: argparse.Namespace) -> list[discovery.Source]:
    """File and/or Kubernetes sources from the flags."""
    sources: list[discovery.Source] = []
    if args.config or args.backends_file:
        sources.append(discovery.FileWatcher(args.config, args.backends_file, args.reload_interval))
    if args.service or args.configmap:
        if not args.namespace:
            raise SystemExit("warmstart router: --service/--configmap need --namespace")
        sources.append(
            discovery.KubernetesWatcher(
                _api_client(args.kubeconfig), args.namespace, args.service, args.configmap, port_name=args.port_name
            )
        )
    return sources


def _elector(args: argparse.Namespace) -> electing.LeaseElector | None:
    """The Lease elector the flags ask for (epp mode with --lease), else None."""
    if not args.lease:
        return None
    if args.mode != "epp" or not args.namespace or not args.lease_identity:
        raise SystemExit("warmstart router: --lease is for --mode epp and needs --namespace and --lease-identity")
    return electing.LeaseElector(_api_client(args.kubeconfig), args.namespace, args.lease, args.lease_identity)


def _api_client(kubeconfig: str | None) -> object:
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


async def run(args: argparse.Namespace) -> int:
    config = RouterConfig.from_file(args.config) if args.config else RouterConfig()
    if args.strategy:
        config = config.model_copy(update={"strategy": strategies.parse(args.strategy)})
    router = Router(config, discovery.parse_backends(args.backends))
    sources = build_sources(args)
    for source in sources:
        await source.start(router)
    router.start()
    sync = build_sync(args, router)
    if sync is not None:
        sync.start()
        sources += sync_sources(args, sync)
        for source in sources[-1:]:
            await source.start(router)
        log.info("sharing picks with peer routers on sync port %d", sync.port)
    traffic: proxying.TrafficServer | None = None
    picker: extproc.PickerServer | None = None
    elector = _elector(args)
    if elector is not None:
        await elector.start()
    if args.mode == "epp":
        picker = await extproc.serve(router, args.host, args.grpc_port, ready=elector.is_leader if elector else None)
        listening = f"ext_proc gRPC :{picker.port}"
    else:
        traffic = await proxying.serve(router, args.host, args.port, header_timeout=args.header_timeout)
        listening = f"HTTP :{traffic.port}"
    admin_runner, admin_port = await admin.serve(admin.make_admin_app(router), args.host, args.admin_port)
    log.info(
        "router (%s mode) listening on %s %s (admin :%d), strategy %s, %d replicas",
        args.mode,
        args.host,
        listening,
        admin_port,
        router.config.strategy.value,
        len(router.fleet),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if elector is not None:  # first: a standby leads within its retry period while this one drains its streams
        await elector.stop()
    if picker is not None:
        await picker.stop(args.drain_seconds)
    if traffic is not None:
        await traffic.cleanup()
    await admin_runner.cleanup()
    for source in sources:
        await source.stop()
    if sync is not None:
        await sync.stop()
    await router.stop()
    return 0


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.strategy and (args.config or args.configmap):
        parser().error("--strategy is for runs without --config/--configmap (set it in the config instead)")
    try:
        import uvloop  # a faster event loop when installed; asyncio's otherwise
    except ImportError:
        return asyncio.run(run(args))
    return int(uvloop.run(run(args)))
