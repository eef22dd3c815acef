"""Every state of an endpoint reads well, on the real control plane with the real operator: `kubectl get` shows the
state, why (the Progressing reason) and how far the weights got; each condition names what it waits for, how far it
got (nodes ready / target, replicas available) and what the user can do.

One endpoint goes through Pending (no node of its instance type), Downloading (the preload Jobs run for
PRELOAD_SECONDS), DeploymentInProgress (its model pods start slowly), DeploymentComplete, and a switch of routing on
(router pods wait for a node that fits their selector) and off. A second endpoint waits longer than its
maxDeployTimeInSeconds (Degraded); a third asks for a hostPath volume in a `baseline` namespace (Failed).

With WARMSTART_STATUS_SNAPSHOTS=<file>, the test also writes what `kubectl get` and `kubectl describe` showed in each
state into that Markdown file, after its MARKER line (`make status-snapshots` updates docs/status.md).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

import endpointing as ep
import kube
import operating
from warmstart.controllers import guarding

pytestmark = pytest.mark.cluster

PLURAL = "inferenceendpointconfigs"
PRELOAD_SECONDS = 20
MODEL_POD_SECONDS = 10
ROUTER_NODE_LABEL = "warmstart.io/test-router-node"
MARKER = "<!-- generated below by make status-snapshots -->\n"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


class Snapshots:
    """What `kubectl get` and the Status part of `kubectl describe` show, per state (kept for the docs)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.sections: list[str] = []

    def take(self, title: str, namespace: str, name: str) -> tuple[str, str]:
        table = kube.kubectl(self.kubeconfig, "get", "iec", name, "-n", namespace).stdout
        described = kube.kubectl(self.kubeconfig, "describe", "iec", name, "-n", namespace).stdout
        status = described[described.index("\nStatus:") + 1 :]
        self.sections.append(f"## {title}\n\n```console\n$ kubectl get iec {name}\n{table}```\n\n")
        self.sections.append(f"```console\n$ kubectl describe iec {name}\n...\n{status}```\n\n")
        return table, status

    def write(self, path: str) -> None:
        """Replace what follows MARKER in `path` (the hand-written part above it stays)."""
        page = Path(path).read_text()
        page = page[: page.index(MARKER) + len(MARKER)] if MARKER in page else page + "\n" + MARKER
        Path(path).write_text(page + "\n" + "".join(self.sections).rstrip("\n") + "\n")


