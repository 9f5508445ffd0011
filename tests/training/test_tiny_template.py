from __future__ import annotations

import pytest

from training.datagen import DialogueGen, to_messages
from training.template import CHAT_TEMPLATE, render
from training.tools_spec import TOOLS

DEMO = [
    {"role": "user", "content": "What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"type": "function", "function": {"name": "book_restaurant",
                                          "arguments": '{"restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}'}}]},
    {"role": "tool", "content": '{"temperature": 21}'},
    {"role": "tool", "content": '{"booking_id": "R12345"}'},
    {"role": "assistant", "content": "Done."},
]


def test_demo_turn_renders_in_qwen_format() -> None:
    text = render(DEMO, TOOLS)
    assert "get_weather(city, date?)\n" in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "book_restaurant", "arguments": {"restaurant": "Chez Nous", '
            '"party_size": 2, "time": "19:00"}}\n</tool_call><|im_end|>\n') in text
    assert ('<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response>\n<tool_response>\n'
            '{"booking_id": "R12345"}\n</tool_response><|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n') in text


def test_generation_prompt_and_custom_system() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = render(msgs, None, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_matches_transformers_apply_chat_template(tokenizer) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                              pad_token="<|endoftext|>")
    hf.chat_template = CHAT_TEMPLATE
    gen = DialogueGen("train", 5)
    for msgs in [DEMO] + [to_messages(gen.dialogue()) for _ in range(10)]:
        for cut in (len(msgs), 1):
            expected = render(msgs[:cut], TOOLS, add_generation_prompt=cut == 1)
            got = hf.apply_chat_template(msgs[:cut], tools=TOOLS, tokenize=False, add_generation_prompt=cut == 1)
            assert got == expected
