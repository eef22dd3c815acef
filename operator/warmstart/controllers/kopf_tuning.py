"""Two costs that kopf (1.45) pays per watched object and that grow with the fleet, and what the operator uses instead.

1. **Index pre-population wakes every waiting worker on every object.** While the indexes fill (when the operator
   starts), kopf makes a toggle per listed object and each object's worker, once indexed, waits until every toggle is
   gone. Every toggle added or dropped wakes every waiting worker, which then re-checks the set: the work grows with
   the square of the objects. With 2,000 nodes a start took 23 CPU seconds before the first reconcile, 4.3 with this
   set (bench/operator_start.py).
   `FlipNotifyingToggleSet` wakes the waiters only when the set's state turns (all dropped: indexed), which is all they
   wait for; a toggle's own waiters are woken by the toggle, as before.
2. **The diff base deep-copies the whole body on every event** and then drops `status` and most of `metadata`: a
   node's images and conditions, every object's managedFields. `LeanDiffBaseStorage` hands kopf a body without them
   (unless a handler follows a status or metadata field), so the same essence costs a fraction of the copy.

`install()` puts the toggle set in place, and the watch wrapper of kopf_relisting.py (objects deleted while a watch was
down leave the indexes); kopf creates its toggle sets when the operator starts, so it must run first.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterable
from typing import Any, cast

import kopf
from kopf._cogs.aiokits import aiotoggles

from warmstart.controllers import kopf_relisting

#: the kopf release whose internals `FlipNotifyingToggleSet` was written against (pyproject.toml pins it)
KOPF_VERSION = "1.45.2"


class FlipNotifyingToggleSet(aiotoggles.ToggleSet):
    """kopf's ToggleSet, but adding or dropping a toggle wakes the set's waiters only when the set's state turns."""

    async def make_toggle(self, __val: bool = False, *, name: str | None = None) -> aiotoggles.Toggle:
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            was_on = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != was_on:
                self._condition.notify_all()
        return toggle

    async def drop_toggle(self, toggle: aiotoggles.Toggle) -> None:
        await self.drop_toggles([toggle])

    async def drop_toggles(self, toggles: Iterable[aiotoggles.Toggle]) -> None:
        async with self._condition:
            was_on = self.is_on()
            self._toggles.difference_update(toggles)
            if self.is_on() != was_on:
                self._condition.notify_all()


def install() -> bool:
    """Use `FlipNotifyingToggleSet` for the toggle sets kopf creates from now on, and kopf_relisting's watch wrapper;
    False (and a warning) when the installed kopf is not the release they were written against."""
    installed = importlib.metadata.version("kopf")
    if installed != KOPF_VERSION:
        logging.getLogger(__name__).warning(
            "kopf %s is not %s: its index pre-population keeps its own toggle sets", installed, KOPF_VERSION
        )
        return False
    aiotoggles.ToggleSet = FlipNotifyingToggleSet  # type: ignore[misc]
    kopf_relisting.install()
    return True


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff base, built from the body without `status` and with only the metadata the essence and
    its key use (labels, annotations, owner references); the whole body when a handler follows a status or metadata
    field."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        fields = list(extra_fields or [])
        lean = body if _names_status_or_metadata(fields) else kopf.Body(cast(kopf.RawBody, lean_body(body)))
        return super().build(body=lean, extra_fields=fields)


#: the metadata a diff base keeps (labels, annotations) or its key reads (owner references)
_KEPT_METADATA = ("labels", "annotations", "ownerReferences")


def lean_body(body: Any) -> dict[str, Any]:
    """A shallow copy of `body` without what a diff base drops anyway: status, and the rest of metadata (pure)."""
    lean = {key: value for key, value in body.items() if key not in ("metadata", "status")}
    metadata = body.get("metadata") or {}
    lean["metadata"] = {key: metadata[key] for key in _KEPT_METADATA if key in metadata}
    return lean


def _names_status_or_metadata(fields: list[Any]) -> bool:
    for field in fields:
        path = field if isinstance(field, str) else ".".join(str(part) for part in field)
        if path.split(".", 1)[0] in ("status", "metadata"):
            return True
    return False
