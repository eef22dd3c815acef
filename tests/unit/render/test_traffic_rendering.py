"""The traffic path as rendered: the client Service's two modes, the model pods' Service the router follows, the
default readiness probe, router replicas with their disruption budget and spreading, and the warm nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.routers import RouterConfig
from warmstart.render import deployments, endpoints, router, services
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint, JumpStartResolution, ObjectRef

ROOT = Path(__file__).resolve().parents[3]
REF = ObjectRef(kind="InferenceEndpointConfig", name="example-model", namespace="team-a", uid="1111-2222")
CONTEXT = RenderContext(operator_image="warmstart:test")


def _endpoint(**changes: Any) -> Endpoint:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    doc.setdefault("intelligentRoutingSpec", {"enabled": True, "routingStrategy": "prefixaware"})
    doc.update(changes)
    return endpoints.from_iec(REF, InferenceEndpointConfigSpec.model_validate(doc))


def _worker(endpoint: Endpoint) -> dict[str, Any]:
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    container: dict[str, Any] = deployments.deployment(endpoint, generation, CONTEXT)["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def _template_labels(manifest: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = manifest["spec"]["template"]["metadata"]["labels"]
    return found


def test_client_service_keeps_name_and_port_and_moves_only_its_selector_and_target() -> None:
    endpoint = _endpoint()
    direct = services.client_service(endpoint, via_router=False)
    routed = services.client_service(endpoint, via_router=True)
    assert direct["metadata"] == routed["metadata"]
    assert direct["metadata"]["name"] == endpoint.child_name == "example-model"
    port = endpoint.worker.model_invocation_port
    assert [(p["name"], p["port"]) for p in direct["spec"]["ports"]] == [(port.name, port.container_port)]
    assert [(p["name"], p["port"]) for p in routed["spec"]["ports"]] == [(port.name, port.container_port)]

    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    model_pods = _template_labels(deployments.deployment(endpoint, generation, CONTEXT))
    router_pods = _template_labels(router.deployment(endpoint, CONTEXT))
    # each mode selects exactly one kind of pod: the model pods, or the router pods, never both
    assert direct["spec"]["selector"].items() <= model_pods.items()
    assert not direct["spec"]["selector"].items() <= router_pods.items()
    assert routed["spec"]["selector"].items() <= router_pods.items()
    assert not routed["spec"]["selector"].items() <= model_pods.items()
    assert direct["spec"]["ports"][0]["targetPort"] == port.name
    assert routed["spec"]["ports"][0]["targetPort"] == router.ROUTER_PORT


def test_the_router_follows_the_model_pods_headless_service_not_the_client_service() -> None:
    endpoint = _endpoint()
    models = router.models_service(endpoint)
    assert models["spec"]["clusterIP"] == "None"
    assert models["spec"]["selector"] == deployments.pod_selector(endpoint)
    assert models["metadata"]["name"] == "example-model-models" != endpoint.child_name
    args = router.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--service") + 1] == models["metadata"]["name"]
    port_name = args[args.index("--port-name") + 1]
    assert [p["name"] for p in models["spec"]["ports"]] == [port_name]


def test_selects_router_and_router_available_read_the_stored_objects() -> None:
    endpoint = _endpoint()
    assert services.selects_router(services.client_service(endpoint, via_router=True), endpoint)
    assert not services.selects_router(services.client_service(endpoint, via_router=False), endpoint)
    assert not services.selects_router(None, endpoint)
    stored = router.deployment(endpoint, CONTEXT)
    assert not services.router_available(None)
    assert not services.router_available(stored)  # no status yet
    assert not services.router_available({**stored, "status": {"replicas": 2, "availableReplicas": 0}})
    assert services.router_available({**stored, "status": {"replicas": 2, "availableReplicas": 1}})


def test_no_readiness_probe_given_means_an_http_get_of_ping_on_the_invocation_port() -> None:
    endpoint = _endpoint()
    assert endpoint.worker.probes is None or endpoint.worker.probes.readiness_probe is None
    probe = _worker(endpoint)["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ping", "port": endpoint.worker.model_invocation_port.name}
    assert probe["periodSeconds"] == deployments.READINESS_PERIOD_SECONDS


def test_health_check_path_sets_the_default_probes_path() -> None:
    endpoint = _endpoint(loadBalancer={"healthCheckPath": "/health"})
    assert _worker(endpoint)["readinessProbe"]["httpGet"]["path"] == "/health"


def test_a_users_readiness_probe_wins_and_other_probes_keep_the_default() -> None:
    worker = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"][
        "worker"
    ]
    own = {"exec": {"command": ["true"]}, "periodSeconds": 2}
    mine = _endpoint(worker={**worker, "probes": {"readinessProbe": own}}, loadBalancer={"healthCheckPath": "/x"})
    assert _worker(mine)["readinessProbe"] == own
    startup = {"httpGet": {"path": "/started", "port": 8080}}
    only_startup = _endpoint(worker={**worker, "probes": {"startupProbe": startup}})
    assert _worker(only_startup)["startupProbe"] == startup
    assert _worker(only_startup)["readinessProbe"]["httpGet"]["path"] == "/ping"


def test_jumpstart_endpoints_get_the_same_default_probe() -> None:
    spec = JumpStartModelSpec.model_validate(
        {
            "model": {"modelId": "meta-textgeneration-llama-3-8b"},
            "server": {"instanceType": "ml.g5.2xlarge"},
            "loadBalancer": {"healthCheckPath": "/ready"},
        }
    )
    resolution = JumpStartResolution(bucket="jumpstart-bucket", prefix="meta/llama/", region="us-west-2", image="img:1")
    endpoint = endpoints.from_jumpstart(REF.model_copy(update={"kind": "JumpStartModel"}), spec, resolution)
    assert _worker(endpoint)["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}


def test_router_replicas_default_from_the_operator_and_override_per_endpoint() -> None:
    assert router.deployment(_endpoint(), CONTEXT)["spec"]["replicas"] == 2
    three = CONTEXT.model_copy(update={"router_replicas": 3})
    assert router.deployment(_endpoint(), three)["spec"]["replicas"] == 3
    own = _endpoint(intelligentRoutingSpec={"enabled": True, "routerReplicas": 5})
    assert router.deployment(own, three)["spec"]["replicas"] == 5


def test_router_pods_spread_over_nodes_and_zones_best_effort_and_roll_without_losing_one() -> None:
    endpoint = _endpoint()
    rendered = router.deployment(endpoint, CONTEXT)
    spread = rendered["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for constraint in spread:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway" and constraint["maxSkew"] == 1
        assert constraint["labelSelector"]["matchLabels"].items() <= _template_labels(rendered).items()
    assert rendered["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    container = rendered["spec"]["template"]["spec"]["containers"][0]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == router.DRAIN_SECONDS


def test_disruption_budget_lets_one_router_pod_go_at_a_time_and_dies_with_the_endpoint() -> None:
    endpoint = _endpoint()
    budget = router.disruption_budget(endpoint)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == router.pod_selector(endpoint)
    assert (
        budget["spec"]["selector"]["matchLabels"].items()
        <= _template_labels(router.deployment(endpoint, CONTEXT)).items()
    )
    (owner,) = budget["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceEndpointConfig",
        "example-model",
        "1111-2222",
        True,
    )


def test_every_router_object_is_owned_by_the_endpoint_and_removable() -> None:
    endpoint = _endpoint()
    rendered = router.manifests(endpoint, CONTEXT, [])
    for manifest in rendered:
        assert [o["uid"] for o in manifest["metadata"]["ownerReferences"]] == ["1111-2222"], manifest["kind"]
    removable = {(kind, name) for _version, kind, name in router.objects("example-model")}
    assert {(m["kind"], m["metadata"]["name"]) for m in rendered} <= removable
    assert ("Service", "example-model-router") in removable  # what earlier versions rendered


def test_warm_nodes_reach_the_router_config_sorted_and_only_when_known() -> None:
    endpoint = _endpoint()
    data = router.configmap(endpoint, ["node-b", "node-a", "node-b"])["data"]
    assert RouterConfig.from_configmap_data(data).warm_nodes == ("node-a", "node-b")
    assert RouterConfig.from_configmap_data(router.configmap(endpoint, [])["data"]).warm_nodes == ()
    assert "warmNodes" not in yaml.safe_load(router.configmap(endpoint)["data"]["router.yaml"])


def test_health_check_path_is_acted_on_and_routing_algorithm_is_named_only_under_intelligent_routing() -> None:
    from warmstart.render.unsupported import unsupported_fields

    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    path_only = InferenceEndpointConfigSpec.model_validate({**doc, "loadBalancer": {"healthCheckPath": "/health"}})
    assert not [f for f in unsupported_fields(path_only) if "loadBalancer" in f]
    both = {"healthCheckPath": "/health", "routingAlgorithm": "round_robin"}
    algorithm = InferenceEndpointConfigSpec.model_validate({**doc, "loadBalancer": both})
    assert not [f for f in unsupported_fields(algorithm) if "loadBalancer" in f]
    routed = {**doc, "loadBalancer": both, "intelligentRoutingSpec": {"enabled": True}}
    named = [f for f in unsupported_fields(InferenceEndpointConfigSpec.model_validate(routed)) if "loadBalancer" in f]
    assert named == ["spec.loadBalancer.routingAlgorithm (intelligentRoutingSpec decides the routing)"]


def _seed(**changes: Any) -> InferenceEndpointConfigSpec:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    return InferenceEndpointConfigSpec.model_validate({**doc, **changes})


def test_request_limits_alone_bring_the_router_that_enforces_them() -> None:
    from warmstart.render.unsupported import unsupported_fields

    limits = {"maxConcurrentRequests": 3, "maxQueueSize": 5, "overflowStatusCode": 503}
    spec = _seed(worker={**_seed().worker.to_api(), "requestLimits": limits})
    endpoint = endpoints.from_iec(REF, spec)
    assert endpoint.routing_enabled
    assert endpoint.routing_strategy.value == "random"  # spread as the Service would; only the cap is added
    config = RouterConfig.from_configmap_data(router.configmap(endpoint)["data"])
    assert (config.max_concurrent_requests, config.max_queue_size, config.overflow_status_code) == (3, 5, 503)
    assert services.client_service(endpoint, via_router=True)["spec"]["selector"] == router.pod_selector(endpoint)
    assert unsupported_fields(spec) == []
    assert not endpoints.from_iec(REF, _seed()).routing_enabled  # no limits, no routing spec: no router


def test_request_limits_that_no_router_enforces_are_named() -> None:
    from warmstart.render.unsupported import unsupported_fields

    limits = {"maxConcurrentRequests": 3, "maxQueueSize": 5, "overflowStatusCode": 503}
    off = _seed(worker={**_seed().worker.to_api(), "requestLimits": limits}, intelligentRoutingSpec={"enabled": False})
    assert not endpoints.from_iec(REF, off).routing_enabled
    assert unsupported_fields(off) == [
        f"spec.worker.requestLimits.{name} (intelligentRoutingSpec.enabled is false: no router enforces it)"
        for name in ("maxConcurrentRequests", "maxQueueSize", "overflowStatusCode")
    ]
    uncapped = _seed(worker={**_seed().worker.to_api(), "requestLimits": {"maxQueueSize": 5}})
    assert not endpoints.from_iec(REF, uncapped).routing_enabled
    assert unsupported_fields(uncapped) == [
        "spec.worker.requestLimits.maxQueueSize (no effect without maxConcurrentRequests)"
    ]


def test_each_container_claim_gets_a_pod_claim_from_the_template_of_its_name() -> None:
    claims = [{"name": "gpu"}, {"name": "nic", "request": "rdma"}, {"name": "gpu", "request": "second"}]
    worker = {**_seed().worker.to_api(), "resources": {"claims": claims}}
    endpoint = endpoints.from_iec(REF, _seed(worker=worker))
    pod = deployments.deployment(endpoint, Generation(endpoint.weights_key({}), endpoint.image_key()), CONTEXT)
    spec = pod["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "gpu"},
        {"name": "nic", "resourceClaimTemplateName": "nic"},
    ]
    assert spec["containers"][0]["resources"]["claims"] == claims
    plain = _endpoint()
    plain_pod = deployments.deployment(plain, Generation(plain.weights_key({}), plain.image_key()), CONTEXT)
    assert "resourceClaims" not in plain_pod["spec"]["template"]["spec"]  # no claims, no pod claims
