"""Endpoints end to end on the real control plane: caches, the gate, warm placement, updates, deletion, restarts."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.api import nodelabels
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import endpoints as rendering
from warmstart.render import labels

pytestmark = pytest.mark.cluster

SLOW_PRELOAD = {"sim.warmstart.io/duration": "600s"}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _patch(api: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        ep.GROUP, ep.VERSION, ns, "inferenceendpointconfigs", name, {"spec": spec}
    )


def _deployment(api: client.ApiClient, ns: str, name: str) -> Any:
    try:
        return client.AppsV1Api(api).read_namespaced_deployment(name, ns)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _keys(body: dict[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    ref = rendering.ObjectRef(kind="InferenceEndpointConfig", name=meta["name"], namespace=meta["namespace"], uid="x")
    endpoint = rendering.from_iec(ref, InferenceEndpointConfigSpec.model_validate(body["spec"]))
    return endpoint.weights_key({}), endpoint.image_key()


def test_seed_example_goes_end_to_end(cluster: Any, api_client: client.ApiClient, namespace: str) -> None:
    """Caches are filled, nodes labelled, the Deployment appears only after the gate, pods run on warm nodes."""
    seed = kube.seed_manifest()
    seed["metadata"]["namespace"] = namespace
    wkey, ikey = _keys(seed)
    with operating.operator(
        str(cluster.kubeconfig), [namespace], render={"preload_pod_annotations": {"sim.warmstart.io/duration": "3s"}}
    ):
        kube.apply(str(cluster.kubeconfig), seed)
        pending = kube.wait_for(
            lambda: ep.status(api_client, namespace, "example-model").get("state"), what="a first status"
        )
        assert pending == "DeploymentPending"
        assert _deployment(api_client, namespace, "example-model") is None, "the gate must hold the Deployment back"
        assert ep.condition(ep.status(api_client, namespace, "example-model"), "WeightsCacheReady")["status"] == "False"

        done = kube.wait_for(
            lambda: (s := ep.status(api_client, namespace, "example-model")).get("state") == "DeploymentComplete" and s,
            timeout=180,
            what="DeploymentComplete",
        )
        # HyperPod's deploymentStatus, which AWS's CLI lists, mirrors the model Deployment
        hyperpod = done["deploymentStatus"]
        assert (hyperpod["name"], hyperpod["deploymentObjectOverallState"]) == ("example-model", "DeploymentComplete")
        assert hyperpod["status"]["availableReplicas"] == seed["spec"].get("replicas", 1) and hyperpod["lastUpdated"]
        mdcc = ep.caches(api_client, namespace, "modeldatacacheconfigs")
        mic = ep.caches(api_client, namespace, "modelimagecaches")
        assert [m["metadata"]["name"] for m in mdcc] == [f"weights-{wkey}"] and mdcc[0]["status"]["state"] == "Ready"
        assert [m["metadata"]["name"] for m in mic] == [f"image-{ikey}"]
        g5 = [
            n
            for n in client.CoreV1Api(api_client)
            .list_node(label_selector=f"{nodelabels.INSTANCE_TYPE}=ml.g5.24xlarge")
            .items
        ]
        warm = {n.metadata.name for n in g5 if n.metadata.labels.get(nodelabels.weights_ready_label(wkey)) == "ready"}
        assert warm == {n.metadata.name for n in g5}, "every target node is labelled"
        pods = ep.running_pods_by_node(api_client, namespace, f"{labels.ENDPOINT_LABEL}=example-model")
        assert sum(pods.values()) == 1 and set(pods) <= warm
        assert done["weightsCacheStatus"]["readyNodes"] == done["weightsCacheStatus"]["targetNodes"] == len(g5)
        assert done["warmPlacement"] == {"warmPods": 1, "coldPods": 0}
        assert done["selector"] and done["replicas"] == 1
        assert ep.condition(done, "Ready")["status"] == "True"
        assert ep.condition(done, "Ready")["observedGeneration"] == 1


def test_gate_timeout_deploys_anyway_and_says_degraded(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        body = ep.endpoint_manifest("slow", namespace, instance_type, maxDeployTimeInSeconds=4)
        with operating.operator(str(cluster.kubeconfig), [namespace], render={"preload_pod_annotations": SLOW_PRELOAD}):
            kube.create_custom(api_client, body)
            kube.wait_for(
                lambda: _deployment(api_client, namespace, "slow"),
                timeout=120,
                what="the Deployment after the gate timeout",
            )
            degraded = kube.wait_for(
                lambda: (
                    ep.condition(ep.status(api_client, namespace, "slow"), "Degraded").get("status") == "True"
                    and ep.status(api_client, namespace, "slow")
                ),
                what="Degraded",
            )
            assert ep.condition(degraded, "Degraded")["reason"] == "MaxDeployTimeExceeded"
            assert "maxDeployTimeInSeconds=4" in ep.condition(degraded, "Degraded")["message"]
            assert degraded["weightsCacheStatus"]["state"] != "Ready"


def test_scale_out_fills_warm_nodes_first_then_cold(cluster: Any, api_client: client.ApiClient, namespace: str) -> None:
    """6 nodes, 3 warm, room for 2 replicas each: replicas 1..6 land warm, 7 and 8 cold."""
    with ep.own_nodes(api_client, 6, gpus=8) as (instance_type, names):
        body = ep.endpoint_manifest("scale", namespace, instance_type, maxDeployTimeInSeconds=0)
        wkey, _ = _keys(body)
        warm = set(names[:3])
        for node in warm:  # caches filled earlier: the label is what a completed preload leaves behind
            client.CoreV1Api(api_client).patch_node(
                node, {"metadata": {"labels": {nodelabels.weights_ready_label(wkey): "ready"}}}
            )
        with operating.operator(str(cluster.kubeconfig), [namespace], render={"preload_pod_annotations": SLOW_PRELOAD}):
            kube.create_custom(api_client, body)
            selector = f"{labels.ENDPOINT_LABEL}=scale"
            kube.wait_for(
                lambda: sum(ep.running_pods_by_node(api_client, namespace, selector).values()) == 1,
                timeout=120,
                what="first replica",
            )
            _patch(api_client, namespace, "scale", {"replicas": 6})
            kube.wait_for(
                lambda: sum(ep.running_pods_by_node(api_client, namespace, selector).values()) == 6,
                timeout=120,
                what="6 replicas",
            )
            placed = ep.running_pods_by_node(api_client, namespace, selector)
            assert set(placed) == warm and all(count == 2 for count in placed.values()), placed
            status = kube.wait_for(
                lambda: (
                    (s := ep.status(api_client, namespace, "scale")).get("warmPlacement", {}).get("warmPods") == 6 and s
                ),
                what="warm metric",
            )
            assert status["warmPlacement"]["coldPods"] == 0

            client.CustomObjectsApi(api_client).patch_namespaced_custom_object_scale(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "scale", {"spec": {"replicas": 8}}
            )
            kube.wait_for(
                lambda: sum(ep.running_pods_by_node(api_client, namespace, selector).values()) == 8,
                timeout=120,
                what="8 replicas",
            )
            placed = ep.running_pods_by_node(api_client, namespace, selector)
            assert (
                sum(c for n, c in placed.items() if n in warm) == 6
                and sum(c for n, c in placed.items() if n not in warm) == 2
            ), placed
            status = kube.wait_for(
                lambda: (
                    (s := ep.status(api_client, namespace, "scale")).get("warmPlacement", {}).get("coldPods") == 2 and s
                ),
                what="cold metric",
            )
            assert status["warmPlacement"]["warmPods"] == 6


def test_source_change_keeps_serving_then_rolls_then_drops_the_old_cache(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        body = ep.endpoint_manifest("roll", namespace, instance_type, replicas=2)
        old_key, _ = _keys(body)
        with operating.operator(
            str(cluster.kubeconfig),
            [namespace],
            render={"preload_pod_annotations": {"sim.warmstart.io/duration": "8s"}},
        ):
            kube.create_custom(api_client, body)
            kube.wait_for(
                lambda: ep.status(api_client, namespace, "roll").get("state") == "DeploymentComplete",
                timeout=180,
                what="first rollout",
            )
            samples: list[int] = []
            weights: list[dict[str, Any]] = []
            stop = threading.Event()

            def watch() -> None:
                while not stop.is_set():
                    d = _deployment(api_client, namespace, "roll")
                    samples.append((d.status.available_replicas or 0) if d is not None else -1)
                    weights.append(dict(ep.status(api_client, namespace, "roll").get("weightsCacheStatus") or {}))
                    stop.wait(0.2)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            new_source = {**body["spec"]["modelSourceConfig"], "modelLocation": "models/roll-v2"}
            _patch(api_client, namespace, "roll", {"modelSourceConfig": new_source})
            new_key, _ = _keys({**body, "spec": {**body["spec"], "modelSourceConfig": new_source}})
            kube.wait_for(
                lambda: (
                    f"weights-{new_key}"
                    in {m["metadata"]["name"] for m in ep.caches(api_client, namespace, "modeldatacacheconfigs")}
                ),
                what="new MDCC",
            )
            progressing = kube.wait_for(
                lambda: (s := ep.status(api_client, namespace, "roll")).get("state") == "DeploymentInProgress" and s,
                what="waiting on the new cache",
            )
            assert (
                _deployment(api_client, namespace, "roll").spec.template.metadata.annotations[
                    f"{nodelabels.CACHE_PREFIX}/weights-key"
                ]
                == old_key
            )
            assert "serving the previous generation" in ep.condition(progressing, "Progressing")["message"]
            kube.wait_for(
                lambda: (
                    _deployment(api_client, namespace, "roll").spec.template.metadata.annotations[
                        f"{nodelabels.CACHE_PREFIX}/weights-key"
                    ]
                    == new_key
                ),
                timeout=120,
                what="the roll to the new generation",
            )
            kube.wait_for(
                lambda: ep.status(api_client, namespace, "roll").get("state") == "DeploymentComplete",
                timeout=120,
                what="rollout complete",
            )
            kube.wait_for(
                lambda: (
                    [m["metadata"]["name"] for m in ep.caches(api_client, namespace, "modeldatacacheconfigs")]
                    == [f"weights-{new_key}"]
                ),
                timeout=120,
                what="the old MDCC to go",
            )
            stop.set()
            watcher.join()
            assert samples and min(samples) >= 2, f"available replicas dipped during the update: {sorted(set(samples))}"
            # the endpoint's mirror of its cache never claims a state the cache has not reached: Ready only with every
            # target node ready, and never the old cache's state under the new cache's name
            claimed = [w for w in weights if w.get("state") == "Ready"]
            assert all(w.get("targetNodes", 0) > 0 and w.get("readyNodes") == w.get("targetNodes") for w in claimed), [
                w for w in claimed if w.get("readyNodes") != w.get("targetNodes") or not w.get("targetNodes")
            ]
            assert any(w.get("name") == f"weights-{new_key}" and w.get("state") != "Ready" for w in weights), (
                "no sample showed the new cache before it was ready"
            )


def test_delete_releases_caches_but_shared_ones_survive(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        first = ep.endpoint_manifest("first", namespace, instance_type)
        second = ep.endpoint_manifest(
            "second", namespace, instance_type, modelSourceConfig=first["spec"]["modelSourceConfig"]
        )
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            kube.create_custom(api_client, first)
            kube.create_custom(api_client, second)
            for name in ("first", "second"):
                kube.wait_for(
                    lambda n=name: ep.status(api_client, namespace, n).get("state") == "DeploymentComplete",
                    timeout=180,
                    what=f"{name} complete",
                )
            mdccs = ep.caches(api_client, namespace, "modeldatacacheconfigs")
            assert len(mdccs) == 1 and len(mdccs[0]["spec"]["parentReferences"]) == 2, "one shared weights cache"
            assert len(ep.caches(api_client, namespace, "modelimagecaches")) == 1, "one shared image cache"

            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "first"
            )
            kube.wait_for(lambda: ep.endpoint(api_client, namespace, "first") is None, what="first deleted")
            assert _deployment(api_client, namespace, "first") is None
            kube.wait_for(
                lambda: kube.get(str(cluster.kubeconfig), "service", "first", namespace) is None, what="service removed"
            )
            mdccs = ep.caches(api_client, namespace, "modeldatacacheconfigs")
            assert len(mdccs) == 1 and [p["name"] for p in mdccs[0]["spec"]["parentReferences"]] == ["second"]

            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "second"
            )
            kube.wait_for(
                lambda: (
                    not ep.caches(api_client, namespace, "modeldatacacheconfigs")
                    and not ep.caches(api_client, namespace, "modelimagecaches")
                ),
                timeout=180,
                what="caches released",
            )


def test_operator_restart_mid_rollout_converges_without_duplicates(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 3) as (instance_type, _nodes):
        body = ep.endpoint_manifest("restart", namespace, instance_type, replicas=2)
        annotations = {"preload_pod_annotations": {"sim.warmstart.io/duration": "6s"}}
        with operating.operator(str(cluster.kubeconfig), [namespace], render=annotations):
            kube.create_custom(api_client, body)
            kube.wait_for(lambda: ep.caches(api_client, namespace, "modeldatacacheconfigs"), what="MDCC")
        with operating.operator(str(cluster.kubeconfig), [namespace], render=annotations):
            kube.wait_for(
                lambda: ep.status(api_client, namespace, "restart").get("state") == "DeploymentComplete",
                timeout=180,
                what="convergence",
            )
        assert len(ep.caches(api_client, namespace, "modeldatacacheconfigs")) == 1
        assert len(ep.caches(api_client, namespace, "modelimagecaches")) == 1
        jobs = client.BatchV1Api(api_client).list_namespaced_job(namespace).items
        assert len({j.metadata.name for j in jobs}) == len(jobs) == 3, [j.metadata.name for j in jobs]
        assert len(client.AppsV1Api(api_client).list_namespaced_deployment(namespace).items) == 1


def test_unsupported_fields_are_named_in_a_condition(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 1) as (instance_type, _nodes):
        body = ep.endpoint_manifest(
            "extras",
            namespace,
            instance_type,
            tlsConfig={"tlsCertificateOutputS3Uri": "s3://b/certs"},
            kvCacheSpec={"enableL1Cache": True},
        )
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            kube.create_custom(api_client, body)
            cond = kube.wait_for(
                lambda: ep.condition(ep.status(api_client, namespace, "extras"), "UnsupportedFields"), what="condition"
            )
            assert cond["status"] == "True" and cond["reason"] == "FieldsIgnored"
            assert "spec.tlsConfig" in cond["message"] and "spec.kvCacheSpec" in cond["message"]