class History:
    """Every status version of one endpoint, from a watch (transient states a poll would miss)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.statuses: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, args=(api, namespace, name), daemon=True)
        self._thread.start()

    def _follow(self, api: client.ApiClient, namespace: str, name: str) -> None:
        objects = client.CustomObjectsApi(api)
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    objects.list_namespaced_custom_object,
                    ep.GROUP,
                    ep.VERSION,
                    namespace,
                    PLURAL,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=5,
                ):
                    self.statuses.append(dict(event["object"].get("status") or {}))
                    if self._stop.is_set():
                        break
            except client.ApiException:
                time.sleep(0.2)
            finally:
                stream.stop()

    def reasons(self, type_: str) -> list[str]:
        """The reasons `type_` went through, in order, without repeats."""
        seen: list[str] = []
        for status in list(self.statuses):
            reason = ep.condition(status, type_).get("reason")
            if reason and (not seen or seen[-1] != reason):
                seen.append(reason)
        return seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def snapshots(cluster: Any) -> Iterator[Snapshots]:
    taken = Snapshots(str(cluster.kubeconfig))
    yield taken
    out = os.environ.get("WARMSTART_STATUS_SNAPSHOTS")
    if out:
        taken.write(out)


@pytest.fixture
def baseline_namespace(api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"t-base-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    kube.wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        what=f"the default ServiceAccount of {name}",
    )
    try:
        yield name
    finally:
        objects = client.CustomObjectsApi(api_client)
        for item in objects.list_namespaced_custom_object(ep.GROUP, ep.VERSION, name, PLURAL)["items"]:
            objects.delete_namespaced_custom_object(ep.GROUP, ep.VERSION, name, PLURAL, item["metadata"]["name"])
        core.delete_namespace(name)


def _status_when(
    api: client.ApiClient, namespace: str, name: str, test: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    found: dict[str, Any] = kube.wait_for(
        lambda: s if test(s := ep.status(api, namespace, name)) else None, timeout=180, interval=0.2, what=what
    )
    return found


def _reason(status: dict[str, Any], type_: str) -> str:
    return str(ep.condition(status, type_).get("reason"))


def _message(status: dict[str, Any], type_: str) -> str:
    return str(ep.condition(status, type_).get("message"))


def _patch(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        ep.GROUP, ep.VERSION, namespace, PLURAL, name, {"spec": spec}
    )


def _label_nodes(api: client.ApiClient, nodes: list[str], value: str | None) -> None:
    for node in nodes:
        client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {ROUTER_NODE_LABEL: value}}})


def test_every_state_of_an_endpoint_says_what_it_waits_for_how_far_it_got_and_what_to_do(
    cluster: Any, api_client: client.ApiClient, namespace: str, baseline_namespace: str, snapshots: Snapshots
) -> None:
    instance_type = f"ml.s{uuid.uuid4().hex[:8]}.24xlarge"
    render = {
        "preload_pod_annotations": {"sim.warmstart.io/duration": f"{PRELOAD_SECONDS}s"},
        "router_node_selector": {ROUTER_NODE_LABEL: "true"},
        "router_replicas": 2,
        "cache_access": "csi",  # the chart's default: model pods mount the cache without a hostPath
        "job_signing_key": uuid.uuid4().hex,
    }
    slow_pods = {"annotations": {"sim.warmstart.io/duration": f"{MODEL_POD_SECONDS}s"}}
    name = "llama"
    with operating.operator(str(cluster.kubeconfig), [namespace, baseline_namespace], render=render):
        kube.create_custom(
            api_client, ep.endpoint_manifest(name, namespace, instance_type, replicas=2, kubernetes=slow_pods)
        )
        history = History(api_client, namespace, name)
        try:
            # Pending: no node of the endpoint's instance type exists yet
            pending = _status_when(
                api_client,
                namespace,
                name,
                lambda s: "no node matches" in _message(s, "Progressing"),
                "the endpoint to wait for a node of its instance type",
            )
            assert pending["state"] == "DeploymentPending"
            assert _reason(pending, "Progressing") == "WaitingForWeightsCache"
            assert "add nodes of those instance types or change instanceType" in _message(pending, "Progressing")
            assert "maxDeployTimeInSeconds=3600, at " in _message(pending, "Progressing")
            table, _ = snapshots.take("Pending: no node of the instance type", namespace, name)
            assert "WaitingForWeightsCache" in table

            with ep.own_nodes(api_client, 2, instance_type=instance_type) as (_, nodes):
                # Downloading: the preload Jobs run on both nodes
                downloading = _status_when(
                    api_client,
                    namespace,
                    name,
                    lambda s: (s.get("weightsCacheStatus") or {}).get("state") == "Downloading",
                    "the weights cache to download",
                )
                assert downloading["state"] == "DeploymentPending"
                cache = downloading["weightsCacheStatus"]["name"]
                weights = _message(downloading, "WeightsCacheReady")
                assert _reason(downloading, "WeightsCacheReady") == "Downloading"
                assert weights.startswith("0/2 nodes ready") and f"kubectl describe mdcc {cache}" in weights
                assert weights.count("nodes ready") == 1, f"the node count is said once: {weights}"
                progressing = _message(downloading, "Progressing")
                assert progressing.startswith("preloading weights: 0/2 target nodes ready")
                assert "it deploys once every target node is ready" in progressing
                table, _ = snapshots.take("Downloading: the weights are on their way to every node", namespace, name)
                header, row = table.splitlines()[:2]
                assert header.split()[:9] == [
                    "NAME",
                    "MODEL",
                    "STATE",
                    "REASON",
                    "REPLICAS",
                    "AVAILABLE",
                    "WEIGHTS",
                    "CACHED",
                    "TARGETS",
                ]
                assert row.split()[2:4] == ["DeploymentPending", "WaitingForWeightsCache"]
                assert row.split()[6:9] == ["Downloading", "0", "2"]

                # DeploymentInProgress: the model pods take MODEL_POD_SECONDS to start
                rolling = _status_when(
                    api_client,
                    namespace,
                    name,
                    lambda s: _reason(s, "Progressing") == "RollingOut",
                    "the rollout of the model pods",
                )
                assert rolling["state"] == "DeploymentInProgress"
                assert "/2 replicas available" in _message(rolling, "Progressing")
                assert f"kubectl rollout status deployment/{name}" in _message(rolling, "Progressing")
                snapshots.take("DeploymentInProgress: the model pods are starting", namespace, name)

                done = _status_when(
                    api_client,
                    namespace,
                    name,
                    lambda s: s.get("state") == "DeploymentComplete",
                    "the endpoint to serve",
                )
                assert (_reason(done, "Ready"), _message(done, "Ready")) == (
                    "Serving",
                    "2/2 replicas available, 2 updated",
                )
                assert ep.condition(done, "Routing") == {}, "no Routing condition while routing was never on"
                snapshots.take("DeploymentComplete: serving", namespace, name)

                # switching routing on: the router pods wait for a node that fits their selector
                _patch(api_client, namespace, name, {"intelligentRoutingSpec": {"enabled": True}})
                starting = _status_when(
                    api_client,
                    namespace,
                    name,
                    lambda s: _reason(s, "Routing") == "RouterStarting",
                    "routing to start",
                )
                assert "straight to the model pods until a router pod is available (0/2 router pods available)" in (
                    _message(starting, "Routing")
                )
                assert f"kubectl describe deployment {name}-router" in _message(starting, "Routing")
                snapshots.take("Routing switched on: the router is starting", namespace, name)
                _label_nodes(api_client, nodes, "true")
                through = _status_when(
                    api_client,
                    namespace,
                    name,
                    lambda s: _reason(s, "Routing") == "ThroughRouter",
                    "clients to reach the router",
                )
                assert _message(through, "Routing").startswith(f"the Service sends clients to the router {name}-router")

                _patch(api_client, namespace, name, {"intelligentRoutingSpec": {"enabled": False}})
                _status_when(
                    api_client, namespace, name, lambda s: _reason(s, "Routing") == "RoutingOff", "routing to be off"
                )
                assert history.reasons("Routing") == ["RouterStarting", "ThroughRouter", "RouterRetiring", "RoutingOff"]
                assert "the router llama-router is removed" in next(
                    _message(s, "Routing") for s in history.statuses if _reason(s, "Routing") == "RouterRetiring"
                )
                snapshots.take("Routing switched off", namespace, name)

                # Degraded: a second endpoint waits for its weights no longer than 3 s
                impatient = ep.endpoint_manifest("impatient", namespace, instance_type, maxDeployTimeInSeconds=3)
                kube.create_custom(api_client, impatient)
                degraded = _status_when(
                    api_client,
                    namespace,
                    "impatient",
                    lambda s: _reason(s, "Degraded") == "MaxDeployTimeExceeded",
                    "the impatient endpoint to deploy without its weights",
                )
                message = _message(degraded, "Degraded")
                assert "waited" in message and "(maxDeployTimeInSeconds=3)" in message
                # cache access csi: a pod on a cold node waits for the node's preload Job, it does not download
                cold = "pods on cold nodes wait until the operator's preload Job has filled their node"
                assert f"{cold} (their cache volume mounts then) (preloading weights: 0/2 target nodes ready" in message
                snapshots.take("Degraded: deployed before the weights were ready", namespace, "impatient")
                _label_nodes(api_client, nodes, None)
        finally:
            history.stop()

        # Failed: a hostPath volume (under the allowed root, so the pass-through rules let it by) in a namespace that
        # enforces Pod Security baseline
        scratch = {
            "volumes": [{"name": "scratch", "hostPath": {"path": "/opt/dlami/nvme/scratch", "type": "Directory"}}]
        }
        kube.create_custom(
            api_client, ep.endpoint_manifest("refused", baseline_namespace, instance_type, kubernetes=scratch)
        )
        failed = _status_when(
            api_client,
            baseline_namespace,
            "refused",
            lambda s: s.get("state") == "DeploymentFailed",
            "the refused endpoint to fail",
        )
        assert _reason(failed, "Ready") == "PodSecurityRejected"
        refusal = _message(failed, "Ready")
        assert 'violates PodSecurity "baseline:latest"' in refusal and 'hostPath volumes (volume "scratch")' in refusal
        assert "model-weights" not in refusal, "only the spec's own volume is refused (the cache needs no hostPath)"
        assert refusal.endswith(guarding.POD_SECURITY_ACTION), refusal
        snapshots.take("DeploymentFailed: the namespace does not admit the model pod", baseline_namespace, "refused")
