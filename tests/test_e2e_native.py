"""End to end on the default engine and model: the native engine running the bundled tiny-agent.

These hold whatever the model says: a continuation reuses the KV it kept, and an OpenAI
follow-up request reuses the cached prefix of the first one.
"""

from __future__ import annotations

import json

import jsonschema
import openai

from tests.test_e2e import assert_exactly_once_in_order, run_session
from turnstream.stack import DEMO_MESSAGE, wait_for_decoders


async def test_bundled_model_session_reuses_its_kv_across_turns(stack_factory) -> None:
    stack = stack_factory(engine="native")
    _, events = await run_session(stack.url, {"messages": [{"role": "user", "content": DEMO_MESSAGE}]})
    assert_exactly_once_in_order(events)
    assert events[-1]["body"]["type"] == "session.ended"
    started = [e["body"] for e in events if e["body"]["type"] == "turn.started"]
    calls = [e["body"] for e in events if e["body"]["type"] == "tool_call.ready"]
    assert calls, "the bundled model called no tool for the demo request"
    assert len(started) >= 2
    first, second = started[0], started[1]
    # the continuation computed only what was new: all of turn 0's prompt came from the pinned KV
    assert second["continuation"] and second["cached_tokens"] >= first["prompt_tokens"]


def test_openai_follow_up_reuses_the_cached_prefix(stack_factory) -> None:
    stack = stack_factory(engine="native")
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    messages: list[dict] = [{"role": "user", "content": "What's the weather in Paris today?"}]
    first = client.chat.completions.create(model="tiny-agent", messages=messages, tools=tools)
    reply = first.choices[0].message
    messages.append(reply.model_dump(exclude_none=True))
    for call in reply.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": json.dumps({"city": "Paris", "temperature": 21})})
    if not reply.tool_calls:
        messages.append({"role": "user", "content": "And in Oslo?"})
    second = client.chat.completions.create(model="tiny-agent", messages=messages, tools=tools)
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens // 2


def test_tool_choice_forces_calls_the_model_would_not_make(stack_factory) -> None:
    from training.tools_spec import TOOLS

    stack = stack_factory(engine="native")
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")

    def ask(text: str, **kw: object):
        return client.chat.completions.create(model="tiny-agent", messages=[{"role": "user", "content": text}],
                                              tools=TOOLS, **kw).choices[0]

    small_talk = ask("Hello! How are you?")
    assert small_talk.message.tool_calls is None and small_talk.message.content  # left alone, no call
    required = ask("Hello! How are you?", tool_choice="required")
    assert required.finish_reason == "tool_calls" and required.message.tool_calls
    assert {c.function.name for c in required.message.tool_calls} <= {t["function"]["name"] for t in TOOLS}
    # the model would call get_weather here; a named choice makes every call get_time, with the model's
    # arguments (it may write more than one); without parallel calls exactly one comes back
    get_time = {"type": "function", "function": {"name": "get_time"}}
    named = ask("What's the weather in Paris today?", tool_choice=get_time)
    assert named.message.tool_calls and named.finish_reason == "stop"
    assert {c.function.name for c in named.message.tool_calls} == {"get_time"}
    assert all(isinstance(json.loads(c.function.arguments), dict) for c in named.message.tool_calls)
    single = ask("What's the weather in Paris today?", tool_choice=get_time, parallel_tool_calls=False)
    assert [c.function.name for c in single.message.tool_calls] == ["get_time"] and single.finish_reason == "stop"


