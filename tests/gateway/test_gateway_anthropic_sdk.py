"""The Anthropic Messages API, driven by the official ``anthropic`` package against real processes
(ReplayEngine scripts), with API keys on: the SDK authenticates with ``x-api-key``."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from gateway_harness import MODEL, GwStack, assert_cancelled_mid_turn

from runtime.chat_template import ChatTokenizer
from schemas import keys

KEY, OTHER = "sk-ant-test-0123456789", "sk-ant-other-9876543210"
GATEWAY_CONFIG = dict(api_keys=(KEY, OTHER), rate_limit_rps=0, max_request_bytes=50_000, max_tokens_limit=10_000)
TOOLS = [{"name": "get_weather", "description": "Weather for a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"name": "get_time", "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}}}}]
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}\n</tool_call>'
TWO_CALLS = ["On it.\n" + WEATHER_CALL + "\n" + TIME_CALL, "Weather {{ results[0] }}, time {{ results[1] }}."]
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(gw: GwStack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0, timeout=30)


def create(client: anthropic.Anthropic, script: list[str], **kw: object) -> anthropic.types.Message:
    args = {"model": MODEL, "max_tokens": 200, "messages": USER, **kw}
    return client.messages.create(**args, extra_body={"replay": script})  # type: ignore[arg-type]


def test_create_returns_a_message(client: anthropic.Anthropic) -> None:
    msg = create(client, ["Hello there!"], system="You are terse.")
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert [(b.type, b.text) for b in msg.content] == [("text", "Hello there!")]
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.output_tokens > 0 and msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 0


def test_stream_helper_assembles_tool_use_and_the_tool_result_follow_up(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, tools=TOOLS,
                                extra_body={"replay": TWO_CALLS}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "input_json" in kinds
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text.strip() == "On it."
    calls = final.content[1:]
    assert [(c.name, c.input) for c in calls] == [("get_weather", {"city": "Paris"}),
                                                  ("get_time", {"timezone": "Europe/Paris"})]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("toolu_") for c in calls)
    results = {"get_weather": "sunny, 21 C", "get_time": "14:05"}
    follow = USER + [final.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": c.id, "content": [{"type": "text", "text": results[c.name]}]}
        for c in calls]}]
    msg = create(client, TWO_CALLS, messages=follow, tools=TOOLS)
    assert msg.stop_reason == "end_turn" and msg.content[0].text == "Weather sunny, 21 C, time 14:05."


def test_a_failed_tool_result_reaches_the_model_as_an_error(client: anthropic.Anthropic) -> None:
    msg = create(client, ["x", "Saw: {{ results[0] }}"], tools=TOOLS, messages=USER + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "no network",
                                      "is_error": True}]}])
    assert msg.content[0].text == "Saw: error: no network"


def test_streamed_events_are_anthropics(client: anthropic.Anthropic) -> None:
    text = "A fairly long answer, streamed in many small deltas so that order matters. " * 3
    events = list(client.messages.create(model=MODEL, max_tokens=300, messages=USER, stream=True,
                                         extra_body={"replay": [text]}))
    kinds = [e.type for e in events]  # (the SDK drops pings)
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert len(deltas) > 5 and all(d.type == "text_delta" for d in deltas) and "".join(d.text for d in deltas) == text
    assert events[0].message.content == [] and events[0].message.stop_reason is None
    end = events[-2]
    assert end.delta.stop_reason == "end_turn" and end.usage.output_tokens > 0


def test_the_wire_is_event_and_data_pairs(gw: GwStack) -> None:
    body = {"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True, "replay": ["Hi."]}
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        with http.stream("POST", "/v1/messages?beta=true", json=body,
                         headers={"x-api-key": KEY, "anthropic-version": "2023-06-01",
                                  "anthropic-beta": "interleaved-thinking-2025-05-14"}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in resp.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines[0::2]]
    datas = [json.loads(line.removeprefix("data: ")) for line in lines[1::2]]
    assert all(line.startswith("event: ") for line in lines[0::2]) and [d["type"] for d in datas] == names
    assert names == ["message_start", "ping", "content_block_start", *["content_block_delta"] * (len(names) - 6),
                     "content_block_stop", "message_delta", "message_stop"]
    assert datas[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_max_tokens_cuts_off(client: anthropic.Anthropic) -> None:
    msg = create(client, TWO_CALLS, max_tokens=5, tools=TOOLS)
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 5


def test_tool_choice(client: anthropic.Anthropic) -> None:
    none = create(client, ["Not calling anything."], tools=TOOLS, tool_choice={"type": "none"})
    assert [b.type for b in none.content] == ["text"] and none.stop_reason == "end_turn"
    with pytest.raises(anthropic.InternalServerError, match="breaks the request"):
        create(client, TWO_CALLS, tools=TOOLS, tool_choice={"type": "none"})  # as the grammar refuses a model
    single = create(client, TWO_CALLS, tools=TOOLS, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.name for b in single.content if b.type == "tool_use"] == ["get_weather"]
    # any / tool hold the turn to calls (the decoder's grammar): a script must be one
    anyone = create(client, [WEATHER_CALL + "\n" + TIME_CALL], tools=TOOLS, tool_choice={"type": "any"})
    assert anyone.stop_reason == "tool_use" and [b.type for b in anyone.content] == ["tool_use", "tool_use"]
    named = create(client, [TIME_CALL], tools=TOOLS, tool_choice={"type": "tool", "name": "get_time"})
    assert [(b.name, b.input) for b in named.content] == [("get_time", {"timezone": "Europe/Paris"})]
    assert named.stop_reason == "tool_use"
    with pytest.raises(anthropic.InternalServerError, match="breaks the request"):
        create(client, [TIME_CALL + "\n" + WEATHER_CALL], tools=TOOLS, tool_choice={"type": "tool", "name": "get_time"})


def test_count_tokens_is_the_decoders_rendering(client: anthropic.Anthropic, gw: GwStack) -> None:
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    counted = client.messages.count_tokens(model=MODEL, system=system, messages=USER, tools=TOOLS).input_tokens
    tok = ChatTokenizer.from_dir(gw.cfg.model)
    internal = [{"role": "system", "content": "You are terse."}, *USER]
    tools = [{"type": "function", "function": {"name": t["name"], **({"description": t["description"]}
              if "description" in t else {}), "parameters": t["input_schema"]}} for t in TOOLS]
    assert counted == len(tok.encode(tok.render(internal, tools)))
    bare = client.messages.count_tokens(model=MODEL, system=system, messages=USER).input_tokens
    assert bare == len(tok.encode(tok.render(internal))) < counted
    with pytest.raises(anthropic.BadRequestError):  # the request limits apply here too
        client.messages.count_tokens(model=MODEL, messages=USER * 600)
    no_tools = client.messages.count_tokens(model=MODEL, system=system, messages=USER, tools=TOOLS,
                                            tool_choice={"type": "none"}).input_tokens
    assert no_tools == bare  # tool_choice none renders no tools, as the decoder would


def test_cache_control_keeps_the_kv_for_its_ttl(client: anthropic.Anthropic, gw: GwStack) -> None:
    r = gw.redis()

    def keep(**kw: object) -> object:
        msg = create(client, ["ok"], **kw)
        return json.loads(r.hget(keys.session(msg.id.removeprefix("msg_")), "params")).get("keep_kv_s")

    assert keep() is None
    assert keep(cache_control={"type": "ephemeral"}) == 300
    assert keep(system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]) == 3600
    assert keep(messages=[{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]) == 300


def test_invalid_requests_get_anthropic_errors(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as nf:
        client.messages.create(model="claude-17", max_tokens=10, messages=USER)
    assert nf.value.body == {"type": "error", "error": {"type": "not_found_error", "message": nf.value.body[
        "error"]["message"]}} and "claude-17" in nf.value.body["error"]["message"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    cases = [dict(messages=[{"role": "user", "content": [image]}]),
             dict(messages=[{"role": "user", "content": [document, {"type": "text", "text": "read"}]}]),
             dict(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
             dict(tool_choice={"type": "any"}), dict(tools=TOOLS, tool_choice={"type": "tool", "name": "nope"}),
             dict(max_tokens=0), dict(max_tokens=10_001), dict(messages=[]),
             dict(messages=USER + [{"role": "assistant", "content": "The answer is ("}]),
             dict(thinking={"type": "enabled", "budget_tokens": 2048}, max_tokens=1000)]
    for kw in cases:
        with pytest.raises(anthropic.BadRequestError) as bad:
            client.messages.create(**{"model": MODEL, "max_tokens": 10, "messages": USER, **kw})  # type: ignore
        assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error", kw
    assert "image content is not supported" in _message_of(client, cases[0])


def _message_of(client: anthropic.Anthropic, kw: dict) -> str:
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(**{"model": MODEL, "max_tokens": 10, "messages": USER, **kw})  # type: ignore
    return bad.value.body["error"]["message"]


def test_keys_and_ownership(gw: GwStack) -> None:
    wrong = anthropic.Anthropic(base_url=gw.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        wrong.messages.create(model=MODEL, max_tokens=10, messages=USER)
    assert denied.value.body["type"] == "error" and denied.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=gw.url, auth_token=OTHER, max_retries=0)  # Authorization: Bearer
    msg = bearer.messages.create(model=MODEL, max_tokens=10, messages=USER, extra_body={"replay": ["mine"]})
    sid = msg.id.removeprefix("msg_")
    with httpx.Client(base_url=gw.url, timeout=10) as http:
        assert http.get(f"/v1/sessions/{sid}", headers={"x-api-key": OTHER}).status_code == 200
        assert http.get(f"/v1/sessions/{sid}", headers={"x-api-key": KEY}).status_code == 404  # not yours


def test_raw_http_errors_keep_anthropics_shape_on_these_routes_only(gw: GwStack) -> None:
    with httpx.Client(base_url=gw.url, timeout=10, headers={"x-api-key": KEY}) as http:
        cases = [(http.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"}), 400),
                 (http.post("/v1/messages", json={"model": MODEL, "messages": USER}), 400),  # no max_tokens
                 (http.post("/v1/messages?beta=true", json={"model": MODEL, "max_tokens": 1,
                                                             "messages": "hi"}), 400),
                 (http.get("/v1/messages"), 405),
                 (http.post("/v1/messages", content=b"x" * 60_000), 413),
                 (http.post("/v1/messages", json={}, headers={"x-api-key": "nope"}), 401)]
        for resp, status in cases:
            assert resp.status_code == status, resp.text
            body = resp.json()
            assert set(body) == {"type", "error"} and body["type"] == "error" and body["error"]["message"]
        assert cases[4][0].json()["error"]["type"] == "request_too_large"
        openai_shape = http.post("/v1/chat/completions", json={})
        assert openai_shape.status_code == 400 and set(openai_shape.json()) == {"error"}
        assert http.head("/").status_code == 200  # Claude Code's probe


def test_a_client_that_leaves_mid_stream_cancels_generation(client: anthropic.Anthropic, gw: GwStack) -> None:
    long = "word " * 8000  # 20 s of tokens at the stack's replay rate: a loaded machine still cancels in time
    stream = client.messages.create(model=MODEL, max_tokens=9000, messages=USER, stream=True,
                                    extra_body={"replay": [long]})
    first = next(iter(stream))
    sid = first.message.id.removeprefix("msg_")
    stream.close()
    assert_cancelled_mid_turn(gw.redis(), sid, long)
