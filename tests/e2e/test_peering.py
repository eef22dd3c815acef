"""With replicaCount > 1 the chart turns on kopf peering: of two operator processes exactly one is active.

Both processes get the environment the chart renders for its replicas (only POD_ID differs, as it does between pods),
so this checks the chart and the operator together: the KopfPeering object lists both, exactly one pauses, only the
active one handles an endpoint, and when the active one stops the other resumes and takes over.
"""

from __future__ import annotations

import pathlib
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client

import helming
import kube
from warmstart.api import GROUP, VERSION

pytestmark = pytest.mark.cluster

ALL_PAUSED = "Pausing all operators, including self"
RESUMED = "Resuming operations after the pause"
HANDLED = "kopf.objects Handler"  # an object handler ran (startup activities log "succeeded" too)


def _endpoint(namespace: str, name: str) -> dict[str, Any]:
    """A small endpoint without caches: the active operator creates its Deployment right away."""
    seed: dict[str, Any] = yaml.safe_load(
        (helming.ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text()
    )
    seed["metadata"] = {"name": name, "namespace": namespace}
    seed["spec"]["modelName"] = name
    seed["spec"].pop("modelCacheConfig")
    return seed


def _peers(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    body = helming.custom(api).get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", "warmstart")
    return dict(body.get("status") or {})


def _has_deployment(api: client.ApiClient, namespace: str, name: str) -> bool:
    return helming.get_or_none(lambda: client.AppsV1Api(api).read_namespaced_deployment(name, namespace)) is not None


def test_two_replicas_one_active(
    cluster: Any, api_client: client.ApiClient, namespace: str, helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    release = f"ha-{suffix}"
    kubeconfig = pathlib.Path(cluster.kubeconfig)
    values = {
        "replicaCount": 2,
        "watchNamespaces": [namespace],
        "operator": {"resyncSeconds": 2},
        "prepull": {"priorityClass": {"create": False}},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    try:
        helming.run_helm(
            helm,
            kubeconfig,
            "install",
            release,
            str(helming.CHART),
            "-n",
            namespace,
            "-f",
            str(tmp_path / "values.yaml"),
        )
        fullname = f"{release}-warmstart"
        env = helming.chart_environment(api_client, namespace, fullname)
        assert env["WARMSTART_PEERING"] == "warmstart"
        sa_kubeconfig = kube.service_account_kubeconfig(
            api_client, kubeconfig, namespace, fullname, tmp_path / "sa.kubeconfig"
        )
        with (
            helming.operator_process(sa_kubeconfig, env, tmp_path / "a.log", pod_id=f"{fullname}-a") as first,
            helming.operator_process(sa_kubeconfig, env, tmp_path / "b.log", pod_id=f"{fullname}-b") as second,
        ):
            logs = lambda: f"--- a:\n{first.tail(30)}\n--- b:\n{second.tail(30)}"  # noqa: E731
            kube.wait_for(
                lambda: {f"{fullname}-a", f"{fullname}-b"} <= set(_peers(api_client, namespace)),
                what="both peers in the KopfPeering",
            )
            peers = _peers(api_client, namespace)
            priorities = {
                peer: int(info.get("priority", 0)) for peer, info in peers.items() if peer.startswith(fullname)
            }
            assert len(set(priorities.values())) == 2, f"replicas need distinct peering priorities, got {priorities}"
            leader = max(priorities, key=lambda peer: priorities[peer])
            active, standby = (first, second) if leader == f"{fullname}-a" else (second, first)
            assert ALL_PAUSED not in first.output() + second.output(), f"both replicas paused:\n{logs()}"
            helming.custom(api_client).create_namespaced_custom_object(
                GROUP, VERSION, namespace, "inferenceendpointconfigs", _endpoint(namespace, "one")
            )
            kube.wait_for(
                lambda: _has_deployment(api_client, namespace, "one"),
                what=f"the active replica to deploy 'one'\n{logs()}",
            )
            kube.wait_for(lambda: HANDLED in active.output(), what=f"the active replica to log its handler\n{logs()}")
            assert HANDLED not in standby.output(), f"the standby handled an object:\n{logs()}"

            seen = len(standby.output())  # kopf also logs RESUMED once at startup, before it meets its peer
            active.stop()  # the standby sees the peer leave and takes over
            kube.wait_for(
                lambda: RESUMED in standby.output()[seen:], what=f"the standby to resume\n{logs()}", timeout=120
            )
            helming.custom(api_client).create_namespaced_custom_object(
                GROUP, VERSION, namespace, "inferenceendpointconfigs", _endpoint(namespace, "two")
            )
            kube.wait_for(
                lambda: _has_deployment(api_client, namespace, "two"),
                what=f"the former standby to deploy 'two'\n{logs()}",
            )
            for name in ("one", "two"):
                helming.custom(api_client).delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "inferenceendpointconfigs", name
                )
            kube.wait_for(
                lambda: (
                    not helming.custom(api_client).list_namespaced_custom_object(
                        GROUP, VERSION, namespace, "inferenceendpointconfigs"
                    )["items"]
                ),
                what="the endpoints to be deleted",
            )
    finally:
        helming.run_helm(helm, kubeconfig, "uninstall", release, "-n", namespace, check=False)
