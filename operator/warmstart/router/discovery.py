"""Keep the router's replicas and configuration current: from files, or live from the Kubernetes API.

Outside a cluster, :class:`FileWatcher` polls a config file (and optionally a backends file) and
applies changes. In a cluster, :class:`KubernetesWatcher` follows the model Service's
EndpointSlices (ready endpoints only, of the slices the EndpointSlice controller keeps:
:mod:`warmstart.router.trusting`) and the router's ConfigMap (key ``router.yaml``).

The kubernetes client is blocking, so each watch runs in its own daemon thread that only talks
to the API and hands finished results to the event loop with ``call_soon_threadsafe``; the
router's state is touched on the loop alone, and the client never sits in the request path.
Each thread re-lists after every bounded watch, so a missed event heals within one watch period.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from warmstart.api.routers import RouterConfig
from warmstart.router import trusting
from warmstart.router.routing import Router

log = logging.getLogger(__name__)


class Source(Protocol):
    """Something that feeds the router's fleet or configuration while the server runs."""

    async def start(self, router: Router) -> None: ...

    async def stop(self) -> None: ...


def parse_backends(text: str) -> list[str]:
    """Comma-, space- or line-separated URLs; '#' starts a comment."""
    urls: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        urls += [part for part in line.replace(",", " ").split() if part]
    return urls


