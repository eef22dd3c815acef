"""The endpoint reconcile: resolve, ensure caches, decide the gate, apply the Deployment, release old caches, status."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api.base import Condition
from warmstart.api.caches import MDCC_KIND, MIC_KIND
from warmstart.api.endpoints import KIND as IEC_KIND
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.states import ConditionType, EndpointState
from warmstart.api.statuses import (
    CacheSummary,
    EndpointStatus,
    ResolvedModel,
    WarmPlacement,
)
from warmstart.controllers import (
    applying,
    autoscaling,
    deployment_index,
    endpoint_facts,
    filling,
    fsx,
    guarding,
    handling,
    metrics,
    routing,
    sharing,
    sync_keys,
)
from warmstart.controllers.resolving import ResolutionFailed, resolve
from warmstart.controllers.storage import Invalid, Store
from warmstart.render import (
    cache_volumes,
    deployments,
    endpoint_children,
    endpoint_status,
    gating,
    hyperpod_status,
    keys,
    kvwiring,
    monitoring,
    names,
    owners,
    resource_claims,
    router,
)
from warmstart.render import fsx as render_fsx
from warmstart.render.conditions import condition, merge_conditions
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint
from warmstart.render.unsupported import unsupported_fields

Manifest = dict[str, Any]

#: the reason of an endpoint whose rendered children the API server refused
RENDER_REJECTED = guarding.RENDER_REJECTED


def reconcile(kind: str, body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Bring the endpoint's children and status in line with its spec; safe to call any number of times."""
    with handling.lock(memo, body["metadata"]["uid"]), handling.api_errors("reconciling the endpoint"):
        _reconcile(kind, body, memo, indexes)


