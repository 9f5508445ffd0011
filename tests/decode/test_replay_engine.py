"""The ReplayEngine test double: scripted turns, and how it treats a forced prefill."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.replay import ReplayEngine, ReplayEngineError

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"
CALL = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "UTC"}}\n</tool_call>'


def _request(prefill: str = "") -> GenerateRequest:
    return GenerateRequest(rid="r", session="s", messages=[{"role": "user", "content": "time?"}],
                           params=SamplingParams.from_dict({"max_tokens": 500, "prefill": prefill}),
                           metadata={"replay": [CALL]})


async def _text(engine: ReplayEngine, req: GenerateRequest) -> str:
    return "".join([d.text async for d in engine.generate(req)])


def test_sampling_params_carry_the_prefill() -> None:
    assert SamplingParams.from_dict({"prefill": "<tool_call>\n"}).prefill == "<tool_call>\n"
    assert SamplingParams.from_dict({"prefill": None}).prefill == "" == SamplingParams.from_dict({}).prefill


async def test_a_script_continues_the_prefill_and_one_that_disagrees_is_an_error() -> None:
    engine = ReplayEngine(MODEL, rate=10_000)
    assert await _text(engine, _request()) == CALL
    assert await _text(engine, _request('<tool_call>\n{"name": "get_time", "arguments":')) == ' {"timezone": "UTC"}}\n</tool_call>'
    with pytest.raises(ReplayEngineError, match="does not begin with the forced"):
        await _text(engine, _request('<tool_call>\n{"name": "get_weather"'))
