"""Idle API traffic of one endpoint (weights + image cache + router), re-applying children on every timer tick versus
only on change, side by side. Needs a running local cluster:

    WARMSTART_KUBECONFIG=.cluster/kubeconfig python bench/endpoint_idle_traffic.py
"""

import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "tests")]
os.environ["WARMSTART_RESYNC_SECONDS"] = "2"
from kubernetes import client, config  # noqa: E402

import endpointing as ep  # noqa: E402
import kube  # noqa: E402
import operating  # noqa: E402
from warmstart.controllers import applying  # noqa: E402
from warmstart.controllers.storage import API_REQUESTS  # noqa: E402


def total() -> float:
    return sum(s.value for m in API_REQUESTS.collect() for s in m.samples if s.name.endswith("_total"))


kc = os.environ["WARMSTART_KUBECONFIG"]
api = config.new_client_from_config(config_file=kc)
kube.install_crds(kc)
for label, resync in (("apply every tick (before)", -1.0), ("apply on change (after)", 300.0)):
    applying.FULL_RESYNC_SECONDS = resync
    ns = f"m-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    with ep.own_nodes(api, 2) as (itype, _):
        body = ep.endpoint_manifest(
            "idle", ns, itype, intelligentRoutingSpec={"enabled": True, "routingStrategy": "prefixaware"}
        )
        with operating.operator(kc, [ns]):
            kube.create_custom(api, body)
            kube.wait_for(lambda ns=ns: ep.status(api, ns, "idle").get("state") == "DeploymentComplete", timeout=180)
            time.sleep(6)
            start, t0 = total(), time.monotonic()
            time.sleep(60)
            rate = (total() - start) / (time.monotonic() - t0)
            print(
                f"{label}: {rate:.2f} API requests/s for one idle endpoint with caches and router "
                "(timer 2 s; all controllers)"
            )
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                ep.GROUP, ep.VERSION, ns, "inferenceendpointconfigs", "idle"
            )
            kube.wait_for(lambda ns=ns: ep.endpoint(api, ns, "idle") is None, timeout=120)
    client.CoreV1Api(api).delete_namespace(ns)
