"""Gateway mode on the real control plane: `intelligentRoutingSpec.endpointPicker` renders the InferencePool and the
endpoint picker instead of the proxy; removing the setting prunes them and brings the proxy back; a cluster without
the InferencePool CRD gets a condition saying so while the rest of the endpoint reconciles; bad settings are refused
at apply.

The InferencePool CRD is the chart's (charts/warmstart/files), applied by ``kube.install_crds``; the missing-CRD test
deletes it and installs it again before it ends.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.render import pickers
from warmstart.render import router as router_render

pytestmark = pytest.mark.cluster

POOLS = ("inference.networking.k8s.io", "v1", "inferencepools")


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _pool(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    group, version, plural = POOLS
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, namespace, plural, name
        )
        return found
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _gateway_body(name: str, namespace: str, instance_type: str, failure_mode: str = "FailOpen") -> dict[str, Any]:
    routing = {"enabled": True, "routingStrategy": "prefixaware", "endpointPicker": {"failureMode": failure_mode}}
    return ep.endpoint_manifest(name, namespace, instance_type, modelCacheConfig=None, intelligentRoutingSpec=routing)


def test_gateway_mode_renders_the_pool_and_picker_and_removing_it_restores_the_proxy(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    rbac, policy = client.RbacAuthorizationV1Api(api_client), client.PolicyV1Api(api_client)
    leases = client.CoordinationV1Api(api_client)
    name, picker = "gw", pickers.name("gw")
    with (
        ep.own_nodes(api_client, 1) as (instance_type, _nodes),
        operating.operator(str(cluster.kubeconfig), [namespace]),
    ):
        kube.create_custom(api_client, _gateway_body(name, namespace, instance_type))
        pool = kube.wait_for(lambda: _pool(api_client, namespace, name), what="the InferencePool")
        uid = ep.endpoint(api_client, namespace, name)["metadata"]["uid"]  # type: ignore[index]
        model = kube.wait_for(
            lambda: (
                _exists(apps.read_namespaced_deployment, name, namespace)
                and apps.read_namespaced_deployment(name, namespace)
            ),
            what="the model Deployment",
        )
        assert pool["spec"]["selector"] == {"matchLabels": model.spec.selector.match_labels}
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]
        ref = pool["spec"]["endpointPickerRef"]
        assert (ref["kind"], ref["name"], ref["port"], ref["failureMode"]) == (
            "Service",
            picker,
            {"number": 9002},
            "FailOpen",
        )
        assert [(o["uid"], o["controller"]) for o in pool["metadata"]["ownerReferences"]] == [(uid, True)]

        deployment = kube.wait_for(
            lambda: (
                _exists(apps.read_namespaced_deployment, picker, namespace)
                and apps.read_namespaced_deployment(picker, namespace)
            ),
            what="the picker Deployment",
        )
        (container,) = deployment.spec.template.spec.containers
        assert container.args[:3] == ["router", "--mode", "epp"]
        assert container.readiness_probe.grpc.service == "readiness" and container.readiness_probe.grpc.port == 9002
        assert container.security_context.read_only_root_filesystem is True
        service = core.read_namespaced_service(picker, namespace)
        assert [(p.port, p.app_protocol) for p in service.spec.ports] == [(9002, "kubernetes.io/h2c")]
        role = rbac.read_namespaced_role(picker, namespace)
        assert any(r.resources == ["leases"] and r.resource_names == [picker] for r in role.rules)
        assert rbac.read_namespaced_role_binding(picker, namespace).subjects[0].name == picker
        assert policy.read_namespaced_pod_disruption_budget(picker, namespace).spec.max_unavailable == "100%"
        assert leases.read_namespaced_lease(picker, namespace).metadata.owner_references[0].uid == uid
        # no proxy: the endpoint's Service goes straight to the model pods
        assert not _exists(apps.read_namespaced_deployment, router_render.name(name), namespace)
        assert core.read_namespaced_service(name, namespace).spec.selector == model.spec.selector.match_labels
        status = kube.wait_for(
            lambda: (s := ep.status(api_client, namespace, name)).get("endpointPickerName") and s, what="status"
        )
        assert "routerName" not in status
        routing = kube.wait_for(
            lambda: (
                (c := ep.condition(ep.status(api_client, namespace, name), "Routing")).get("reason") == "ThroughGateway"
                and c
            ),
            what="Routing ThroughGateway",
        )
        assert pickers.pool_name(name) in routing["message"]
        kube.wait_for(
            lambda: (
                ep.condition(ep.status(api_client, namespace, name), "InferencePool").get("reason") == "PickerReady"
            ),
            what="the InferencePool condition once a (kwok) picker pod is ready",
        )

        # the setting goes: pool, picker and Lease are pruned, the proxy comes back, the model pods' Service stays
        patch = {"spec": {"intelligentRoutingSpec": {"endpointPicker": None}}}
        group, version = ep.GROUP, ep.VERSION
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            group, version, namespace, "inferenceendpointconfigs", name, patch
        )
        kube.wait_for(
            lambda: _exists(apps.read_namespaced_deployment, router_render.name(name), namespace),
            what="the proxy router Deployment",
        )
        kube.wait_for(lambda: _pool(api_client, namespace, name) is None, what="the InferencePool removed")
        for read in (
            apps.read_namespaced_deployment,
            core.read_namespaced_service,
            core.read_namespaced_config_map,
            core.read_namespaced_service_account,
            rbac.read_namespaced_role,
            rbac.read_namespaced_role_binding,
            policy.read_namespaced_pod_disruption_budget,
            leases.read_namespaced_lease,
        ):
            kube.wait_for(lambda read=read: not _exists(read, picker, namespace), what=f"{read.__name__} gone")
        assert _exists(core.read_namespaced_service, router_render.models_service_name(name), namespace)
        off = kube.wait_for(
            lambda: (
                (c := ep.condition(ep.status(api_client, namespace, name), "InferencePool")).get("reason")
                == "GatewayModeOff"
                and c
            ),
            what="InferencePool GatewayModeOff",
        )
        assert off["status"] == "False"
        kube.wait_for(
            lambda: (
                "endpointPickerName" not in ep.status(api_client, namespace, name)
                and ep.status(api_client, namespace, name).get("routerName")
            ),
            what="status naming the router again",
        )


def test_without_the_inference_pool_crd_the_endpoint_says_so_and_still_serves(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api_client)
    kubeconfig = str(cluster.kubeconfig)
    kube.delete_crds(kubeconfig, [str(kube.INFERENCE_POOL_CRD)])
    try:
        with ep.own_nodes(api_client, 1) as (instance_type, _nodes), operating.operator(kubeconfig, [namespace]):
            kube.create_custom(api_client, _gateway_body("nocrd", namespace, instance_type, "FailClose"))
            missing = kube.wait_for(
                lambda: (
                    (c := ep.condition(ep.status(api_client, namespace, "nocrd"), "InferencePool")).get("reason") and c
                ),
                what="the InferencePool condition",
            )
            assert (missing["status"], missing["reason"]) == ("False", "InferencePoolCRDMissing")
            assert "install the Gateway API Inference Extension CRDs" in missing["message"]
            # nothing lost: the model pods and the picker are there, and the endpoint becomes ready
            kube.wait_for(lambda: _exists(apps.read_namespaced_deployment, "nocrd", namespace), what="model pods")
            kube.wait_for(
                lambda: _exists(apps.read_namespaced_deployment, pickers.name("nocrd"), namespace), what="picker"
            )
            kube.wait_for(
                lambda: ep.status(api_client, namespace, "nocrd").get("state") == "DeploymentComplete",
                what="DeploymentComplete",
            )
            # the CRD arrives: the pool follows without a restart or a spec change
            kube.install_crds(kubeconfig)
            pool = kube.wait_for(lambda: _pool(api_client, namespace, "nocrd"), what="the InferencePool")
            assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
            kube.wait_for(
                lambda: (
                    ep.condition(ep.status(api_client, namespace, "nocrd"), "InferencePool").get("reason")
                    == "PickerReady"
                ),
                what="PickerReady",
            )
    finally:
        kube.install_crds(kubeconfig)


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"enabled": True, "endpointPicker": {"failureMode": "FailSometimes"}}, "FailSometimes"),
        ({"enabled": False, "endpointPicker": {}}, "endpointPicker needs enabled: true"),
        ({"endpointPicker": {"failureMode": "FailOpen"}}, "endpointPicker needs enabled: true"),
    ],
)
def test_a_bad_gateway_setting_is_refused_at_apply(
    api_client: client.ApiClient, namespace: str, routing: dict[str, Any], message: str
) -> None:
    body = ep.endpoint_manifest("bad", namespace, "ml.g5.24xlarge", intelligentRoutingSpec=routing)
    with pytest.raises(client.ApiException) as refused:
        kube.create_custom(api_client, body)
    assert refused.value.status == 422
    assert message in (refused.value.body or "")
