"""How a conversation reaches the chat template: a call's arguments as the model wrote them."""

from __future__ import annotations

import pytest

from runtime.chat_template import ChatTokenizer
from workers.decode.synthetic import build_checkpoint


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> ChatTokenizer:
    return ChatTokenizer.from_dir(build_checkpoint(tmp_path_factory.mktemp("m") / "m", vocab_size=512))


def _turn(arguments) -> list[dict]:
    call = {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}]


def test_arguments_sent_as_a_json_string_render_as_the_object_the_model_wrote(chat: ChatTokenizer) -> None:
    as_string = chat.render(_turn('{"unit": "c", "city": "Paris"}'))
    assert as_string == chat.render(_turn({"unit": "c", "city": "Paris"}))
    assert '"arguments": {"unit": "c", "city": "Paris"}}' in as_string  # tojson, keys as the model wrote them


def test_arguments_that_are_not_a_json_object_render_as_sent(chat: ChatTokenizer) -> None:
    assert '"arguments": "not json"' in chat.render(_turn("not json"))
    assert '"arguments": "[1, 2]"' in chat.render(_turn("[1, 2]"))
