"""Session events -> OpenAI chunks and responses (pure; no processes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.openai.format import ChatOptions, ChatStream
from gateway.translator import Diverged, ToolPolicy, UpstreamError
from schemas.events import (ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs, ToolCallBegin,
                            ToolCallReady, TurnEnded, TurnRestarted, TurnStarted)


def ev(body: Any, attempt: int = 1, turn: int = 0) -> Event:
    return Event(sid="s1", turn=turn, attempt=attempt, seq=0, src="parser", body=body)


def call_events(index: int, name: str, args: list[str]) -> list[Any]:
    return ([ToolCallBegin(index=index, id=f"call_0_{index}", name=name)]
            + [ToolCallArgs(index=index, delta=a) for a in args]
            + [ToolCallReady(index=index, id=f"call_0_{index}", name=name, arguments="".join(args))])


TURN = ([TurnStarted(prompt_tokens=40, cached_tokens=32), ReasoningDelta(text="need "), ReasoningDelta(text="tools"),
         ContentDelta(text="Checking"), ContentDelta(text=" now.")]
        + call_events(0, "get_weather", ['{"city"', ': "Pa', 'ris"}'])
        + call_events(1, "get_time", ['{"timezone": ', '"UTC"}'])
        + [TurnEnded(finish_reason="tool_calls", completion_tokens=30, n_calls=2), SessionEnded(reason="tool_calls")])


OFFERED = frozenset({"get_weather", "get_time"})
POLICY = ("offer_tools", "named", "parallel", "tools")  # run()'s options that are the ToolPolicy's


def run(bodies: list[Any], attempts: list[int] | None = None, **opts: Any) -> tuple[ChatStream, list[dict]]:
    policy = {"tools": OFFERED, **{k: opts.pop(k) for k in POLICY if k in opts}}
    stream = ChatStream(ChatOptions("chatcmpl-x", "tiny", 1700000000, **opts), ToolPolicy("call_x_", **policy))
    chunks: list[dict] = []
    for i, body in enumerate(bodies):
        chunks += stream.feed(ev(body, attempts[i] if attempts else 1))
    return stream, chunks + stream.finish()


def assemble(chunks: list[dict]) -> dict[str, Any]:
    """What a client accumulates from chunks (merging tool calls by index)."""
    content, reasoning, calls, finish = "", "", {}, None
    for c in chunks:
        for choice in c["choices"]:
            d = choice["delta"]
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls", []):
                slot = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                slot["name"] = (tc.get("function") or {}).get("name") or slot["name"]
                slot["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {"content": content, "reasoning": reasoning, "calls": [calls[i] for i in sorted(calls)], "finish": finish}


def test_wire_format_matches_openai() -> None:
    _, chunks = run(TURN, include_usage=True)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)  # the SDK's own type accepts every chunk
        assert c["id"] == "chatcmpl-x" and c["object"] == "chat.completion.chunk" and c["model"] == "tiny"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:] if c["choices"])
    call_deltas = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    firsts = [tc for tc in call_deltas if "id" in tc]
    assert [(t["index"], t["id"], t["type"], t["function"]["name"], t["function"]["arguments"]) for t in firsts] == \
        [(0, "call_x_0", "function", "get_weather", ""), (1, "call_x_1", "function", "get_time", "")]
    for tc in call_deltas:
        if "id" not in tc:
            assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
    got = assemble(chunks)
    assert got["content"] == "Checking now." and got["reasoning"] == "need tools"
    assert [json.loads(c["arguments"]) for c in got["calls"]] == [{"city": "Paris"}, {"timezone": "UTC"}]
    assert got["finish"] == "tool_calls"
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 40, "completion_tokens": 30,
                                                                   "total_tokens": 70,
                                                                   "prompt_tokens_details": {"cached_tokens": 32}}


def test_response_is_what_the_chunks_assemble_to() -> None:
    stream, chunks = run(TURN)
    resp = stream.response()
    ChatCompletion.model_validate(resp)
    got = assemble(chunks)
    msg = resp["choices"][0]["message"]
    assert msg["content"] == got["content"] and msg["reasoning_content"] == got["reasoning"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]] == \
        [(c["id"], c["name"], c["arguments"]) for c in got["calls"]]
    assert resp["choices"][0]["finish_reason"] == "tool_calls" and resp["usage"]["total_tokens"] == 70
    assert "usage" not in chunks[0]  # only with include_usage


def test_first_chunk_of_a_call_only_reply_has_null_content() -> None:
    _, chunks = run(call_events(0, "get_weather", ['{"city": "Paris"}'])
                    + [TurnEnded(finish_reason="tool_calls"), SessionEnded(reason="tool_calls")])
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"] is None


def test_tool_choice_none_returns_no_calls() -> None:
    stream, chunks = run(TURN, offer_tools=False)
    assert assemble(chunks)["calls"] == [] and assemble(chunks)["finish"] == "stop"
    assert "tool_calls" not in stream.response()["choices"][0]["message"]


def test_calls_of_functions_not_offered_are_dropped() -> None:
    stream, chunks = run(TURN, tools=frozenset({"get_time"}))
    got = assemble(chunks)
    assert [(c["name"], c["id"]) for c in got["calls"]] == [("get_time", "call_x_0")] and got["finish"] == "tool_calls"
    assert [c["function"]["name"] for c in stream.response()["choices"][0]["message"]["tool_calls"]] == ["get_time"]


def test_with_no_tools_offered_no_call_comes_back_and_the_turn_stops() -> None:
    for opts in ({"tools": frozenset()}, {}):  # offered none; or a caller that names no tools at all
        stream = ChatStream(ChatOptions("chatcmpl-x", "tiny", 1700000000), ToolPolicy("call_x_", **opts))
        chunks = [c for b in TURN for c in stream.feed(ev(b))] + stream.finish()
        got = assemble(chunks)
        assert got["calls"] == [] and got["finish"] == "stop" and got["content"] == "Checking now."
        message = stream.response()["choices"][0]["message"]
        assert "tool_calls" not in message and message["content"] == "Checking now."


def test_named_tool_choice_drops_other_functions_and_finishes_with_stop() -> None:
    _, chunks = run(TURN, named="get_time")
    got = assemble(chunks)
    assert [c["name"] for c in got["calls"]] == ["get_time"] and got["calls"][0]["id"] == "call_x_0"
    assert got["finish"] == "stop"  # as OpenAI does for a named function


def test_parallel_tool_calls_false_returns_the_first_call_only() -> None:
    _, chunks = run(TURN, parallel=False)
    assert [c["name"] for c in assemble(chunks)["calls"]] == ["get_weather"]


def test_cut_off_turn_keeps_finish_reason_length() -> None:
    bodies = [ContentDelta(text="Hi")] + call_events(0, "get_weather", ['{"ci'])[:-1] + [
        TurnEnded(finish_reason="length", n_calls=1), SessionEnded(reason="length")]
    _, chunks = run(bodies)
    assert assemble(chunks)["finish"] == "length"


def test_empty_reply_still_has_a_role_chunk() -> None:
    _, chunks = run([TurnEnded(finish_reason="stop"), SessionEnded(reason="stop")])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_regenerated_turn_streams_seamlessly() -> None:
    """A decoder died mid-turn; attempt 2 regenerates the same text: nothing is sent twice."""
    first = TURN[:6]  # up to the weather call's begin
    bodies = first + [TurnRestarted(reason="decoder lost")] + TURN
    attempts = [1] * len(first) + [2] * (len(TURN) + 1)
    _, chunks = run(bodies, attempts)
    _, reference = run(TURN)
    assert assemble(chunks) == assemble(reference)
    assert len(chunks) == len(reference)


def test_a_regenerated_turn_that_differs_is_an_error() -> None:
    bodies = [ContentDelta(text="Hello"), TurnRestarted(reason="decoder lost"), ContentDelta(text="Howdy")]
    with pytest.raises(Diverged):
        run(bodies, [1, 2, 2])


def test_a_failed_session_raises() -> None:
    with pytest.raises(UpstreamError, match="boom"):
        run([ContentDelta(text="x"), ErrorEvent(message="boom"), SessionEnded(reason="error")])


def test_the_reply_is_complete_at_its_turns_end() -> None:
    """A oneshot turn is the whole reply: the runner answers at ``turn.ended`` (the session's ending,
    one round trip and one relay read later, adds nothing for the client)."""
    stream = ChatStream(ChatOptions("chatcmpl-x", "tiny", 1700000000), ToolPolicy("call_x_", tools=OFFERED))
    stream.feed(ev(ContentDelta(text="Hi")))
    assert not stream.ended
    stream.feed(ev(TurnEnded(finish_reason="stop", completion_tokens=1)))
    assert stream.ended and assemble(stream.finish())["finish"] == "stop"
    failed = ChatStream(ChatOptions("chatcmpl-y", "tiny", 1700000000), ToolPolicy("call_x_", tools=OFFERED))
    failed.feed(ev(ErrorEvent(message="boom")))
    with pytest.raises(UpstreamError, match="boom"):  # an error before the turn's end fails the reply
        failed.feed(ev(TurnEnded(finish_reason="stop")))


def test_tool_choice_and_response_format_are_recorded_for_the_decoders_grammar() -> None:
    from gateway.openai.bodies import ChatRequest
    from gateway.openai.api import plan_chat
    from runtime.config import load_config
    from workers.decode.constraints import Calls, constraint_for

    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]

    def plan(**req: Any) -> Any:
        body = ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **req})
        p = plan_chat(load_config(served_model_name="m"), body)
        return p, constraint_for("hermes", None, p.tools, p.params)

    named = {"type": "function", "function": {"name": "b"}}
    p, c = plan(tools=tools, tool_choice=named)
    assert p.params["tool_choice"] == named and "prefill" not in p.params
    assert c.calls is Calls.REQUIRED and [t.name for t in c.tools] == ["b"]
    assert plan(tools=tools, tool_choice="required")[1].calls is Calls.REQUIRED
    assert plan(tools=tools)[1].calls is Calls.ALLOWED
    assert plan(tools=tools, tool_choice="none")[1] is None  # none renders no tools: a plain request
    assert plan()[1] is None  # no tools: decoded freely; the parser returns the text as content
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    p, c = plan(response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}})
    assert c.answer_schema == {**schema, "additionalProperties": False}
    assert plan(response_format={"type": "json_object"})[1].answer_schema == {"type": "object"}
