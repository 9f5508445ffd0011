"""With the decoder's grammar off for ``auto`` (``grammar_auto=off``), a model may write a call of a
function the request did not offer: the parser drops it, and only offered calls come back."""

from __future__ import annotations

import openai
import pytest
from gateway_harness import MODEL, GwStack

GATEWAY_CONFIG = {"grammar_auto": "off"}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"timezone": {"type": "string"}}}}}
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}\n</tool_call>'
BOOKING = '<tool_call>\n{"name": "book_restaurant", "arguments": {"name": "Chez Nous"}}\n</tool_call>'
HELLO = [{"role": "user", "content": "Hello! How are you?"}]


@pytest.fixture(scope="module")
def client(gw: GwStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_only_offered_functions_come_back(client: openai.OpenAI, stream: bool) -> None:
    replay = {"replay": ["I am fine.\n" + BOOKING + "\n" + TIME_CALL]}
    if not stream:
        choice = client.chat.completions.create(model=MODEL, messages=HELLO, tools=[TIME], extra_body=replay).choices[0]
        assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
        assert choice.finish_reason == "tool_calls" and choice.message.content.strip() == "I am fine."
        return
    chunks = list(client.chat.completions.create(model=MODEL, messages=HELLO, tools=[TIME], extra_body=replay,
                                                 stream=True))
    streamed = [tc.function.name for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.function.name]
    assert streamed == ["get_time"] and chunks[-1].choices[0].finish_reason == "tool_calls"
