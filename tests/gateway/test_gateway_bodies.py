"""Tool definitions as clients send them: a function without ``parameters`` is a function with
no arguments, a bare function is a session's client tool, and a ``parameters`` schema is a
400 (never a 500) when it is nested too deeply, too large, or refers to nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from gateway_harness import MODEL, GwStack

from gateway.openai.bodies import ChatRequest, CreateSession
from gateway import tool_schemas
from gateway.tool_schemas import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES
from runtime.chat_template import ChatTokenizer
from runtime.config import DEFAULT_MODEL_DIR

GATEWAY_KINDS = ("gateway",)  # every refusal here happens before a turn is queued
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


def fn(parameters: Any = None, name: str = "f") -> dict[str, Any]:
    function = {"name": name} if parameters is None else {"name": name, "parameters": parameters}
    return {"type": "function", "function": function}


def nested(depth: int) -> dict[str, Any]:
    """A schema whose JSON nests exactly ``depth`` containers (two per property level)."""
    schema: dict[str, Any] = {"type": "string"}
    levels = 1
    while levels + 2 <= depth:
        schema, levels = {"type": "object", "properties": {"a": schema}}, levels + 2
    return {"not": schema} if levels < depth else schema


def test_schema_verdicts_are_remembered_whatever_the_key_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent sends its tools with every turn: each schema is checked against its meta-schema once."""
    monkeypatch.setattr(tool_schemas, "_checked", type(tool_schemas._checked)())
    monkeypatch.setattr(tool_schemas, "CHECKED_MAX", 2)
    calls: list[Any] = []
    real = tool_schemas._check_uncached
    monkeypatch.setattr(tool_schemas, "_check_uncached", lambda schema: (calls.append(schema), real(schema))[1])
    tool_schemas.check({"type": "object", "properties": {"a": {"type": "string"}}})
    tool_schemas.check({"properties": {"a": {"type": "string"}}, "type": "object"})  # the same schema
    assert len(calls) == 1
    for _ in range(2):  # a refusal is remembered too, with its reason
        with pytest.raises(ValueError, match="not a valid JSON Schema"):
            tool_schemas.check({"type": 3})
    assert len(calls) == 2
    with pytest.raises(ValueError, match="nested too deeply"):  # the size bound comes before any key is made
        tool_schemas.check(nested(MAX_SCHEMA_DEPTH + 1))
    tool_schemas.check({"type": "string"})
    assert len(tool_schemas._checked) == 2 and len(calls) == 3  # the oldest verdict made room


def test_a_function_without_parameters_is_a_function_with_no_arguments() -> None:
    request = ChatRequest.model_validate({"model": MODEL, "messages": USER, "tools": [fn()]})
    tool = request.tools[0].as_dict()
    assert tool["function"]["parameters"] == {"type": "object", "properties": {}}
    prompt = ChatTokenizer.from_dir(DEFAULT_MODEL_DIR).render(USER, [tool])  # the bundled model's template
    assert "f()" in prompt


def test_a_bare_function_is_a_sessions_client_tool(http: httpx.Client) -> None:
    bare = {"name": "lookup_order", "description": "Find an order", "parameters": {"type": "object"}}
    assert CreateSession.model_validate({"messages": USER, "tools": [bare]}).tools[0].function.name == "lookup_order"
    resp = http.post("/v1/sessions", json={"messages": USER, "tools": [bare, fn()]})
    assert resp.status_code == 201, resp.text
    session = http.get(f"/v1/sessions/{resp.json()['id']}").json()
    assert session["tools"] == session["client_tools"] == ["lookup_order", "f"]


def refusal(http: httpx.Client, parameters: Any) -> list[dict[str, Any]]:
    """The error of each route for a tool with these ``parameters`` (asserting both are 400s)."""
    out = []
    for path, body in (("/v1/sessions", {"messages": USER}), ("/v1/chat/completions", {"model": MODEL, "messages": USER})):
        resp = http.post(path, json={**body, "tools": [fn(parameters)]})
        assert resp.status_code == 400, (path, resp.text)
        out.append(resp.json()["error"])
    return out


def accepted(http: httpx.Client, parameters: Any) -> None:
    resp = http.post("/v1/sessions", json={"messages": USER, "tools": [fn(parameters)]})
    assert resp.status_code == 201, resp.text


