"""KV-event routing wired by the operator on the real control plane; every router knob set on an IEC reaches the
router's ConfigMap; bad knobs are refused at apply."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

import endpointing as ep
import kube
import operating

pytestmark = pytest.mark.cluster

KNOBS: dict[str, Any] = {
    "blockChars": 512,
    "maxBlocks": 64,
    "indexCapacityBlocks": 4096,
    "homeBlocks": 2,
    "homeChoices": 2,
    "prefillAware": True,
    "loadEpsilon": 0.25,
    "loadMinCeiling": 4,
    "balanceEpsilon": 0.3,
    "balanceWindow": 256,
    "balanceSlack": 2.0,
    "sessionHeader": "x-conversation",
    "sessionField": "session",
    "connectTimeoutSeconds": 1.5,
    "readTimeoutSeconds": 120.0,
    "maxBodyBytes": 1048576,
    "maxBufferedBytes": 33554432,
    "bodyTimeoutSeconds": 10.0,
    "maxBufferedBytesPerClient": 4194304,
    "maxBodiesPerClient": 8,
    "writeTimeoutSeconds": 30.0,
    "retries": 2,
    "kvEvents": True,
    "kvEventsPort": 6557,
    "kvEventsReplayPort": 6558,
    "kvBlockSize": 32,
    "speculativeTtlSeconds": 1.0,
    "engineMetricsPath": "/stats/metrics",
    "engineLoadIntervalSeconds": 0.5,
}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _worker(deployment: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "worker")


def test_knobs_reach_the_configmap_and_vllm_gets_its_kv_events_flag(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    kubeconfig = str(cluster.kubeconfig)
    with ep.own_nodes(api_client, 1) as (instance_type, _nodes):
        vllm = ep.endpoint_manifest(
            "events",
            namespace,
            instance_type,
            modelCacheConfig=None,
            intelligentRoutingSpec={"enabled": True, "routingStrategy": "prefixaware", "routerConfig": KNOBS},
        )
        vllm["spec"]["worker"]["command"] = ["vllm", "serve", "/opt/ml/model"]
        other = ep.endpoint_manifest(
            "opaque",
            namespace,
            instance_type,
            modelCacheConfig=None,
            intelligentRoutingSpec={"enabled": True, "routerConfig": {"kvEvents": True}},
        )
        other["spec"]["worker"]["image"] = "example/llama-server:1"
        other["spec"]["worker"]["command"] = ["/bin/sh", "-c", "exec llama-server --port 8000"]
        with operating.operator(kubeconfig, [namespace]):
            api = client.CustomObjectsApi(api_client)
            for body in (vllm, other):
                api.create_namespaced_custom_object(ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", body)
            configmap = kube.wait_for(
                lambda: kube.get(kubeconfig, "configmap", "events-router", namespace), what="router ConfigMap"
            )
            rendered = yaml.safe_load(configmap["data"]["router.yaml"])
            for knob, value in KNOBS.items():
                assert rendered[knob] == value, knob
            deployment = kube.wait_for(
                lambda: kube.get(kubeconfig, "deployment", "events", namespace), what="model Deployment"
            )
            worker = _worker(deployment)
            assert worker["command"] == ["vllm", "serve", "/opt/ml/model"]
            flag = worker["args"].index("--kv-events-config")
            assert json.loads(worker["args"][flag + 1]) == {
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": "tcp://*:6557",
                "replay_endpoint": "tcp://*:6558",
            }
            ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
            assert ports["kv-events"] == 6557 and ports["kv-replay"] == 6558
            kube.wait_for(
                lambda: ep.condition(ep.status(api_client, namespace, "events"), "KVEvents").get("reason") == "Wired",
                what="KVEvents=Wired",
            )
            # a command the operator does not understand: left exactly as written, and the condition says why
            opaque = kube.wait_for(
                lambda: kube.get(kubeconfig, "deployment", "opaque", namespace), what="model Deployment"
            )
            assert _worker(opaque)["command"] == ["/bin/sh", "-c", "exec llama-server --port 8000"]
            assert "args" not in _worker(opaque)
            kube.wait_for(
                lambda: (
                    ep.condition(ep.status(api_client, namespace, "opaque"), "KVEvents").get("reason")
                    == "CommandNotUnderstood"
                ),
                what="KVEvents=CommandNotUnderstood",
            )
            condition = ep.condition(ep.status(api_client, namespace, "opaque"), "KVEvents")
            assert condition["status"] == "False" and "--kv-events-config" in condition["message"]


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("balanceEpsilon", -1, "spec.intelligentRoutingSpec.routerConfig.balanceEpsilon"),
        ("engineMetricsPath", "http://elsewhere/metrics", "spec.intelligentRoutingSpec.routerConfig.engineMetricsPath"),
        ("kvEventsPort", 70000, "spec.intelligentRoutingSpec.routerConfig.kvEventsPort"),
        ("sessionHeader", "x-a\r\nx-b", "spec.intelligentRoutingSpec.routerConfig.sessionHeader"),
    ],
)
def test_bad_router_knobs_are_refused_at_apply(
    cluster: Any, namespace: str, knob: str, value: Any, message: str
) -> None:
    doc = copy.deepcopy(kube.seed_manifest())
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["intelligentRoutingSpec"] = {"enabled": True, "routerConfig": {knob: value}}
    result = kube.apply(cluster.kubeconfig, doc, check=False)
    assert result.returncode != 0, f"{knob}={value!r} was accepted"
    assert message in result.stderr, result.stderr
