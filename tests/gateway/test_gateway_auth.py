"""API keys, ownership, limits and the rate limit: each failure gets the right status and
OpenAI's error shape, and nothing about other keys' sessions leaks."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import httpx
import pytest
import websockets
from gateway_harness import MODEL, GwStack

from schemas import keys

ALICE, BOB, RATE, FILED = "sk-alice-0123456789", "sk-bob-9876543210", "sk-rate-limited-1", "sk-from-the-file-42"
_KEY_FILE = Path(tempfile.mkdtemp(prefix="turnstream-keys-")) / "keys.txt"
_KEY_FILE.write_text(f"# operators' keys\n\nsha256:{hashlib.sha256(FILED.encode()).hexdigest()}\n")

GATEWAY_KINDS = ("gateway",)  # no workers: nothing here needs a turn to run
GATEWAY_CONFIG = dict(api_keys=(ALICE, BOB, RATE), api_keys_file=str(_KEY_FILE), rate_limit_rps=0.5,
                      rate_limit_burst=60, max_request_bytes=20_000, max_messages=10, max_tools=5,
                      max_turns_limit=10, max_tokens_limit=1000)
USER = [{"role": "user", "content": "hi"}]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def alices_session(http: httpx.Client) -> str:
    resp = http.post("/v1/sessions", json={"messages": USER}, headers=auth(ALICE))
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def requests_for(sid: str) -> list[tuple[str, str, dict | None]]:
    return [("GET", "/v1/models", None), ("GET", "/v1/tools", None), ("GET", f"/v1/sessions/{sid}", None),
            ("POST", "/v1/chat/completions", {"model": MODEL, "messages": USER}),
            ("POST", "/v1/sessions", {"messages": USER}), ("GET", f"/v1/sessions/{sid}/events", None),
            ("POST", f"/v1/sessions/{sid}/messages", {"content": "x"}), ("POST", f"/v1/sessions/{sid}/cancel", None),
            ("POST", f"/v1/sessions/{sid}/tool_results", {"tool_call_id": "call_0_0", "content": "x"})]


def assert_error(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code and err["message"]
    return err


def test_no_key_or_a_wrong_key_is_refused_everywhere(http: httpx.Client, alices_session: str) -> None:
    for method, path, body in requests_for(alices_session):
        assert_error(http.request(method, path, json=body), 401, "missing_api_key")
        for headers in (auth("sk-wrong"), {"Authorization": f"Basic {ALICE}"}, {"Authorization": ALICE}):
            resp = http.request(method, path, json=body, headers=headers)
            assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error", path


def test_health_metrics_playground_and_schema_stay_open(http: httpx.Client) -> None:
    for path in ("/healthz", "/metrics", "/", "/openapi.json", "/static/app.js"):
        assert http.get(path).status_code == 200, path


def test_another_keys_session_is_not_found_and_indistinguishable(http: httpx.Client, alices_session: str) -> None:
    assert http.get(f"/v1/sessions/{alices_session}", headers=auth(ALICE)).status_code == 200
    for method, path, body in requests_for(alices_session):
        if alices_session not in path:
            continue
        theirs = http.request(method, path, json=body, headers=auth(BOB))
        missing = http.request(method, path.replace(alices_session, "0" * 16), json=body, headers=auth(BOB))
        err = assert_error(theirs, 404, "session_not_found")
        assert err == {**assert_error(missing, 404, "session_not_found"), "message": err["message"]}
    # Bob's cancel did nothing: Alice's session is still active
    assert http.get(f"/v1/sessions/{alices_session}", headers=auth(ALICE)).json()["status"] == "active"


def test_keys_are_stored_hashed(gw: GwStack, alices_session: str) -> None:
    stored = gw.redis().hget(keys.session(alices_session), "key").decode()
    assert stored == hashlib.sha256(ALICE.encode()).hexdigest()[: len(stored)] and len(stored) >= 16
    for key in gw.redis().scan_iter():
        if gw.redis().type(key) == b"hash":
            assert all(ALICE.encode() not in v for v in gw.redis().hvals(key))


def test_a_key_from_the_keys_file_works(http: httpx.Client) -> None:
    assert http.get("/v1/models", headers=auth(FILED)).json()["data"][0]["id"] == MODEL


def test_oversized_inputs_get_clear_4xx(http: httpx.Client) -> None:
    big = {"messages": [{"role": "user", "content": "x" * 30_000}]}
    assert_error(http.post("/v1/sessions", json=big, headers=auth(ALICE)), 413, "request_too_large")
    assert_error(http.post("/v1/chat/completions", json={"model": MODEL, **big}, headers=auth(ALICE)), 413,
                 "request_too_large")
    assert_error(http.post("/v1/sessions", json=big), 401, "missing_api_key")  # the key is checked first

    def chunked():  # no Content-Length: the limit applies while reading
        for _ in range(30):
            yield b" " * 1000

    assert_error(http.post("/v1/sessions", content=chunked(), headers={**auth(ALICE), "Content-Type":
                                                                         "application/json"}), 413, "request_too_large")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    cases = [("messages", {"messages": USER * 11}), ("tools", {"messages": USER, "tools": [tool] * 6}),
             ("max_turns", {"messages": USER, "max_turns": 11}), ("max_tokens", {"messages": USER, "max_tokens": 5000})]
    for param, body in cases:
        err = assert_error(http.post("/v1/sessions", json=body, headers=auth(ALICE)), 400, "limit_exceeded")
        assert err["param"] == param
    err = assert_error(http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 5000},
                                 headers=auth(ALICE)), 400, "limit_exceeded")
    assert err["param"] == "max_tokens"
    assert_error(http.post("/v1/sessions", content=b"{not json", headers={**auth(ALICE), "Content-Type":
                                                                           "application/json"}), 400, "invalid_json")


def test_oversized_request_headers_get_431_before_anything_else(gw: GwStack, http: httpx.Client) -> None:
    huge = {"X-Padding": "x" * 1_000_000}
    for path in ("/healthz", "/v1/models"):
        assert_error(http.get(path, headers={**auth(ALICE), **huge}), 431, "request_headers_too_large")
    many = {f"X-Pad-{i}": "y" * 1000 for i in range(40)}  # the total counts, not one header
    assert_error(http.get("/v1/models", headers={**auth(ALICE), **many}), 431, "request_headers_too_large")
    assert http.get("/v1/models", headers={**auth(ALICE), "X-Padding": "x" * 8000}).status_code == 200


async def test_an_oversized_websocket_handshake_is_refused(gw: GwStack, alices_session: str) -> None:
    many = {f"X-Pad-{i}": "y" * 1000 for i in range(40)}  # each line under the WebSocket parser's own 8 KiB
    with pytest.raises(websockets.InvalidStatus) as exc:
        async with websockets.connect(f"{gw.ws}/v1/sessions/{alices_session}/ws",
                                      additional_headers={**auth(ALICE), **many}):
            pass
    assert exc.value.response.status_code == 431


def test_rate_limit_answers_429_with_retry_after(http: httpx.Client) -> None:
    statuses = [http.get("/v1/models", headers=auth(RATE)) for _ in range(70)]
    limited = [r for r in statuses if r.status_code == 429]
    assert limited and all(r.status_code == 200 for r in statuses[:60])
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert_error(limited[0], 429, "rate_limit_exceeded")
    assert http.get("/v1/models", headers=auth(BOB)).status_code == 200  # per key: Bob is unaffected


async def test_websocket_authenticates_before_it_streams(gw: GwStack, alices_session: str) -> None:
    url = f"{gw.ws}/v1/sessions/{alices_session}/ws"
    for kw in ({}, {"additional_headers": auth("sk-wrong")}, {"subprotocols": ["bearer.sk-wrong"]}):
        with pytest.raises(websockets.InvalidStatus) as exc:
            async with websockets.connect(url, **kw):
                pass
        assert exc.value.response.status_code == 401
        assert b'"authentication_error"' in exc.value.response.body
    with pytest.raises(websockets.InvalidStatus) as exc:  # the right key, someone else's session
        async with websockets.connect(url, additional_headers=auth(BOB)):
            pass
    assert exc.value.response.status_code == 404
    for kw in ({"additional_headers": auth(ALICE)}, {"subprotocols": ["turnstream.v1", f"bearer.{ALICE}"]}):
        async with websockets.connect(url, **kw) as ws:
            assert ws.subprotocol == ("turnstream.v1" if "subprotocols" in kw else None)
    async with websockets.connect(url + f"?token={ALICE}") as ws:
        assert ws.state.name == "OPEN"
