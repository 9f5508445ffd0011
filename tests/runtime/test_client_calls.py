"""Client-side tools: the tools the server lacks go to the client, whose results (or their absence,
after a timeout) continue the session exactly like server-side results."""

from __future__ import annotations

import asyncio
import json

import pytest
from arq.constants import job_key_prefix, result_key_prefix

from schemas import keys
from schemas.codec import decode_job
from schemas.events import ContinueTurn
from tests.stack_helpers import ended, of, start_session, wait_for
from runtime import bus
from runtime.barrier import Arrival
from runtime.client_calls import ClientResultError, expire_overdue, submit_client_result
from runtime.tool_catalog import ToolRequestError, split_tools
from runtime.turns import Turns
from workers.tools import default_registry
from workers.tools.worker import catalog_entries

LOCATION = {"type": "function", "function": {"name": "get_location", "description": "Where the user is.",
                                             "parameters": {"type": "object", "properties": {}}}}


def catalog() -> dict:
    """The catalog a tool worker with the built-in tools publishes."""
    return {t.name: t for t in catalog_entries(default_registry())}


# --------------------------------------------------------------------------- split_tools
def test_tools_the_server_lacks_are_client_tools() -> None:
    reg = default_registry()
    bare = {"name": "pick_file", "parameters": {"type": "object", "properties": {}}}
    weather_as_dict = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    tools, client = split_tools(catalog(), ["calculator", LOCATION, bare, weather_as_dict])
    assert client == ["get_location", "pick_file"]
    by_name = {t["function"]["name"]: t for t in tools}
    assert list(by_name) == ["calculator", "get_location", "pick_file", "get_weather"]
    assert by_name["get_weather"] == reg.openai_tools(["get_weather"])[0]  # the server's own schema
    assert by_name["pick_file"] == {"type": "function", "function": bare}


def test_no_tools_requested_means_every_server_tool() -> None:
    reg = default_registry()
    assert split_tools(catalog(), None) == (reg.openai_tools(), [])


@pytest.mark.parametrize("requested, fragment", [
    (["no_such_tool"], "unknown server tool 'no_such_tool'"),
    ([{"type": "function", "function": {"description": "nameless"}}], "needs a name"),
    ([{"name": "bad name!"}], "needs a name"),
    ([LOCATION, LOCATION], "duplicate tool names"),
])
def test_unusable_tool_requests_are_refused(requested, fragment) -> None:
    with pytest.raises(ToolRequestError, match=fragment):
        split_tools(catalog(), requested)


# --------------------------------------------------------------------------- results
async def _pending_session(r, n_calls: int = 1) -> Turns:
    turns = Turns(r)
    await turns.sessions.create("s", [{"role": "user", "content": "hi"}], client_tools=["get_location"])
    await turns.sessions.record_message("s", 0, {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_0_{i}", "type": "function", "function": {"name": "get_location", "arguments": "{}"}}
        for i in range(n_calls)]})
    for i in range(n_calls):
        await turns.barrier.awaiting_client("s", 0, i, f"call_0_{i}", "get_location")
    return turns


async def test_a_client_result_counts_like_a_server_result(r) -> None:
    turns = await _pending_session(r)
    b = turns.barrier
    assert await b.turn_end("s", 0, 1) == Arrival.RECORDED
    assert await submit_client_result(turns, "s", "call_0_0", "Lyon") == Arrival.COMPLETED
    assert await submit_client_result(turns, "s", "call_0_0", "Lyon again") == Arrival.DUPLICATE
    assert [x["content"] for x in await b.results("s", 0)] == ["Lyon"]
    [(_, fields)] = await r.xrange(keys.DECODE_JOBS)
    assert decode_job(fields[bus.FIELD]) == ContinueTurn(sid="s", turn=0)
    assert await r.hget(keys.TOOL_DURATIONS, "get_location") is not None


@pytest.mark.parametrize("sid, call_id, fragment", [
    ("ghost", "call_0_0", "does not exist"),
    ("s", "call_7_0", "not a call of turn 0"),
    ("s", "call_0_x", "not a call id"),
    ("s", "call_0_1", "not a pending client-side call"),
])
async def test_results_for_no_pending_call_are_refused(r, sid, call_id, fragment) -> None:
    turns = await _pending_session(r)
    with pytest.raises(ClientResultError, match=fragment):
        await submit_client_result(turns, sid, call_id, "x")


