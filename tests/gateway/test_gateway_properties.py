"""The property suite: every operation of the gateway's own OpenAPI document (so routes added
later are covered as they appear) gets generated requests, valid and invalid (schemathesis),
further mutated by hand-written strategies (``mutations``: lone surrogates, deep nesting, huge
numbers, wrong types, broken bytes, odd headers, stream ids, path ids), aimed half the time at
things that exist (the served model, live, ended and cancelled sessions); and every WebSocket
gets generated frames.  Against real processes (ReplayEngine), it asserts:

* no answer is a 5xx, no WebSocket closes with 1011, every frame is answered;
* the gateway logs no traceback;
* afterwards it still serves a normal request, and every session in the store is readable.

Deterministic (``derandomize``) and bounded: ``TURNSTREAM_PROPERTY_EXAMPLES`` examples per
operation (default 25) keep it well under two minutes on two cores.
"""

from __future__ import annotations

import json
import os
import time
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from gateway_harness import MODEL, GwStack, assert_sound
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import Request, mutate, stream_ids, ws_frames
from schemathesis import GenerationMode
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

KEY = "sk-property-suite-0123"
AUTH = {"Authorization": f"Bearer {KEY}"}
_SCRIPT = Path(tempfile.mkdtemp(prefix="turnstream-props-")) / "script.json"
_SCRIPT.write_text(json.dumps(["Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"Paris\"}}\n</tool_call>", "Done: {{ user }}"]))
GATEWAY_CONFIG = dict(api_keys=(KEY,), rate_limit_rps=0, replay_rate=5000, replay_script=str(_SCRIPT),
                      max_messages=16, max_tools=8, max_tokens_limit=256)
EXAMPLES = int(os.environ.get("TURNSTREAM_PROPERTY_EXAMPLES", "25"))
LOOKUP = {"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"id": {"type": "string"}}}}}
WAITS = ["<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"id\": \"A1\"}}\n</tool_call>",
         "Order: {{ results[0] }}"]  # waits for the client's result of call_0_0
SETTINGS = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck),
                    max_examples=EXAMPLES)


class Known:
    """Things that exist: session ids (waiting, ended, cancelled), their event ids, the model."""

    def __init__(self, http: httpx.Client) -> None:
        user = [{"role": "user", "content": "hi"}]
        waiting = _create(http, {"messages": user, "tools": [LOOKUP], "replay": WAITS})
        ended = _create(http, {"messages": user, "replay": ["ok"]})
        with http.stream("GET", f"/v1/sessions/{ended}/events") as resp:
            resp.read()  # ends with session.ended
        cancelled = _create(http, {"messages": user, "tools": [LOOKUP], "replay": WAITS})
        http.post(f"/v1/sessions/{cancelled}/cancel")
        self.sessions = [waiting, ended, cancelled]
        self.event_ids = [http.get(f"/v1/sessions/{s}").json()["last_event_id"] for s in self.sessions]
        self.ids = self.sessions + [MODEL]


