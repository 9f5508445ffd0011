"""Tool schemas and schema-typed values for the XML-style formats.

XML-style formats (qwen3_coder, glm45, minimax_m2) write parameter values as bare text; the
tool's JSON Schema decides what JSON each one becomes.  ``to_json(text, schema)`` returns
JSON text and never rounds numbers through float: a valid number keeps the model's digits.

    type string          -> JSON string of the text as written ("02139" stays "02139")
    integer / number     -> the number as written, if it is a JSON number; else a string
    boolean / null       -> true/false/null (case-insensitive); else a string
    object / array / ?   -> the text if it is valid JSON, else a Python literal, else a string
"""

from __future__ import annotations

import json
import re
from typing import Any

from workers.parser.formats.pyliteral import literal_to_json
from workers.parser.scan import json_error

_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def json_string(text: str) -> str:
    """``text`` as a JSON string literal, non-ASCII kept as written."""
    return json.dumps(text, ensure_ascii=False)


class ToolSchemas:
    """Parameter schemas by tool name, from OpenAI-style tool dicts (or bare function dicts)."""

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        self._params: dict[str, dict[str, Any]] = {}
        for tool in tools or ():
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            name = fn.get("name") if isinstance(fn, dict) else None
            if isinstance(name, str):
                params = fn.get("parameters") or {}
                props = params.get("properties") if isinstance(params, dict) else None
                self._params[name] = props if isinstance(props, dict) else {}

    def names(self) -> list[str]:
        """Names of the known tools."""
        return list(self._params)

    def param(self, tool: str | None, name: str) -> dict[str, Any] | None:
        """The JSON Schema of parameter ``name`` of ``tool``, or None when unknown."""
        schema = self._params.get(tool or "", {}).get(name)
        return schema if isinstance(schema, dict) else None


def _types(schema: dict[str, Any] | None) -> list[str]:
    if not schema:
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            return [x for alt in alts if isinstance(alt, dict) for x in _types(alt)]
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return ["string"]
    return []


def to_json(text: str, schema: dict[str, Any] | None) -> str:
    """The JSON text for a bare parameter value ``text`` typed by ``schema`` (see module doc)."""
    types = _types(schema)
    if "null" in types and text.strip().lower() in ("null", "none"):
        return "null"
    for t in types:
        value = _as_type(text, t)
        if value is not None:
            return value
    if "string" in types:
        return json_string(text)
    return _guess(text)


def _as_type(text: str, t: str) -> str | None:
    s = text.strip()
    if t == "string":
        return json_string(text)
    if t == "integer":
        return s if _INT.match(s) else None
    if t == "number":
        return s if _NUMBER.match(s) else None
    if t == "boolean":
        low = s.lower()
        return low if low in ("true", "false") else None
    if t in ("object", "array"):
        return _structured(s, dict if t == "object" else list)
    return None


def _structured(s: str, kind: type) -> str | None:
    if not json_error(s, want_object=False):
        value = json.loads(s, parse_int=str, parse_float=str)
        return s if isinstance(value, kind) else None
    converted = literal_to_json(s)
    if converted is not None and converted[:1] == ("{" if kind is dict else "["):
        return converted
    return None


def _guess(text: str) -> str:
    s = text.strip()
    if s and not json_error(s, want_object=False):
        return s
    return json_string(text)
