"""Turn pydantic JSON Schema into a Kubernetes structural OpenAPI v3 schema (no $ref, no nulls)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

_DROPPED = {"title", "$defs", "discriminator"}


def structural(model: type[BaseModel]) -> Schema:
    """The structural schema of a model, with refs inlined and Optional unwrapped."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Schema] = raw.get("$defs", {})
    return _convert(raw, defs)


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    if "$ref" not in node:
        return node
    target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return _resolve(merged, defs)


def _unwrap_any_of(node: Schema, defs: dict[str, Schema]) -> Schema:
    options = [_resolve(o, defs) for o in node["anyOf"] if o.get("type") != "null"]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if len(options) == 1:
        return {**options[0], **rest}
    types = {o.get("type") for o in options}
    if types == {"integer", "string"}:
        return {**rest, "x-kubernetes-int-or-string": True}
    return {**rest, "type": "object", "x-kubernetes-preserve-unknown-fields": True}


#: JSON Schema 2020's numeric exclusive bounds and the OpenAPI v3 keyword that carries the bound instead
_EXCLUSIVE_BOUNDS = {"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}


def _convert(node: Schema, defs: dict[str, Schema]) -> Schema:
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _unwrap_any_of(node, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED or (key == "default" and (value is None or isinstance(value, (dict, list)))):
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out[key] = _convert(value, defs)
            elif value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif key == "const":
            out["enum"] = [value]
        elif key in _EXCLUSIVE_BOUNDS and not isinstance(value, bool):
            # JSON Schema 2020 (pydantic's `gt`/`lt`) gives the bound itself; OpenAPI v3, which CRDs speak, wants the
            # bound in minimum/maximum and a boolean flag: the API server refuses a number here
            out[_EXCLUSIVE_BOUNDS[key]] = value
            out[key] = True
        elif key == "minItems" or key == "maxItems":
            out[key] = value
        else:
            out[key] = value
    if "x-kubernetes-int-or-string" not in out and "type" not in out:
        out["type"] = "object"
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "object" and "properties" in out:
        out.pop("additionalProperties", None)
    return out