def _create(http: httpx.Client, body: dict[str, Any]) -> str:
    resp = http.post("/v1/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=30, headers=AUTH) as client:
        yield client


@pytest.fixture(scope="module")
def known(http: httpx.Client) -> Known:
    return Known(http)


def as_request(case: Any) -> Request:
    """A schemathesis case as plain data (header values it cannot send on HTTP/1.1 left out)."""
    body = None if type(case.body).__name__ == "NotSet" else case.body
    raw = body if isinstance(body, bytes) else None
    headers = {k: str(v).strip() for k, v in (case.headers or {}).items()
               if _sendable(str(v).strip()) and k.lower() != "authorization"}  # the key: see mutations
    if body is not None:
        headers.setdefault("Content-Type", case.media_type or "application/json")
    return Request(case.method.upper(), case.path, {k: str(v) for k, v in (case.path_parameters or {}).items()},
                   {k: str(v) for k, v in (case.query or {}).items()}, {**AUTH, **headers},
                   None if raw is not None else body, raw)


def _sendable(value: str) -> bool:
    return all(" " <= c <= "\xff" and c != "\x7f" for c in value)


def aim(data: st.DataObject, req: Request, known: Known, examples: list[Any]) -> Request:
    """Half the time, point the request at things that exist: the served model, known sessions,
    and (where the operation documents examples) a documented body instead of a generated one."""
    if not data.draw(st.booleans()):
        return req
    body = data.draw(st.sampled_from(examples)) if examples and req.raw is None else req.body
    body = {**body, "model": MODEL} if isinstance(body, dict) and "model" in body else body
    params = {k: data.draw(st.sampled_from(known.ids)) for k in req.path_params}
    return Request(req.method, req.template, params, req.query, req.headers, body, req.raw)


def documented_examples(doc: dict[str, Any], op: Any) -> list[Any]:
    """The request-body examples an operation documents (for a body that may be a list, as lists too)."""
    content = (op.definition.raw.get("requestBody") or {}).get("content", {})
    schema = next(iter(content.values()), {}).get("schema", {})
    out: list[Any] = []
    for member in [schema, *schema.get("anyOf", [])]:
        listed = member.get("type") == "array"
        target = _resolve(doc, member.get("items", {}) if listed else member)
        out += [[e] if listed else e for e in target.get("examples", [])]
    return out


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref.startswith("#/components/schemas/") else schema


def send(http: httpx.Client, req: Request) -> tuple[int, str]:
    """Status and body; a live event stream is left after its headers (its end is not awaited)."""
    headers = {k: v.encode("latin-1") for k, v in req.headers.items()}  # bytes: non-ASCII values go out as they are
    request = http.build_request(req.method, req.path, params=req.query, headers=headers, content=req.content())
    resp = http.send(request, stream=True)
    try:
        live = resp.headers.get("content-type", "").startswith("text/event-stream")
        return resp.status_code, "" if live else resp.read().decode(errors="replace")
    finally:
        resp.close()


def read_back(http: httpx.Client, text: str, where: str) -> None:
    """What an answer names by ``id`` (a session, or an object over one: ``chatcmpl-<sid>``) reads back without a 5xx."""
    try:
        named = json.loads(text).get("id") if text.startswith("{") else None
    except ValueError:
        return
    if isinstance(named, str) and named:
        sid = named.replace("_", "-").rsplit("-", 1)[-1]
        status = http.get(f"/v1/sessions/{quote(sid, safe='')}").status_code
        assert status < 500, f"reading {named!r} back -> {status}, after {where}"


def operations(gw: GwStack) -> tuple[dict[str, Any], list[Any]]:
    """The OpenAPI document and its operations."""
    doc = httpx.get(gw.url + "/openapi.json").json()
    ops = [result.ok() for result in schemathesis.openapi.from_dict(doc).get_all_operations()]
    assert len(ops) >= 12, [op.label for op in ops]
    return doc, ops


def test_no_request_gets_a_5xx(gw: GwStack, http: httpx.Client, known: Known) -> None:
    baseline = gw.tracebacks()
    doc, ops = operations(gw)
    assert sum(bool(documented_examples(doc, op)) for op in ops) >= 4  # the bodies of both APIs
    for op in ops:
        cases = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))
        examples = documented_examples(doc, op)

        @given(case=cases, data=st.data())
        @SETTINGS
        def no_5xx(case: Any, data: st.DataObject) -> None:
            req = mutate(data, aim(data, as_request(case), known, examples), known.ids + known.event_ids)
            status, text = send(http, req)
            where = f"{req.method} {req.path}?{req.query} -> {status} {text[:300]}\n" \
                    f"headers {list(req.headers)}; body {(req.content() or b'')[:300]!r}"
            assert status < 500, where
            assert gw.tracebacks() == baseline, where + "\n" + gw.gateway_log()[-3000:]
            read_back(http, text, where)

        started = time.monotonic()
        no_5xx()
        print(f"{op.label}: {time.monotonic() - started:.1f}s")
    assert_sound(gw, AUTH, baseline)


def converse(url: str, frames: list[str | bytes]) -> int:
    """Send ``frames`` (each must be answered), then cancel; the close code once the session ended."""
    with connect(url, additional_headers=AUTH, max_size=None, open_timeout=30) as ws:
        try:
            for frame in frames:
                ws.send(frame)
                reply = _next_reply(ws)
                assert reply["type"] == "ack" or reply["error"]["type"] != "server_error", reply
            ws.send(json.dumps({"type": "cancel"}))
            while True:
                ws.recv(timeout=10)
        except ConnectionClosed:
            pass
    return ws.close_code


def _next_reply(ws: Any) -> dict[str, Any]:
    """The next reply to a client frame (events in between are skipped)."""
    while True:
        msg = json.loads(ws.recv(timeout=10))
        if msg.get("type") in ("ack", "error"):
            return msg


def test_no_websocket_frame_breaks_the_socket(gw: GwStack, http: httpx.Client, known: Known) -> None:
    baseline = gw.tracebacks()

    @given(frames=st.lists(ws_frames(), min_size=1, max_size=4), after=st.none() | stream_ids(known.event_ids))
    @SETTINGS
    def socket_survives(frames: list[str | bytes], after: str | None) -> None:
        sid = _create(http, {"messages": [{"role": "user", "content": "hi"}], "tools": [LOOKUP], "replay": WAITS})
        url = f"{gw.ws}/v1/sessions/{sid}/ws" + ("" if after is None else f"?after={quote(after, safe='')}")
        try:
            assert converse(url, frames) == 1000
        except InvalidStatus as exc:  # a refused stream id: an OpenAI-shaped 400
            assert exc.response.status_code == 400 and after is not None, exc

    socket_survives()
    assert_sound(gw, AUTH, baseline)
