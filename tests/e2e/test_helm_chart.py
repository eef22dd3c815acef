"""The chart on the real control plane: install, the seed example to DeploymentComplete, upgrade, uninstall.

The operator runs as a process with the environment the chart rendered, authenticated as the chart's ServiceAccount,
so the chart's RBAC and settings are what is exercised. The seed runs on this test's own kwok nodes (a test-unique
instance type with the shape of ml.g5.24xlarge) and a test-unique model path, so nothing is shared with other tests.
"""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import endpointing
import helming
import kube
from warmstart.api import GROUP, VERSION
from warmstart.localcluster import nodes

pytestmark = pytest.mark.cluster

PLURAL = "inferenceendpointconfigs"
SEED = helming.ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml"
#: what a successful `warmstart preload` writes to /dev/termination-log; kwok copies it from this annotation
PRELOADED = json.dumps(
    {
        "outcome": "Succeeded",
        "reason": "Downloaded",
        "message": "simulated",
        "bytes": 1000,
        "seconds": 1.0,
        "files": 2,
        "retryable": False,
    }
)


FSX_STORAGE = {"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs-0123456789abcdef0.fsx.aws", "mountName": "m1"}


def _values(namespace: str, suffix: str) -> dict[str, Any]:
    return {
        "watchNamespaces": [namespace],
        "operator": {"resyncSeconds": 2},
        # cluster-scoped: unique per test, so parallel runs and other tests never collide
        "prepull": {"priorityClass": {"name": f"warmstart-prepull-{suffix}"}},
        "preload": {
            "podAnnotations": {"sim.warmstart.io/duration": "2s", "sim.warmstart.io/termination-message": PRELOADED}
        },
        # the FSx file system the FSx check below mounts, allowed in the watched namespace only
        "fsx": {"allowedFileSystems": {namespace: [FSX_STORAGE]}},
    }


def _release_objects(api: client.ApiClient, release: str, namespaces: list[str]) -> list[str]:
    """Every object labelled as part of the release, cluster-scoped ones included."""
    selector = f"app.kubernetes.io/instance={release}"
    found: list[str] = []
    rbac, core, apps = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api), client.AppsV1Api(api)
    scheduling = client.SchedulingV1Api(api)
    found += [f"ClusterRole/{o.metadata.name}" for o in rbac.list_cluster_role(label_selector=selector).items]
    found += [
        f"ClusterRoleBinding/{o.metadata.name}" for o in rbac.list_cluster_role_binding(label_selector=selector).items
    ]
    found += [f"PriorityClass/{o.metadata.name}" for o in scheduling.list_priority_class(label_selector=selector).items]
    admission = client.AdmissionregistrationV1Api(api)
    found += [
        f"ValidatingAdmissionPolicy/{o.metadata.name}"
        for o in admission.list_validating_admission_policy(label_selector=selector).items
    ]
    found += [
        f"ValidatingAdmissionPolicyBinding/{o.metadata.name}"
        for o in admission.list_validating_admission_policy_binding(label_selector=selector).items
    ]
    for ns in namespaces:
        found += [
            f"Deployment/{ns}/{o.metadata.name}"
            for o in apps.list_namespaced_deployment(ns, label_selector=selector).items
        ]
        found += [
            f"Service/{ns}/{o.metadata.name}" for o in core.list_namespaced_service(ns, label_selector=selector).items
        ]
        found += [
            f"ServiceAccount/{ns}/{o.metadata.name}"
            for o in core.list_namespaced_service_account(ns, label_selector=selector).items
        ]
        found += [
            f"RoleBinding/{ns}/{o.metadata.name}"
            for o in rbac.list_namespaced_role_binding(ns, label_selector=selector).items
        ]
        found += [f"Role/{ns}/{o.metadata.name}" for o in rbac.list_namespaced_role(ns, label_selector=selector).items]
        found += [
            f"Secret/{ns}/{o.metadata.name}"
            for o in core.list_namespaced_secret(ns, label_selector=f"name={release}").items
        ]
    return found


