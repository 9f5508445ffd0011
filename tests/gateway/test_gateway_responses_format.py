"""``gateway.responses.format``: session events -> Responses events, checked against the ``openai`` types."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from gateway.responses.format import ResponseStream
from gateway.responses.output import Policy, ResponseHead
from schemas.events import (ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs, ToolCallBegin,
                            ToolCallInvalid, ToolCallReady, ToolResult, TurnEnded, TurnRestarted, TurnStarted)

SID = "abc123"
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
HEAD = ResponseHead(SID, 1700000000, {"model": "tiny", "instructions": None, "tools": [], "tool_choice": "auto",
                                      "parallel_tool_calls": True, "metadata": {}})
WEATHER = Policy(servers={"get_weather": ("turnstream", "get_weather")})


def ev(body: Any, turn: int = 0, attempt: int = 1, ts: float = 1700000001.0) -> Event:
    return Event(sid=SID, turn=turn, attempt=attempt, seq=0, src="test", body=body, ts=ts)


def call(index: int, name: str, args: str, turn: int = 0, attempt: int = 1) -> list[Event]:
    cid = f"call_{turn}_{index}"
    half = len(args) // 2
    return [ev(ToolCallBegin(index=index, id=cid, name=name), turn, attempt),
            ev(ToolCallArgs(index=index, delta=args[:half]), turn, attempt),
            ev(ToolCallArgs(index=index, delta=args[half:]), turn, attempt),
            ev(ToolCallReady(index=index, id=cid, name=name, arguments=args), turn, attempt)]


def run(events: list[Event], policy: Policy | None = None) -> tuple[ResponseStream, list[dict[str, Any]]]:
    """Translate ``events``; every output event and the final object must validate as OpenAI's types."""
    stream = ResponseStream(HEAD, policy or Policy())
    out = stream.start()
    for e in events:
        out += stream.feed(e)
    for o in out:
        EVENTS.validate_python(o)  # strict: required fields, literals
    assert [o["sequence_number"] for o in out] == list(range(len(out)))
    Response.model_validate(stream.snapshot())
    return stream, out


def types(out: list[dict[str, Any]]) -> list[str]:
    return [o["type"] for o in out]


def text_turn(text: str = "Hello there", finish: str = "stop") -> list[Event]:
    return [ev(TurnStarted(prompt_tokens=20, cached_tokens=16)), ev(ContentDelta(text=text[:5])),
            ev(ContentDelta(text=text[5:])), ev(TurnEnded(finish_reason=finish, completion_tokens=3))]


