"""Tool calls valid by construction, on the bundled model (issue 17's acceptance).

300 generated requests (``bench/grammar_cases.py``: tools and arguments renamed, types
changed, enums, tools left out) run greedily through the native engine under the grammar the
decoder builds.  Whatever the model writes: under ``required`` and a named choice every call
the parser returns names the offered (or the named) tool and its arguments validate against
that tool's schema; under ``auto`` no call names a tool the request did not offer; without
tools nothing is held and the parser returns the whole text as content, never a call.  A turn cut by ``max_tokens`` may end inside a call: the parser reports
it truncated (never a call), as for any model.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.grammar import FMT, core_for, generate, request
from bench.grammar_cases import Case, build_cases, judge
from workers.parser import make_parser, parse_text
from workers.parser.turn import collect

MODES = ("required",) * 5 + ("named",) * 5 + ("auto",) * 3 + ("no_tools",) * 2  # 100 / 100 / 60 / 40 of 300
MAX_TOKENS = 96
pytestmark = pytest.mark.timeout(900)  # ~1-2 min on a busy 2-core machine


@pytest.fixture(scope="module")
def generated() -> dict[str, list[tuple[Case, str, str]]]:
    """Every case under the decoder's default grammar (tool-less requests decode freely,
    ``grammar_plain=off``), and the tool-less cases again under ``grammar_plain=on``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two intra-op threads on a busy 2-core machine made each step 30x slower
    try:
        cases = build_cases(17, 300, MODES)
        plain = [c for c in cases if c.mode == "no_tools"]
        reqs = [request(c, i, True, MAX_TOKENS) for i, c in enumerate(cases)]
        reqs = [dataclasses.replace(r, constraint=None) if c.mode == "no_tools" else r for r, c in zip(reqs, cases)]
        reqs += [request(c, len(cases) + i, True, MAX_TOKENS) for i, c in enumerate(plain)]  # held: no call markup
        outputs = generate(core_for(), reqs)
    finally:
        torch.set_num_threads(threads)
    runs = [(c, text, finish) for c, (text, finish) in zip(cases + plain, outputs)]
    return {"default": runs[:len(cases)], "plain": runs[len(cases):]}


@pytest.fixture(scope="module")
def runs(generated) -> list[tuple[Case, str, str]]:
    return generated["default"]


def _of(runs: list[tuple[Case, str, str]], *modes: str) -> list[tuple[Case, str, str]]:
    picked = [r for r in runs if r[0].mode in modes]
    assert picked
    return picked


def test_required_and_named_turns_are_valid_calls_of_the_offered_tools(runs) -> None:
    picked = _of(runs, "required", "named")
    assert len(picked) == 200
    for case, text, finish in picked:
        v = judge(FMT, text, case)
        assert (v.unoffered, v.invalid_args, v.wrong_name) == (0, 0, 0), (case, text, v.notes)
        if finish == "stop":  # a finished turn is one or more complete calls and nothing else
            assert v.calls >= 1 and v.malformed == 0 and not v.no_call, (case, text)
            assert not parse_text(FMT, text).content.strip(), text
        else:  # cut inside a call: reported truncated, never returned as a call
            assert all(bad.truncated for bad in parse_text(FMT, text, tools=case.tools).invalid), text
    finished = sum(f == "stop" for _, _, f in picked)
    assert finished >= 0.9 * len(picked), f"only {finished} of {len(picked)} turns finished within {MAX_TOKENS} tokens"


def test_auto_never_calls_a_tool_the_request_did_not_offer(runs) -> None:
    picked = _of(runs, "auto")
    calls = 0
    for case, text, finish in picked:
        v = judge(FMT, text, case)
        calls += v.calls
        assert v.unoffered == 0 and v.invalid_args == 0, (case, text, v.notes)
        assert finish == "length" or v.malformed == 0, text
    assert calls > 0  # the model does call the offered tools


def test_a_request_without_tools_never_returns_a_call(runs) -> None:
    """No tools: nothing is held (a plain request decodes as on any server), and the parser of a
    turn offered no tools returns all of its text as content, whatever the model wrote."""
    wrote_calls = 0
    for case, text, _ in _of(runs, "no_tools"):
        assert case.tools == [] or case.tools is None
        p = make_parser(FMT, calls=False)
        turn = collect(p.feed(text) + p.finish())
        assert not turn.calls and not turn.invalid and turn.content == text, (case, text)
        wrote_calls += "<tool_call>" in text
    assert wrote_calls > 0  # the model does write call markup here: the parser is what keeps it text


def test_grammar_plain_holds_a_request_without_tools_to_text(generated) -> None:
    """``grammar_plain=on``: the same tool-less requests under the no-call grammar never write call markup."""
    assert len(generated["plain"]) == 40
    for case, text, _ in generated["plain"]:
        assert "<tool_call>" not in text and "</tool_call>" not in text, (case, text)


def test_the_judge_catches_what_the_grammar_prevents() -> None:
    """The checks above can fail: hand-written turns with each fault are caught."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
    case = Case([{"role": "user", "content": "x"}], [tool], "required")
    call = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
    assert judge(FMT, call.format("book_restaurant", '{"location": "Oslo"}'), case).unoffered == 1
    assert judge(FMT, call.format("get_weather", '{"city": "Oslo"}'), case).invalid_args == 1
    assert judge(FMT, "It is sunny.", case).no_call
    assert judge(FMT, call.format("get_weather", '{"location": "Oslo"}'), case).notes == []
