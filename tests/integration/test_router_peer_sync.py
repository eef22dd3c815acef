"""Router replicas' sync on the real control plane: the operator renders the key, the peers Service, the sync port and
the NetworkPolicy; a router finds its peers in that Service's EndpointSlices with its own least-privilege identity."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kube_config

import endpointing as ep
import kube
import operating
from warmstart.render import router as router_render
from warmstart.router import peerdiscovery

pytestmark = pytest.mark.cluster

NAME = "synced"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


class Peers:
    """Stands in for the sync's transport: records the peer addresses discovery hands it."""

    def __init__(self) -> None:
        self.addresses: list[str] | None = None

    def set_peers(self, addresses: list[str]) -> None:
        self.addresses = sorted(addresses)


def _key(kubeconfig: str, namespace: str) -> str | None:
    secret = kube.get(kubeconfig, "secret", f"{NAME}-router-sync", namespace)
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data[router_render.SYNC_KEY]).decode() if router_render.SYNC_KEY in data else None


def _router_pod_ips(api_client: client.ApiClient, namespace: str) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in {"app.kubernetes.io/component": "router"}.items())
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(p.status.pod_ip for p in pods if p.status.pod_ip and p.metadata.deletion_timestamp is None)


def _discovered(kubeconfig: Path, namespace: str, own: str) -> list[str] | None:
    """What a router (authenticated as the endpoint's router ServiceAccount) finds as its peers."""

    async def follow() -> list[str] | None:
        peers = Peers()
        watcher = peerdiscovery.PeerWatcher(
            kube_config.new_client_from_config(config_file=str(kubeconfig)),
            namespace,
            router_render.name(NAME),
            peers,  # type: ignore[arg-type]
            own,
        )
        await watcher.start(None)  # type: ignore[arg-type]
        try:
            for _ in range(100):
                await asyncio.sleep(0.1)
                if peers.addresses:
                    break
        finally:
            await watcher.stop()
        return peers.addresses

    return asyncio.run(follow())


def test_the_operator_wires_the_sync_and_routers_find_each_other(
    cluster: Any, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = str(cluster.kubeconfig)
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        body = ep.endpoint_manifest(
            NAME,
            namespace,
            instance_type,
            modelCacheConfig=None,
            replicas=1,
            intelligentRoutingSpec={"enabled": True, "routerReplicas": 2},
        )
        with operating.operator(kubeconfig, [namespace]):
            client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", body
            )
            key = kube.wait_for(lambda: _key(kubeconfig, namespace), what="the sync key")
            assert len(key) == 64 and int(key, 16) >= 0  # 32 random bytes, hex
            secret = kube.get(kubeconfig, "secret", f"{NAME}-router-sync", namespace)
            assert secret is not None
            [owner] = secret["metadata"]["ownerReferences"]
            assert owner["kind"] == "InferenceEndpointConfig" and owner["name"] == NAME and owner["controller"]

            service = kube.wait_for(
                lambda: kube.get(kubeconfig, "service", f"{NAME}-router", namespace), what="the peers Service"
            )
            assert service["spec"]["clusterIP"] == "None"
            assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
                ("sync", router_render.ROUTER_SYNC_PORT)
            ]

            policy = kube.get(kubeconfig, "networkpolicy", f"{NAME}-router", namespace)
            assert policy is not None
            sync_rules = [
                rule
                for rule in policy["spec"]["ingress"]
                if [p["port"] for p in rule["ports"]] == [router_render.ROUTER_SYNC_PORT]
            ]
            assert sync_rules == [
                {
                    "from": [{"podSelector": {"matchLabels": policy["spec"]["podSelector"]["matchLabels"]}}],
                    "ports": [{"port": router_render.ROUTER_SYNC_PORT, "protocol": "TCP"}],
                }
            ]

            deployment = kube.wait_for(
                lambda: kube.get(kubeconfig, "deployment", f"{NAME}-router", namespace), what="router Deployment"
            )
            pod = deployment["spec"]["template"]["spec"]
            [container] = pod["containers"]
            assert "--sync-port" in container["args"] and "--peers-service" in container["args"]
            assert {"name": "sync", "containerPort": router_render.ROUTER_SYNC_PORT, "protocol": "TCP"} in container[
                "ports"
            ]
            mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
            assert mounted == {f"{NAME}-router-sync"}
            # only the router pods mount the key: the model pods do not
            model = kube.wait_for(lambda: kube.get(kubeconfig, "deployment", NAME, namespace), what="model Deployment")
            model_secrets = {
                v["secret"]["secretName"] for v in model["spec"]["template"]["spec"].get("volumes", []) if "secret" in v
            }
            assert f"{NAME}-router-sync" not in model_secrets

            # peers from the EndpointSlices of the peers Service, read with the router's own Role
            ips = kube.wait_for(
                lambda: (found := _router_pod_ips(api_client, namespace)) and len(found) == 2 and found,
                timeout=120,
                what="two router pods with addresses",
            )
            router_kubeconfig = kube.service_account_kubeconfig(
                api_client, cluster.kubeconfig, namespace, f"{NAME}-router", tmp_path / "router.kubeconfig"
            )
            own = f"tcp://{ips[0]}:{router_render.ROUTER_SYNC_PORT}"
            peers = kube.wait_for(
                lambda: _discovered(router_kubeconfig, namespace, own), timeout=120, what="the peers discovered"
            )
            assert peers == [f"tcp://{ips[1]}:{router_render.ROUTER_SYNC_PORT}"]

        # the key survives an operator restart and a reconcile that changes the router
        with operating.operator(kubeconfig, [namespace]):
            client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                ep.GROUP,
                ep.VERSION,
                namespace,
                "inferenceendpointconfigs",
                NAME,
                {"spec": {"intelligentRoutingSpec": {"routerReplicas": 3}}},
            )
            kube.wait_for(
                lambda: (
                    (d := kube.get(kubeconfig, "deployment", f"{NAME}-router", namespace))
                    and d["spec"]["replicas"] == 3
                ),
                what="the router scaled",
            )
            assert _key(kubeconfig, namespace) == key

            client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                ep.GROUP,
                ep.VERSION,
                namespace,
                "inferenceendpointconfigs",
                NAME,
                {"spec": {"intelligentRoutingSpec": {"enabled": False}}},
            )
            kube.wait_for(
                lambda: kube.get(kubeconfig, "secret", f"{NAME}-router-sync", namespace) is None,
                timeout=120,
                what="the sync key removed with the router",
            )
            assert kube.get(kubeconfig, "service", f"{NAME}-router", namespace) is None
