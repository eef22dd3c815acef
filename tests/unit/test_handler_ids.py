"""Every kopf handler's id makes valid annotation keys, so kopf can save a retried handler's progress.

kopf stores each handler's progress (retries, backoff) in an annotation named after the handler id. A handler
defined inside a function gets the id `outer.<locals>.name`, which becomes `outer._locals_.name`: a key starting
with `_`, which the API server refuses with 422, so a failing handler's retry state is never saved."""

from __future__ import annotations

import re
from typing import Any

import kopf

from warmstart.controllers import running
from warmstart.controllers.settings import OperatorSettings

#: the name part of a Kubernetes annotation key
NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _handler_ids(registry: kopf.OperatorRegistry) -> set[str]:
    ids: set[str] = set()
    for group in (registry._changing, registry._spawning, registry._watching, registry._indexing):
        for handler in group.get_all_handlers():
            ids.add(str(handler.id))
    return ids


def _progress_storage() -> Any:
    settings = kopf.OperatorSettings()
    running.configure(settings)
    return settings.persistence.progress_storage


def test_every_handler_id_makes_valid_progress_annotation_keys() -> None:
    storage = _progress_storage()
    ids = _handler_ids(running.registry(OperatorSettings()))
    assert len(ids) >= 8, ids
    for handler_id in sorted(ids):
        for key in storage.make_keys(handler_id):
            prefix, _, name = key.rpartition("/")
            assert prefix and len(name) <= 63 and NAME.match(name), f"{handler_id!r} makes the invalid key {key!r}"
