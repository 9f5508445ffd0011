from __future__ import annotations

from training.evaluate import Item, build_items, parse_calls, score
from training.pools import split_of

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def test_parse_calls_accepts_only_clean_turns() -> None:
    assert parse_calls(CALL + "<|im_end|>") == ([{"name": "get_weather", "arguments": {"city": "Oslo"}}], True)
    assert parse_calls("Sure! " + CALL + "<|im_end|>")[1] is False
    assert parse_calls(CALL)[1] is False  # never stopped
    assert parse_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}\n</tool_call><|im_end|>') == ([], False)


def test_score_single_parallel_none_and_answer() -> None:
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    other = {"name": "get_time", "arguments": {"timezone": "UTC"}}
    two = CALL + '\n<tool_call>\n{"name": "get_time", "arguments": {"timezone": "UTC"}}\n</tool_call><|im_end|>'
    assert score(Item("single", "weather", [], [call]), CALL + "<|im_end|>") == {
        "well_formed": True, "right_tool": True, "exact_args": True}
    assert score(Item("parallel", "time+weather", [], [other, call]), two)["parallel_both"] is True
    assert score(Item("none", "none", []), "Hello!<|im_end|>") == {"right_tool": True}
    assert score(Item("none", "none", []), CALL + "<|im_end|>") == {"right_tool": False}
    assert score(Item("answer", "weather", [], [call], ["21", "sunny"]), "It's 21°C and sunny.<|im_end|>")["answer_values"]
    assert not score(Item("answer", "weather", [], [call], ["21", "sunny"]), "It's 12°C and sunny.<|im_end|>")["answer_values"]


def test_eval_items_use_held_out_values() -> None:
    items = build_items(0, 10, 5, 5, 8)
    assert [i.kind for i in items].count("single") == 10 and len(items) == 28
    for item in items:
        for call in item.calls:
            for value in call["arguments"].values():
                if isinstance(value, str) and call["name"] != "search":
                    assert split_of(value) == "eval", value
