"""`warmstart operator`: run the kopf operator with probes, Prometheus metrics and the watched namespaces."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import random
import threading
from collections.abc import Mapping
from typing import Any

import kopf
from kopf._cogs.structs import references as kopf_references
from kopf._core.engines import indexing as kopf_indexing
from prometheus_client import start_http_server

from warmstart.api import GROUP
from warmstart.controllers import (
    coexistence,
    discovery,
    endpoints,
    images,
    kopf_relisting,
    kopf_tuning,
    node_watching,
    sharing,
    waking,
    weights,
)
from warmstart.controllers import settings as settings_module
from warmstart.controllers.settings import OperatorSettings
from warmstart.controllers.storage import Store, load_api_client

#: what registers this operator's indexes and handlers, in this order
REGISTRARS = (
    sharing.register,
    endpoints.register,
    weights.register,
    images.register,
    waking.register,
)

_metrics_started: set[int] = set()
_metrics_lock = threading.Lock()


def registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """A fresh kopf registry with every index and handler of this operator, configured by `settings`."""
    result = kopf.OperatorRegistry()
    kopf.on.startup(registry=result)(configure)
    kopf.on.login(registry=result)(login)
    for register in REGISTRARS:
        register(result, settings)
    return result


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf's own behaviour: finalizer name, annotation storage, timeouts."""
    settings.persistence.finalizer = f"{GROUP}/warmstart"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=f"warmstart.{GROUP}")
    settings.persistence.diffbase_storage = kopf_tuning.LeanDiffBaseStorage(
        prefix=f"warmstart.{GROUP}", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 8
    settings.queueing.error_delays = [1, 2, 5, 10, 20]


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account. Elsewhere: the kubeconfig in $KUBECONFIG (set from --kubeconfig)."""
    in_pod = kopf.login_with_service_account(**kwargs)
    if in_pod is not None:
        return dataclasses.replace(in_pod, server=in_cluster_server(os.environ, in_pod.server))
    return kopf.login_with_kubeconfig(**kwargs)


def in_cluster_server(env: Mapping[str, str], fallback: str) -> str:
    """The API server as the kubelet tells every pod (KUBERNETES_SERVICE_HOST/PORT), as client-go's in-cluster config
    does. kopf names `kubernetes.default.svc`, which only resolves where the cluster runs a DNS add-on."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return fallback
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


#: kopf's log line for each event handler that ran; the wake-up handlers (controllers/waking.py) run on every event of
#: every Job, pod and Deployment the operator follows: thousands of lines a minute in a fleet warm-up (about 4% of the
#: operator's CPU at 500 nodes, bench/operator_scale.py --profile)
_WAKEUP_SUCCEEDED = "Handler 'wake_"


def quiet_wakeups(record: logging.LogRecord) -> bool:
    """A logging filter: drop kopf's success line of a wake-up handler (its failures still show)."""
    return not (record.levelno <= logging.INFO and str(record.msg).startswith(_WAKEUP_SUCCEEDED))


def start_metrics(port: int) -> None:
    """Serve Prometheus metrics once per process and port."""
    with _metrics_lock:
        if port and port not in _metrics_started:
            start_http_server(port)
            _metrics_started.add(port)


def peering_priority(settings: OperatorSettings) -> int | None:
    """kopf pauses every peer whose priority equals another's, so replicas need distinct ones: random unless set."""
    if settings.peering is None:
        return None
    return settings.peering_priority if settings.peering_priority is not None else random.randint(1, 2**30)


async def run(
    settings: OperatorSettings,
    *,
    kubeconfig: str | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run the operator until `stop_flag` is set (or forever)."""
    kopf_tuning.install()  # before kopf creates its toggle sets
    if kubeconfig:
        os.environ["KUBECONFIG"] = str(kubeconfig)
    api = load_api_client(str(kubeconfig) if kubeconfig else None)
    await discovery.wait_for_api_server(api)
    store = Store(api)
    settings = coexistence.check(store, settings)  # ForeignCrds: AWS's operator owns the kinds here
    start_metrics(settings.metrics_port)
    memo = kopf.Memo(store=store, settings=settings, wakeups=waking.Wakeups())
    stop = stop_flag or asyncio.Event()
    while True:
        incomplete = await _serve_once(settings, api, memo, stop, ready_flag)
        if not incomplete or stop.is_set():
            return
        logging.getLogger(__name__).error(
            "the API server's discovery lacked %s (it was starting?); starting over", ", ".join(incomplete)
        )


async def _serve_once(
    settings: OperatorSettings, api: Any, memo: kopf.Memo, stop: asyncio.Event, ready_flag: threading.Event | None
) -> list[str]:
    """Run kopf until `stop`, or until its initial discovery turns out incomplete: then stop it and return what was
    missing (kopf resolves resources once, at start, and re-resolves only when a CRD changes)."""
    operator_registry = registry(settings)
    indexers = kopf_indexing.OperatorIndexers()
    kopf_relisting.activate(kopf_relisting.Relisting(operator_registry, indexers))
    informer = node_watching.NodeInformer(api)
    informer.start()
    node_watching.expose(informer, indexers)
    # the nodes are listed once, before any handler runs (kopf's own indexes are waited for by kopf)
    while not await asyncio.to_thread(informer.wait_synced, 1.0):
        if stop.is_set():
            informer.stop()
            return []
    insights = kopf_references.Insights()
    halt = asyncio.Event()
    missing: list[str] = []

    async def watchdog() -> None:
        await insights.ready_resources.wait()
        lacking = discovery.unresolved(operator_registry, insights)
        if not lacking:
            return
        # a CRD that is not installed is lacking for good (kopf serves it once it appears); a resource the API server
        # serves now but did not list then was lost to a starting API server: only that is worth starting over
        await asyncio.sleep(2.0)
        await discovery.wait_for_api_server(api)
        for selector in lacking:
            if await asyncio.to_thread(discovery.served, api, selector):
                missing.append(str(selector.plural or selector.any_name))
        if missing:
            halt.set()

    async def relay() -> None:
        await stop.wait()
        halt.set()

    helpers = [asyncio.create_task(watchdog()), asyncio.create_task(relay())]
    try:
        await kopf.operator(
            registry=operator_registry,
            indexers=indexers,
            insights=insights,
            standalone=settings.peering is None,
            peering_name=settings.peering,
            priority=peering_priority(settings),
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None,
            memo=memo,
            stop_flag=halt,
            ready_flag=ready_flag,
        )
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.to_thread(informer.stop)
    return missing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="warmstart operator", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--namespace", action="append", default=[], help="namespace to watch (repeatable; default all)")
    parser.add_argument("--metrics-port", type=int, help="Prometheus port (default 8080)")
    parser.add_argument("--health-port", type=int, help="liveness port (default 8081)")
    parser.add_argument("--peering", help="kopf peering name: several replicas, one active")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(quiet_wakeups)
    settings = settings_module.from_env()
    overrides: dict[str, Any] = {}
    if args.namespace:
        overrides["namespaces"] = args.namespace
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    if args.health_port is not None:
        overrides["health_port"] = args.health_port
    if args.peering:
        overrides["peering"] = args.peering
    settings = settings.model_copy(update=overrides)
    try:
        asyncio.run(run(settings, kubeconfig=args.kubeconfig))
    except coexistence.ForeignCrds as error:
        logging.getLogger(__name__).error("not starting: %s", error)
        return coexistence.EXIT_FOREIGN_CRDS
    return 0
