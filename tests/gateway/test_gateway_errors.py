"""Every error in OpenAI's shape, naming the client's own field; an unexpected failure is one
logged traceback and a 500 that leaves the keep-alive connection usable."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets
from gateway_harness import MODEL, GwStack

from schemas import keys

GATEWAY_KINDS = ("gateway",)  # nothing here needs a turn to run
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


def local_port(resp: httpx.Response) -> int | None:
    """The client-side port of the connection that carried ``resp`` (None once it is closed)."""
    try:
        return resp.extensions["network_stream"].get_extra_info("client_addr")[1]
    except OSError:
        return None


def test_a_500_logs_one_traceback_and_keeps_the_connection(gw: GwStack, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={"messages": USER}).json()["id"]
    gw.redis().hset(keys.session(sid), "tools", "{not json")  # a record the gateway cannot read
    before = gw.tracebacks()
    with httpx.Client(base_url=gw.url, timeout=10, limits=httpx.Limits(max_connections=1)) as one:
        port = local_port(one.get("/healthz"))
        failed = one.get(f"/v1/sessions/{sid}")
        assert failed.status_code == 500
        assert failed.json() == {"error": {"message": "internal server error", "type": "server_error",
                                           "param": None, "code": None}}
        assert "close" not in failed.headers.get("connection", "")
        after = one.get("/healthz")
        assert after.status_code == 200
        assert local_port(after) == port, "the keep-alive connection was dropped after the 500"
    assert gw.tracebacks() == before + 1


INTERNALS = ("constrained-str", "literal[", "ToolResultIn", "ToolDef", "FunctionDef", "function-after", "list[",
             "UserMessage", "body.")


def assert_names(resp: httpx.Response, param: str) -> None:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == param, err
    assert err["message"].startswith(param + ": ") and not any(x in err["message"] for x in INTERNALS), err


def test_param_names_the_clients_field_as_openai_does(http: httpx.Client) -> None:
    chat = {"model": MODEL, "messages": USER}
    cases = [
        ("/v1/sessions", {"messages": USER, "tools": [{"type": "function", "function": {"name": "f f"}}]},
         "tools[0].function.name"),
        ("/v1/sessions", {"messages": USER, "tools": ["get_weather", 5]}, "tools[1]"),
        ("/v1/chat/completions", {**chat, "tools": [{"type": "function", "function": {"name": "f", "strict": "x"}}]},
         "tools[0].function.strict"),
        ("/v1/chat/completions", {**chat, "tool_choice": "bogus"}, "tool_choice"),
        ("/v1/chat/completions", {**chat, "tool_choice": "required"}, "tool_choice"),  # no tools to force
        ("/v1/sessions", {"messages": USER, "tools": [{"type": "function", "function": {"name": "lookup"}}],
                          "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
        ("/v1/chat/completions", {**chat, "tool_choice": {"type": "function", "function": {}}},
         "tool_choice.function.name"),
        ("/v1/chat/completions", {**chat, "messages": [*USER, {"role": "assistant", "content": "a"},
                                                       {"role": "user", "content": 5}]}, "messages[2].content"),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ("/v1/chat/completions", {"model": MODEL}, "messages"),
        ("/v1/sessions/0123456789abcdef/tool_results", {"content": "x"}, "tool_call_id"),
        ("/v1/sessions/0123456789abcdef/tool_results", [{"tool_call_id": "a", "content": "x"}, {"tool_call_id": "b"}],
         "[1].content"),
    ]
    for path, body, param in cases:
        assert_names(http.post(path, json=body), param)


def test_a_limit_error_names_the_field_that_was_sent(http: httpx.Client) -> None:
    resp = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_completion_tokens": 10**6})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_completion_tokens", resp.text
    resp = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 10**6})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_tokens", resp.text


async def test_a_websocket_error_names_the_field_too(gw: GwStack, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={"messages": USER}).json()["id"]
    async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
        await ws.send(json.dumps({"type": "tool_result", "tool_call_id": "call_0_0", "content": [{"type": "x"}]}))
        err = json.loads(await ws.recv())["error"]
    assert err["param"] == "content[0].type" and not any(x in err["message"] for x in INTERNALS), err
