"""Responses on a reasoning deployment (``reasoning = "think"``): the model's ``<think>`` span is a
``reasoning`` item streamed with ``response.reasoning_text.delta``; sent back in a follow-up it is
accepted and becomes the assistant turn's ``reasoning_content``."""

from __future__ import annotations

import openai
from gateway_harness import MODEL, GwStack

GATEWAY_CONFIG = {"reasoning": "think"}
SCRIPT = ["<think>The user wants the weather; I should check.</think>Let me check.",
          "<think>Turn {{ turn }} thinks again.</think>Done."]


def test_reasoning_is_a_reasoning_item_and_goes_back_in(gw: GwStack) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0, timeout=30)
    events = list(client.responses.create(model=MODEL, input="Weather?", stream=True, extra_body={"replay": SCRIPT}))
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message"]
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thought == final.output[0].content[0].text == "The user wants the weather; I should check."
    assert final.output_text == "Let me check."
    done = [e for e in events if e.type == "response.reasoning_text.done"]
    assert len(done) == 1 and done[0].text == thought
    items = [{"role": "user", "content": "Weather?"}, *[o.model_dump(exclude_none=True) for o in final.output],
             {"role": "user", "content": "Thanks"}]
    second = client.responses.create(model=MODEL, input=items, extra_body={"replay": SCRIPT})
    assert second.output_text == "Done." and second.output[0].content[0].text == "Turn 1 thinks again."
