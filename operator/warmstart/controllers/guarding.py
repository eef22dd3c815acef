"""Refuse, before anything is applied, an endpoint whose model pod its namespace would not admit as a Pod.

Creating an endpoint must never grant more than creating a pod would. Before the reconcile applies any child (caches,
Deployment, Service, router), the model pod template it rendered goes through two checks:

1. the pass-through rules (render/passthrough.py): init containers at most at Pod Security baseline whatever the
   namespace's level, hostPath volumes under the admin's roots, mounted read-only;
2. Pod Security, on the real API server: a Pod with that template is created in the endpoint's namespace with
   `dryRun=All`. PodSecurity admission answers at the namespace's `enforce` level (its `warn` level only adds
   warnings, which do not refuse), exactly as it will for the ReplicaSet's pods; a Deployment, by contrast, is only
   warned about. A pod the API server finds invalid is refused here too, with its message.

A refusal is a `Ready=False` condition (reason `InitContainerBeyondBaseline`, `PodSecurityRejected`,
`HostPathNotAllowed` or `RenderRejected`, the message naming the fields) and a Warning Event; nothing is applied, and
what runs keeps running.

The verdict for one template is remembered per endpoint: an admitted template is checked again after
`RECHECK_ADMITTED_SECONDS` (the namespace's level may change), a refused one after `RECHECK_REFUSED_SECONDS` (the
admin may relabel the namespace). Any other answer (the service account does not exist yet, a quota, RBAC without
`create pods`) decides nothing: the endpoint proceeds and PodSecurity still enforces on the ReplicaSet's pods.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Any

import kopf

from warmstart.controllers import applying
from warmstart.controllers.storage import Forbidden, Invalid, Store
from warmstart.render import passthrough
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

#: the reason of an endpoint whose model pod Pod Security refuses in its namespace
POD_SECURITY_REJECTED = "PodSecurityRejected"
#: the reason of an endpoint whose model pod the API server finds invalid (duplicate volume names, bad fields...)
RENDER_REJECTED = "RenderRejected"
RECHECK_ADMITTED_SECONDS = 300.0
RECHECK_REFUSED_SECONDS = 20.0
#: what the user can do about a Pod Security refusal (the API server's message names the fields)
POD_SECURITY_ACTION = (
    "; remove those fields from the spec, or use a namespace whose pod-security.kubernetes.io/enforce level admits "
    f"them (checked again every {RECHECK_REFUSED_SECONDS:.0f} s)"
)
#: how PodSecurity admission words its refusal ("... is forbidden: violates PodSecurity "baseline:latest": ...")
_POD_SECURITY_MARK = "violates PodSecurity"
#: a 400 from an admission webhook that has side effects ("... does not support dry run")
_NO_DRY_RUN = "does not support dry run"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    """Why the endpoint's model pod may not be created: one CamelCase reason, a message naming the fields."""

    reason: str
    message: str


@dataclass(frozen=True)
class _Verdict:
    digest: str
    refusal: Refusal | None
    at: float


def dry_run_pod(deployment: Manifest) -> Manifest:
    """The Pod the Deployment's ReplicaSet would create (its template, in its namespace), for a dry-run create."""
    template = deployment["spec"]["template"]
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{deployment['metadata']['name']}-",
            "namespace": deployment["metadata"]["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def pod_security(store: Store, deployment: Manifest) -> Refusal | None:
    """The API server's answer to creating the Deployment's pod (dry run): a Refusal, or None (admitted, or no
    verdict: a refusal by anything but PodSecurity or validation)."""
    try:
        store.dry_run_create(dry_run_pod(deployment))
    except Forbidden as error:
        text = str(error)
        if _POD_SECURITY_MARK not in text:
            log.warning("the Pod Security dry run of %s decided nothing: %s", deployment["metadata"]["name"], text)
            return None
        return Refusal(
            POD_SECURITY_REJECTED,
            "the model pod " + text[text.index(_POD_SECURITY_MARK) :] + POD_SECURITY_ACTION,
        )
    except Invalid as error:
        if _NO_DRY_RUN in str(error):  # a webhook with side effects: the API server could not ask it
            log.warning("the Pod Security dry run of %s decided nothing: %s", deployment["metadata"]["name"], error)
            return None
        return Refusal(RENDER_REJECTED, f"the API server rejected the model pod this spec renders: {error}")
    return None


def refusal(
    store: Store, memo: kopf.Memo, body: kopf.Body, endpoint: Endpoint, deployment: Manifest, context: RenderContext
) -> Refusal | None:
    """Why the endpoint's rendered model pod may not be created (None: go ahead); each new refusal posts an Event."""
    beyond = passthrough.init_container_refusals(endpoint)
    broken = passthrough.refusals(endpoint, context.allowed_host_paths)
    found: Refusal | None
    if beyond:
        found = Refusal(passthrough.INIT_REASON, "; ".join(beyond)[:1024])
    elif broken:
        found = Refusal(passthrough.REASON, "; ".join(broken)[:1024])
    else:
        found = _checked(store, memo, endpoint.ref.uid, deployment)
    reported: dict[str, Refusal | None] = memo.setdefault("pod_refusals_reported", {})
    if found is not None and reported.get(endpoint.ref.uid) != found:
        kopf.event(body, type="Warning", reason=found.reason, message=found.message[:1000])
    reported[endpoint.ref.uid] = found
    return found


def _checked(store: Store, memo: kopf.Memo, uid: str, deployment: Manifest) -> Refusal | None:
    """Pod Security's verdict on the template: remembered, or asked of the API server again."""
    verdicts: dict[str, _Verdict] = memo.setdefault("pod_security_verdicts", {})
    digest = applying.digest([deployment["spec"]["template"]])
    last = verdicts.get(uid)
    if last is not None and last.digest == digest:
        limit = RECHECK_REFUSED_SECONDS if last.refusal is not None else RECHECK_ADMITTED_SECONDS
        if time.monotonic() - last.at <= limit:
            return last.refusal
    found = pod_security(store, deployment)
    verdicts[uid] = _Verdict(digest, found, time.monotonic())
    return found


def forget(memo: kopf.Memo, uid: str) -> None:
    memo.setdefault("pod_security_verdicts", {}).pop(uid, None)
    memo.setdefault("pod_refusals_reported", {}).pop(uid, None)
