"""The OpenAI API, driven by the official ``openai`` SDK against real processes."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_harness import MODEL, GwStack, assert_cancelled_mid_turn


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"timezone": {"type": "string"}}}}}]
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}\n</tool_call>'
TWO_CALLS = ["On it.\n" + WEATHER_CALL + "\n" + TIME_CALL,
             "Weather {{ results[0] }}, time {{ results[1] }}."]
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(gw: GwStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0, timeout=30)


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_plain_completion(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=USER, extra_body={"replay": ["Hello there!"]})
    assert resp.id.startswith("chatcmpl-") and resp.object == "chat.completion" and resp.model == MODEL
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "Hello there!"
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert resp.usage.completion_tokens > 0 and resp.usage.total_tokens >= resp.usage.completion_tokens


def test_tool_calls_non_streaming(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, extra_body={"replay": TWO_CALLS})
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content.strip() == "On it."
    calls = choice.message.tool_calls
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("function", "get_weather", {"city": "Paris"}), ("function", "get_time", {"timezone": "Europe/Paris"})]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


def test_streamed_tool_calls_are_assembled_by_the_sdk_and_followed_up(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=USER, tools=TOOLS,
                                        stream_options={"include_usage": True},
                                        extra_body={"replay": TWO_CALLS}) as stream:
        chunks = []
        for event in stream:
            if event.type == "chunk":
                chunks.append(event.chunk)
        final = stream.get_final_completion()
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0  # include_usage
    msg = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in msg.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris"}
    # the follow-up request: the assistant's calls and one tool message per call
    results = {"get_weather": "sunny, 21 C", "get_time": "14:05"}
    follow = USER + [msg.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": results[c.function.name]} for c in msg.tool_calls]
    resp = client.chat.completions.create(model=MODEL, messages=follow, tools=TOOLS, extra_body={"replay": TWO_CALLS})
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == "Weather sunny, 21 C, time 14:05."


def test_streaming_text_deltas(client: openai.OpenAI) -> None:
    text = "A fairly long answer, streamed in many small deltas so that order matters. " * 3
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True, extra_body={"replay": [text]})
    chunks = list(stream)
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 5
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)


def test_max_tokens_cuts_off_with_length(client: openai.OpenAI) -> None:
    for kw in ({"max_tokens": 5}, {"max_completion_tokens": 5}):
        resp = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, extra_body={"replay": TWO_CALLS},
                                              **kw)
        assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 5


def test_tool_choice_none_named_and_parallel(client: openai.OpenAI) -> None:
    def ask(script: list[str] = TWO_CALLS, **kw: object):
        return client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS,
                                              extra_body={"replay": script}, **kw).choices[0]

    none = ask(["Not calling anything."], tool_choice="none")
    assert none.message.tool_calls is None and none.finish_reason == "stop"
    with pytest.raises(openai.InternalServerError, match="breaks the request's grammar"):
        ask(tool_choice="none")  # a script that calls under "none" is refused, as a grammar refuses a model
    single = ask(parallel_tool_calls=False)
    assert [c.function.name for c in single.message.tool_calls] == ["get_weather"]
    required = ask([WEATHER_CALL + "\n" + TIME_CALL], tool_choice="required")
    assert required.finish_reason == "tool_calls" and len(required.message.tool_calls) == 2
    named = ask([TIME_CALL], tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [c.function.name for c in named.message.tool_calls] == ["get_time"] and named.finish_reason == "stop"
    with pytest.raises(openai.InternalServerError, match="breaks the request's grammar"):
        ask([TIME_CALL + "\n" + WEATHER_CALL], tool_choice={"type": "function", "function": {"name": "get_time"}})


def test_only_offered_functions_come_back(client: openai.OpenAI) -> None:
    booking = '<tool_call>\n{"name": "book_restaurant", "arguments": {"name": "Chez Nous"}}\n</tool_call>'
    hello = [{"role": "user", "content": "Hello! How are you?"}]
    for tools in (None, [TOOLS[1]]):  # no tools at all; tools that do not include book_restaurant
        kw = {"tools": tools} if tools else {}
        replay = {"replay": ["I am fine.\n" + booking + "\n" + TIME_CALL]}
        choice = client.chat.completions.create(model=MODEL, messages=hello, extra_body=replay, **kw).choices[0]
        names = [c.function.name for c in choice.message.tool_calls or []]
        assert names == (["get_time"] if tools else []), names
        assert choice.finish_reason == ("tool_calls" if tools else "stop")
        if tools:
            assert choice.message.content.strip() == "I am fine."
        else:  # nothing was offered: the whole text is content
            assert choice.message.content == replay["replay"][0]
        chunks = list(client.chat.completions.create(model=MODEL, messages=hello, extra_body=replay, stream=True,
                                                     **kw))
        streamed = [tc.function.name for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.function.name]
        assert streamed == names and chunks[-1].choices[0].finish_reason == choice.finish_reason


def test_invalid_requests_get_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="gpt-17", messages=USER)
    assert nf.value.body["code"] == "model_not_found" and nf.value.body["param"] == "model"
    cases = [dict(n=2), dict(tool_choice="required"), dict(tools=TOOLS, tool_choice={"type": "function",
             "function": {"name": "nope"}}), dict(temperature=7), dict(messages=[])]
    for kw in cases:
        args = {"model": MODEL, "messages": USER, **kw}
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(**args)
        assert bad.value.body["type"] == "invalid_request_error" and bad.value.body["message"], kw


def test_a_client_that_leaves_mid_stream_cancels_generation(client: openai.OpenAI, gw: GwStack) -> None:
    long = "word " * 2000  # 5 s of tokens at the stack's replay rate
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True, extra_body={"replay": [long]})
    first = next(iter(stream))
    sid = first.id.removeprefix("chatcmpl-")
    stream.close()
    assert_cancelled_mid_turn(gw.redis(), sid, long)
