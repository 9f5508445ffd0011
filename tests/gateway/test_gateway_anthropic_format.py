"""The Messages translator (session events -> Anthropic events) and the request mapping, as pure
functions; every event and message is checked against the ``anthropic`` package's types."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pydantic
import pytest

from gateway.anthropic.bodies import MessagesRequest
from gateway.anthropic.format import MessageOptions, MessageStream
from gateway.anthropic.plan import plan_messages
from gateway.errors import ApiError
from gateway.translator import ToolPolicy, UpstreamError
from runtime.config import load_config
from schemas.events import (ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs, ToolCallBegin,
                            TurnEnded, TurnRestarted, TurnStarted)

EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
CFG = load_config(served_model_name="tiny")


def _no_extra(obj: Any, where: str = "") -> None:
    """Every field we sent is one the SDK's type declares."""
    if isinstance(obj, pydantic.BaseModel):
        assert not obj.model_extra, f"{where}: fields the SDK does not know: {obj.model_extra}"
        for name in type(obj).model_fields:
            _no_extra(getattr(obj, name), f"{where}.{name}")
    elif isinstance(obj, list):
        for i, x in enumerate(obj):
            _no_extra(x, f"{where}[{i}]")


OFFERED = frozenset({"get_weather", "get_time"})  # the tools the requests below offer


def run(bodies: list[Any], **opts: Any) -> tuple[list[dict[str, Any]], MessageStream]:
    """Feed bodies as events of attempt 1 (a ``(attempt, body)`` pair sets the attempt); check every event."""
    policy = {"tools": OFFERED, **{k: opts.pop(k) for k in ("offer_tools", "named", "parallel", "tools") if k in opts}}
    stream = MessageStream(MessageOptions("msg_x", "tiny", **opts), ToolPolicy("toolu_x_", **policy))
    out: list[dict[str, Any]] = []
    for seq, item in enumerate(bodies):
        attempt, body = item if isinstance(item, tuple) else (1, item)
        out += stream.feed(Event(sid="x", turn=0, attempt=attempt, seq=seq, src="t", body=body))
    out += stream.finish()
    for ev in out:
        if ev["type"] == "ping":  # the SDK has no type for it: it drops pings
            assert ev == {"type": "ping"}
        else:
            _no_extra(EVENT.validate_python(ev), ev["type"])
    _no_extra(anthropic.types.Message.model_validate(stream.message()), "message")
    return out, stream


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


TWO_CALLS = [TurnStarted(prompt_tokens=10, cached_tokens=4), ContentDelta(text="On it.\n"),
             ToolCallBegin(index=0, id="c0", name="get_weather"), ToolCallArgs(index=0, delta='{"city": '),
             ToolCallArgs(index=0, delta='"Paris"}'), ContentDelta(text="\n"),
             ToolCallBegin(index=1, id="c1", name="get_time"), ToolCallArgs(index=1, delta="{}"),
             TurnEnded(finish_reason="tool_calls", completion_tokens=7, n_calls=2), SessionEnded(reason="tool_calls")]


def test_text_then_calls_become_blocks() -> None:
    events, stream = run(TWO_CALLS)
    assert kinds(events) == ["message_start", "ping", "content_block_start", "content_block_delta",
                             "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
                             "content_block_stop", "content_block_start", "content_block_delta",
                             "content_block_stop", "message_delta", "message_stop"]
    assert events[0]["message"]["usage"] == {"input_tokens": 6, "cache_creation_input_tokens": 0,
                                             "cache_read_input_tokens": 4, "output_tokens": 0}
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(e["index"], e["content_block"]) for e in starts] == [
        (0, {"type": "text", "text": ""}),
        (1, {"type": "tool_use", "id": "toolu_x_0", "name": "get_weather", "input": {}}),
        (2, {"type": "tool_use", "id": "toolu_x_1", "name": "get_time", "input": {}})]
    assert events[-2] == {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                          "usage": {"input_tokens": 6, "cache_creation_input_tokens": 0,
                                    "cache_read_input_tokens": 4, "output_tokens": 7}}
    msg = stream.message()
    assert msg["content"] == [{"type": "text", "text": "On it.\n"},  # the lone "\n" between the calls: no block
                              {"type": "tool_use", "id": "toolu_x_0", "name": "get_weather", "input": {"city": "Paris"}},
                              {"type": "tool_use", "id": "toolu_x_1", "name": "get_time", "input": {}}]
    assert msg["stop_reason"] == "tool_use" and msg["usage"]["output_tokens"] == 7


