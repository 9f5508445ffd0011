"""The Messages API on the default engine and model (the native engine running the bundled
tiny-agent), where token counts are real: ``count_tokens`` is exactly the prompt the decoder
computed, and a follow-up request reads the first one's KV (``cache_read_input_tokens``)."""

from __future__ import annotations

import anthropic
import jsonschema
import pytest
from gateway_harness import MODEL, GwStack

from training.tools_spec import TOOLS as OPENAI_TOOLS

GATEWAY_CONFIG = dict(engine="native")
TOOLS = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
          "input_schema": t["function"]["parameters"]} for t in OPENAI_TOOLS]
SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def client(gw: GwStack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="unused-in-open-mode", max_retries=0, timeout=120)


def test_count_tokens_is_the_prompt_the_decoder_computed(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "What's the weather in Paris today?"}]
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages, tools=TOOLS)
    msg = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS)
    assert counted.input_tokens == msg.usage.input_tokens + msg.usage.cache_read_input_tokens


def test_a_follow_up_reads_the_first_requests_kv(client: anthropic.Anthropic) -> None:
    messages: list[dict] = [{"role": "user", "content": "What's the weather in Oslo today?"}]
    first = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS)
    calls = [b for b in first.content if b.type == "tool_use"]
    messages.append(first.to_param())
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": c.id, "content": '{"temperature": 21}'} for c in calls]
        or [{"type": "text", "text": "And tomorrow?"}]})
    second = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS)
    first_prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens > first_prompt
    # all of the first request's full KV blocks (16 tokens each) were found
    assert second.usage.cache_read_input_tokens >= first_prompt // 16 * 16 > 0
    assert first.stop_reason in ("end_turn", "tool_use", "max_tokens")


ASKS = ["What's the weather in Paris today?", "Book a table for 2 at Chez Nous at 8pm", "whats 12 * 7",
        "What time is it in Tokyo?"]


@pytest.mark.parametrize("ask", ASKS)
def test_the_grammar_holds_the_bundled_model_to_tool_choice(client: anthropic.Anthropic, ask: str) -> None:
    """Whatever the tiny model would say, the decoder's grammar decides what can come out: no
    tools offered, no tool_use; ``any`` and a named tool, calls of those tools with valid input."""
    messages = [{"role": "user", "content": ask}]
    bare = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages)
    assert all(b.type == "text" for b in bare.content) and bare.stop_reason != "tool_use"
    anyone = client.messages.create(model=MODEL, max_tokens=96, system=SYSTEM, messages=messages, tools=TOOLS,
                                    tool_choice={"type": "any"})
    uses = [b for b in anyone.content if b.type == "tool_use"]
    assert uses and anyone.stop_reason == "tool_use"
    by_name = {t["name"]: t for t in TOOLS}
    for use in uses:
        jsonschema.validate(use.input, by_name[use.name]["input_schema"])
    named = client.messages.create(model=MODEL, max_tokens=96, system=SYSTEM, messages=messages, tools=TOOLS,
                                   tool_choice={"type": "tool", "name": "calculator"})
    assert {b.name for b in named.content if b.type == "tool_use"} == {"calculator"}
