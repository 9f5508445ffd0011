"""Resuming a session's stream where there is nothing left: at the last event of an ended
session, or past it, SSE ends and a WebSocket closes 1000 at once; a stream of a session that
goes on still follows it."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from gateway_harness import GwStack, kinds, read_sse, read_ws, wait_for_subscribers

GATEWAY_KINDS = ("gateway",)  # no workers: sessions stay active until cancelled
FUTURE = "99999999999999-0"
AT_ONCE_S = 5.0  # well under the SSE keep-alive (15 s): a stream left open fails the test


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


def ended_session(http: httpx.Client) -> tuple[str, str]:
    """A cancelled session and the id of its last event (its session.ended)."""
    sid = http.post("/v1/sessions", json={"messages": [{"role": "user", "content": "hi"}]}).json()["id"]
    http.post(f"/v1/sessions/{sid}/cancel")
    return sid, http.get(f"/v1/sessions/{sid}").json()["last_event_id"]


async def ws_close(url: str) -> tuple[list[dict], int]:
    """Events of one WebSocket and its close code."""
    async with websockets.connect(url) as ws:
        events = [json.loads(f) async for f in ws]
    return events, ws.close_code


async def test_resuming_at_or_past_the_end_of_an_ended_session_ends_at_once(gw: GwStack, http: httpx.Client) -> None:
    sid, last = ended_session(http)
    for after in (last, FUTURE):
        sse = read_sse(gw.url, f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": after})
        assert await asyncio.wait_for(sse, AT_ONCE_S) == []
        assert await asyncio.wait_for(read_sse(gw.url, f"/v1/sessions/{sid}/events?after={after}"), AT_ONCE_S) == []
        events, code = await asyncio.wait_for(ws_close(f"{gw.ws}/v1/sessions/{sid}/ws?after={after}"), AT_ONCE_S)
        assert (events, code) == ([], 1000)
    everything = await asyncio.wait_for(read_ws(f"{gw.ws}/v1/sessions/{sid}/ws"), AT_ONCE_S)
    assert kinds(everything) == ["session.ended"] and everything[0]["id"] == last


async def test_a_stream_past_the_end_of_a_running_session_ends_with_it(gw: GwStack, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={"messages": [{"role": "user", "content": "hi"}]}).json()["id"]
    sse = asyncio.ensure_future(read_sse(gw.url, f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": FUTURE}))
    ws = asyncio.ensure_future(ws_close(f"{gw.ws}/v1/sessions/{sid}/ws?after={FUTURE}"))
    await wait_for_subscribers(gw.url, 2)  # both wait on the live path
    http.post(f"/v1/sessions/{sid}/cancel")
    assert await asyncio.wait_for(sse, AT_ONCE_S) == []
    assert await asyncio.wait_for(ws, AT_ONCE_S) == ([], 1000)


async def test_a_continued_session_is_followed_from_the_after_it_returns(gw: GwStack, http: httpx.Client) -> None:
    sid, last = ended_session(http)
    cont = http.post(f"/v1/sessions/{sid}/messages", json={"content": "more"}).json()
    assert cont["after"] == last
    sse = asyncio.ensure_future(read_sse(gw.url, cont["events_url"]))
    await wait_for_subscribers(gw.url, 1)  # the new turn is running: the stream waits for it
    http.post(f"/v1/sessions/{sid}/cancel")
    events = await asyncio.wait_for(sse, AT_ONCE_S)
    assert kinds(events) == ["session.ended"] and events[0]["turn"] == 1


async def test_an_event_id_beyond_redis_ids_is_a_400(gw: GwStack, http: httpx.Client) -> None:
    sid, _ = ended_session(http)
    for after in ("1-18446744073709551616", "18446744073709551616-0", "99999999999999999999999-1"):
        for where in ({"params": {"after": after}}, {"headers": {"Last-Event-ID": after}}):
            resp = http.get(f"/v1/sessions/{sid}/events", **where)
            assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_event_id", resp.text
        with pytest.raises(websockets.InvalidStatus) as exc:
            async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws?after={after}"):
                pass
        assert exc.value.response.status_code == 400
    ok = http.get(f"/v1/sessions/{sid}/events", params={"after": "18446744073709551615-18446744073709551615"})
    assert ok.status_code == 200 and ok.text == ""  # the largest id Redis has: past the end
