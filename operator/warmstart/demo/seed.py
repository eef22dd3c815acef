"""The seed example, adapted to the local cluster's real node: its S3 server, its image, its simulator.

Pure: the manifest and the operator's environment are computed from plain values, nothing is read or applied here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from warmstart.localcluster import nodeplans
from warmstart.render.context import RenderContext

Manifest = dict[str, Any]

PORT = 8000
GIB = 1024**3


def real_seed(
    base: Manifest,
    *,
    namespace: str,
    instance_type: str,
    bucket: str,
    prefix: str,
    s3_url: str,
    region: str,
    image: str,
    host_path: str,
) -> Manifest:
    """``base`` (examples/01-seed) pointed at the real node: its instance type (one GPU), the model in the cluster's
    S3 server, the cache under the node's ``host_path``, and the project image running ``warmstart sim
    --model-dir`` as the model server, Ready only once it has read every weight file."""
    manifest = copy.deepcopy(base)
    manifest["metadata"]["namespace"] = namespace
    spec = manifest["spec"]
    spec["instanceType"] = instance_type
    source = spec["modelSourceConfig"]
    source["s3Storage"] = {"bucketName": bucket, "region": region, "endpointUrl": s3_url}
    source["modelLocation"] = prefix
    spec["modelCacheConfig"]["weightsCache"]["hostPath"] = host_path
    mount = spec["worker"]["modelVolumeMount"]["mountPath"]
    spec["worker"] = {
        **spec["worker"],
        "image": image,
        "command": ["warmstart"],
        "args": ["sim", "--host", "0.0.0.0", "--base-port", str(PORT), "--model-dir", mount],
        "modelInvocationPort": {"containerPort": PORT},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"nvidia.com/gpu": "1"}},
        "probes": {"readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 1}},
    }
    return manifest


#: the preload's S3 variables; their values come from the namespace's preload Secret (see :func:`preload_secret`)
PRELOAD_ENV_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def operator_env(image: str, namespace: str, cache_root: str, preload_seconds: str) -> dict[str, str]:
    """The operator's WARMSTART_* settings: the pushed image for preloads, the preload variables it references from
    the namespace's Secret, ``cache_root`` as the only allowed cache root, one namespace watched, routers on the real
    node.

    The kwok duration annotation only steers preload Jobs on kwok nodes; a real kubelet ignores it.
    """
    return {
        "WARMSTART_OPERATOR_IMAGE": image,
        "WARMSTART_PRELOAD_ENV_NAMES": json.dumps(list(PRELOAD_ENV_NAMES)),
        "WARMSTART_ALLOWED_HOST_PATHS": json.dumps([cache_root]),
        "WARMSTART_PRELOAD_POD_ANNOTATIONS": json.dumps({"sim.warmstart.io/duration": preload_seconds}),
        "WARMSTART_NAMESPACES": namespace,
        "WARMSTART_RESYNC_SECONDS": "2",
        # router pods on the real node: on a kwok node they would only look Ready, and the Service would lead nowhere
        "WARMSTART_ROUTER_NODE_SELECTOR": json.dumps({nodeplans.REAL_NODE_LABEL: "true"}),
    }


def preload_secret(namespace: str, access_key: str, secret_key: str) -> Manifest:
    """The Secret the preload containers read their S3 keys from (the operator's default name)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": RenderContext().preload_env_secret, "namespace": namespace},
        "type": "Opaque",
        "stringData": dict(zip(PRELOAD_ENV_NAMES, (access_key, secret_key), strict=True)),
    }
