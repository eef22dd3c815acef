"""kopf handlers for InferenceEndpointConfig and JumpStartModel: one level-based reconcile for both kinds.

Each handler is three lines: take the body, call `reconciling.reconcile` (or `release`), let it write status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import GROUP, VERSION
from warmstart.api.endpoints import KIND as IEC_KIND
from warmstart.api.endpoints import PLURAL as IEC_PLURAL
from warmstart.api.jumpstart import KIND as JSM_KIND
from warmstart.api.jumpstart import PLURAL as JSM_PLURAL
from warmstart.controllers import reconciling
from warmstart.render import labels as label_keys


@kopf.index("", "v1", "pods", labels={label_keys.ENDPOINT_LABEL: kopf.PRESENT})
def endpoint_pods(namespace: str | None, name: str, labels: Mapping[str, str], spec: Mapping[str, Any], body: Any, **_: Any) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(namespace, endpoint, kind) -> (pod, node) for every scheduled, live endpoint pod."""
    node = spec.get("nodeName") or ""
    if body.get("metadata", {}).get("deletionTimestamp") or body.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return {}
    return {(namespace or "", labels[label_keys.ENDPOINT_LABEL], labels.get(label_keys.ENDPOINT_KIND_LABEL, "")): (name, node)}


def _handlers(kind: str, plural: str) -> None:
    @kopf.on.resume(GROUP, VERSION, plural)
    @kopf.on.create(GROUP, VERSION, plural)
    @kopf.on.update(GROUP, VERSION, plural)
    def reconcile_on_change(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
        reconciling.reconcile(kind, body, memo, indexes)

    @kopf.timer(GROUP, VERSION, plural, interval=reconciling.TIMER_SECONDS, initial_delay=reconciling.TIMER_SECONDS)
    def reconcile_on_timer(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
        if not body.get("metadata", {}).get("deletionTimestamp"):
            reconciling.reconcile(kind, body, memo, indexes)

    @kopf.on.delete(GROUP, VERSION, plural)
    def release_on_delete(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
        reconciling.delete(kind, body, memo, indexes)


_handlers(IEC_KIND, IEC_PLURAL)
_handlers(JSM_KIND, JSM_PLURAL)
