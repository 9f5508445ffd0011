"""Schema-typed values and Python literals -> JSON text."""

from __future__ import annotations

import warnings

import pytest

from workers.parser.formats.pyliteral import literal_to_json
from workers.parser.schema import ToolSchemas, to_json


@pytest.mark.parametrize(("text", "schema", "want"), [
    ("02139", {"type": "string"}, '"02139"'),
    ("42", {"type": "integer"}, "42"),
    ("123456789012345678901234567890", {"type": "integer"}, "123456789012345678901234567890"),
    ("4.2", {"type": "integer"}, "4.2"),  # not an integer: falls back to plain JSON
    ("1e400", {"type": "number"}, "1e400"),
    ("True", {"type": "boolean"}, "true"),
    ("null", {"type": ["integer", "null"]}, "null"),
    ('{"a": 1}', {"type": "object"}, '{"a": 1}'),
    ("{'a': None}", {"type": "object"}, '{"a": null}'),
    ("[1, 'x']", {"type": "array"}, '[1, "x"]'),
    ("not json", {"type": "object"}, '"not json"'),
    ("42", None, "42"),
    ("02139", None, '"02139"'),
    ("é \"q\"", None, '"é \\"q\\""'),
    ("7", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "7"),
])
def test_to_json(text: str, schema: dict | None, want: str) -> None:
    assert to_json(text, schema) == want


@pytest.mark.parametrize(("text", "want"), [
    ("None", "null"), ("(1, -2.50)", "[1, -2.50]"), ("{'k': [True]}", '{"k": [true]}'), ("'é'", '"é"'),
    ("10**3", None), ("foo", None), ("f(1)", None), ("float('nan')", None), ("-'x'", None),
])
def test_literal_to_json(text: str, want: str | None) -> None:
    assert literal_to_json(text) == want


def test_a_malformed_literal_is_none_without_a_warning() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert literal_to_json("{'n': 1and 2}") is None
    assert [str(w.message) for w in seen] == []


def test_tool_schemas_accepts_openai_and_bare_dicts() -> None:
    s = ToolSchemas([{"type": "function", "function": {"name": "a", "parameters": {"properties": {"x": {"type": "string"}}}}},
                     {"name": "b", "parameters": {"properties": {"y": {"type": "integer"}}}}, "junk"])
    assert s.param("a", "x") == {"type": "string"}
    assert s.param("b", "y") == {"type": "integer"}
    assert s.param("c", "x") is None
