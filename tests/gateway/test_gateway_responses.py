"""The Responses API, driven by the official ``openai`` SDK against real processes (ReplayEngine)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from gateway_harness import MODEL, GwStack, assert_cancelled_mid_turn

from schemas import keys

ALICE, BOB = "sk-resp-alice-0123456789", "sk-resp-bob-9876543210"
GATEWAY_CONFIG = {"api_keys": (ALICE, BOB), "rate_limit_rps": 1000, "rate_limit_burst": 1000, "max_tools": 4,
                  "max_messages": 8, "max_tokens_limit": 8192, "response_ttl_s": 600}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
         {"type": "function", "name": "get_time",
          "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}}}]
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}\n</tool_call>'
TWO_CALLS = ["On it.\n" + WEATHER_CALL + "\n" + TIME_CALL, "Weather {{ results[0] }}, time {{ results[1] }}."]
ASK = "What's the weather in Paris?"
RESULTS = {"get_weather": "sunny, 21 C", "get_time": "14:05"}


def sdk(gw: GwStack, key: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def client(gw: GwStack) -> openai.OpenAI:
    return sdk(gw)


def outputs_for(calls: list) -> list[dict]:
    return [{"type": "function_call_output", "call_id": c.call_id, "output": RESULTS[c.name]} for c in calls]


def test_a_text_response(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input=ASK, instructions="Be brief.", metadata={"ticket": "7"},
                                   extra_body={"replay": ["Hello there!"]})
    assert resp.id.startswith("resp_") and resp.object == "response" and resp.model == MODEL
    assert resp.status == "completed" and resp.output_text == "Hello there!" and resp.error is None
    assert resp.instructions == "Be brief." and resp.metadata == {"ticket": "7"} and resp.store is True
    assert resp.usage.output_tokens > 0 and resp.usage.total_tokens >= resp.usage.output_tokens
    assert client.responses.retrieve(resp.id).model_dump() == resp.model_dump()


def test_streamed_events_assemble_to_the_stored_response(client: openai.OpenAI) -> None:
    text = "A fairly long answer, streamed in many small deltas so that order matters. " * 3
    events = list(client.responses.create(model=MODEL, input=ASK, stream=True, extra_body={"replay": [text]}))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
    assert client.responses.retrieve(events[0].response.id).to_dict() == events[-1].response.to_dict()
    with client.responses.stream(model=MODEL, input=ASK, extra_body={"replay": [text]}) as stream:
        assert stream.get_final_response().output_text == text  # the SDK's own accumulator agrees


def test_function_calls_end_the_response(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, extra_body={"replay": TWO_CALLS})
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and [o.type for o in first.output] == ["message", "function_call",
                                                                             "function_call"]
    assert first.output_text.strip() == "On it."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"}),
                                                                  ("get_time", {"timezone": "Europe/Paris"})]
    assert len({c.call_id for c in calls}) == 2 and all(c.status == "completed" for c in calls)


def test_a_follow_up_by_previous_response_id(client: openai.OpenAI, gw: GwStack) -> None:
    first = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, instructions="Be brief.",
                                    extra_body={"replay": TWO_CALLS})
    calls = [o for o in first.output if o.type == "function_call"]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input=outputs_for(calls),
                                     tools=TOOLS, extra_body={"replay": TWO_CALLS})
    assert second.output_text == "Weather sunny, 21 C, time 14:05." and second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id, order="asc")
    assert [i.type for i in items.data] == ["function_call_output"] * 2
    # the conversation it continued: the first one's, without its instructions (as OpenAI), calls matched up
    session = httpx.get(f"{gw.url}/v1/sessions/{second.id.removeprefix('resp_')}",
                        headers={"Authorization": f"Bearer {ALICE}"}).json()
    msgs = session["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == [c.call_id for c in calls] == [
        m["tool_call_id"] for m in msgs[2:4]]


def test_a_stateless_follow_up_sends_the_whole_item_list(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, store=False, extra_body={"replay": TWO_CALLS})
    calls = [o for o in first.output if o.type == "function_call"]
    items = [{"role": "user", "content": ASK}] + [o.model_dump(exclude_none=True) for o in first.output]
    second = client.responses.create(model=MODEL, input=items + outputs_for(calls), tools=TOOLS, store=False,
                                     extra_body={"replay": TWO_CALLS})
    assert second.output_text == "Weather sunny, 21 C, time 14:05."
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)  # store: false keeps nothing


def test_max_output_tokens_makes_it_incomplete(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input=ASK, max_output_tokens=5, extra_body={"replay": TWO_CALLS})
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 5 and resp.max_output_tokens == 5


def test_tool_choice_none_named_and_parallel(client: openai.OpenAI) -> None:
    def names(script: list[str] = TWO_CALLS, **kw: object) -> list[str]:
        resp = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, extra_body={"replay": script}, **kw)
        return [o.name for o in resp.output if o.type == "function_call"]

    assert names(["Not calling anything."], tool_choice="none") == []
    assert names(parallel_tool_calls=False) == ["get_weather"]
    assert names([WEATHER_CALL + "\n" + TIME_CALL], tool_choice="required") == ["get_weather", "get_time"]
    assert names([TIME_CALL], tool_choice={"type": "function", "name": "get_time"}) == ["get_time"]
    # the decoder's grammar holds the turn to the choice: a script breaking it is refused, as a model is held
    broken = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, tool_choice={"type": "function", "name": "get_time"},
                                     extra_body={"replay": [TIME_CALL + "\n" + WEATHER_CALL]})
    assert broken.status == "failed" and "breaks the request" in broken.error.message


def test_namespaced_functions_are_client_tools_whose_calls_carry_the_namespace(client: openai.OpenAI) -> None:
    tools = [{"type": "namespace", "name": "weather", "description": "Weather tools", "tools": [TOOLS[0]]},
             TOOLS[1]]
    resp = client.responses.create(model=MODEL, input=ASK, tools=tools, extra_body={"replay": TWO_CALLS})
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [(c.name, c.namespace) for c in calls] == [("get_weather", "weather"), ("get_time", None)]
    assert resp.tools[0].type == "namespace" and resp.tools[0].tools[0].name == "get_weather"
    clash = [{"type": "namespace", "name": "a", "description": "", "tools": [TOOLS[0]]}, TOOLS[0]]
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input=ASK, tools=clash)
    assert bad.value.body["param"] == "tools"


def _collect(stream, limit: int | None = None) -> list:
    out = []
    for event in stream:
        out.append(event)
        if limit is not None and len(out) >= limit:
            break
    stream.close()
    return out


def test_background_runs_unattended_and_resumes_exactly_after_a_sequence_number(client: openai.OpenAI) -> None:
    text = "word " * 150  # 600 tokens: 1.5 s at the stack's replay rate
    resp = client.responses.create(model=MODEL, input=ASK, background=True, extra_body={"replay": [text]})
    assert resp.background is True and resp.status in ("queued", "in_progress")
    head = _collect(client.responses.retrieve(resp.id, stream=True), limit=12)
    tail = _collect(client.responses.retrieve(resp.id, stream=True, starting_after=head[-1].sequence_number))
    seqs = [e.sequence_number for e in head + tail]
    assert seqs == list(range(len(seqs))) and tail[-1].type == "response.completed"
    whole = _collect(client.responses.retrieve(resp.id, stream=True))
    assert [e.model_dump() for e in whole] == [e.model_dump() for e in head + tail]
    assert client.responses.retrieve(resp.id).output_text == text


def test_leaving_a_background_stream_does_not_cancel_it(client: openai.OpenAI) -> None:
    text = "word " * 150
    stream = client.responses.create(model=MODEL, input=ASK, background=True, stream=True,
                                     extra_body={"replay": [text]})
    rid = _collect(stream, limit=4)[0].response.id
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and client.responses.retrieve(rid).status == "in_progress":
        time.sleep(0.05)
    done = client.responses.retrieve(rid)
    assert done.status == "completed" and done.output_text == text


def test_cancel_stops_a_background_response(client: openai.OpenAI, gw: GwStack) -> None:
    long = "word " * 2000  # 8000 tokens: 20 s at the stack's replay rate, longer than a starved gateway's cancel
    resp = client.responses.create(model=MODEL, input=ASK, background=True, max_output_tokens=8000,
                                   extra_body={"replay": [long]})
    first = _collect(client.responses.retrieve(resp.id, stream=True), limit=5)  # it is generating
    assert first[-1].sequence_number == 4
    cancelled = client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled" and client.responses.retrieve(resp.id).status == "cancelled"
    assert client.responses.cancel(resp.id).status == "cancelled"  # idempotent
    assert_cancelled_mid_turn(gw.redis(), resp.id.removeprefix("resp_"), long)  # the decoder stopped
    done = client.responses.create(model=MODEL, input=ASK, extra_body={"replay": ["ok"]})
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(done.id)  # a finished response cannot be cancelled


def test_a_client_that_leaves_mid_stream_cancels_generation(client: openai.OpenAI, gw: GwStack) -> None:
    long = "word " * 2000  # 20 s of tokens
    stream = client.responses.create(model=MODEL, input=ASK, stream=True, max_output_tokens=8000,
                                     extra_body={"replay": [long]})
    rid = _collect(stream, limit=6)[0].response.id
    assert_cancelled_mid_turn(gw.redis(), rid.removeprefix("resp_"), long)
    assert client.responses.retrieve(rid).status == "cancelled"


def test_input_items_delete_and_input_tokens(client: openai.OpenAI) -> None:
    items = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": ASK}]
    resp = client.responses.create(model=MODEL, input=items, extra_body={"replay": ["Il fait beau."]})
    listed = client.responses.input_items.list(resp.id)
    assert [(i.role, i.content[0].text) for i in listed.data] == [("user", ASK), ("developer", "Answer in French.")]
    page = client.responses.input_items.list(resp.id, order="asc", limit=1)
    assert page.has_more and page.data[0].role == "developer"
    count = client.responses.input_tokens.count(model=MODEL, input=items)
    more = client.responses.input_tokens.count(model=MODEL, input=items, tools=TOOLS)
    assert 10 < count.input_tokens < more.input_tokens and count.object == "response.input_tokens"
    client.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_a_stored_response_belongs_to_its_key(gw: GwStack, client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input=ASK, extra_body={"replay": ["mine"]})
    bob = sdk(gw, BOB)
    for call in (lambda: bob.responses.retrieve(resp.id), lambda: bob.responses.cancel(resp.id),
                 lambda: bob.responses.delete(resp.id), lambda: bob.responses.input_items.list(resp.id),
                 lambda: bob.responses.create(model=MODEL, input="x", previous_response_id=resp.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert client.responses.retrieve(resp.id).output_text == "mine"
    with pytest.raises(openai.AuthenticationError):
        sdk(gw, "sk-nobody").responses.retrieve(resp.id)


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}}, "text.format"),
    ({"truncation": "auto"}, "truncation"),
    ({"background": True, "store": False}, "background"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"max_tool_calls": 3}, "max_tool_calls"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"tools": [{"type": "mcp", "server_label": "turnstream", "require_approval": "never",
                 "server_url": "http://127.0.0.1:1/mcp"}]}, "tools[0].server_url"),
    ({"tools": [{"type": "mcp", "server_label": "nowhere", "require_approval": "never"}]}, "tools[0].server_label"),
    ({"tools": [{"type": "mcp", "server_label": "turnstream"}]}, "tools[0].require_approval"),
    ({"temperature": 7}, "temperature"),
    ({"max_output_tokens": 9000}, "max_output_tokens"),
    ({"input": [{"role": "user", "content": "x"}] * 9}, "input"),
    ({"tools": [TOOLS[0] | {"name": f"t{i}"} for i in range(5)]}, "tools"),
])
def test_unsupported_or_invalid_fields_get_a_400_naming_them(gw: GwStack, body: dict, param: str) -> None:
    payload = {"model": MODEL, "input": ASK, **body}
    resp = httpx.post(gw.url + "/v1/responses", json=payload, headers={"Authorization": f"Bearer {ALICE}"})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]


def test_a_stored_response_expires_after_response_ttl_s(client: openai.OpenAI, gw: GwStack) -> None:
    resp = client.responses.create(model=MODEL, input=ASK, extra_body={"replay": ["kept"]})
    ttl = gw.redis().ttl(keys.response(resp.id.removeprefix("resp_")))
    assert 0 < ttl <= 600


def test_unknown_models_and_responses_are_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.responses.create(model="gpt-17", input=ASK)
    assert nf.value.body["code"] == "model_not_found"
    for rid in ("resp_0123456789abcdef", "nonsense", "resp_"):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input=ASK, previous_response_id="resp_0123456789abcdef")
