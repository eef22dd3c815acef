"""What the CSI driver reads from the API server for one mount: the namespace's caches, and a writer's pod and Job.

Read-only, and only what a decision needs (ClusterRole `<release>-csi`: get pods and jobs, list
modeldatacacheconfigs). Errors other than NotFound propagate: the server turns them into UNAVAILABLE, so the kubelet
retries instead of failing the pod on a blip of the API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warmstart.api import GROUP, VERSION
from warmstart.csi import decisions

MDCC_PLURAL = "modeldatacacheconfigs"


class Lookups:
    """The driver's API reads, through one API client."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self._batch = client.BatchV1Api(api)
        self._custom = client.CustomObjectsApi(api)

    def caches(self, namespace: str) -> list[Mapping[str, Any]]:
        found = self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)
        return list(found.get("items") or [])

    def writer(self, namespace: str, pod_name: str) -> decisions.Writer:
        pod = self._get(lambda: self._core.read_namespaced_pod(pod_name, namespace))
        if pod is None:
            return decisions.Writer(pod={}, job=None)
        ref = decisions.controller_job(pod)
        job = None if ref is None else self._get(lambda: self._batch.read_namespaced_job(ref[0], namespace))
        return decisions.Writer(pod=pod, job=job)

    def _get(self, read: Any) -> dict[str, Any] | None:
        try:
            obj = read()
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        body: dict[str, Any] = self._core.api_client.sanitize_for_serialization(obj)
        return body
