"""The last endpoint to release a shared cache, killed after its first write: no cache is left orphaned (real API).

A crash is injected deterministically, at the step where the old code orphaned the cache: the operator process is
cut off (no further API call returns to it) right after the first write `sharing.release` makes. A cache must then
either be gone, or still carry a parent reference, through which a restarted operator finds and releases it again.
(The earlier code detached first and deleted second: cut there, it left a cache nothing referenced and nothing ever
deleted, its DaemonSet still running on every node.) A second test cuts the process after the fallback write, when
another endpoint attached between the release's read and its delete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
from warmstart.api import API_VERSION
from warmstart.api.caches import MIC_KIND
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.controllers import sharing, storage
from warmstart.render import caches
from warmstart.render import endpoints as rendering

pytestmark = pytest.mark.cluster


class Crash(BaseException):
    """The operator process dying: not an Exception, so nothing on the way catches it."""


class CutAfterFirstWrite:
    """An API client that forwards every call, and dies right after the first write returns from the server.
    `before_write` runs before each write goes out (to let another endpoint act at that instant)."""

    def __init__(self, api: Any, before_write: Callable[[str, str], None] | None = None) -> None:
        self.api, self.before_write, self.writes = api, before_write, []

    def call_api(self, path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "GET" and self.before_write is not None:
            self.before_write(method, path)
        result = self.api.call_api(path, method, *args, **kwargs)
        if method != "GET":
            self.writes.append((method, path))
            raise Crash(f"killed after {method} {path}")
        return result


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _parent(api: client.ApiClient, namespace: str, name: str) -> rendering.Endpoint:
    """A real endpoint object (no operator runs), as the Endpoint the operator would resolve it to."""
    body = ep.endpoint_manifest(name, namespace, "ml.g5.24xlarge")
    kube.create_custom(api, body)
    uid = kube.get_custom(api, namespace, "inferenceendpointconfigs", name)["metadata"]["uid"]  # type: ignore[index]
    ref = rendering.ObjectRef(kind="InferenceEndpointConfig", name=name, namespace=namespace, uid=uid)
    return rendering.from_iec(ref, InferenceEndpointConfigSpec.model_validate(body["spec"]))


def _parents(cache: dict[str, Any]) -> tuple[list[str], list[str]]:
    specs = [p["uid"] for p in cache["spec"].get("parentReferences") or []]
    owners = [o["uid"] for o in cache["metadata"].get("ownerReferences") or []]
    return specs, owners


def test_the_last_parent_killed_after_its_first_write_leaves_no_orphan(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    api = storage.load_api_client(str(cluster.kubeconfig))
    store = storage.Store(api)
    parent = _parent(api_client, namespace, "only")
    manifest = caches.image_cache(parent)
    name = manifest["metadata"]["name"]
    sharing.attach(store, manifest, parent.ref.uid)
    assert store.get(API_VERSION, MIC_KIND, name, namespace) is not None

    cut = CutAfterFirstWrite(api)
    with pytest.raises(Crash):
        sharing.release(storage.Store(cut), MIC_KIND, name, namespace, parent.ref.uid)
    assert len(cut.writes) == 1
    left = store.get(API_VERSION, MIC_KIND, name, namespace)
    assert left is None or parent.ref.uid in _parents(left)[0], f"orphaned after {cut.writes}: {left}"


def test_a_parent_that_attached_meanwhile_keeps_the_cache_when_the_releaser_dies(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    api = storage.load_api_client(str(cluster.kubeconfig))
    store = storage.Store(api)
    leaving, staying = _parent(api_client, namespace, "leaving"), _parent(api_client, namespace, "staying")
    manifest = caches.image_cache(leaving)
    name = manifest["metadata"]["name"]
    sharing.attach(store, manifest, leaving.ref.uid)

    done: list[str] = []

    def attach_staying(method: str, path: str) -> None:  # once, between the release's read and its delete
        if method == "DELETE" and not done:
            done.append(path)
            sharing.attach(store, caches.image_cache(staying), staying.ref.uid)

    cut = CutAfterFirstWrite(api, before_write=attach_staying)
    with pytest.raises(Crash):
        sharing.release(storage.Store(cut), MIC_KIND, name, namespace, leaving.ref.uid)
    left = store.get(API_VERSION, MIC_KIND, name, namespace)
    assert left is not None, "the cache an endpoint attached to was deleted"
    specs, owners = _parents(left)
    assert staying.ref.uid in specs and staying.ref.uid in owners, left
