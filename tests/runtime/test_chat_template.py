"""How a conversation reaches the chat template: a call's arguments as the model wrote them."""

from __future__ import annotations

import pytest

from runtime.chat_template import ChatTokenizer, PromptError, render_template
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


# DeepSeek's templates write a call as text concatenation: '...' + tool['function']['arguments']
CONCATENATING = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                 "{{ '<call>' + c.function.name + ':' + c.function.arguments + '</call>' }}{% endfor %}{% endfor %}")


@pytest.mark.parametrize("arguments", ['{"city": "Paris"}', {"city": "Paris"}])
def test_a_template_that_concatenates_arguments_gets_them_as_json_text(arguments: object) -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    text = render_template(CONCATENATING, {}, [{"role": "user", "content": "hi"}, call], add_generation_prompt=False)
    assert text == '<call>f:{"city": "Paris"}</call>'


def test_a_template_that_fails_on_both_shapes_is_a_prompt_error() -> None:
    with pytest.raises(PromptError, match="rejected the conversation"):
        render_template("{{ messages[0].content + 1 }}", {}, [{"role": "user", "content": "hi"}])