def _forbidden(call: Callable[[], Any]) -> client.ApiException:
    try:
        call()
    except client.ApiException as error:
        return error
    raise AssertionError("the call was allowed")


def _check_confinement(
    admin: client.ApiClient, sa_kubeconfig: pathlib.Path, namespace: str, node: str, seed: dict[str, Any]
) -> None:
    """The chart's namespaced mode and policies, as the operator's own ServiceAccount meets them."""
    other = f"other-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": other, "labels": {"warmstart.io/test": "true"}}})
    operator_api = config.new_client_from_config(config_file=str(sa_kubeconfig))
    try:
        # RBAC: full rights in the watched namespace, none in another one
        assert client.BatchV1Api(operator_api).list_namespaced_job(namespace) is not None
        config_map = {"metadata": {"name": "probe"}}
        for call in (
            lambda: client.BatchV1Api(operator_api).list_namespaced_job(other),
            lambda: client.CoreV1Api(operator_api).create_namespaced_config_map(other, config_map),
            lambda: client.AppsV1Api(operator_api).list_namespaced_deployment(other),
            lambda: client.RbacAuthorizationV1Api(operator_api).list_namespaced_role_binding(other),
            lambda: client.CoreV1Api(operator_api).list_namespaced_secret(namespace),
        ):
            assert _forbidden(call).status == 403
        # nodes: its own cache labels only; never another label, a taint or an annotation
        nodes_api = client.CoreV1Api(operator_api)
        nodes_api.patch_node(node, {"metadata": {"labels": {"cache.inference.sagemaker.aws.amazon.com/probe": "x"}}})
        nodes_api.patch_node(node, {"metadata": {"labels": {"cache.inference.sagemaker.aws.amazon.com/probe": None}}})
        for patch in (
            {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
            {"metadata": {"labels": {nodes.INSTANCE_TYPE_LABEL: "ml.p5.48xlarge"}}},
            {"metadata": {"annotations": {"evil": "1"}}},
            {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
            {"spec": {"unschedulable": True}},
        ):
            error = _forbidden(lambda patch=patch: nodes_api.patch_node(node, patch))  # type: ignore[misc]
            assert "the warmstart operator may" in json.loads(error.body)["message"], error.body
        # admission: a cache root the values do not allow is refused at create time
        escape = json.loads(json.dumps(seed))
        escape["metadata"] = {"name": "escape", "namespace": namespace}
        escape["spec"]["modelCacheConfig"]["weightsCache"]["hostPath"] = "/var/lib/kubelet"
        error = _forbidden(
            lambda: helming.custom(admin).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, escape)
        )
        assert "is not an allowed cache root" in json.loads(error.body)["message"], error.body
    finally:
        operator_api.close()
        client.CoreV1Api(admin).delete_namespace(other)


def _seed(namespace: str, instance_type: str, suffix: str) -> dict[str, Any]:
    """The seed example, moved to this test's namespace, nodes and model path (nothing else changes)."""
    seed: dict[str, Any] = yaml.safe_load(SEED.read_text())
    seed["metadata"]["namespace"] = namespace
    seed["spec"]["instanceType"] = instance_type
    seed["spec"]["modelSourceConfig"]["modelLocation"] += f"-{suffix}"
    return seed


def _state(api: client.ApiClient, namespace: str, name: str) -> str | None:
    body = helming.get_or_none(
        lambda: helming.custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )
    return None if body is None else (body.get("status") or {}).get("state")


def _check_fsx_and_autoscaling(
    api: client.ApiClient, namespace: str, instance_type: str, operator: helming.OperatorProcess
) -> None:
    """Under the chart's RBAC and admission policies: an FSx endpoint's static PV and claim (bound by the PV controller)
    are created and removed, and autoScalingSpec without KEDA says so."""
    storage = FSX_STORAGE
    body = endpointing.endpoint_manifest(
        "fsx-scaled",
        namespace,
        instance_type,
        modelSourceConfig={"modelSourceType": "fsx", "fsxStorage": storage, "modelLocation": "models/m"},
        modelCacheConfig={"weightsCache": {"enabled": False}},
        autoScalingSpec={"prometheusTrigger": {"serverAddress": "http://prom:9090", "query": "q", "targetValue": 1}},
    )
    helming.custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    core = client.CoreV1Api(api)
    claim = kube.wait_for(
        lambda: [c for c in core.list_namespaced_persistent_volume_claim(namespace).items if c.status.phase == "Bound"],
        what="the FSx claim Bound",
    )[0]
    volume = claim.spec.volume_name
    scaling = kube.wait_for(
        lambda: endpointing.condition(endpointing.status(api, namespace, "fsx-scaled"), "Autoscaling"),
        what="the Autoscaling condition",
    )
    assert scaling["reason"] == "KedaNotInstalled", scaling
    helming.custom(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fsx-scaled")
    kube.wait_for(
        lambda: helming.get_or_none(lambda: core.read_persistent_volume(volume)) is None,
        what="the PV deleted by the operator's finalizer",
    )
    assert "Forbidden" not in operator.output(), f"the chart's RBAC or a policy refused a request:\n{operator.tail()}"


def test_install_seed_upgrade_uninstall(
    cluster: Any, api_client: client.ApiClient, namespace: str, helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    release = f"ws-{suffix}"
    kubeconfig = pathlib.Path(cluster.kubeconfig)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_values(namespace, suffix)))
    instance_type = f"ml.t{suffix}.24xlarge"
    node_names = [nodes.node_name(instance_type, i, prefix=f"e2e-{suffix}") for i in range(2)]
    core = client.CoreV1Api(api_client)
    for name in node_names:  # the shape (4 GPUs, 3.8 TB NVMe) of ml.g5.24xlarge, under a test-unique instance type
        core.create_node(nodes.node_manifest(name, "ml.g5.24xlarge", labels={nodes.INSTANCE_TYPE_LABEL: instance_type}))
    operator: helming.OperatorProcess | None = None
    try:
        # install: CRDs from crds/ (skipped when present), then the templates; --wait needs the (simulated) pod Ready
        helming.run_helm(
            helm,
            kubeconfig,
            "install",
            release,
            str(helming.CHART),
            "-n",
            namespace,
            "-f",
            str(values),
            "--wait",
            "--timeout",
            "180s",
        )
        fullname = f"{release}-warmstart"
        installed = _release_objects(api_client, release, [namespace])
        for expected in (f"Deployment/{namespace}/{fullname}", f"ServiceAccount/{namespace}/{fullname}",
                         f"RoleBinding/{namespace}/{fullname}",
                         f"Role/{namespace}/{fullname}",
                         f"ClusterRole/{fullname}-cluster", f"PriorityClass/warmstart-prepull-{suffix}"):  # fmt: skip
            assert expected in installed, installed
        # namespaced mode: no ClusterRole holds the namespaced permissions
        assert f"ClusterRole/{fullname}-namespaced" not in installed, installed
        for expected in (f"ValidatingAdmissionPolicy/{fullname}-cache-roots",
                         f"ValidatingAdmissionPolicy/{fullname}-node-labels"):  # fmt: skip
            assert expected in installed, installed
        crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        assert crd.spec.names.kind == "InferenceEndpointConfig"

        env = helming.chart_environment(api_client, namespace, fullname)
        sa_kubeconfig = kube.service_account_kubeconfig(
            api_client, kubeconfig, namespace, fullname, tmp_path / "sa.kubeconfig"
        )
        seed = _seed(namespace, instance_type, suffix)
        with helming.operator_process(
            sa_kubeconfig, env, tmp_path / "operator.log", pod_id=f"{fullname}-0"
        ) as operator:
            helming.custom(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, seed)
            try:
                kube.wait_for(
                    lambda: _state(api_client, namespace, "example-model") == "DeploymentComplete",
                    what="the seed to reach DeploymentComplete",
                    timeout=240,
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\noperator log:\n{operator.tail()}") from None
            assert "Forbidden" not in operator.output(), f"the chart's RBAC refused a request:\n{operator.tail()}"
            # the endpoint's pods (the operator's and the CSI driver's, which runs on every node, aside)
            selector = "app.kubernetes.io/component notin (operator,csi)"
            pods = core.list_namespaced_pod(namespace, label_selector=selector).items
            assert {p.spec.node_name for p in pods if p.spec.node_name} <= set(node_names)
            _check_confinement(api_client, sa_kubeconfig, namespace, node_names[0], seed)

            # routing on, under the chart's RBAC: the router gets its disruption budget, and the endpoint's own
            # Service moves to the router pods once one is ready
            helming.custom(api_client).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                "example-model",
                {"spec": {"intelligentRoutingSpec": {"enabled": True}}},
            )
            policy = client.PolicyV1Api(api_client)
            kube.wait_for(
                lambda: helming.get_or_none(
                    lambda: policy.read_namespaced_pod_disruption_budget("example-model-router", namespace)
                ),
                what="the router's PodDisruptionBudget",
                timeout=120,
            )
            kube.wait_for(
                lambda: (
                    (core.read_namespaced_service("example-model", namespace).spec.selector or {}).get(
                        "app.kubernetes.io/component"
                    )
                    == "router"
                ),
                what="the endpoint's Service to select the router pods",
                timeout=120,
            )
            assert "Forbidden" not in operator.output(), f"the chart's RBAC refused a request:\n{operator.tail()}"

            # delete while the operator runs, so its finalizers are removed and nothing is left to block the namespace
            helming.custom(api_client).delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "example-model"
            )
            kube.wait_for(
                lambda: (
                    _state(api_client, namespace, "example-model") is None
                    and helming.get_or_none(
                        lambda: helming.custom(api_client).get_namespaced_custom_object(
                            GROUP, VERSION, namespace, PLURAL, "example-model"
                        )
                    )
                    is None
                ),
                what="the endpoint to be deleted",
                timeout=120,
            )

            _check_fsx_and_autoscaling(api_client, namespace, instance_type, operator)

        # upgrade: a changed value reaches the operator's environment; a bad value is refused and changes nothing
        helming.run_helm(
            helm,
            kubeconfig,
            "upgrade",
            release,
            str(helming.CHART),
            "-n",
            namespace,
            "--reuse-values",
            "--set",
            "jumpstart.region=eu-west-1",
            "--wait",
            "--timeout",
            "180s",
        )
        assert helming.chart_environment(api_client, namespace, fullname)["WARMSTART_JUMPSTART_REGION"] == "eu-west-1"
        bad = helming.run_helm(
            helm,
            kubeconfig,
            "upgrade",
            release,
            str(helming.CHART),
            "-n",
            namespace,
            "--reuse-values",
            "--set",
            "replicaCount=0",
            check=False,
        )
        assert bad.returncode != 0 and "replicaCount" in bad.stderr, bad.stderr
        history = json.loads(
            helming.run_helm(helm, kubeconfig, "history", release, "-n", namespace, "-o", "json").stdout
        )
        assert [h["status"] for h in history] == ["superseded", "deployed"]

        # uninstall: nothing of the release is left, except the CRDs (Helm never deletes crds/)
        helming.run_helm(helm, kubeconfig, "uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")
        kube.wait_for(
            lambda: not _release_objects(api_client, release, [namespace]),
            what="the release's objects to be gone",
            timeout=60,
        )
        assert client.ApiextensionsV1Api(api_client).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        assert not json.loads(helming.run_helm(helm, kubeconfig, "list", "-n", namespace, "-o", "json").stdout)
    finally:
        if operator is not None:
            operator.stop()
        helming.run_helm(helm, kubeconfig, "uninstall", release, "-n", namespace, check=False)
        nodes.delete_nodes(api_client, node_names)