def test_the_stream_assembles_to_the_message() -> None:
    events, stream = run(TWO_CALLS)
    blocks: list[dict[str, Any]] = []
    for e in events:
        if e["type"] == "content_block_start":
            blocks.append(dict(e["content_block"], json=""))
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            key = {"text_delta": "text", "input_json_delta": "json", "thinking_delta": "thinking"}[d["type"]]
            blocks[e["index"]][key] += d[{"json": "partial_json"}.get(key, key)]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b["json"])
        del b["json"]
    assert blocks == stream.message()["content"]


def test_thinking_blocks_only_when_asked() -> None:
    bodies = [ReasoningDelta(text="Let me think. "), ReasoningDelta(text="Done."), ContentDelta(text="Answer."),
              TurnEnded(finish_reason="stop", completion_tokens=5), SessionEnded(reason="stop")]
    events, stream = run(bodies, thinking=True)
    assert stream.message()["content"] == [{"type": "thinking", "thinking": "Let me think. Done.", "signature": ""},
                                           {"type": "text", "text": "Answer."}]
    assert [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"] == [
        "thinking_delta", "thinking_delta", "text_delta"]
    _, hidden = run(bodies, thinking=False)
    assert hidden.message()["content"] == [{"type": "text", "text": "Answer."}]


def test_a_regenerated_turn_streams_only_what_is_new() -> None:
    bodies = [ContentDelta(text="Hel"), (2, TurnRestarted(reason="decoder lost")), (2, ContentDelta(text="Hello")),
              (2, TurnEnded(finish_reason="stop", completion_tokens=2)), (2, SessionEnded(reason="stop"))]
    events, stream = run(bodies)
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == ["Hel", "lo"]
    assert stream.message()["content"] == [{"type": "text", "text": "Hello"}]


def test_cut_off_calls_and_filtered_calls() -> None:
    cut = [ToolCallBegin(index=0, id="c0", name="get_weather"), ToolCallArgs(index=0, delta='{"ci'),
           TurnEnded(finish_reason="length", completion_tokens=3), SessionEnded(reason="length")]
    _, stream = run(cut)
    assert stream.message()["stop_reason"] == "max_tokens"
    assert stream.message()["content"] == [{"type": "tool_use", "id": "toolu_x_0", "name": "get_weather", "input": {}}]
    _, none = run(TWO_CALLS, offer_tools=False)
    assert none.message()["content"] == [{"type": "text", "text": "On it.\n\n"}]
    assert none.message()["stop_reason"] == "end_turn"
    _, first = run(TWO_CALLS, parallel=False)
    assert [b.get("name") for b in first.message()["content"]] == [None, "get_weather"]


def test_an_empty_turn_and_a_failed_one() -> None:
    events, stream = run([SessionEnded(reason="stop")])
    assert kinds(events) == ["message_start", "ping", "message_delta", "message_stop"]
    assert stream.message()["content"] == [] and stream.message()["stop_reason"] == "end_turn"
    with pytest.raises(UpstreamError):
        run([ContentDelta(text="a"), ErrorEvent(message="boom"), SessionEnded(reason="error")])


# --------------------------------------------------------------------------- requests -> sessions
def plan(**body: Any):
    return plan_messages(CFG, MessagesRequest.model_validate({"model": "tiny", "max_tokens": 50, **body}))


def test_the_conversation_maps_onto_internal_messages() -> None:
    p = plan(system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}], messages=[
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "Paris."}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "sunny"}]}, {"type": "text", "text": "Thanks."}]},
        {"role": "system", "content": "Reminder."},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "down",
                                      "is_error": True}]}])
    assert p.messages == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "Weather?\nParis."},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"}, {"role": "user", "content": "Thanks."},
        {"role": "system", "content": "Reminder."},
        {"role": "tool", "tool_call_id": "t2", "content": "error: down"}]
    assert p.params == {"max_tokens": 50} and p.meta == {} and p.parallel and not p.thinking