def test_follow_up_requests_go_to_the_decoder_holding_their_prefix(stack_factory) -> None:
    import redis

    from schemas import keys

    stack = stack_factory(engine="native")
    stack.start("decode")  # two decoders; the shared queue alone would hand a follow-up to either
    wait_for_decoders(stack.cfg.redis_url, 2)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")
    r = redis.Redis.from_url(stack.cfg.redis_url)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    for city in ("Paris", "Oslo", "Rome", "Lima"):  # the agent loop: each request, then its follow-up
        messages = [{"role": "user", "content": f"What's the weather in {city} today?"}]
        first = client.chat.completions.create(model="tiny-agent", messages=messages, tools=tools)
        reply = first.choices[0].message
        follow = messages + [reply.model_dump(exclude_none=True)]
        follow += [{"role": "tool", "tool_call_id": c.id, "content": '{"temperature": 21}'} for c in reply.tool_calls or []]
        follow += [] if reply.tool_calls else [{"role": "user", "content": "And tomorrow?"}]
        second = client.chat.completions.create(model="tiny-agent", messages=follow, tools=tools)
        owner = [r.hget(keys.session(x.id.removeprefix("chatcmpl-")), "owner") for x in (first, second)]
        assert owner[0] == owner[1], "the follow-up ran on another decoder than the one holding its prefix"
        # all of the first request's full KV blocks (16 tokens each) were found
        assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens // 16 * 16


def test_calls_name_only_offered_tools_and_no_tools_means_no_calls(stack_factory) -> None:
    """The two reports of issue 17, through the OpenAI SDK against the bundled model."""
    stack = stack_factory(engine="native")
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": p,
                                                                          "required": list(p)}}}
             for n, p in (("get_weather", {"city": {"type": "string"}}),
                          ("book_table", {"restaurant": {"type": "string"}, "party_size": {"type": "integer"},
                                          "time": {"type": "string"}}))]
    ask = "What's the weather in Paris today, and can you book a table for 2 at Chez Nous at 19:00?"
    reply = client.chat.completions.create(model="tiny-agent", messages=[{"role": "user", "content": ask}],
                                           tools=tools).choices[0]
    assert reply.message.tool_calls  # the model was trained on book_restaurant: it may only call book_table
    for call in reply.message.tool_calls:
        schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schema)
    story = [{"role": "user", "content": "Tell me a long story about the sea."}]
    plain = client.chat.completions.create(model="tiny-agent", messages=story, max_tokens=120).choices[0]
    assert plain.message.tool_calls is None and plain.finish_reason in ("stop", "length")  # whatever it wrote
    chunks = list(client.chat.completions.create(model="tiny-agent", messages=story, max_tokens=120, stream=True))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)


def test_grammar_plain_keeps_call_markup_out_of_a_plain_reply(stack_factory) -> None:
    """``grammar_plain=on``: a request without tools is held to text in which no call can begin (the
    tiny model, trained on tools, writes a call for a request that needs one even when none was offered)."""
    story = [{"role": "user", "content": "What's the weather in Paris today?"}]
    for plain_grammar, markup in (("off", True), ("on", False)):
        stack = stack_factory(engine="native", grammar_plain=plain_grammar)
        client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")
        reply = client.chat.completions.create(model="tiny-agent", messages=story, max_tokens=120).choices[0]
        assert reply.message.tool_calls is None
        assert ("<tool_call>" in (reply.message.content or "")) is markup, reply.message.content
        stack.stop()  # before the next: both would serve the same queues


def test_response_format_json_schema_holds_the_answer(stack_factory) -> None:
    stack = stack_factory(engine="native")
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused")
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "confidence": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    reply = client.chat.completions.create(
        model="tiny-agent", messages=[{"role": "user", "content": "Is it going to rain in Paris today?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}},
        max_tokens=60).choices[0]
    jsonschema.validate(json.loads(reply.message.content), schema)


async def test_a_sessions_named_tool_choice_binds_its_first_turn(stack_factory) -> None:
    stack = stack_factory(engine="native")
    body = {"messages": [{"role": "user", "content": "What's the weather in Paris today?"}], "max_turns": 3,
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    _, events = await run_session(stack.url, body)
    ready = [e for e in events if e["body"]["type"] == "tool_call.ready"]
    assert ready and ready[0]["turn"] == 0 and ready[0]["body"]["name"] == "get_time"  # the model wanted get_weather
    assert events[-1]["body"]["type"] == "session.ended"