def test_a_text_turn_streams_one_message() -> None:
    stream, out = run(text_turn() + [ev(SessionEnded(reason="stop"))])
    assert types(out) == ["response.created", "response.in_progress", "response.output_item.added",
                          "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    final = Response.model_validate(out[-1]["response"])
    assert final.output_text == "Hello there" and final.status == "completed" and final.id == f"resp_{SID}"
    assert final.usage.input_tokens == 20 and final.usage.input_tokens_details.cached_tokens == 16
    assert final.usage.output_tokens == 3 and final.usage.total_tokens == 23
    assert out[0]["response"]["status"] == "in_progress" and out[0]["response"]["usage"] is None
    assert stream.snapshot() == out[-1]["response"]


def test_function_calls_end_the_response_with_function_call_items() -> None:
    args = '{"city": "Paris"}'
    events = [ev(ContentDelta(text="On it.")), *call(0, "get_weather", args), *call(1, "get_time", "{}"),
              ev(TurnEnded(finish_reason="tool_calls", completion_tokens=9)), ev(SessionEnded(reason="tool_calls"))]
    _, out = run(events)
    final = Response.model_validate(out[-1]["response"])
    assert [o.type for o in final.output] == ["message", "function_call", "function_call"]
    fc = final.output[1]
    assert (fc.name, fc.arguments, fc.status) == ("get_weather", args, "completed")
    assert fc.call_id == f"call_{SID}_0_0" and fc.id != fc.call_id
    deltas = "".join(o["delta"] for o in out if o["type"] == "response.function_call_arguments.delta"
                     and o["item_id"] == fc.id)
    assert deltas == args and final.status == "completed"
    assert types(out).index("response.output_text.done") < types(out).index("response.output_item.added", 3)


def test_reasoning_then_content_are_two_items() -> None:
    events = [ev(ReasoningDelta(text="think ")), ev(ReasoningDelta(text="hard")), ev(ContentDelta(text="42")),
              ev(TurnEnded(finish_reason="stop")), ev(SessionEnded(reason="stop"))]
    _, out = run(events)
    final = Response.model_validate(out[-1]["response"])
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "think hard" and final.output_text == "42"
    assert "response.reasoning_text.delta" in types(out) and "response.reasoning_text.done" in types(out)


def test_server_tools_are_mcp_calls_and_the_loop_goes_on_in_one_response() -> None:
    args = '{"city": "Paris"}'
    events = [*call(0, "get_weather", args), *call(1, "get_time", "{}"),
              ev(TurnEnded(finish_reason="tool_calls", completion_tokens=5)),
              ev(ToolResult(index=0, id="call_0_0", name="get_weather", content="sunny"), attempt=0),
              ev(ToolResult(index=1, id="call_0_1", name="get_time", content="no clock", is_error=True), attempt=0),
              *text_turn("It is sunny.")[1:3], ev(TurnEnded(finish_reason="stop"), turn=1),
              ev(SessionEnded(reason="stop"), turn=1)]
    events[-4:-2] = [ev(e.body, turn=1) for e in events[-4:-2]]
    policy = Policy(servers={"get_weather": ("turnstream", "get_weather"), "get_time": ("turnstream", "get_time")})
    _, out = run(events, policy)
    final = Response.model_validate(out[-1]["response"])
    assert [o.type for o in final.output] == ["mcp_call", "mcp_call", "message"]
    ok, bad = final.output[0], final.output[1]
    assert (ok.server_label, ok.name, ok.arguments, ok.output, ok.status) == ("turnstream", "get_weather", args,
                                                                            "sunny", "completed")
    assert bad.status == "failed" and bad.error.type == "mcp_tool_execution_error" and bad.output is None
    assert final.output_text == "It is sunny." and final.status == "completed"
    t = types(out)
    for kind in ("in_progress", "arguments.delta", "arguments.done", "completed", "failed"):
        sep = "_" if kind.startswith("arguments") else "."
        assert f"response.mcp_call{sep}{kind}" in t, kind


def test_with_server_tools_a_call_of_an_unknown_name_is_the_servers_and_a_client_tool_the_clients() -> None:
    events = [*call(0, "made_up", "{}"), *call(1, "get_time", "{}"), ev(TurnEnded(finish_reason="tool_calls")),
              ev(ToolResult(index=0, id="call_0_0", name="made_up", content="unknown tool", is_error=True), attempt=0),
              ev(SessionEnded(reason="tool_calls"))]
    _, out = run(events, Policy(servers=WEATHER.servers, clients=("get_time",)))
    final = Response.model_validate(out[-1]["response"])
    assert [(o.type, o.status) for o in final.output] == [("mcp_call", "failed"), ("function_call", "completed")]
    assert (final.output[0].server_label, final.output[0].name) == ("turnstream", "made_up")
    _, out = run(events)  # without server tools every call is the client's (as in chat completions)
    assert [o["type"] for o in out[-1]["response"]["output"]] == ["function_call", "function_call"]


def test_a_turn_cut_off_is_incomplete_with_max_output_tokens() -> None:
    events = [ev(ContentDelta(text="Hel")), *call(0, "get_weather", '{"ci')[:3],
              ev(ToolCallInvalid(index=0, id="call_0_0", name="get_weather", truncated=True)),
              ev(TurnEnded(finish_reason="length", completion_tokens=5)), ev(SessionEnded(reason="length"))]
    _, out = run(events)
    final = Response.model_validate(out[-1]["response"])
    assert out[-1]["type"] == "response.incomplete" and final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens" and final.output[1].status == "incomplete"


def test_output_policies_as_in_chat_completions() -> None:
    events = [*call(0, "get_weather", "{}"), *call(1, "get_time", "{}"), ev(TurnEnded(finish_reason="tool_calls")),
              ev(SessionEnded(reason="tool_calls"))]
    names = {
        "none": Policy(offer_tools=False), "named": Policy(named="get_time"), "serial": Policy(parallel=False)}
    got = {k: [o.name for o in Response.model_validate(run(events, p)[1][-1]["response"]).output]
           for k, p in names.items()}
    assert got == {"none": [], "named": ["get_time"], "serial": ["get_weather"]}


def test_a_regenerated_turn_is_streamed_once_and_a_divergent_one_fails() -> None:
    first = [ev(ContentDelta(text="Hello "), attempt=1), ev(TurnRestarted(reason="decoder died"), attempt=2)]
    again = [ev(ContentDelta(text="Hello world"), attempt=2), ev(ContentDelta(text="late"), attempt=1),
             ev(TurnEnded(finish_reason="stop"), attempt=2), ev(SessionEnded(reason="stop"))]
    _, out = run(first + again)
    deltas = [o["delta"] for o in out if o["type"] == "response.output_text.delta"]
    assert deltas == ["Hello ", "world"]
    assert Response.model_validate(out[-1]["response"]).output_text == "Hello world"
    stream, out = run(first + [ev(ContentDelta(text="Goodbye"), attempt=2), ev(SessionEnded(reason="stop"))])
    assert out[-1]["type"] == "response.failed" and stream.status == "failed"
    assert "differs" in out[-1]["response"]["error"]["message"]


def test_the_translation_is_deterministic_so_resuming_is_exact() -> None:
    events = [ev(ReasoningDelta(text="hmm")), ev(ContentDelta(text="ok")), *call(0, "get_weather", '{"a": 1}'),
              ev(TurnEnded(finish_reason="tool_calls")), ev(SessionEnded(reason="tool_calls"))]
    a, b = run(events)[1], run(events)[1]
    assert json.dumps(a) == json.dumps(b)


def test_cancelled_has_no_terminal_event_and_errors_fail() -> None:
    stream, out = run([ev(ContentDelta(text="partial")), ev(SessionEnded(reason="cancelled"))])
    assert out[-1]["type"] == "response.output_item.done" and stream.status == "cancelled"
    assert stream.snapshot()["output"][0]["content"][0]["text"] == "partial"
    _, out = run([ev(ErrorEvent(message="decoder exploded")), ev(SessionEnded(reason="error"))])
    assert out[-1]["type"] == "response.failed"
    assert out[-1]["response"]["error"] == {"code": "server_error", "message": "decoder exploded"}


@pytest.mark.parametrize("reason", ["max_turns"])
def test_the_turn_limit_is_incomplete(reason: str) -> None:
    _, out = run([ev(ContentDelta(text="x")), ev(SessionEnded(reason=reason))], WEATHER)
    assert out[-1]["response"]["incomplete_details"] == {"reason": "max_messages"}
