"""kopf wiring of ModelImageCache: its indexes, the PriorityClass check at start-up, and handlers into prepulling.

One level-based reconcile (`prepulling.reconcile`) serves create, update, resume and the drift-correcting timer
(every `resync_seconds`); deletion runs behind the operator's finalizer (`prepulling.release`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MIC_PLURAL, ModelImageCacheSpec
from warmstart.api.states import CacheState
from warmstart.controllers import handling, prepulling, waking
from warmstart.controllers.settings import OperatorSettings
from warmstart.controllers.storage import Forbidden, StorageError, Store
from warmstart.render import daemonsets, image_status, labels, priority
from warmstart.render.image_status import PrepullPod


def prepull_pods(namespace: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], PrepullPod]:
    """(namespace, MIC label value) -> the pre-pull pods of that MIC."""
    pod = image_status.prepull_pod(body)
    return {(namespace, pod.mic): pod}


def image_cache_states(namespace: str, name: str, status: Mapping[str, Any], **_: Any) -> dict[tuple[str, str], str]:
    """(namespace, name) -> status.state of every MIC, for the warmstart_caches gauge."""
    return {(namespace, name): str(status.get("state") or CacheState.PENDING.value)}


def ensure_priority_class(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Create the pre-pull PriorityClass if it is missing (the chart normally installs it): pods naming a missing
    PriorityClass are rejected by admission, and the DaemonSet would never get a pod."""
    store: Store = memo.store
    name = memo.settings.render.prepull_priority_class
    try:
        if store.get("scheduling.k8s.io/v1", "PriorityClass", name) is None:
            store.apply(priority.priority_class(name))
            logger.info(f"created PriorityClass {name}")
    except Forbidden:
        logger.warning(f"PriorityClass {name} cannot be read or created (RBAC); install it with the chart")
    except StorageError as error:
        logger.warning(f"PriorityClass {name} not ensured: {error}")


def reconcile_on_change(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    prepulling.reconcile(body, handling.spec(body, ModelImageCacheSpec), memo, indexes)


def _reconcile(body: kopf.Body, memo: kopf.Memo, indexes: dict[str, Any]) -> None:
    prepulling.reconcile(body, handling.spec(body, ModelImageCacheSpec), memo, indexes)


def release_on_delete(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    prepulling.release(body, memo, indexes)


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the ModelImageCache indexes and handlers; each cache's status loop wakes on its pre-pull pods'
    events, and every `settings.resync_seconds` at the latest (read from the memo on each run)."""
    del settings
    prepull_labels = {labels.MIC_LABEL: kopf.PRESENT, labels.COMPONENT: daemonsets.COMPONENT}
    kopf.index("", "v1", "pods", labels=prepull_labels, registry=registry)(prepull_pods)  # type: ignore[arg-type]
    kopf.index(GROUP, VERSION, MIC_PLURAL, registry=registry)(image_cache_states)  # type: ignore[arg-type]
    kopf.on.startup(registry=registry)(ensure_priority_class)
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(GROUP, VERSION, MIC_PLURAL, registry=registry)(reconcile_on_change)
    # status follows the pre-pull pods and the DaemonSet (controllers/waking.py); the resync interval at the latest
    follow_status = waking.status_loop(waking.image_cache_key, _reconcile, lambda memo: memo.settings.resync_seconds)
    kopf.daemon(GROUP, VERSION, MIC_PLURAL, id="follow-status", registry=registry)(follow_status)
    kopf.on.delete(GROUP, VERSION, MIC_PLURAL, registry=registry)(release_on_delete)
