"""The session API over real processes: resumable WebSocket/SSE streams, client-side tool
results (HTTP and WebSocket), continuing a session, cancelling it, metrics."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import websockets
from gateway_harness import (WEATHER, GwStack, assert_exactly_once_in_order, create_session, kinds, read_sse,
                             read_ws)

from schemas import keys

LONG_WEATHER = ["Let me check the weather in Paris for you; " + "this sentence pads the stream. " * 12 + "\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "The forecast says: {{ results[0] }}. " + "More padding for the second turn. " * 8]
LOOKUP = {"type": "function", "function": {"name": "lookup_order", "description": "Find an order (client side)",
                                            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}
CLIENT_AND_SERVER = ["Looking up both.\n"
                     "<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"id\": \"A17\"}}\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                     "Order: {{ results[0] }}; weather: {{ results[1] }}."]
TWO_CLIENT_CALLS = ["<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"id\": \"A1\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"id\": \"B2\"}}\n</tool_call>",
                    "{{ results[0] }} and {{ results[1] }}"]


def body(script: list[str], **kw: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "weather in Paris?"}], "replay": script, **kw}


async def read_with_forced_disconnects(gw: GwStack, sid: str, every: int, cuts: int) -> tuple[list[dict], int]:
    """Read a session's events, aborting the TCP connection every ``every`` events (``cuts`` times)
    and resuming from the last id received."""
    events: list[dict[str, Any]] = []
    done_cuts = 0
    while not events or events[-1]["body"]["type"] != "session.ended":
        after = events[-1]["id"] if events else "0-0"
        try:
            async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws?after={after}") as ws:
                n = 0
                async for frame in ws:
                    events.append(json.loads(frame))
                    n += 1
                    if n == every and done_cuts < cuts:
                        done_cuts += 1
                        ws.transport.abort()  # no close handshake: a dropped connection
        except websockets.ConnectionClosedError:
            continue
    return events, done_cuts


async def test_websocket_resume_after_forced_disconnects_delivers_every_event_once(gw: GwStack) -> None:
    sid = await create_session(gw.url, body(LONG_WEATHER))
    events, cuts = await read_with_forced_disconnects(gw, sid, every=7, cuts=4)
    assert cuts == 4
    assert_exactly_once_in_order(events)
    reference = await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws")  # the whole log, read again in one go
    assert [e["id"] for e in events] == [e["id"] for e in reference]
    assert events[-1]["body"]["reason"] == "stop"
    assert kinds(events).count("turn.started") == 2 and "tool.result" in kinds(events)


async def test_sse_resumes_from_last_event_id(gw: GwStack) -> None:
    sid = await create_session(gw.url, body(WEATHER))
    head = await read_sse(gw.url, f"/v1/sessions/{sid}/events", limit=5)
    tail = await read_sse(gw.url, f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": head[-1]["id"]})
    full = await read_sse(gw.url, f"/v1/sessions/{sid}/events?after=0-0")
    assert [e["id"] for e in head + tail] == [e["id"] for e in full]
    assert_exactly_once_in_order(head + tail)
    assert full[-1]["body"]["type"] == "session.ended"


async def test_client_tool_result_over_websocket_continues_the_loop(gw: GwStack) -> None:
    sid = await create_session(gw.url, body(CLIENT_AND_SERVER, tools=[LOOKUP, "get_weather"]))
    events: list[dict[str, Any]] = []
    replies: list[dict[str, Any]] = []
    async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
        async for frame in ws:
            msg = json.loads(frame)
            if "body" not in msg:
                replies.append(msg)
                continue
            events.append(msg)
            b = msg["body"]
            if b["type"] == "tool_call.ready" and b["name"] == "lookup_order":
                await ws.send(json.dumps({"type": "tool_result", "tool_call_id": b["id"],
                                          "content": "shipped on Monday"}))
                await ws.send(json.dumps({"type": "tool_result", "tool_call_id": "call_0_9", "content": "x"}))
                await ws.send("not json")
    assert_exactly_once_in_order(events)
    results = {e["body"]["name"]: e["body"] for e in events if e["body"]["type"] == "tool.result"}
    assert results["lookup_order"]["content"] == "shipped on Monday" and not results["lookup_order"]["is_error"]
    assert "get_weather" in results  # the server tool ran on a tool worker
    assert events[-1]["body"]["reason"] == "stop"
    assert events[-1]["body"]["content"].startswith("Order: shipped on Monday; weather: ")
    assert replies[0]["type"] == "ack" and replies[0]["status"] in ("recorded", "completed")
    assert [r["error"]["code"] for r in replies[1:]] == ["invalid_tool_call_id", "invalid_json"]


async def test_client_tool_results_over_http(gw: GwStack) -> None:
    sid = await create_session(gw.url, body(TWO_CLIENT_CALLS, tools=[LOOKUP]))
    ready: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        async def answer(sid: str) -> None:
            async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
                async for frame in ws:
                    b = json.loads(frame)["body"]
                    if b["type"] == "tool_call.ready":
                        ready.append(b)
                    if b["type"] == "turn.ended":
                        return
        await answer(sid)
        first = await http.post(f"/v1/sessions/{sid}/tool_results",
                                json={"tool_call_id": ready[0]["id"], "content": "order A1: delivered"})
        parts = [{"type": "text", "text": "B2: lost"}]
        again = await http.post(f"/v1/sessions/{sid}/tool_results",
                                json=[{"tool_call_id": ready[0]["id"], "content": "other"},
                                      {"tool_call_id": ready[1]["id"], "content": parts, "is_error": True}])
        assert first.json()["results"] == [{"tool_call_id": "call_0_0", "status": "recorded"}]
        assert [r["status"] for r in again.json()["results"]] == ["duplicate", "completed"]
        events = await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws")
        assert events[-1]["body"]["content"] == "order A1: delivered and B2: lost"
        late = await http.post(f"/v1/sessions/{sid}/tool_results", json={"tool_call_id": "call_1_0", "content": "x"})
        assert late.status_code == 409 and late.json()["error"]["code"] == "session_not_active"


async def test_add_message_continues_an_ended_session(gw: GwStack) -> None:
    script = WEATHER + ["You said: {{ user }}"]
    sid = await create_session(gw.url, body(script))
    first = await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws")
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        resp = await http.post(f"/v1/sessions/{sid}/messages", json={"content": "thanks, bye"})
        assert resp.status_code == 202, resp.text
        cont = resp.json()
        assert cont["turn"] == 2 and cont["after"] == first[-1]["id"]
        busy = await http.post(f"/v1/sessions/{sid}/messages", json={"content": "again"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        second = await read_ws(gw.ws + cont["ws_url"])
        state = (await http.get(f"/v1/sessions/{sid}")).json()
    assert {e["turn"] for e in second} == {2} and second[-1]["body"] == {
        "type": "session.ended", "reason": "stop", "content": "You said: thanks, bye"}
    assert_exactly_once_in_order(first + second)
    assert state["status"] == "ended" and state["turn"] == 2
    # complete when session.ended is out: the final answer of each turn is in (issue 13)
    assert [m["role"] for m in state["messages"]] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert state["messages"][3]["content"].startswith("The forecast says")
    assert state["messages"][5]["content"] == "You said: thanks, bye"
    # a subscriber from the start reads on through the first turn's session.ended to the latest one
    assert [e["id"] for e in await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws")] == [e["id"] for e in first + second]


async def test_cancel_over_websocket_stops_generation(gw: GwStack) -> None:
    long = "word " * 2000
    sid = await create_session(gw.url, body([long]))
    events: list[dict[str, Any]] = []
    replies: list[dict[str, Any]] = []
    async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
        async for frame in ws:
            msg = json.loads(frame)
            (events if "body" in msg else replies).append(msg)
            if len(events) == 3:
                await ws.send(json.dumps({"type": "cancel"}))
        assert ws.close_code == 1000
    assert replies == [{"type": "ack", "ref": "cancel", "status": "cancelled"}]
    assert events[-1]["body"]["type"] == "session.ended" and events[-1]["body"]["reason"] == "cancelled"
    r = gw.redis()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and r.hget(keys.session(sid), "asst:0") is None:
        await asyncio.sleep(0.05)
    raw = json.loads(r.hget(keys.session(sid), "asst:0"))["raw"]
    assert len(raw) < len(long) and r.hget(keys.session(sid), "status") == b"cancelled"
    async with httpx.AsyncClient(base_url=gw.url) as http:
        again = await http.post(f"/v1/sessions/{sid}/cancel")
    assert again.json() == {"id": sid, "status": "cancelled"}


async def test_metrics_report_latencies_kv_reuse_and_queues(gw: GwStack) -> None:
    sid = await create_session(gw.url, body(WEATHER))
    await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws")
    text = httpx.get(gw.url + "/metrics").text
    values = {line.split(" ")[0].replace('{model_name="tiny"}', ""): float(line.split(" ")[1])
              for line in text.splitlines() if line and not line.startswith("#")}  # model_name: the served id
    assert values["turnstream_time_to_first_token_seconds_count"] >= 1
    assert values["turnstream_dispatch_latency_seconds_count"] >= 1
    assert values["turnstream_completion_tokens_total"] > 0 and values["turnstream_prompt_tokens_total"] > 0
    assert "turnstream_cached_prompt_tokens_total" in values and "turnstream_pin_hit_ratio_count" in values
    assert values['turnstream_queue_length{stream="ts:decode:jobs"}'] >= 1
    assert 'turnstream_queue_pending{stream="ts:parse:jobs"}' in values
    assert values["turnstream_decoders_alive"] == 1
    assert values["turnstream_relay_subscribers"] == 0  # every client above has left
    assert values["turnstream_continuation_ttft_seconds_count"] >= 1  # the turn after the tool result
    assert values["turnstream_time_per_output_token_seconds_count"] >= 1
    assert values["turnstream_relay_events_total"] > 0  # counters are counters
    [worker] = [k for k in values if k.startswith("turnstream_decoder_tokens_out_total{")]
    assert values[worker] > 0 and any(k.startswith("turnstream_decoder_requests{") for k in values)
    for kind in ("gateway", "decode", "parser", "tools"):
        assert values[f'turnstream_processes_alive{{kind="{kind}"}}'] == 1


async def test_a_client_that_leaves_an_idle_stream_is_forgotten_at_once(gw: GwStack) -> None:
    """Nothing is sent on a stream waiting for a client tool's result; leaving is still noticed."""
    sid = await create_session(gw.url, body(TWO_CLIENT_CALLS, tools=[LOOKUP]))
    await read_ws(f"{gw.ws}/v1/sessions/{sid}/ws", limit=1)

    def subscribers() -> float:
        text = httpx.get(gw.url + "/metrics").text
        return float(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("turnstream_relay_subscribers")))

    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        async with http.stream("GET", f"/v1/sessions/{sid}/events") as sse:
            async with websockets.connect(f"{gw.ws}/v1/sessions/{sid}/ws") as ws:
                await ws.recv()
                for _ in range(100):
                    if subscribers() == 2:
                        break
                    await asyncio.sleep(0.05)
                assert subscribers() == 2
            assert sse.status_code == 200
    for _ in range(100):  # both left while idle: the relay forgets them without waiting for an event
        if subscribers() == 0:
            break
        await asyncio.sleep(0.05)
    assert subscribers() == 0
