from __future__ import annotations

import json
from collections import Counter

from training.evalsets import COUNTS, TITLE_SWAPS, indist, legacy, selection, titles
from training.evaluate import evaluate, legacy_rates
from training.harder import harder
from training.scoring import grounded, parse_calls, same_calls, same_value, score
from training.values import split_of

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def _turn(calls: list[dict]) -> str:
    return "\n".join(f"<tool_call>\n{json.dumps(c, ensure_ascii=False)}\n</tool_call>" for c in calls) + "<|im_end|>"


def test_parse_calls_accepts_only_clean_turns() -> None:
    assert parse_calls(CALL + "<|im_end|>") == ([{"name": "get_weather", "arguments": {"city": "Oslo"}}], True)
    assert parse_calls("Sure! " + CALL + "<|im_end|>")[1] is False
    assert parse_calls(CALL)[1] is False  # never stopped
    assert parse_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}\n</tool_call><|im_end|>') == ([], False)


def test_values_compare_as_the_tools_read_them() -> None:
    assert same_value("city", "paris", "Paris") and not same_value("city", "Pari", "Paris")
    assert same_value("expression", "1234+4321", "1234 + 4321") and same_value("expression", "80 * 15 / 100", "15 / 100 * 80")
    assert not same_value("expression", "5555", "1234 + 4321") and not same_value("expression", "4 + 1234", "1234 + 4321")
    assert not same_value("timezone", "asia/tokyo", "Asia/Tokyo") and not same_value("party_size", "2", 2)


def test_calls_match_in_any_order_and_strict_mode_is_exact() -> None:
    a, b = {"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {"timezone": "UTC"}}
    assert same_calls([b, a], [a, b]) and not same_calls([a, a], [a, b]) and not same_calls([a], [a, b])
    assert not same_calls([{"name": "get_weather", "arguments": {"city": "oslo"}}], [a], strict=True)


def test_score_call_none_and_answer_items() -> None:
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert score("call", CALL + "<|im_end|>", [call], []) == {"well_formed": True, "right_tool": True, "exact_args": True}
    assert score("none", "Hello!<|im_end|>", [], []) == {"no_tool": True}
    assert score("none", CALL + "<|im_end|>", [], []) == {"no_tool": False}
    ok = score("answer", "It's 21°C and sunny.<|im_end|>", [], ["21", "sunny"], context='{"temperature":21}')
    assert ok == {"answer_values": True, "answer_grounded": True}
    spliced = score("answer", "It's 21°C and sunny. 7:0 = 19900.<|im_end|>", [], ["21", "sunny"], context='{"temperature":21}')
    assert spliced == {"answer_values": True, "answer_grounded": False}
    assert grounded("ID R41911 at 19:00", "R41911 19:00") and not grounded("ID R4191", "R41911 19:00 x")


def test_sets_have_every_category_and_held_out_values() -> None:
    items = indist(0, 0.2)
    cats = Counter(i.category for i in items)
    assert set(cats) == set(COUNTS) and all(cats[c] == max(1, int(COUNTS[c] * 0.2)) for c in COUNTS)
    for item in items:
        for call in item.calls:
            for key in ("city", "restaurant"):
                if key in call["arguments"]:
                    assert split_of(call["arguments"][key]) == "eval" or not call["arguments"][key].istitle()
    assert Counter(i.category for i in harder(0, 0.2)) == cats
    assert [i.messages for i in selection(0.1)] != [i.messages for i in indist(0, 0.1)]


def test_legacy_set_is_the_first_models_330_prompts() -> None:
    items = legacy()
    assert len(items) == 330 and Counter(i.category for i in items) == {"single": 150, "parallel": 60, "none": 40, "answer": 80}
    assert all(i.tools == "demo5" for i in items)


class _Oracle:
    """Answers every item perfectly from its expectation: checks the harness scores a right turn right."""

    def __init__(self, items: list) -> None:
        self.by_prompt = {json.dumps(i.messages, ensure_ascii=False): i for i in items}

    def complete(self, messages: list, max_new_tokens: int, tools: list) -> str:
        item = self.by_prompt[json.dumps(messages, ensure_ascii=False)]
        if item.kind == "call":
            return _turn(item.calls)
        return ("Done: " + ", ".join(item.keys) + ".<|im_end|>") if item.kind == "answer" else "Hi!<|im_end|>"


class _Silent:
    def complete(self, messages: list, max_new_tokens: int, tools: list) -> str:
        return "<|im_end|>"


def test_harness_scores_a_perfect_and_a_silent_model() -> None:
    items = harder(1, 0.1)
    perfect = evaluate(_Oracle(items), items, progress=False)
    assert all(perfect[m] == 1.0 for m in ("well_formed", "right_tool", "exact_args", "no_tool", "answer_values"))
    silent = evaluate(_Silent(), items, progress=False)
    assert silent["right_tool"] == 0.0 and silent["answer_values"] == 0.0 and silent["no_tool"] == 1.0


def test_legacy_rates_use_the_first_evaluations_names() -> None:
    items = legacy()
    rates = legacy_rates(evaluate(_Oracle(items), items, progress=False, strict=True))
    assert rates == {"well_formed": 1.0, "right_tool": 1.0, "exact_args": 1.0, "parallel_both": 1.0,
                     "answer_values": 1.0, "n": 330}


def test_titles_set_swaps_only_the_history_title_of_the_legacy_answers() -> None:
    """``--set titles``: each legacy answer prompt titled "A Short History of X", once per form, with that title
    (in the tool result and the expected values) the only change; a model that rebuilds the old title fails."""
    items, old = titles(), [i for i in legacy() if i.kind == "answer" and any("A Short History of" in k for k in i.keys)]
    assert len(old) == 5 and len(items) == 5 * len(TITLE_SWAPS)
    assert Counter(i.category for i in items) == {f.format(x="X"): 5 for f in TITLE_SWAPS}
    for item in items:
        place = item.category.replace("X", "{x}")
        new = next(k for k in item.keys if k.startswith(place.split("{x}")[0]) and k.endswith(place.split("{x}")[1]))
        tool_text = "".join(m["content"] for m in item.messages if m["role"] == "tool")
        assert new in tool_text and item.tools == "demo5" and item.kind == "answer"
        if not item.category.startswith("A Short History"):
            assert "A Short History" not in tool_text
    assert evaluate(_Oracle(items), items, progress=False)["answer_values"] == 1.0

    class Stale:  # quotes the title the legacy prompt had, not the one it was shown
        def complete(self, messages: list, max_new_tokens: int, tools: list) -> str:
            shown = "".join(m["content"] for m in messages if m["role"] == "tool")
            item = next(i for i in old if any(k.removeprefix("A Short History of ") in shown for k in i.keys
                                              if k.startswith("A Short History of ")))
            return "Done: " + ", ".join(item.keys) + ".<|im_end|>"
    stale = evaluate(Stale(), items, progress=False)
    assert stale["answer_values/A Short History of X"] == 1.0 and stale["answer_values"] == 1 / len(TITLE_SWAPS)
