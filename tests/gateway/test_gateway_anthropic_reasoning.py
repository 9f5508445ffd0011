"""Extended thinking on a reasoning deployment (``reasoning="think"``): the model's ``<think>`` span
comes back as a thinking block (streamed as ``thinking_delta``) when the request asks for
thinking, and is left out when it does not."""

from __future__ import annotations

import anthropic
import pytest
from gateway_harness import MODEL, GwStack

GATEWAY_CONFIG = dict(reasoning="think")
SCRIPT = ["<think>Paris is in France; it is summer.</think>It is sunny in Paris."]
USER = [{"role": "user", "content": "Weather in Paris?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def client(gw: GwStack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="unused-in-open-mode", max_retries=0, timeout=30)


def test_thinking_is_streamed_as_thinking_blocks(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, max_tokens=2048, messages=USER, thinking=THINK,
                                extra_body={"replay": SCRIPT}) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "thinking_delta" in deltas and deltas.index("thinking_delta") < deltas.index("text_delta")
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Paris is in France; it is summer."
    assert final.content[1].text == "It is sunny in Paris." and final.stop_reason == "end_turn"


def test_without_thinking_only_the_answer_comes_back(client: anthropic.Anthropic) -> None:
    for thinking in (None, {"type": "disabled"}):
        kw = {"thinking": thinking} if thinking else {}
        msg = client.messages.create(model=MODEL, max_tokens=2048, messages=USER, extra_body={"replay": SCRIPT}, **kw)
        assert [(b.type, b.text) for b in msg.content] == [("text", "It is sunny in Paris.")]
