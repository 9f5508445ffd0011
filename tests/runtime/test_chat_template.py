"""How a conversation reaches the chat template: a call's arguments as the model wrote them."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import chat_template
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


# ---------------------------------------------------------------------------- a tool's result after a turn's raw text
FIXTURES = Path(__file__).resolve().parent / "model_fixtures"
TEMPLATES = sorted(d.name for d in FIXTURES.iterdir() if (d / "chat_template.jinja").is_file())
# Templates that write a tool's result only after an assistant message with tool_calls: Gemma 4's drops a
# tool message after plain text, MiniMax-M2's and M3's and gpt-oss's refuse one ("no previous assistant
# message with a tool call").
RESULTS_NEED_CALLS = {"google--gemma-4-31B-it", "MiniMaxAI--MiniMax-M2", "MiniMaxAI--MiniMax-M3", "openai--gpt-oss-120b"}
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.mark.parametrize("name", [n for n in TEMPLATES if n != "deepseek-ai--DeepSeek-V4-Flash"])  # refuses tools
def test_every_real_template_keeps_a_tool_result_after_a_generated_turn(name: str) -> None:
    """A continuation's prompt holds the turn as generated and the result its tool returned: from the turn's
    raw text where the template writes a result after any assistant text (the prompt then extends the
    generated one byte for byte), from its parsed calls where it writes results only after calls."""
    source = (FIXTURES / name / "chat_template.jinja").read_text()
    call = {"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Zanzibar9"}'}}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "raw": "RAW-GENERATED-TURN", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "RESULT-SUNNY-21C"}]
    text = render_template(source, SPECIALS, messages, [WEATHER])
    assert text.count("RESULT-SUNNY-21C") == 1
    structured = name in RESULTS_NEED_CALLS
    assert ("RAW-GENERATED-TURN" in text) is not structured
    assert ("Zanzibar9" in text) is structured  # the call as parsed, written by the template
    template = chat_template._environment().from_string(source)
    assert chat_template.results_need_calls(
        lambda ms, tools: template.render(messages=ms, tools=tools, add_generation_prompt=False, **SPECIALS)) is structured


def test_a_template_refusing_both_renderings_keeps_the_raw_one() -> None:
    def refuses(messages: list, tools: list) -> str:
        raise TypeError("nothing renders")

    assert chat_template.results_need_calls(refuses) is False
