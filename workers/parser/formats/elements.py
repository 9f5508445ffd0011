"""Parameter values written as nested elements (minimax_m3) -> JSON text typed by the tool schema.

    <k>text</k>                            a leaf: ``schema.to_json(text, schema)``
    <k><a>1</a><b>x</b></k>                an object {"a": .., "b": ..}; a repeated child name collects a list
    <k><item>1</item><item>2</item></k>    an array where the schema makes ``k`` one (child names not read)
    <k></k>                                [] or {} where the schema makes ``k`` a container, not a string

Text beside child elements (other than whitespace) has no JSON reading: ``ElementError``.
Facts from vLLM 0.32's ``vllm/parser/minimax_m3.py`` and MiniMax-M3's chat template (its ``to_xml``).
"""

from __future__ import annotations

from typing import Any

from workers.parser.schema import _types, json_string, to_json


class ElementError(ValueError):
    """An element tree with no JSON reading."""


class Element:
    """One parameter element being read: its text pieces and its finished children, in order."""

    __slots__ = ("name", "text", "children")

    def __init__(self, name: str) -> None:
        self.name = name
        self.text: list[str] = []
        self.children: list[Element] = []


def container(schema: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """("array" | "object", the alternative saying so) for a schema that makes a value a container."""
    if not isinstance(schema, dict):
        return None
    types = schema.get("type")
    for kind in ("array", "object"):
        if types == kind or (isinstance(types, list) and kind in types):
            return kind, schema
    if types is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for key in ("anyOf", "oneOf"):
        for alt in schema.get(key) or ():
            if found := container(alt):
                return found
    return None


def element_json(el: Element, schema: Any) -> str:
    """The JSON text of element ``el`` under ``schema`` (see the module doc)."""
    schema = schema if isinstance(schema, dict) else None
    box = container(schema)
    text = "".join(el.text)
    if not el.children:
        if box is not None and "string" not in _types(schema) and not text.strip():
            return "[]" if box[0] == "array" else "{}"
        return to_json(text, schema)
    if text.strip():
        raise ElementError(f"text beside child elements in <{el.name}>")
    if box is not None and box[0] == "array":
        items = box[1].get("items")
        return "[" + ", ".join(element_json(child, items) for child in el.children) + "]"
    return _object_json(el.children, box[1] if box is not None else None)


def _object_json(children: list[Element], schema: dict[str, Any] | None) -> str:
    props = (schema or {}).get("properties") or {}
    extra = (schema or {}).get("additionalProperties")
    fields: dict[str, list[str]] = {}
    for child in children:
        fields.setdefault(child.name, []).append(element_json(child, props.get(child.name, extra)))
    parts = (f"{json_string(k)}: {v[0] if len(v) == 1 else '[' + ', '.join(v) + ']'}" for k, v in fields.items())
    return "{" + ", ".join(parts) + "}"
