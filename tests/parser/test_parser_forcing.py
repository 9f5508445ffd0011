"""Forced openers for ``tool_choice``: a turn that starts with one parses as a call of that tool."""

from __future__ import annotations

import json

import pytest

from parser_harness import parse_all_ways
from workers.decode.forcing import forced_opener
from workers.parser import FORMATS

TOOLS = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object", "properties": {
    "zip": {"type": "string"}}}}}]

# what a model writes after the named opener, in each format
REST = {
    "hermes": ' {"zip": "1"}}\n</tool_call>',
    "qwen3_coder": "<parameter=zip>\n1\n</parameter>\n</function>\n</tool_call>",
    "minimax_m2": '<parameter name="zip">1</parameter>\n</invoke>\n</minimax:tool_call>',
    "glm45": "<arg_key>zip</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    "llama3_json": ' {"zip": "1"}}',
    "pythonic": "zip='1')]",
    "kimi_k2": '{"zip": "1"}<|tool_call_end|><|tool_calls_section_end|>',
    "deepseek_v3": '{"zip": "1"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v31": '{"zip": "1"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "harmony": '{"zip": "1"}<|call|>',
}


@pytest.mark.parametrize("fmt", sorted(REST))
def test_a_named_opener_plus_the_models_arguments_is_that_call(fmt: str) -> None:
    opener = forced_opener(fmt, "w")
    assert opener is not None and opener.startswith(forced_opener(fmt))  # named extends required
    turn = parse_all_ways(fmt, opener + REST[fmt], tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [("w", {"zip": "1"})]
    assert turn.content.strip() == "" and not turn.invalid


def test_mistral_forces_only_the_marker() -> None:
    assert forced_opener("mistral", "w") is None
    turn = parse_all_ways("mistral", forced_opener("mistral") + 'w{"zip": "1"}', tools=TOOLS)
    assert [c.name for c in turn.calls] == ["w"]


def test_every_format_is_covered_and_reasoning_models_are_not_forced() -> None:
    assert set(REST) | {"mistral"} == set(FORMATS)
    assert forced_opener("hermes", "w", reasoning="think") is None
    assert forced_opener("no_such_format") is None


def test_names_are_escaped_inside_json() -> None:
    assert forced_opener("hermes", 'a"b') == '<tool_call>\n{"name": "a\\"b", "arguments":'
