"""Decide the image-ready node labels of one cache key from the pre-pull pods (pure: pods and labels in, patches out).

A node gets `image_ready_label(key)=ready` when a pre-pull pod of that key is Ready on it. It keeps the label while
its own pod exists and the node is still targeted (a pod restarting does not flap the label), and loses it when the
pod is gone or the node left the targeting. Several MICs can share a key (the same image and targeting in several
namespaces): a label stays while ANY of them has a Ready pod on the node, so one MIC going away never strips another's.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from warmstart.api.nodelabels import READY
from warmstart.render.image_status import PrepullPod

#: node name -> "ready" (set) or None (remove), as a merge patch of metadata.labels wants it
LabelChanges = dict[str, str | None]


def _live(pod: PrepullPod, key: str) -> bool:
    return pod.key == key and not pod.deleting and pod.node is not None


def label_changes(
    key: str,
    labeled: Set[str],
    own: Iterable[PrepullPod],
    others: Iterable[PrepullPod],
    targeted: Set[str],
) -> LabelChanges:
    """Changes to the nodes' `key` label.

    `labeled`: nodes carrying it now; `own`: the reconciled MIC's pods (none when it is being deleted); `others`: pods
    of every other MIC; `targeted`: nodes the reconciled MIC's targeting matches.
    """
    mine = [(p.node, p.warm) for p in own if _live(p, key) and p.node and p.node in targeted]
    add = {node for node, warm in mine if warm and node} | {
        p.node for p in others if _live(p, key) and p.warm and p.node
    }
    keep = add | {node for node, _ in mine}
    changes: LabelChanges = {node: READY for node in sorted(add - labeled)}
    changes.update({node: None for node in sorted(labeled - keep)})
    return changes
