"""Render the API reference page (docs/api-reference.md) from the generated CRDs: every field, its type, default,
validation, and whether warmstart acts on it.

The CRDs are generated from the pydantic models, so this page is too: `make crds` writes it, and a test fails when
the committed page differs. "Acted on" comes from `render.unsupported`, the same list that fills the
`UnsupportedFields` condition, so the page and the condition cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from warmstart.api import crds
from warmstart.render import unsupported

HEADER = """# API reference

Generated from the CRDs by `make crds`; do not edit by hand. Every kind is
served as `inference.sagemaker.aws.amazon.com/v1` (and `v1alpha1`, with the same schema). **Acted on**: *yes* when
warmstart uses the field; *no* when it accepts the field for compatibility and names it in the `UnsupportedFields`
condition when set; *partly* when only some values are used (the note says which). Fields under a Kubernetes type
(a pod's volumes, affinity, resources, ...) take that type's schema, as in a Pod.
"""

_VALIDATION_KEYS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "format")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _type(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = str(schema.get("type", "object"))
    if kind == "array":
        return f"[]{_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map[string]{_type(schema['additionalProperties'])}"
    return kind


def _validation(schema: dict[str, Any], required: bool) -> str:
    parts = ["required"] if required else []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{value}`" for value in schema["enum"]))
    parts += [f"{key} `{schema[key]}`" for key in _VALIDATION_KEYS if key in schema]
    parts += [str(rule["message"]) for rule in schema.get("x-kubernetes-validations", []) if "message" in rule]
    return "; ".join(parts)


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _acted_on(path: str) -> str:
    if path.startswith("status"):
        return "written by warmstart"
    # a field below one warmstart does not act on is not acted on either
    parts = path.removeprefix("spec.").replace("[]", "").split(".")
    for depth in range(len(parts), 0, -1):
        note = unsupported.NOT_ACTED_ON.get(".".join(parts[:depth]))
        if note is not None:
            return note if depth == len(parts) or note == "no" else "yes"
    return "yes"


def _fields(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) for every field below `schema`, depth first, stopping at pass-through types."""
    required = set(schema.get("required", []))
    for name, child in schema.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        yield child_path, child, name in required
        if child.get("x-kubernetes-preserve-unknown-fields"):
            continue
        if child.get("type") == "array":
            yield from _fields(child.get("items", {}), child_path + "[]")
        else:
            yield from _fields(child, child_path)


def kind_section(kind: crds.Kind) -> str:
    """One kind's table of spec and status fields."""
    schema = crds.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    lines = [
        f"## {kind.kind}",
        "",
        f"Short names: {', '.join(f'`{name}`' for name in kind.short_names)}.",
        "",
        "| field | type | default | validation | acted on | description |",
        "|---|---|---|---|---|---|",
    ]
    for part in ("spec", "status"):
        if part not in schema.get("properties", {}):
            continue
        for path, child, required in _fields(schema["properties"][part], part):
            row = (
                f"`{path}`",
                _type(child),
                _default(child),
                _validation(child, required),
                _acted_on(path),
                child.get("description", ""),
            )
            lines.append("| " + " | ".join(_cell(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def page() -> str:
    """The whole reference page."""
    return HEADER + "".join("\n" + kind_section(kind) for kind in crds.KINDS)
