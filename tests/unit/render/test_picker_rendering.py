"""Gateway mode as rendered: the InferencePool over the model pods, the picker's Deployment, Service, RBAC, Lease and
budget, the proxy's pieces shared rather than copied, the conditions, and the setting's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from warmstart.api.blocks import IntelligentRoutingSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.states import ConditionType
from warmstart.render import deployments, endpoint_status, endpoints, pickers, router
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoint_status import PickerFacts
from warmstart.render.endpoints import Endpoint, ObjectRef

ROOT = Path(__file__).resolve().parents[3]
REF = ObjectRef(kind="InferenceEndpointConfig", name="example-model", namespace="team-a", uid="1111-2222")
CONTEXT = RenderContext(operator_image="warmstart:test")


def _endpoint(picker: dict[str, Any] | None = None, enabled: bool = True) -> Endpoint:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    routing: dict[str, Any] = {"enabled": enabled, "routingStrategy": "prefixaware"}
    if picker is not None:
        routing["endpointPicker"] = picker
    doc["intelligentRoutingSpec"] = routing
    return endpoints.from_iec(REF, InferenceEndpointConfigSpec.model_validate(doc))


def _by_kind(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["kind"] if m["kind"] != "Service" else f"Service/{m['metadata']['name']}": m for m in manifests}


def test_the_setting_switches_from_the_proxy_to_the_picker() -> None:
    assert _endpoint().proxy_enabled and _endpoint().endpoint_picker is None
    gateway = _endpoint({"failureMode": "FailOpen"})
    assert gateway.routing_enabled and not gateway.proxy_enabled
    assert gateway.endpoint_picker is not None and gateway.endpoint_picker.failure_mode.value == "FailOpen"
    assert _endpoint({}).endpoint_picker.failure_mode.value == "FailClose"  # type: ignore[union-attr]


def test_the_pool_selects_the_model_pods_on_their_port_and_names_the_picker_service() -> None:
    endpoint = _endpoint({"failureMode": "FailOpen"})
    pool = pickers.inference_pool(endpoint)
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "example-model" and pool["metadata"]["namespace"] == "team-a"
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    model_labels = deployments.deployment(endpoint, generation, CONTEXT)["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"] == {"matchLabels": deployments.pod_selector(endpoint)}
    assert pool["spec"]["selector"]["matchLabels"].items() <= model_labels.items()
    assert pool["spec"]["targetPorts"] == [{"number": endpoint.worker.model_invocation_port.container_port}]
    assert pool["spec"]["endpointPickerRef"] == {
        "kind": "Service",
        "name": "example-model-epp",
        "port": {"number": 9002},
        "failureMode": "FailOpen",
    }
    (owner,) = pool["metadata"]["ownerReferences"]
    assert owner["uid"] == REF.uid and owner["controller"] is True


def test_the_picker_runs_the_router_in_epp_mode_locked_down_and_probed_over_grpc_health() -> None:
    endpoint = _endpoint({})
    deployment = pickers.deployment(endpoint, CONTEXT)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "warmstart:test"
    args = container["args"]
    assert args[:3] == ["router", "--mode", "epp"]
    flags = dict(zip(args[3::2], args[4::2], strict=True))
    assert flags["--namespace"] == "team-a"
    assert flags["--service"] == "example-model-models"
    assert flags["--configmap"] == "example-model-epp"  # its own ConfigMap, the same knobs as the proxy's
    assert flags["--grpc-port"] == "9002"
    assert flags["--lease"] == "example-model-epp"
    assert flags["--lease-identity"] == "$(POD_NAME)"
    assert container["readinessProbe"]["grpc"] == {"port": 9002, "service": "readiness"}
    assert container["livenessProbe"]["grpc"] == {"port": 9002, "service": "liveness"}
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert pod["serviceAccountName"] == "example-model-epp"
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == router.pod_selector(endpoint, router.PICKER) != router.pod_selector(endpoint)
    # one ready pod at most (the leader): a rollout must not wait for a second one
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == "100%"


def test_the_picker_shares_the_proxy_pieces_and_only_its_name_and_labels_differ() -> None:
    endpoint = _endpoint({})
    proxy = router.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]
    picker = pickers.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]
    assert picker["containers"][0]["securityContext"] == proxy["containers"][0]["securityContext"]
    assert [c["topologyKey"] for c in picker["topologySpreadConstraints"]] == [
        c["topologyKey"] for c in proxy["topologySpreadConstraints"]
    ]
    assert router.configmap(endpoint, workload=router.PICKER)["data"] == router.configmap(endpoint)["data"]


def test_the_picker_service_speaks_h2c_and_selects_only_picker_pods() -> None:
    endpoint = _endpoint({})
    service = pickers.service(endpoint)
    assert service["metadata"]["name"] == "example-model-epp"
    assert service["spec"]["selector"] == router.pod_selector(endpoint, router.PICKER)
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 9002, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}
    ]


def test_the_picker_role_reads_discovery_and_renews_only_its_own_lease() -> None:
    endpoint = _endpoint({})
    rules = pickers.role(endpoint)["rules"]
    assert {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]} in (
        rules
    )
    lease_rules = [r for r in rules if r["resources"] == ["leases"]]
    assert lease_rules == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["example-model-epp"],
            "verbs": ["get", "update"],
        }
    ]
    configmaps = [r for r in rules if r["resources"] == ["configmaps"]]
    assert configmaps and all(r["resourceNames"] == ["example-model-epp"] for r in configmaps)
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in rules)
    lease = pickers.lease(endpoint)
    assert lease["metadata"]["name"] == "example-model-epp" and "spec" not in lease  # the pods own the spec


def test_gateway_mode_renders_every_picker_object_and_the_pool_only_where_served() -> None:
    endpoint = _endpoint({})
    with_pool = pickers.manifests(endpoint, CONTEXT, None, pool=True)
    without = pickers.manifests(endpoint, CONTEXT, None, pool=False)
    assert [m["kind"] for m in with_pool] == [*[m["kind"] for m in without], "InferencePool"]
    kinds = _by_kind(with_pool)
    assert set(kinds) >= {
        "ConfigMap",
        "ServiceAccount",
        "Lease",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Deployment",
        "PodDisruptionBudget",
        "InferencePool",
        "Service/example-model-epp",
        "Service/example-model-models",
    }
    rendered = {(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in with_pool}
    assert rendered == set(pickers.objects(endpoint.ref.name)), "removal must know every object gateway mode makes"
    budget = kinds["PodDisruptionBudget"]["spec"]
    assert budget["maxUnavailable"] == "100%"
    ports = kinds["NetworkPolicy"]["spec"]["ingress"][0]["ports"]
    assert ports == [{"port": 9002, "protocol": "TCP"}]


def test_the_setting_needs_routing_enabled_and_a_known_failure_mode() -> None:
    with pytest.raises(ValidationError):
        IntelligentRoutingSpec.model_validate({"enabled": True, "endpointPicker": {"failureMode": "FailSometimes"}})
    schema = yaml.safe_load(
        (ROOT / "crds" / "inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml").read_text()
    )
    routing = schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "intelligentRoutingSpec"
    ]
    assert routing["properties"]["endpointPicker"]["properties"]["failureMode"]["enum"] == ["FailClose", "FailOpen"]
    assert any("endpointPicker" in rule["rule"] for rule in routing["x-kubernetes-validations"])


def _facts(**changes: Any) -> PickerFacts:
    base: dict[str, Any] = dict(pool="m", picker="m-epp", served=True, available=1, desired=2, failure_mode="FailClose")
    return PickerFacts(**{**base, **changes})


def test_a_missing_crd_gives_a_camelcase_reason_and_says_what_to_install() -> None:
    (cond,) = endpoint_status.pool_condition(_facts(served=False), had=False, generation=3)
    assert cond.type == ConditionType.INFERENCE_POOL and cond.status.value == "False"
    assert cond.reason == "InferencePoolCRDMissing"
    assert "install the Gateway API Inference Extension CRDs" in cond.message and cond.observed_generation == 3


def test_pool_conditions_follow_the_picker_and_turn_off_only_once_had() -> None:
    (ready,) = endpoint_status.pool_condition(_facts(), had=False, generation=1)
    assert (ready.status.value, ready.reason) == ("True", "PickerReady")
    (starting,) = endpoint_status.pool_condition(_facts(available=0), had=False, generation=1)
    assert (starting.status.value, starting.reason) == ("False", "PickerStarting")
    assert endpoint_status.pool_condition(None, had=False, generation=1) == []
    (off,) = endpoint_status.pool_condition(None, had=True, generation=1)
    assert (off.status.value, off.reason) == ("False", "GatewayModeOff")
    (routing,) = endpoint_status.through_gateway(_facts(), generation=1)
    assert (routing.type, routing.reason) == (ConditionType.ROUTING, "ThroughGateway")


def test_the_router_command_line_accepts_what_the_picker_deployment_runs() -> None:
    from warmstart.router import cli

    (container,) = pickers.deployment(_endpoint({}), CONTEXT)["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "router"
    args = cli.parser().parse_args(container["args"][1:])
    assert (args.mode, args.grpc_port, args.lease, args.lease_identity) == (
        "epp",
        9002,
        "example-model-epp",
        "$(POD_NAME)",  # the kubelet expands it from the env the container declares
    )
    assert [e["name"] for e in container["env"]] == ["POD_NAME"]
    with pytest.raises(SystemExit):
        cli._elector(cli.parser().parse_args(["--mode", "proxy", "--lease", "x", "--namespace", "n"]))
    with pytest.raises(SystemExit):
        cli._elector(cli.parser().parse_args(["--mode", "epp", "--lease", "x", "--namespace", "n"]))
