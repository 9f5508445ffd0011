"""The Responses API on the default engine and model (native engine, bundled tiny-agent): whatever the
model says, a follow-up reuses the KV of the first response and says so in
``usage.input_tokens_details.cached_tokens``."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from gateway_harness import MODEL, GwStack

from training.tools_spec import TOOLS as OPENAI_TOOLS

GATEWAY_CONFIG = {"engine": "native"}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
ASK = "What's the weather in Paris today?"


@pytest.fixture(scope="module")
def client(gw: GwStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0, timeout=60)


def follow_up_items(first) -> list[dict]:
    """What the client sends next: the results of the model's calls, or another question."""
    calls = [o for o in first.output if o.type == "function_call"]
    if not calls:
        return [{"role": "user", "content": "And in Oslo?"}]
    return [{"type": "function_call_output", "call_id": c.call_id,
             "output": json.dumps({"city": "Paris", "temperature": 21})} for c in calls]


def test_a_stateless_follow_up_reuses_the_cached_prefix(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=ASK, tools=TOOLS, store=False)
    assert first.status in ("completed", "incomplete") and first.usage.input_tokens > 0
    items = [{"role": "user", "content": ASK}] + [o.model_dump(exclude_none=True) for o in first.output]
    second = client.responses.create(model=MODEL, input=items + follow_up_items(first), tools=TOOLS, store=False)
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2


def test_a_follow_up_by_previous_response_id_reuses_the_kv(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=ASK, tools=TOOLS)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input=follow_up_items(first),
                                     tools=TOOLS)
    assert first.usage.output_tokens > 16
    # the first response's prompt and its own output were kept: every full KV block of them is reused
    whole = first.usage.input_tokens + first.usage.output_tokens - 1
    assert second.usage.input_tokens_details.cached_tokens >= whole // 16 * 16


ALL_TOOLS = [{"type": "function", **t["function"]} for t in OPENAI_TOOLS]
ASKS = ["What's the weather in Paris today?", "Book a table for 2 at Chez Nous at 8pm", "whats 12 * 7"]


@pytest.mark.parametrize("ask", ASKS)
def test_the_grammar_holds_the_bundled_model_to_tool_choice_and_text_format(client: openai.OpenAI, ask: str) -> None:
    """Whatever the tiny model would say, the decoder's grammar decides what can come out: no tools
    offered, no function_call; ``required``, calls of offered tools with valid arguments; a
    ``json_schema`` text format, an answer that is JSON of the schema."""
    bare = client.responses.create(model=MODEL, input=ask, max_output_tokens=64)
    assert bare.status in ("completed", "incomplete") and all(o.type == "message" for o in bare.output)
    forced = client.responses.create(model=MODEL, input=ask, tools=ALL_TOOLS, tool_choice="required",
                                     max_output_tokens=96)
    calls = [o for o in forced.output if o.type == "function_call"]
    assert calls and forced.status == "completed"
    by_name = {t["name"]: t for t in ALL_TOOLS}
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), by_name[call.name]["parameters"])
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}}, "required": ["answer"],
              "additionalProperties": False}
    shaped = client.responses.create(model=MODEL, input=ask, max_output_tokens=64, text={"format": {
        "type": "json_schema", "name": "reply", "schema": schema, "strict": True}})
    assert shaped.text.format.type == "json_schema"
    jsonschema.validate(json.loads(shaped.output_text), schema)
