"""kopf wiring of InferenceEndpointConfig and JumpStartModel: one level-based reconcile for both kinds.

Each handler is one call: `reconciling.reconcile` (which validates, reconciles and writes status) or `delete`. The
status loop (`follow-status`) runs it again whenever an event changes what the status reads (controllers/waking.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import GROUP, VERSION
from warmstart.api.endpoints import KIND as IEC_KIND
from warmstart.api.endpoints import PLURAL as IEC_PLURAL
from warmstart.api.jumpstart import KIND as JSM_KIND
from warmstart.api.jumpstart import PLURAL as JSM_PLURAL
from warmstart.controllers import deployment_index, filling, reconciling, waking
from warmstart.controllers.settings import OperatorSettings
from warmstart.render import labels as label_keys


def endpoint_pods(
    namespace: str | None, name: str, labels: Mapping[str, str], spec: Mapping[str, Any], body: Any, **_: Any
) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(namespace, endpoint, kind) -> (pod, node) for every scheduled, live endpoint pod."""
    node = spec.get("nodeName") or ""
    if body.get("metadata", {}).get("deletionTimestamp") or body.get("status", {}).get("phase") in (
        "Succeeded",
        "Failed",
    ):
        return {}
    return {
        (namespace or "", labels[label_keys.ENDPOINT_LABEL], labels.get(label_keys.ENDPOINT_KIND_LABEL, "")): (
            name,
            node,
        )
    }


def _handlers(registry: kopf.OperatorRegistry, interval: float, kind: str, plural: str) -> None:
    # nested functions get ids like `_handlers.<locals>.name`, which make invalid annotation keys: kopf could not save a
    # retried handler's progress (422). Explicit ids, the same for both kinds (ids are per resource).
    def reconcile_on_change(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
        reconciling.reconcile(kind, body, memo, indexes)

    def release_on_delete(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
        reconciling.delete(kind, body, memo, indexes)

    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(GROUP, VERSION, plural, id="reconcile-on-change", registry=registry)(reconcile_on_change)
    # status follows events (controllers/waking.py); every `interval` seconds at the latest
    follow_status = waking.status_loop(
        functools.partial(waking.endpoint_key, kind),
        functools.partial(reconciling.reconcile, kind),
        lambda _: interval,
    )
    kopf.daemon(GROUP, VERSION, plural, id="follow-status", registry=registry)(follow_status)
    kopf.on.delete(GROUP, VERSION, plural, id="release-on-delete", registry=registry)(release_on_delete)


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the endpoint pod and Deployment indexes and both kinds' handlers; each endpoint's status loop wakes
    on the events of its children and caches (controllers/waking.py), and every `settings.resync_seconds` at the
    latest."""
    endpoint_labels = {label_keys.ENDPOINT_LABEL: kopf.PRESENT}
    kopf.index("", "v1", "pods", labels=endpoint_labels, registry=registry)(endpoint_pods)
    kopf.index("", "v1", "pods", labels=endpoint_labels, registry=registry)(filling.endpoint_pod_preloads)
    deployment_index.register(registry)
    _handlers(registry, settings.resync_seconds, IEC_KIND, IEC_PLURAL)
    _handlers(registry, settings.resync_seconds, JSM_KIND, JSM_PLURAL)