async def test_a_result_posted_again_after_the_turn_moved_on_is_a_duplicate(r) -> None:
    """A client retrying a post whose reply it lost, once the session has moved to turn 1 (issue 19 #10)."""
    turns = await _pending_session(r)
    await turns.barrier.turn_end("s", 0, 1)
    assert await submit_client_result(turns, "s", "call_0_0", "Lyon") == Arrival.COMPLETED
    await turns.sessions.claim_turn("s", 1, "d1")  # the continuation started turn 1
    assert await submit_client_result(turns, "s", "call_0_0", "Lyon") == Arrival.DUPLICATE
    with pytest.raises(ClientResultError, match="not waiting for a result"):
        await submit_client_result(turns, "s", "call_0_1", "never asked")


async def test_overdue_client_calls_get_an_error_once(r) -> None:
    turns = await _pending_session(r, n_calls=2)
    b = turns.barrier
    await b.turn_end("s", 0, 2)
    assert await expire_overdue(turns, "s", 0, timeout_s=60) == 0
    await submit_client_result(turns, "s", "call_0_0", "Lyon")
    await asyncio.sleep(0.05)
    assert await expire_overdue(turns, "s", 0, timeout_s=0.01) == 1  # only call 1 was still waiting
    assert await expire_overdue(turns, "s", 0, timeout_s=0.01) == 0
    results = await b.results("s", 0)
    assert results[0]["content"] == "Lyon" and not results[0]["is_error"]
    assert results[1]["is_error"] and "did not return a result for get_location" in results[1]["content"]
    assert await r.xlen(keys.DECODE_JOBS) == 1


# --------------------------------------------------------------------------- with the stack
CLIENT_AND_SERVER = [
    'Let me see.\n<tool_call>\n{"name": "get_location", "arguments": {}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "You are in {{ results[0] }}; weather: {{ results[1] }}",
]


async def _client(r, sid: str, content: str) -> str:
    """Play the client: run get_location when its call shows up, post the result."""
    bodies = await wait_for(r, sid, lambda b: any(c.name == "get_location" for c in of(b, "ToolCallReady")))
    [call] = [c for c in of(bodies, "ToolCallReady") if c.name == "get_location"]
    await submit_client_result(Turns(r), sid, call.id, content)
    return call.id


async def test_client_tool_round_trip_and_timeout(stack_factory, r) -> None:
    stack_factory(replay_rate=200, client_tool_timeout_s=2.0)
    tools, client_tools = split_tools(catalog(), [LOCATION, "get_weather"])
    for sid in ("answered", "silent"):
        await start_session(r, sid, CLIENT_AND_SERVER, tools=tools, client_tools=client_tools)
    call_id = await _client(r, "answered", "Lyon")
    answered = await wait_for(r, "answered", ended)
    silent = await wait_for(r, "silent", ended)

    results = sorted(of(answered, "ToolResult"), key=lambda x: x.index)
    assert [(x.name, x.is_error) for x in results] == [("get_location", False), ("get_weather", False)]
    assert results[0].content == "Lyon" and results[0].id == call_id
    final = of(answered, "SessionEnded")[0]
    assert final.reason == "stop" and final.content.startswith("You are in Lyon; weather: {")
    assert [s.name for s in of(answered, "ToolStarted")] == ["get_weather"]  # only the server ran one
    assert not await r.exists(job_key_prefix + keys.tool_job_id("answered", 0, 0),
                              result_key_prefix + keys.tool_job_id("answered", 0, 0))
    conv = [json.loads(m) for m in await r.lrange(keys.messages("answered"), 0, -1)]
    assert [(m["role"], m.get("content")) for m in conv[2:]] == [("tool", "Lyon"), ("tool", results[1].content),
                                                                 ("assistant", final.content)]  # complete at the end

    timed_out = [x for x in of(silent, "ToolResult") if x.name == "get_location"][0]
    assert timed_out.is_error and "did not return a result for get_location within 2 s" in timed_out.content
    assert "did not return a result" in of(silent, "SessionEnded")[0].content  # the model saw the error