class FileWatcher:
    """Poll a config file and/or a backends file; apply them when their mtime or size changes."""

    def __init__(self, config_path: str | None, backends_path: str | None = None, interval: float = 1.0) -> None:
        self.config_path = Path(config_path) if config_path else None
        self.backends_path = Path(backends_path) if backends_path else None
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[Path, tuple[float, int]] = {}

    async def start(self, router: Router) -> None:
        self.poll(router)
        self._task = asyncio.create_task(self._run(router), name="router-file-watcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, router: Router) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.poll(router)
            except Exception as exc:  # noqa: BLE001 - one bad poll must not end all later reloads
                log.error("reading the router's files failed (%s); retrying", type(exc).__name__)

    def poll(self, router: Router) -> None:
        """Apply whichever file changed since the last poll (errors keep the previous state).

        An empty file is taken as one being written (editors and ``>`` truncate first) and is
        looked at again on the next poll; write files atomically (rename) to avoid the window.
        """
        if self.config_path is not None:
            text = self._read_if_changed(self.config_path)
            if text is not None:
                try:
                    config = RouterConfig.from_yaml(text)
                except ValueError as exc:
                    router.reject_config(f"file {self.config_path}", _reason(exc))
                else:
                    router.apply_config(config)
        if self.backends_path is not None:
            text = self._read_if_changed(self.backends_path)
            if text is not None:
                router.set_backends(parse_backends(text))

    def _read_if_changed(self, path: Path) -> str | None:
        try:
            stat = path.stat()
            mark = (stat.st_mtime, stat.st_size)
            if self._seen.get(path) == mark:
                return None
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            log.error("keeping the previous state: cannot read %s: %s", path, exc)
            return None
        if not text.strip():
            return None  # probably mid-write: not marked as seen, so the next poll reads it again
        self._seen[path] = mark
        return text


def _reason(exc: ValueError) -> str:
    """A one-line reason for a rejected configuration (field names and messages, no values)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors(include_input=False))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def ready_urls(slices: Iterable[Any], port_name: str | None = None, scheme: str = "http") -> list[str]:
    """Replica URLs from EndpointSlice objects: ready (nil counts as ready), not terminating."""
    return sorted(ready_replicas(slices, port_name, scheme))


def ready_replicas(slices: Iterable[Any], port_name: str | None = None, scheme: str = "http") -> dict[str, str | None]:
    """Ready replica URLs and the node each runs on (the endpoint's ``nodeName``, None if not set)."""
    urls: dict[str, str | None] = {}
    for eps in slices:
        port = _pick_port(getattr(eps, "ports", None) or [], port_name)
        if port is None:
            continue
        for endpoint in getattr(eps, "endpoints", None) or []:
            conditions = endpoint.conditions
            if conditions is not None and (conditions.ready is False or conditions.terminating is True):
                continue
            for address in endpoint.addresses or []:
                host = f"[{address}]" if ":" in address else address
                urls[f"{scheme}://{host}:{port}"] = getattr(endpoint, "node_name", None)
    return urls


def _pick_port(ports: list[Any], port_name: str | None) -> int | None:
    """The port named ``port_name``; without that name (or without a match) the slice's first port."""
    numbered = [port for port in ports if port.port is not None]
    named = [port for port in numbered if port_name is not None and port.name == port_name]
    if port_name is not None and not named and numbered:
        log.warning("no EndpointSlice port named %r; using port %s", port_name, numbered[0].port)
    chosen = (named or numbered)[:1]
    return int(chosen[0].port) if chosen else None


class KubernetesWatcher:
    """Follow EndpointSlices of ``service`` and the ConfigMap ``configmap`` in ``namespace``."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        service: str | None,
        configmap: str | None,
        *,
        port_name: str | None = None,
        watch_seconds: int = 30,
        retry_seconds: float = 2.0,
    ) -> None:
        self.api_client = api_client
        self.namespace, self.service, self.configmap = namespace, service, configmap
        self.port_name = port_name
        self.watch_seconds, self.retry_seconds = watch_seconds, retry_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ignored: list[str] = []

    async def start(self, router: Router) -> None:
        from kubernetes import client  # imported here so the request path never loads it

        loop = asyncio.get_running_loop()
        if self.service:
            discovery = client.DiscoveryV1Api(self.api_client)
            self._spawn(
                "endpointslices",
                lambda **kw: discovery.list_namespaced_endpoint_slice(self.namespace, **kw),
                {"label_selector": f"kubernetes.io/service-name={self.service}"},
                lambda items: self._post_replicas(loop, router, items),
            )
        if self.configmap:
            core = client.CoreV1Api(self.api_client)
            self._spawn(
                "configmap",
                lambda **kw: core.list_namespaced_config_map(self.namespace, **kw),
                {"field_selector": f"metadata.name={self.configmap}"},
                lambda items: self._post_config(loop, router, items),
            )

    async def stop(self) -> None:
        self._stop.set()  # threads are daemons and end at their next watch timeout

    def _post_replicas(self, loop: asyncio.AbstractEventLoop, router: Router, items: list[Any]) -> None:
        items, ignored = trusting.split(items, self.service or "")
        if ignored != self._ignored:
            self._ignored = ignored
            if ignored:
                log.warning("ignoring EndpointSlices not managed by the EndpointSlice controller: %s", ignored)
        replicas = ready_replicas(items, self.port_name)
        nodes = {url: node for url, node in replicas.items() if node}
        loop.call_soon_threadsafe(router.set_backends, sorted(replicas), nodes)

    def _post_config(self, loop: asyncio.AbstractEventLoop, router: Router, items: list[Any]) -> None:
        if not items:
            log.warning("configmap %s/%s not found; keeping the current configuration", self.namespace, self.configmap)
            return
        try:
            config = RouterConfig.from_configmap_data(items[0].data)
        except ValueError as exc:
            source = f"configmap {self.namespace}/{self.configmap}"
            loop.call_soon_threadsafe(router.reject_config, source, _reason(exc))
            return
        loop.call_soon_threadsafe(router.apply_config, config)

    def _spawn(
        self, what: str, list_fn: Callable[..., Any], selector: dict[str, str], publish: Callable[[list[Any]], Any]
    ) -> None:
        thread = threading.Thread(
            target=self._follow, args=(what, list_fn, selector, publish), name=f"router-watch-{what}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _follow(
        self, what: str, list_fn: Callable[..., Any], selector: dict[str, str], publish: Callable[[list[Any]], Any]
    ) -> None:
        """Thread body: list, publish, watch and publish on every change; re-list after each watch."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            try:
                listed = list_fn(**selector)
                objects = {item.metadata.name: item for item in listed.items}
                publish(list(objects.values()))
                stream = watch.Watch()
                for event in stream.stream(
                    list_fn,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=self.watch_seconds,
                    _request_timeout=self.watch_seconds + 10,
                    **selector,
                ):
                    if self._stop.is_set():
                        stream.stop()
                        return
                    obj = event["object"]
                    if event["type"] == "DELETED":
                        objects.pop(obj.metadata.name, None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        objects[obj.metadata.name] = obj
                    else:
                        continue
                    publish(list(objects.values()))
            except ApiException as exc:
                if exc.status != 410:  # 410 Gone: our resourceVersion expired; re-list at once
                    log.warning("watching %s failed (%s); retrying", what, exc.status)
                    self._stop.wait(self.retry_seconds)
            except Exception as exc:  # noqa: BLE001 - a watch thread must survive any client error
                log.warning("watching %s failed (%s); retrying", what, type(exc).__name__)
                self._stop.wait(self.retry_seconds)
