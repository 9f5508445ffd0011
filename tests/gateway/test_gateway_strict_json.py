"""Request JSON is checked at the edge: a lone surrogate, invalid UTF-8, nesting past the
parser's limit or an over-long number is a 400 naming the field, over HTTP and WebSocket, and
nothing of such a request reaches the store."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets
from gateway_harness import MODEL, GwStack

from schemas import keys

GATEWAY_KINDS = ("gateway",)  # no workers: a created session stays active
JSON = {"content-type": "application/json"}
LONE = "\\ud800"  # a JSON escape of half a UTF-16 pair: valid JSON, not valid Unicode


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


def raw(http: httpx.Client, path: str, body: str | bytes) -> httpx.Response:
    return http.post(path, content=body.encode() if isinstance(body, str) else body, headers=JSON)


def assert_refused(resp: httpx.Response, code: str, param: str | None = None) -> None:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and err["type"] == "invalid_request_error", err
    if param is not None:
        assert err["param"] == param, err


def stored_sessions(gw: GwStack) -> int:
    return len(gw.redis().keys(keys.session("*")))


def new_session(http: httpx.Client, ended: bool = False) -> str:
    sid = http.post("/v1/sessions", json={"messages": [{"role": "user", "content": "hi"}]}).json()["id"]
    if ended:
        assert http.post(f"/v1/sessions/{sid}/cancel").json()["status"] == "cancelled"
    return sid


def test_lone_surrogates_are_refused_naming_the_field(gw: GwStack, http: httpx.Client) -> None:
    before = stored_sessions(gw)
    cases = [
        ("/v1/chat/completions", f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": "a{LONE}"}}]}}',
         "messages[0].content"),
        ("/v1/sessions", f'{{"messages": [{{"role": "system", "content": "x"}}, '
                         f'{{"role": "user", "content": [{{"type": "text", "text": "{LONE}b"}}]}}]}}',
         "messages[1].content[0].text"),
        ("/v1/sessions", f'{{"messages": [{{"role": "user", "content": "x"}}], "tools": [{{"type": "function", '
                         f'"function": {{"name": "f", "description": "{LONE}"}}}}]}}', "tools[0].function.description"),
        ("/v1/sessions", f'{{"messages": [{{"role": "user", "content": "x", "{LONE}": 1}}]}}', "messages[0]"),
    ]
    for path, body, param in cases:
        assert_refused(raw(http, path, body), "invalid_value", param)
    assert stored_sessions(gw) == before


def test_a_continuation_or_tool_result_with_a_lone_surrogate_changes_nothing(gw: GwStack,
                                                                             http: httpx.Client) -> None:
    sid = new_session(http, ended=True)
    before = http.get(f"/v1/sessions/{sid}").json()
    assert_refused(raw(http, f"/v1/sessions/{sid}/messages", f'{{"content": "{LONE}"}}'), "invalid_value", "content")
    assert_refused(raw(http, f"/v1/sessions/{sid}/tool_results", f'{{"tool_call_id": "call_0_0", "content": "{LONE}"}}'),
                   "invalid_value", "content")
    assert_refused(raw(http, f"/v1/sessions/{sid}/tool_results",
                       f'[{{"tool_call_id": "call_0_0", "content": "ok"}}, {{"tool_call_id": "{LONE}", "content": ""}}]'),
                   "invalid_value", "[1].tool_call_id")
    after = http.get(f"/v1/sessions/{sid}")
    assert after.status_code == 200 and after.json() == before


def test_a_surrogate_pair_is_text(http: httpx.Client) -> None:
    resp = raw(http, "/v1/sessions", '{"messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}')
    assert resp.status_code == 201, resp.text
    messages = http.get(f"/v1/sessions/{resp.json()['id']}").json()["messages"]
    assert messages[0]["content"] == "smile \U0001F600"


def test_bodies_that_are_not_json_text_are_invalid_json(http: httpx.Client) -> None:
    user = b'"messages": [{"role": "user", "content": "x"}]'
    for body in (b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}',  # not UTF-8
                 b'{"model": "tiny", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested too deeply
                 b'{"model": "tiny", ' + user + b', "seed": ' + b"9" * 5000 + b"}",  # a 5000-digit number
                 b'{"model": "tiny", ' + user + b",}"):  # a syntax error
        assert_refused(raw(http, "/v1/chat/completions", body), "invalid_json")


async def test_a_websocket_frame_that_is_not_acceptable_json_gets_an_error_and_the_socket_stays(
        gw: GwStack, http: httpx.Client) -> None:
    sid = new_session(http)
    async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
        await ws.send("[" * 100_000 + "]" * 100_000)
        assert json.loads(await ws.recv())["error"]["code"] == "invalid_json"
        await ws.send(f'{{"type": "tool_result", "tool_call_id": "call_0_0", "content": "{LONE}"}}')
        err = json.loads(await ws.recv())["error"]
        assert (err["code"], err["param"]) == ("invalid_value", "content")
        await ws.send(b'{"type": "cancel", "x": "\xff"}')  # a binary frame must be UTF-8 JSON too
        assert json.loads(await ws.recv())["error"]["code"] == "invalid_json"
        await ws.send(json.dumps({"type": "cancel"}))  # still answered: the socket survived
        replies = [json.loads(frame) async for frame in ws]  # the ack and session.ended, in either order
        assert {"type": "ack", "ref": "cancel", "status": "cancelled"} in replies
    assert http.get(f"/v1/sessions/{sid}").status_code == 200
