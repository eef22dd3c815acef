"""Which API model fields a piece of code reads: a trace of attribute reads on warmstart's pydantic models.

While `tracing()` is active every read of a declared field on an `ApiModel` instance is recorded as
(model class, field name). Dumping a model (`model_dump`, `to_api`, ...) passes every field it emits into the output,
so it records each of them, nested models included. Validation runs before tracing starts, so fields only a validator
looks at are not counted.
"""

from __future__ import annotations

import contextlib
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from warmstart.api.base import ApiModel

Read = tuple[type[BaseModel], str]
_DUMPS = frozenset({"model_dump", "model_dump_json", "to_api"})


def _emitted(model: BaseModel, found: set[Read]) -> None:
    for name in type(model).model_fields:
        value = model.__dict__.get(name)
        if value is None:
            continue
        found.add((type(model), name))
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, BaseModel):
                _emitted(item, found)


@contextlib.contextmanager
def tracing() -> Iterator[set[Read]]:
    """Record field reads on ApiModel instances until the block ends."""
    found: set[Read] = set()
    original = ApiModel.__getattribute__

    def traced(self: ApiModel, name: str) -> Any:
        cls = type(self)
        if name in cls.model_fields:
            found.add((cls, name))
        elif name in _DUMPS:
            _emitted(self, found)
        return original(self, name)

    ApiModel.__getattribute__ = traced  # type: ignore[method-assign]
    try:
        yield found
    finally:
        ApiModel.__getattribute__ = original  # type: ignore[method-assign]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (through Optional, list, Annotated), or None for plain data."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def field_chain(root: type[BaseModel], path: str) -> list[Read] | None:
    """The (model, field) reads that reach `path` (spec.a.b[].c) from `root`, down to the deepest model field; the rest
    of the path lies inside plain data (a dict, a core Kubernetes object) that the last field holds whole. None when
    a part of the path is not a field of the model."""
    chain: list[Read] = []
    model: type[BaseModel] | None = root
    for part in re.findall(r"[^.\[\]]+|\[\]", path)[1:]:
        if part == "[]":
            continue
        if model is None:
            break
        by_alias = {(info.alias or name): name for name, info in model.model_fields.items()}
        name = by_alias.get(part) or (part if part in model.model_fields else None)
        if name is None:
            return None
        chain.append((model, name))
        model = _model_in(model.model_fields[name].annotation)
    return chain
