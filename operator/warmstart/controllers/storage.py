"""A thin storage wrapper: server-side apply, get, list, patch and delete, with ApiException turned into domain errors.

Controllers never touch `ApiException`: they catch `NotFound`, `Conflict`, `Invalid` and `Unavailable` and map them
to kopf's TemporaryError (retry) or PermanentError (needs a spec change). Every request is counted, so benchmarks can
show that API traffic grows with nodes + caches, not with their product.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

FIELD_MANAGER = "warmstart"

API_REQUESTS = Counter(
    "warmstart_api_requests",
    "Kubernetes API requests made by the operator's controllers, by method and resource (pods, pods/log, ...)",
    ["method", "resource"],
)

Manifest = dict[str, Any]

#: connections kept to the API server (urllib3's pool)
CONNECTION_POOL_SIZE = 32


class StorageError(Exception):
    """Base of the domain errors."""


class NotFound(StorageError):
    """The object does not exist."""


class Conflict(StorageError):
    """A conflicting write: re-read and retry."""


class Invalid(StorageError):
    """The API server rejected the object (422/400): a spec problem, retrying will not help."""


class Forbidden(StorageError):
    """RBAC refused the request."""


class Unavailable(StorageError):
    """The API server could not answer (5xx, 429, connection): retry later."""


#: kind -> (plural, namespaced)
_KINDS: dict[str, tuple[str, bool]] = {
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "Service": ("services", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    "ServiceAccount": ("serviceaccounts", True),
    "Event": ("events", True),
    "Namespace": ("namespaces", False),
    "Job": ("jobs", True),
    "DaemonSet": ("daemonsets", True),
    "Deployment": ("deployments", True),
    "ReplicaSet": ("replicasets", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "PriorityClass": ("priorityclasses", False),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "EndpointSlice": ("endpointslices", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "NetworkPolicy": ("networkpolicies", True),
    "PodMonitor": ("podmonitors", True),
    "InferenceEndpointConfig": ("inferenceendpointconfigs", True),
    "JumpStartModel": ("jumpstartmodels", True),
    "ModelDataCacheConfig": ("modeldatacacheconfigs", True),
    "ModelImageCache": ("modelimagecaches", True),
    "PersistentVolume": ("persistentvolumes", False),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "ScaledObject": ("scaledobjects", True),
    "HorizontalPodAutoscaler": ("horizontalpodautoscalers", True),
    "Lease": ("leases", True),
    "InferencePool": ("inferencepools", True),
}


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    """The REST path of a kind's collection, e.g. /apis/batch/v1/namespaces/ns/jobs."""
    plural, namespaced = _KINDS[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced and namespace:
        return f"{base}/namespaces/{namespace}/{plural}"
    return f"{base}/{plural}"


def object_path(api_version: str, kind: str, name: str, namespace: str | None = None) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{name}"


def resource_of(path: str) -> str:
    """The resource (and subresource) a request path names: `/api/v1/namespaces/n/pods/p/log` -> `pods/log`."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1, /apis/group/version
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:] or ["namespaces"]
    if not parts:
        return ""
    return f"{parts[0]}/{parts[2]}" if len(parts) >= 3 else parts[0]


class CountingApiClient(client.ApiClient):  # type: ignore[misc]
    """An ApiClient that counts every request it makes."""

    def call_api(self, resource_path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        API_REQUESTS.labels(method=method, resource=resource_of(resource_path)).inc()
        return super().call_api(resource_path, method, *args, **kwargs)


def load_api_client(kubeconfig: str | None = None) -> CountingApiClient:
    """An API client from in-cluster credentials, or from a kubeconfig file."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    # every thread that may call at once (kopf's handlers, the status loops, controllers/fanout.py) keeps its
    # connection: urllib3 would otherwise discard the ones over its default pool size and open new TLS connections
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return CountingApiClient(configuration)


def _translate(error: ApiException) -> StorageError:
    reason = _reason(error)
    if error.status == 404:
        return NotFound(reason)
    if error.status == 409:
        return Conflict(reason)
    if error.status in (400, 422):
        return Invalid(reason)
    if error.status in (401, 403):
        return Forbidden(reason)
    return Unavailable(reason)


def _reason(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "{}")
        return str(body.get("message") or error.reason)
    except (ValueError, TypeError):
        return str(error.reason)


@dataclass
class Store:
    """Reads and writes Kubernetes objects as plain dicts."""

    api: client.ApiClient
    field_manager: str = FIELD_MANAGER

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        try:
            response = self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=(5, 30),
            )
        except ApiException as error:
            raise _translate(error) from error
        except Exception as error:  # urllib3 connection errors and friends
            raise Unavailable(str(error)) from error
        data = response.data
        return json.loads(data) if data else None

    def apply(self, manifest: Manifest, *, force: bool = True, subresource: str = "") -> Manifest:
        """Server-side apply: the manifest states every field warmstart owns on this object."""
        meta = manifest["metadata"]
        path = object_path(manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace"))
        if subresource:
            path = f"{path}/{subresource}"
        query = [("fieldManager", self.field_manager), ("force", "true" if force else "false")]
        result: Manifest = self._call(
            "PATCH", path, query=query, body=manifest, content_type="application/apply-patch+yaml"
        )
        return result

    def dry_run_create(self, manifest: Manifest) -> Manifest:
        """Create with `dryRun=All`: every admission step decides, nothing is stored."""
        meta = manifest["metadata"]
        path = collection_path(manifest["apiVersion"], manifest["kind"], meta.get("namespace"))
        query = [("dryRun", "All"), ("fieldManager", self.field_manager)]
        result: Manifest = self._call("POST", path, query=query, body=manifest)
        return result

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest | None:
        try:
            result: Manifest = self._call("GET", object_path(api_version, kind, name, namespace))
            return result
        except NotFound:
            return None

    def serves(self, api_version: str) -> bool:
        """Whether the API server serves `api_version` (group/version discovery, readable by every user)."""
        try:
            self._call("GET", f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}")
        except NotFound:
            return False
        return True

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Manifest]:
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        result = self._call("GET", collection_path(api_version, kind, namespace), query=query)
        items: list[Manifest] = result.get("items", []) if result else []
        return items

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Manifest,
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> Manifest:
        path = object_path(api_version, kind, name, namespace)
        if subresource:
            path = f"{path}/{subresource}"
        # under the operator's one field manager, like its applies: a preload Job the operator signs after creating
        # it (cache access `csi`) must still read as written by the operator alone (render/jobs.made_by)
        query = [("fieldManager", self.field_manager)]
        result: Manifest = self._call(
            "PATCH", path, query=query, body=patch, content_type="application/merge-patch+json"
        )
        return result

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        resource_version: str | None = None,
    ) -> bool:
        """Delete an object; False when it was already gone. With `resource_version`, only that version of it (else
        Conflict)."""
        body: Manifest = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            self._call("DELETE", object_path(api_version, kind, name, namespace), body=body)
            return True
        except NotFound:
            return False
