"""collect(): folds events and rejects streams that break the contract."""

from __future__ import annotations

import pytest

from schemas.events import ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallBegin, ToolCallInvalid, ToolCallReady
from workers.parser import FORMATS, ParseContractError, collect, make_parser
from workers.parser.registry import UnknownFormat

B = ToolCallBegin(index=0, id="c0", name="f")


def test_collect_folds_a_turn() -> None:
    turn = collect([ReasoningDelta(text="r"), ContentDelta(text="a"), B, ToolCallArgs(index=0, delta='{"a"'),
                    ToolCallArgs(index=0, delta=": 1}"), ToolCallReady(index=0, id="c0", name="f", arguments='{"a": 1}'),
                    ToolCallInvalid(index=1, id="c1", raw="x", error="bad"), ContentDelta(text="b")])
    assert (turn.content, turn.reasoning) == ("ab", "r")
    assert [(c.index, c.id, c.name, c.arguments) for c in turn.calls] == [(0, "c0", "f", '{"a": 1}')]
    assert [(c.index, c.error) for c in turn.invalid] == [(1, "bad")]


@pytest.mark.parametrize("events", [
    [B, ToolCallArgs(index=0, delta="{"), ToolCallReady(index=0, id="c0", name="f", arguments="{}")],  # fragments differ
    [ToolCallArgs(index=0, delta="{}")],  # fragment before begin
    [B, B],  # begun twice
    [B],  # never ended
    [B, ToolCallReady(index=0, id="c9", name="f", arguments="")],  # id changed
    [B, ToolCallReady(index=0, id="c0", name="f", arguments=""), ToolCallInvalid(index=0, id="c0")],  # ended twice
    [ToolCallInvalid(index=1, id="c1")],  # indices not contiguous
    [ToolCallInvalid(index=0, id="x"), ToolCallInvalid(index=1, id="x")],  # duplicate id
])
def test_collect_rejects_broken_streams(events: list) -> None:
    with pytest.raises(ParseContractError):
        collect(events)


def test_unknown_format_and_reasoning_mode() -> None:
    with pytest.raises(UnknownFormat):
        make_parser("nope")
    with pytest.raises(ValueError):
        make_parser("hermes", reasoning="maybe")


def test_formats_list() -> None:
    assert set(FORMATS) == {"hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic", "deepseek_v3", "deepseek_v31",
                            "kimi_k2", "glm45", "harmony", "minimax_m2", "longcat", "ernie45", "internlm", "jamba",
                            "hunyuan_a13b", "minimax_m1", "cohere_command", "granite", "phi4_mini_json", "seed_oss",
                            "deepseek_v32", "deepseek_v4", "lfm2", "gigachat3", "step3", "apertus", "olmo3", "xlam",
                            "functiongemma", "deepseek_v41", "mimo",
                            "minimax_m3", "kimi_k3", "gemma4"}
