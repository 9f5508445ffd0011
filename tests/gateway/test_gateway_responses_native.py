"""The Responses API on the default engine and model (native engine, bundled tiny-agent): whatever the
model says, a follow-up reuses the KV of the first response and says so in
``usage.input_tokens_details.cached_tokens``."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_harness import MODEL, GwStack

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
