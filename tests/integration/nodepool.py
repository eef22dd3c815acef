"""kwok nodes of test-unique instance types for one test, so tests that count nodes never see each other's."""

from __future__ import annotations

import uuid

from kubernetes import client

import kube
from warmstart.localcluster import nodes as kwok_nodes


class NodePool:
    """Creates fake GPU nodes on demand and deletes all of them at the end."""

    def __init__(self, api: client.ApiClient, prefix: str = "t") -> None:
        self.api = api
        self.prefix = f"{prefix}{uuid.uuid4().hex[:6]}"
        self.created: list[str] = []

    def add(
        self,
        count: int,
        *,
        start: int = 0,
        instance_type: str | None = None,
        tainted: bool = False,
        nvme: int | None = None,
        gpus: int | None = None,
    ) -> tuple[str, list[str]]:
        """`count` Ready nodes; returns (instance type, names). A new unique instance type unless one is given."""
        instance_type = instance_type or f"ml.t{uuid.uuid4().hex[:8]}.24xlarge"
        taints = [kwok_nodes.Taint("nvidia.com/gpu", "present")] if tainted else []
        manifests = kwok_nodes.manifests_for_spec(
            [(instance_type, count)], taints=taints, start=start, prefix=self.prefix
        )
        core = client.CoreV1Api(self.api)
        for manifest in manifests:
            if nvme is not None:
                manifest["metadata"]["annotations"][kwok_nodes.NVME_ANNOTATION] = str(nvme)
            if gpus is not None:
                for key in ("capacity", "allocatable"):
                    manifest["status"][key]["nvidia.com/gpu"] = str(gpus)
            core.create_node(manifest)
            self.created.append(manifest["metadata"]["name"])
        names = [m["metadata"]["name"] for m in manifests]
        kube.wait_for(lambda: kwok_nodes.ready_nodes(self.api, names) == set(names), 120, what=f"nodes {names} Ready")
        return instance_type, names

    def delete_all(self) -> None:
        kwok_nodes.delete_nodes(self.api, self.created)
        self.created = []
