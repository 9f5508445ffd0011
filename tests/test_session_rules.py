"""Session rules the whole pipeline enforces: a session's tool list, its mode, and its ending.

* A call of a tool the session was not given is never run: ``tool_call.invalid`` (unavailable),
  and the model gets an error result (issue 19 #1).
* RETURN_CALLS (the Responses API): server tools run inside the response; a turn that calls a
  client tool ends the session with reason ``tool_calls`` once its server calls are answered.
* Nothing is published for a turn after its ``session.ended`` (a cancel while a tool runs, #11).
* The conversation is complete when ``session.ended`` is out (issue 13).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from runtime import bus
from runtime.session import SessionMode, Sessions
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import ContinueTurn
from tests.stack_helpers import ended, of, server_tools, start_session, wait_for

TOOLS_TOML = """
[registry]
include_debug = true

[python.append_line]
target = "workers.tools.debug:append_line"
"""

LOCATION = {"type": "function", "function": {"name": "get_location", "description": "Where the user is.",
                                             "parameters": {"type": "object", "properties": {}}}}


def _call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _stack(stack_factory, tmp_path: Path, **kw: object):
    toml = tmp_path / "tools.toml"
    toml.write_text(TOOLS_TOML)
    return stack_factory(replay_rate=200, tools_config=str(toml), **kw)


async def test_a_tool_the_session_was_not_given_never_runs(stack_factory, r, tmp_path) -> None:
    """The rule holds without the grammar too (``grammar_auto=off``: the model may write any name)."""
    _stack(stack_factory, tmp_path, grammar_auto="off")
    effect = Path(tempfile.mkdtemp()) / "booked.txt"
    allowed = [t for t in await server_tools(r) if t["function"]["name"] == "debug_sleep"]
    script = [_call("append_line", path=str(effect), line="booked") + _call("debug_sleep", text="z", seconds=0),
              "Results: {{ results[0] }} | {{ results[1] }}"]
    await start_session(r, "s", script, tools=allowed)
    bodies = await wait_for(r, "s", ended)
    [invalid] = of(bodies, "ToolCallInvalid")
    assert (invalid.name, invalid.unavailable, invalid.index) == ("append_line", True, 0)
    assert "not available in this session" in invalid.error and "debug_sleep" in invalid.error
    assert [c.name for c in of(bodies, "ToolCallReady")] == ["debug_sleep"]
    results = sorted(of(bodies, "ToolResult"), key=lambda x: x.index)
    assert results[0].is_error and "not available in this session" in results[0].content
    assert (results[1].content, results[1].is_error) == ("z", False)
    assert [s.name for s in of(bodies, "ToolStarted")] == ["debug_sleep"]  # append_line never started
    assert "not available" in of(bodies, "SessionEnded")[0].content  # the model saw the error
    assert not effect.exists()  # and its side effect never happened


async def test_return_calls_runs_server_tools_and_returns_the_client_ones(stack_factory, r, tmp_path) -> None:
    _stack(stack_factory, tmp_path)
    sleep = [t for t in await server_tools(r) if t["function"]["name"] == "debug_sleep"]
    both = _call("debug_sleep", text="slept", seconds=0) + _call("get_location")
    await start_session(r, "mixed", [both, "never"], tools=sleep + [LOCATION], client_tools=["get_location"],
                        mode=SessionMode.RETURN_CALLS)
    await start_session(r, "server", [_call("debug_sleep", text="slept", seconds=0), "Done: {{ results[0] }}"],
                        tools=sleep, mode=SessionMode.RETURN_CALLS)
    mixed = await wait_for(r, "mixed", ended)
    assert of(mixed, "SessionEnded")[0].reason == "tool_calls"
    assert [(x.name, x.content) for x in of(mixed, "ToolResult")] == [("debug_sleep", "slept")]
    assert len(of(mixed, "TurnStarted")) == 1
    conv = await Sessions(r).messages("mixed")
    assert [m["role"] for m in conv] == ["user", "assistant", "tool"]
    assert [c["function"]["name"] for c in conv[1]["tool_calls"]] == ["debug_sleep", "get_location"]
    assert conv[2]["tool_call_id"] == conv[1]["tool_calls"][0]["id"]  # the caller answers the other one
    server = await wait_for(r, "server", ended)
    assert of(server, "SessionEnded")[0].reason == "stop" and of(server, "SessionEnded")[0].content == "Done: slept"
    assert [m["role"] for m in await Sessions(r).messages("server")] == ["user", "assistant", "tool", "assistant"]


async def test_nothing_is_published_after_a_cancel_while_a_tool_runs(stack_factory, r, tmp_path) -> None:
    _stack(stack_factory, tmp_path)
    await start_session(r, "c", [_call("debug_sleep", text="late", seconds=1.5), "never"])
    await wait_for(r, "c", lambda b: bool(of(b, "ToolStarted")))
    await Turns(r).end("c", 0, "cancelled")
    async with asyncio.timeout(10):  # the tool finishes and records its result for the barrier...
        while not await r.hexists(keys.barrier("c", 0), "r:0"):
            await asyncio.sleep(0.05)
    bodies = await wait_for(r, "c", ended)
    assert type(bodies[-1]).__name__ == "SessionEnded" and bodies[-1].reason == "cancelled"
    assert of(bodies, "ToolResult") == []  # ...which no client ever sees
    conv = await Sessions(r).messages("c")  # the cancelled call has no result: it is not in the conversation
    assert [m["role"] for m in conv] == ["user", "assistant"] and "tool_calls" not in conv[1]


async def test_a_refused_continuation_ends_the_session_at_the_turn_it_was_to_generate(r) -> None:
    """The decoder claims turn 1 (the session's ``turn`` becomes 1) and then refuses its
    continuation job (the prompt outgrew the context): a client subscribed since waits for a
    ``session.ended`` of turn >= 1, so the error and the ending are turn 1's, not turn 0's."""
    sessions = Sessions(r)
    await sessions.create("grown", [{"role": "user", "content": "hi"}])
    await sessions.claim_turn("grown", 1, "decode-a")
    job = bus.Entry(keys.DECODE_JOBS, "1-0", encode(ContinueTurn(sid="grown", turn=0)))
    await Turns(r).fail(job, "prompt of 202 tokens; this engine fits at most 159", code="context_length_exceeded")
    events = [decode_event(f[bus.FIELD]) for _, f in await r.xrange(keys.events("grown"))]
    assert [(type(e.body).__name__, e.turn) for e in events] == [("ErrorEvent", 1), ("SessionEnded", 1)]
    assert events[0].body.code == "context_length_exceeded" and events[1].body.reason == "error"
    assert (await sessions.get("grown")).status == "ended"
