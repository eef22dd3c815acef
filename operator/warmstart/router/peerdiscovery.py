"""Find a router's peers as engines are found: from the EndpointSlices of the routers' own Service, or from a file.

In a cluster the operator gives the endpoint's router pods a headless Service (``<endpoint>-router``) with
the sync port, named ``sync``; every router follows its EndpointSlices (the same watch as the model pods',
:class:`warmstart.router.discovery.KubernetesWatcher`) and sends to every address there but its own
(``--sync-advertise``, the pod's IP). Outside a cluster a file lists the peers (``tcp://host:port``, one
a line), re-read when it changes; the router's own address may be in it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from warmstart.router import discovery, trusting
from warmstart.router.peersync import PeerSync
from warmstart.router.routing import Router

log = logging.getLogger(__name__)

#: the port name of the sync port in the routers' Service and its EndpointSlices
PORT_NAME = "sync"


def addresses(urls: Iterable[str], own: str | None) -> list[str]:
    """``tcp://`` peer addresses from ``urls`` (``host:port`` or ``tcp://host:port``), without ``own``."""
    peers = []
    for url in urls:
        address = url if "://" in url else f"tcp://{url}"
        if own is None or address != own:
            peers.append(address)
    return sorted(set(peers))


def own_address(advertise: str | None, port: int) -> str | None:
    """This router's address as its peers list it (``tcp://ip:port``), when it knows its IP."""
    if not advertise:
        return None
    host = f"[{advertise}]" if ":" in advertise and not advertise.startswith("[") else advertise
    return f"tcp://{host}:{port}"


class PeerFile:
    """Peers listed in a file, re-read every ``interval`` seconds when its mtime or size changes."""

    def __init__(self, path: str, sync: PeerSync, own: str | None, interval: float = 1.0) -> None:
        self.path, self.sync, self.own, self.interval = Path(path), sync, own, interval
        self._seen: tuple[float, int] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, router: Router) -> None:
        self.poll()
        self._task = asyncio.create_task(self._run(), name="router-peer-file")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.poll()

    def poll(self) -> None:
        try:
            stat = self.path.stat()
            mark = (stat.st_mtime, stat.st_size)
            if mark == self._seen:
                return
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            log.error("keeping the current peers: cannot read %s: %s", self.path, exc)
            return
        self._seen = mark
        self.sync.set_peers(addresses(discovery.parse_backends(text), self.own))


class PeerWatcher(discovery.KubernetesWatcher):
    """Follow the routers' Service's EndpointSlices; send to every router pod listed but this one."""

    def __init__(self, api_client: Any, namespace: str, service: str, sync: PeerSync, own: str | None) -> None:
        super().__init__(api_client, namespace, None, None)
        self.peers_service, self.sync, self.own = service, sync, own

    async def start(self, router: Router) -> None:
        from kubernetes import client

        loop = asyncio.get_running_loop()
        api = client.DiscoveryV1Api(self.api_client)
        self._spawn(
            "peer-endpointslices",
            lambda **kw: api.list_namespaced_endpoint_slice(self.namespace, **kw),
            {"label_selector": f"kubernetes.io/service-name={self.peers_service}"},
            lambda items: self._post_peers(loop, items),
        )

    def _post_peers(self, loop: asyncio.AbstractEventLoop, items: list[Any]) -> None:
        items, _ = trusting.split(items, self.peers_service)
        urls = discovery.ready_urls(items, PORT_NAME, scheme="tcp")
        loop.call_soon_threadsafe(self.sync.set_peers, addresses(urls, self.own))