def _reconcile(kind: str, body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    store: Store = memo.store
    context = memo.settings.render
    meta = body["metadata"]
    generation = int(meta.get("generation", 1))
    old_status = dict(body.get("status") or {})
    now = handling.now()
    spec_model = _spec_model(kind, body)
    unsupported = _unsupported_condition(spec_model, generation)
    try:
        endpoint = resolve(kind, body, context, memo.setdefault("jumpstart", _jumpstart_cache()))
        endpoint = _with_complete_fsx(endpoint, context)
    except ResolutionFailed as failure:
        conds = [*endpoint_status.failed(generation, failure.reason, failure.message), *unsupported]
        _write_status(memo, kind, body, old_status, {"state": EndpointState.DEPLOYMENT_FAILED.value}, conds, now)
        if failure.retryable:
            raise kopf.TemporaryError(failure.message, delay=30) from failure
        return

    if resource_claims.names(endpoint.worker) and not context.resource_claims:
        message = resource_claims.unavailable_message(endpoint.worker)
        conds = [*endpoint_status.failed(generation, resource_claims.UNAVAILABLE_REASON, message), *unsupported]
        _write_status(memo, kind, body, old_status, {"state": EndpointState.DEPLOYMENT_FAILED.value}, conds, now)
        return

    wkey, ikey = endpoint.weights_key(context.cache_sharing_groups), endpoint.image_key()
    model_deployment = deployments.deployment(endpoint, Generation(wkey, ikey), context)
    refused = guarding.refusal(store, memo, body, endpoint, model_deployment, context)
    if refused is not None:  # before anything is applied: the pod this spec renders is not one the namespace admits
        conds = [*endpoint_status.failed(generation, refused.reason, refused.message), *unsupported]
        _write_status(memo, kind, body, old_status, {"state": EndpointState.DEPLOYMENT_FAILED.value}, conds, now)
        return
    weights = (
        _summary(indexes, "weights_cache_summaries", endpoint, keys.weights_cache_name(wkey))
        if endpoint.weights_enabled
        else None
    )
    image = (
        _summary(indexes, "image_cache_summaries", endpoint, keys.image_cache_name(ikey))
        if endpoint.image_cache
        else None
    )

    resolved_old = old_status.get("resolved") or {}
    waiting_since = (
        handling.parse_timestamp(old_status.get("waitingSince"))
        if resolved_old.get("weightsCacheKey") == wkey
        else None
    )
    waiting_since = waiting_since or now
    gate = gating.decide(
        endpoint.weights_enabled,
        weights,
        (now - waiting_since).total_seconds(),
        endpoint.max_deploy_time_seconds,
        handling.timestamp(waiting_since + datetime.timedelta(seconds=endpoint.max_deploy_time_seconds)),
        access=context.cache_access,
    )

    deployment = deployment_index.deployment(indexes, endpoint.ref.namespace, endpoint.child_name)
    if gate.open and endpoint_facts.serving_weights_key(deployment) != wkey:
        metrics.GATE_WAIT_SECONDS.observe((now - waiting_since).total_seconds())
    traffic = endpoint_facts.traffic(store, indexes, endpoint, old_status, context)
    served = routing.pool_served(store, memo) if endpoint.endpoint_picker is not None else False
    warm_nodes = endpoint_facts.warm_nodes(endpoint, wkey, indexes) if endpoint.routing_enabled else None
    scaling = autoscaling.plan(store, endpoint, context, old_status)
    if scaling.remove:
        autoscaling.remove(store, endpoint)
    generation_keys = Generation(wkey, ikey)
    rendered = endpoint_children.children(
        endpoint,
        gate.open,
        generation_keys,
        context,
        traffic.via_router,
        warm_nodes,
        served,
        sync_keys.key(store, memo, endpoint),
    )
    children = [*rendered, *scaling.manifests]
    changed = applying.pending(memo, endpoint.ref.uid, children, deployment)
    if changed:
        try:
            deployment = _apply(store, indexes, endpoint, changed) or deployment
            _remove_unwanted_monitor(store, endpoint, children, context)
        except Invalid as error:  # the spec renders to something the API server refuses: say so, do not loop
            applying.record(memo, endpoint.ref.uid, children, deployment, error=str(error))
        else:
            every_child = len(changed) == len(children)
            applying.record(memo, endpoint.ref.uid, children, deployment, every_child=every_child)
    if endpoint.weights_enabled and context.cache_access == cache_volumes.CacheAccess.HOST_PATH:
        filling.label_filled_nodes(store, memo, body, endpoint, Generation(wkey, ikey), context, deployment, indexes)
    rejection = applying.rejected(memo, endpoint.ref.uid, children)
    if rejection is not None:
        message = f"the API server rejected what this spec renders (fix the spec): {rejection}"[:1024]
        conds = [*endpoint_status.failed(generation, RENDER_REJECTED, message), *unsupported]
        _write_status(memo, kind, body, old_status, {"state": EndpointState.DEPLOYMENT_FAILED.value}, conds, now)
        return
    elif not gate.open and deployment is not None and deployment.get("spec", {}).get("replicas") != endpoint.replicas:
        deployment = store.merge_patch(
            "apps/v1",
            "Deployment",
            endpoint.child_name,
            {"spec": {"replicas": endpoint.replicas}},
            endpoint.ref.namespace,
        )
    router_name = router.name(endpoint.ref.name) if endpoint.proxy_enabled or traffic.retiring else None
    if router_name is None and old_status.get("routerName"):
        routing.remove(store, endpoint.ref.namespace, endpoint.ref.name, endpoint.ref.uid, routing.keys(children))
    picker = endpoint_facts.picker_facts(indexes, endpoint, context, served)
    if picker is None and old_status.get("endpointPickerName"):
        routing.remove_picker(
            store, endpoint.ref.namespace, endpoint.ref.name, endpoint.ref.uid, routing.keys(children)
        )

    facts = endpoint_facts.deployment_facts(deployment)
    if facts.rolled_out and gate.open:
        _release_stale(store, endpoint, indexes, wkey, ikey)
    _release_stale_fsx(store, endpoint, resolved_old)
    placement = endpoint_facts.placement(endpoint, wkey, indexes)
    conds = [
        *endpoint_status.conditions(
            generation, gate, weights, endpoint.weights_enabled, image, endpoint.image_cache, facts
        ),
        *unsupported,
        *scaling.conditions,
        *_kv_events_condition(endpoint, generation, old_status),
        *(
            endpoint_status.through_gateway(picker, generation)
            if picker is not None and not traffic.retiring
            else endpoint_status.routing_condition(traffic, _had(old_status, ConditionType.ROUTING), generation)
        ),
        *endpoint_status.pool_condition(picker, _had(old_status, ConditionType.INFERENCE_POOL), generation),
    ]
    conds.append(
        condition(
            ConditionType.RESOLVED,
            True,
            "Resolved",
            f"source {endpoint.source.model_source_type.value}, image {endpoint.worker.image}",
            generation,
        )
    )
    state = endpoint_status.state(conds, facts)
    status = EndpointStatus(
        state=state,
        replicas=facts.replicas if deployment is not None else 0,
        available_replicas=facts.available,
        selector=deployments.selector_string(endpoint),
        weights_cache_status=weights,
        image_cache_status=image,
        resolved=ResolvedModel(
            model_source_config=endpoint.source,
            image=endpoint.worker.image,
            instance_types=endpoint.instance_types,
            environment=endpoint.resolved_env or None,
            weights_cache_key=wkey,
            image_cache_key=ikey,
        ),
        warm_placement=placement,
        deployment_name=endpoint.child_name if deployment is not None else None,
        router_name=router_name,
        endpoint_picker_name=picker.picker if picker is not None else None,
        waiting_since=handling.timestamp(waiting_since)
        if not gate.open or gate.degraded
        else old_status.get("waitingSince"),
        gate_opened_at=old_status.get("gateOpenedAt") or (handling.timestamp(now) if gate.open else None),
    ).to_api()
    status.pop("conditions", None)
    blocks = hyperpod_status.blocks(endpoint, context, deployment, state, conds, old_status, handling.timestamp(now))
    _write_status(memo, kind, body, old_status, {**status, **blocks}, conds, now)
    _export_metrics(endpoint, state, placement)


def _spec_model(kind: str, body: Mapping[str, Any]) -> InferenceEndpointConfigSpec | JumpStartModelSpec | None:
    """The spec, for the unsupported-fields condition; None when it does not validate (resolve reports that)."""
    try:
        if kind == IEC_KIND:
            return handling.spec(body, InferenceEndpointConfigSpec)
        return handling.spec(body, JumpStartModelSpec)
    except kopf.PermanentError:
        return None


def _unsupported_condition(
    spec: InferenceEndpointConfigSpec | JumpStartModelSpec | None, generation: int
) -> list[Condition]:
    fields = unsupported_fields(spec) if spec is not None else []
    if not fields:
        return [condition(ConditionType.UNSUPPORTED_FIELDS, False, "AllFieldsSupported", "", generation)]
    message = "accepted but not implemented by warmstart, so they have no effect: " + ", ".join(fields)
    return [condition(ConditionType.UNSUPPORTED_FIELDS, True, "FieldsIgnored", message, generation)]


def _had(old_status: Mapping[str, Any], type_: ConditionType) -> bool:
    """Whether the status last written carries a condition of `type_`."""
    return any(c.get("type") == type_ for c in old_status.get("conditions") or [])


def _kv_events_condition(endpoint: Endpoint, generation: int, old_status: Mapping[str, Any]) -> list[Condition]:
    """``KVEvents``: whether the model container publishes KV events for the router (only once asked for)."""
    chosen = kvwiring.knobs(endpoint).kv_events
    had = _had(old_status, ConditionType.KV_EVENTS)
    if not chosen:
        message = "the router does not follow KV events (routerConfig.kvEvents is off or routing is off)"
        return [condition(ConditionType.KV_EVENTS, False, "KVEventsOff", message, generation)] if had else []
    wired = kvwiring.of(endpoint)
    if wired.reason is not None:
        return [condition(ConditionType.KV_EVENTS, False, "CommandNotUnderstood", wired.reason, generation)]
    ports = ", ".join(f"{name} {number}" for name, number in wired.ports)
    how = "added --kv-events-config" if wired.args is not None else "the command passes --kv-events-config itself"
    return [condition(ConditionType.KV_EVENTS, True, "Wired", f"{how}; ports {ports}", generation)]


def _jumpstart_cache() -> Any:
    from warmstart.controllers.resolving import JumpStartCache

    return JumpStartCache.empty()


def _summary(indexes: Mapping[str, Any], index: str, endpoint: Endpoint, name: str) -> CacheSummary:
    found = sharing.lookup(indexes[index], (endpoint.ref.namespace, name))
    return found[0] if found else CacheSummary(name=name)


def _apply(store: Store, indexes: Mapping[str, Any], endpoint: Endpoint, children: list[Manifest]) -> Manifest | None:
    """Apply these children; caches under this endpoint's own field manager. Returns the applied Deployment, if any."""
    applied_deployment: Manifest | None = None
    for manifest in children:
        if manifest["kind"] in (MDCC_KIND, MIC_KIND, "PersistentVolumeClaim"):
            sharing.attach(store, manifest, endpoint.ref.uid)
        elif manifest["kind"] == "Deployment" and manifest["metadata"]["name"] == endpoint.child_name:
            _refuse_taken_name(store, indexes, manifest)
            applied_deployment = store.apply(manifest)
        else:
            _refuse_taken_name(store, indexes, manifest)
            store.apply(manifest)
    return applied_deployment


def _refuse_taken_name(store: Store, indexes: Mapping[str, Any], manifest: Manifest) -> None:
    """Refuse to take over a child another endpoint controls (endpoint `a`'s `a-models` Service and an endpoint named
    `a-models`): a forced apply would make the two fight over it. A Deployment an endpoint owns is in the index; any
    other object, or a Deployment not there, is read."""
    if owners.controller_of(manifest) is None:
        return
    meta = manifest["metadata"]
    existing = (
        deployment_index.deployment(indexes, meta.get("namespace") or "", meta["name"])
        if manifest["kind"] == "Deployment"
        else None
    )
    if existing is None:
        existing = store.get(manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace"))
    other = owners.taken_by_another(existing, manifest)
    if other is not None:
        raise Invalid(
            f"{manifest['kind']} {meta['name']} already belongs to {other.get('kind')} {other.get('name')}: "
            "both render a child of that name; rename one of them"
        )


def _remove_unwanted_monitor(
    store: Store, endpoint: Endpoint, children: list[Manifest], context: RenderContext
) -> None:
    """Delete the endpoint's PodMonitor once metrics are off (runs only when the children changed)."""
    if context.pod_monitors and not any(c["kind"] == monitoring.KIND for c in children):
        store.delete(monitoring.API_VERSION, monitoring.KIND, endpoint.child_name, endpoint.ref.namespace)


def _with_complete_fsx(endpoint: Endpoint, context: RenderContext) -> Endpoint:
    """The endpoint with its FSx source's DNS and mount names from the admin's allowlist for its namespace."""
    source = fsx.completed_source(endpoint.source, endpoint.ref.namespace, context.fsx_file_systems)
    return endpoint if source is endpoint.source else endpoint.model_copy(update={"source": source})


def _release_stale_fsx(store: Store, endpoint: Endpoint, resolved_old: Mapping[str, Any]) -> None:
    """After a change off an FSx source (or to another file system), let go of the old claim at once: the API
    server keeps a claim in use by pods (and its volume) until the old pods are gone."""
    old_source = resolved_old.get("modelSourceConfig") or {}
    if old_source.get("modelSourceType") != "fsx" or old_source == endpoint.source.to_api():
        return
    storage = render_fsx.storage_of(endpoint.source)
    keep = render_fsx.claim_name(storage) if storage is not None else None
    fsx.release(store, endpoint.ref.namespace, endpoint.ref.uid, keep=keep)


def _release_stale(store: Store, endpoint: Endpoint, indexes: Mapping[str, Any], wkey: str, ikey: str) -> None:
    """After a completed rollout, let go of caches of earlier generations (or of caching turned off)."""
    uid = endpoint.ref.uid
    keep_weights = keys.weights_cache_name(wkey) if endpoint.weights_enabled else None
    keep_image = keys.image_cache_name(ikey) if endpoint.image_cache else None
    for name in set(sharing.lookup(indexes["weights_caches_by_parent"], uid)) - {keep_weights}:
        sharing.release(store, MDCC_KIND, name, endpoint.ref.namespace, uid)
    for name in set(sharing.lookup(indexes["image_caches_by_parent"], uid)) - {keep_image}:
        sharing.release(store, MIC_KIND, name, endpoint.ref.namespace, uid)


def _write_status(
    memo: kopf.Memo,
    kind: str,
    body: kopf.Body,
    old: dict[str, Any],
    new: dict[str, Any],
    conds: list[Condition],
    now: datetime.datetime,
) -> None:
    """Write status when something changed; post an Event when the state changes (once: a second pass that started
    from the same stale body writes the same state again, and is not a change)."""
    store: Store = memo.store
    old_conditions = [Condition.model_validate(c) for c in old.get("conditions") or []]
    merged = merge_conditions(old_conditions, conds, handling.timestamp(now))
    new = {
        **new,
        "conditions": [c.to_api() for c in merged],
        "observedGeneration": int(body["metadata"].get("generation", 1)),
    }
    owned_old = {k: v for k, v in old.items() if k in new or k in _OWNED}
    if not handling.write_status(store, kind, body, owned_old, new):
        return
    posted: dict[str, Any] = memo.setdefault(_POSTED_STATES, {})
    uid = body["metadata"]["uid"]
    if posted.get(uid, old.get("state")) != new.get("state"):
        posted[uid] = new.get("state")
        ready = next((c for c in merged if c.type == ConditionType.READY), None)
        message = ready.message if ready else ""
        event_type = "Warning" if new.get("state") == EndpointState.DEPLOYMENT_FAILED.value else "Normal"
        kopf.event(body, type=event_type, reason=str(new.get("state")), message=message[:1000])


#: memo key: the state each endpoint's last Event announced, by uid
_POSTED_STATES = "posted_endpoint_states"

_OWNED = (
    "state",
    "conditions",
    "observedGeneration",
    "replicas",
    "availableReplicas",
    "selector",
    "weightsCacheStatus",
    "imageCacheStatus",
    "resolved",
    "warmPlacement",
    "deploymentName",
    "routerName",
    "endpointPickerName",
    "waitingSince",
    "gateOpenedAt",
    "deploymentStatus",
    "metricsStatus",
)


def _export_metrics(endpoint: Endpoint, state: EndpointState, placement: WarmPlacement) -> None:
    ns, name = endpoint.ref.namespace, endpoint.ref.name
    metrics.ENDPOINT_PODS.labels(ns, name, "warm").set(placement.warm_pods)
    metrics.ENDPOINT_PODS.labels(ns, name, "cold").set(placement.cold_pods)
    for candidate in EndpointState:
        metrics.ENDPOINT_STATE.labels(ns, name, candidate.value).set(1 if candidate == state else 0)


def delete(kind: str, body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Finalizer: remove the Deployment, Service and router, and release the caches (shared ones survive)."""
    store: Store = memo.store
    meta = body["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    with handling.lock(memo, uid), handling.api_errors("releasing the endpoint's children", finalizing=True):
        handling.patch_status(store, kind, body, {"state": EndpointState.DELETION_IN_PROGRESS.value})
        if (body.get("status") or {}).get("routerName"):
            routing.remove(store, ns, name, uid)
        if (body.get("status") or {}).get("endpointPickerName"):
            routing.remove_picker(store, ns, name, uid)
        store.delete("apps/v1", "Deployment", names.child_name(name), ns)
        store.delete("v1", "Service", names.child_name(name), ns)
        fsx.release(store, ns, uid)
        for cache_name in set(sharing.lookup(indexes["weights_caches_by_parent"], uid)):
            sharing.release(store, MDCC_KIND, cache_name, ns, uid)
        for cache_name in set(sharing.lookup(indexes["image_caches_by_parent"], uid)):
            sharing.release(store, MIC_KIND, cache_name, ns, uid)
    _forget_metrics(ns, name)
    applying.forget(memo, uid)
    guarding.forget(memo, uid)
    memo.setdefault(_POSTED_STATES, {}).pop(uid, None)
    kopf.info(body, reason=EndpointState.DELETION_COMPLETE.value, message="children removed and caches released")


def _forget_metrics(ns: str, name: str) -> None:
    for candidate in EndpointState:
        with contextlib.suppress(KeyError):
            metrics.ENDPOINT_STATE.remove(ns, name, candidate.value)
    for placement in ("warm", "cold"):
        with contextlib.suppress(KeyError):
            metrics.ENDPOINT_PODS.remove(ns, name, placement)
