"""End to end, real processes and a real server: gateway → decode → parser → tools →
continuation → decode → client, over a WebSocket."""

from __future__ import annotations

import json
from typing import Any

import httpx
import redis
import websockets

from schemas import keys

TWO_CALLS = [
    "Checking both at once.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
    "\nand now the table, which takes a while to describe in full detail before the call itself.\n"
    "<tool_call>\n{\"name\": \"book_restaurant\", \"arguments\": {\"restaurant\": \"Chez Nous\", \"party_size\": 2, "
    "\"time\": \"19:00\"}}\n</tool_call>",
    "Weather: {{ results[0] }} / booking: {{ results[1] }}. Done.",
]


async def run_session(url: str, body: dict[str, Any], on_event=None) -> tuple[str, list[dict[str, Any]]]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        resp = await http.post("/v1/sessions", json=body)
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
    events: list[dict[str, Any]] = []
    async with websockets.connect(url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/ws") as ws:
        async for frame in ws:
            ev = json.loads(frame)
            events.append(ev)
            if on_event:
                await on_event(sid, ev)
    return sid, events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["body"]["type"] for e in events]


def first(events: list[dict[str, Any]], kind: str, **match: Any) -> int:
    for i, e in enumerate(events):
        if e["body"]["type"] == kind and all(e["body"].get(k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {kind} {match} in {kinds(events)}")


def assert_exactly_once_in_order(events: list[dict[str, Any]]) -> None:
    ids = [tuple(map(int, e["id"].split("-"))) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    marks = [(e["turn"], e["attempt"], e["src"], e["seq"]) for e in events]
    assert len(set(marks)) == len(marks), "duplicate event"
    for turn, attempt in {(e["turn"], e["attempt"]) for e in events}:
        seqs = [e["seq"] for e in events if (e["turn"], e["attempt"], e["src"]) == (turn, attempt, "parser")]
        assert seqs == list(range(1, len(seqs) + 1)), f"parser events of turn {turn}.{attempt} have gaps: {seqs}"


async def test_two_calls_in_one_turn_end_to_end(stack_factory) -> None:
    stack = stack_factory(replay_rate=100)
    body = {"messages": [{"role": "user", "content": "weather and a table please"}], "replay": TWO_CALLS}
    sid, events = await run_session(stack.url, body)
    assert_exactly_once_in_order(events)
    assert events[-1]["body"] == {"type": "session.ended", "reason": "stop", "content": events[-1]["body"]["content"]}
    # the first tool started while its turn was still being generated: before the second call began
    assert first(events, "tool.started", index=0) < first(events, "tool_call.begin", index=1)
    assert first(events, "tool.started", index=0) < first(events, "turn.ended")
    results = [e["body"] for e in events if e["body"]["type"] == "tool.result"]
    assert [r["name"] for r in sorted(results, key=lambda r: r["index"])] == ["get_weather", "book_restaurant"]
    assert not any(r["is_error"] for r in results)
    final = events[-1]["body"]["content"]
    for r in results:
        assert r["content"] in final  # the answer carries the tool results
    assert [e["turn"] for e in events if e["body"]["type"] == "turn.started"] == [0, 1]
    conv = redis.Redis.from_url(stack.cfg.redis_url).lrange(keys.messages(sid), 0, -1)
    roles = [json.loads(m)["role"] for m in conv]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]  # the final answer too, once it ended
    assert json.loads(conv[-1])["content"] == events[-1]["body"]["content"]


async def test_parser_killed_mid_turn_is_taken_over(stack_factory) -> None:
    stack = stack_factory(replay_rate=40, parsers=2)
    r = redis.Redis.from_url(stack.cfg.redis_url)
    killed: list[int] = []

    async def kill_parser_once(sid: str, ev: dict[str, Any]) -> None:
        # the turn's narration is its decoder's (a content run); its parser starts at the first call's markup
        if killed or ev["body"]["type"] != "tool_call.begin" or ev["turn"] != 0:
            return
        [pending] = r.xpending_range(keys.PARSE_JOBS, keys.PARSE_GROUP, "-", "+", 10)
        pid = int(pending["consumer"].decode().rsplit("-", 1)[1])
        victim = next(p for p in stack.procs["parser"] if p.pid == pid)
        stack.kill(victim)
        killed.append(pid)

    body = {"messages": [{"role": "user", "content": "weather and a table please"}], "replay": TWO_CALLS}
    _, events = await run_session(stack.url, body, on_event=kill_parser_once)
    assert killed, "no parser was killed"
    assert_exactly_once_in_order(events)
    assert kinds(events).count("tool_call.ready") == 2 and kinds(events).count("tool.result") == 2
    assert events[-1]["body"]["reason"] == "stop"
    content = "".join(e["body"]["text"] for e in events if e["body"]["type"] == "content.delta" and e["turn"] == 0)
    assert content.startswith("Checking both at once.\n") and "<tool_call>" not in content