def test_a_schema_nested_too_deeply_is_a_400_on_both_routes(http: httpx.Client) -> None:
    accepted(http, nested(MAX_SCHEMA_DEPTH))
    for depth in (MAX_SCHEMA_DEPTH + 1, 200, 400):
        for err in refusal(http, nested(depth)):
            assert err["param"] == "tools[0].function.parameters" and "deep" in err["message"], err


def test_a_schema_too_large_is_a_400(http: httpx.Client) -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_NODES)}}
    for err in refusal(http, wide):
        assert err["param"] == "tools[0].function.parameters" and "large" in err["message"], err


def test_a_ref_that_resolves_nowhere_is_a_400(http: httpx.Client) -> None:
    accepted(http, {"type": "object", "properties": {"at": {"$ref": "#/$defs/place"}},
                    "$defs": {"place": {"type": "string"}}})
    accepted(http, {"type": "object", "properties": {"tree": {"$ref": "#"}}})  # recursive, but resolves
    for ref in ("#/$defs/nope", "#/properties/x", "other.json", "https://example.com/schema.json"):
        for err in refusal(http, {"type": "object", "properties": {"at": {"$ref": ref}}}):
            assert err["param"] == "tools[0].function.parameters" and ref in err["message"], err


HOSTILE_SCHEMAS = [  # each made jsonschema or referencing raise something other than a schema error: a 500
    {"type": "object", "minProperties": 1, "properties": {"a": {"$ref": "#/minProperties/x"}}},  # 1["x"]
    {"type": "object", "properties": {"a": True, "b": {"$ref": "#/properties/a/x"}}},  # True["x"]
    {"type": "object", "required": ["b"], "properties": {"b": {"$ref": "#/required/0/x"}}},
    {"$schema": 5, "type": "object"},
    {"$schema": True, "type": "object"},
]


def test_schemas_that_break_the_checker_are_a_400_on_every_route(http: httpx.Client) -> None:
    for parameters in HOSTILE_SCHEMAS:
        for err in refusal(http, parameters):
            assert err["param"] == "tools[0].function.parameters", err
            assert "$ref" in err["message"] or "$schema" in err["message"], err
        resp = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [
            {"type": "function", "name": "f", "parameters": parameters}]})
        assert resp.status_code == 400, resp.text
        resp = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 16, "messages": USER, "tools": [
            {"name": "f", "input_schema": parameters}]})
        assert resp.status_code == 400, resp.text


@pytest.mark.parametrize("kind", [[], {}, 7, None])
def test_a_part_whose_type_is_not_a_string_is_a_400_on_every_route(http: httpx.Client, gw: GwStack, kind: Any) -> None:
    """Found by the property run: a content block ``{"type": []}`` made the union's tag lookup raise (a 500)."""
    baseline = gw.tracebacks()
    block = {"type": kind}
    requests = [
        ("/v1/messages/count_tokens", {"model": MODEL, "messages": [{"role": "user", "content": [block]}]}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [block]}]}]}),
        ("/v1/responses", {"model": MODEL, "input": [block]}),
        ("/v1/responses", {"model": MODEL, "input": "hi", "tools": [block]}),
    ]
    for path, body in requests:
        resp = http.post(path, json=body)
        assert resp.status_code == 400, (path, body, resp.text)
    assert gw.tracebacks() == baseline


def test_structured_outputs_are_one_grammar_or_regex_per_request_or_per_turn(http: httpx.Client) -> None:
    chat = ChatRequest.model_validate({"model": MODEL, "messages": USER, "structured_outputs": {"regex": "a+"}})
    assert chat.structured_outputs.as_dict() == {"regex": "a+"}
    turns = CreateSession.model_validate({"messages": USER, "structured_outputs": [{"grammar": "start: \"x\""},
                                                                                    {"regex": "y"}]})
    assert [s.as_dict() for s in turns.structured_outputs] == [{"grammar": "start: \"x\""}, {"regex": "y"}]
    one = CreateSession.model_validate({"messages": USER, "structured_outputs": {"regex": "a"}})
    assert one.structured_outputs.as_dict() == {"regex": "a"}  # one object: every turn
    r = http.post("/v1/sessions", json={"messages": USER, "structured_outputs": [{"regex": "a"}] * 257})
    assert r.status_code == 400, r.text
    for bad in ({"grammar": "start: \"x\"", "regex": "x"}, {}, {"json": {}}):
        r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "structured_outputs": bad})
        assert r.status_code == 400, (bad, r.text)
        assert "structured_outputs" in r.json()["error"]["param"]