def test_tools_tool_choice_and_sampling() -> None:
    tools = [{"name": "a", "input_schema": {"type": "object"}}, {"name": "b", "description": "B",
                                                                  "input_schema": {"type": "object"}}]
    p = plan(messages=[{"role": "user", "content": "x"}], tools=tools, temperature=0.5, top_p=0.9, top_k=40,
             stop_sequences=["END"], metadata={"user_id": "u"})
    no_args = {"type": "object", "properties": {}}  # written out, as every tool's (gateway.tool_schemas)
    assert p.tools == [{"type": "function", "function": {"name": "a", "parameters": no_args}},
                       {"type": "function", "function": {"name": "b", "description": "B", "parameters": no_args}}]
    assert p.params == {"max_tokens": 50, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stop": ["END"]}
    named = plan(messages=[{"role": "user", "content": "x"}], tools=tools,
                 tool_choice={"type": "tool", "name": "b", "disable_parallel_tool_use": True})
    assert [t["function"]["name"] for t in named.tools] == ["b"] and named.named == "b" and not named.parallel
    # the decoder holds the turn to the choice (workers.decode.constraints); the plan records it
    assert named.params["tool_choice"] == {"type": "tool", "name": "b"}
    assert named.params["parallel_tool_calls"] is False
    assert plan(messages=[{"role": "user", "content": "x"}], tools=tools,
                tool_choice={"type": "any"}).params["tool_choice"] == {"type": "any"}
    none = plan(messages=[{"role": "user", "content": "x"}], tools=tools, tool_choice={"type": "none"})
    assert none.tools == [] and not none.offer_tools


def test_thinking_is_shown_on_reasoning_deployments_only() -> None:
    body = MessagesRequest.model_validate({"model": "tiny", "max_tokens": 2000, "messages": [
        {"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert plan_messages(CFG.replace(reasoning="think"), body).thinking
    assert not plan_messages(CFG, body).thinking
    hidden = body.model_copy(update={"thinking": body.thinking.model_copy(update={"type": "disabled"})})
    assert not plan_messages(CFG.replace(reasoning="think"), hidden).thinking


def test_cache_control_sets_how_long_the_kv_is_kept() -> None:
    user = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]
    assert plan(messages=user).params["keep_kv_s"] == 300
    tools = [{"name": "a", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert plan(messages=user, tools=tools).params["keep_kv_s"] == 3600
    assert "keep_kv_s" not in plan(messages=[{"role": "user", "content": "x"}]).params


@pytest.mark.parametrize("body, where", [
    (dict(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]), "messages.0.content.0"),
    (dict(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "document", "source": {}}]}]}]), "messages.0.content.0.content.0"),
    (dict(messages=[{"role": "user", "content": [{"type": "search_result", "x": 1}]}]), "messages.0.content.0"),
    (dict(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "("}]), "messages.1"),
    (dict(messages=[{"role": "user", "content": "x"}], tools=[{"type": "bash_20250124", "name": "bash"}]),
     "tools.0.type"),
    (dict(messages=[{"role": "user", "content": "x"}], tools=[{"name": "a"}]), "tools.0.input_schema"),
    (dict(messages=[{"role": "user", "content": "x"}], tools=[{"name": "a", "input_schema": {"type": 5}}]),
     "tools.0.input_schema"),
    (dict(messages=[{"role": "user", "content": "x"}], tools=[{"name": "a", "input_schema": {}}] * 2), "tools"),
    (dict(messages=[{"role": "user", "content": "x"}], tool_choice={"type": "any"}), "tool_choice"),
])
def test_what_this_server_refuses_is_named(body: dict[str, Any], where: str) -> None:
    with pytest.raises(ApiError) as err:
        plan(**body)
    assert err.value.status == 400 and err.value.message.startswith(where + ":"), err.value.message
    assert err.value.body("/v1/messages") == {"type": "error", "error": {"type": "invalid_request_error",
                                                                         "message": err.value.message}}


def test_error_shapes_follow_the_route() -> None:
    err = ApiError(429, "slow down")
    assert err.body("/v1/messages/count_tokens")["error"] == {"type": "rate_limit_error", "message": "slow down"}
    assert err.body("/v1/chat/completions")["error"]["type"] == "rate_limit_error"
    assert set(err.body("/v1/messagesx")) == {"error"} and set(err.body("/v1/messages")) == {"type", "error"}
    assert {s: ApiError(s, "m").body("/v1/messages")["error"]["type"] for s in (401, 403, 404, 413, 500, 503)} == {
        401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large",
        500: "api_error", 503: "api_error"}


def test_a_long_turn_assembles_every_delta_once() -> None:
    """Thousands of deltas (text, then a call's arguments) end in the message exactly as streamed."""
    words = [f"w{i} " for i in range(3000)]
    args = ['{"city": "'] + ["P"] * 2000 + ['"}']
    bodies = [TurnStarted(prompt_tokens=10, cached_tokens=0), *(ContentDelta(text=w) for w in words),
              ToolCallBegin(index=0, id="c0", name="get_weather"), *(ToolCallArgs(index=0, delta=a) for a in args),
              TurnEnded(finish_reason="tool_calls", completion_tokens=5002, n_calls=1), SessionEnded(reason="tool_calls")]
    events, stream = run(bodies)
    assert sum(e["type"] == "content_block_delta" for e in events) == len(words) + len(args)
    assert stream.message()["content"] == [
        {"type": "text", "text": "".join(words)},
        {"type": "tool_use", "id": "toolu_x_0", "name": "get_weather", "input": {"city": "P" * 2000}}]
