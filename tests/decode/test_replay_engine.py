"""The ReplayEngine test double: scripted turns, a forced prefill, and the request's grammar."""

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


def _constrained(params: dict, tools: list[dict], script: str, max_tokens: int = 500) -> GenerateRequest:
    from workers.decode.constraints import constraint_for

    return GenerateRequest(rid="r", session="s", messages=[{"role": "user", "content": "time?"}], tools=tools,
                           params=SamplingParams(max_tokens=max_tokens), metadata={"replay": [script]},
                           constraint=constraint_for("hermes", None, tools, params))


TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


async def test_a_script_that_follows_the_requests_grammar_streams() -> None:
    engine = ReplayEngine(MODEL, rate=10_000)
    assert await _text(engine, _constrained({}, [TIME], "Let me look. " + CALL)) == "Let me look. " + CALL
    assert await _text(engine, _constrained({"tool_choice": "required"}, [TIME, WEATHER], CALL)) == CALL
    assert await _text(engine, _constrained({}, [], "No tools, no calls.")) == "No tools, no calls."
    assert await _text(engine, _constrained({}, [], CALL)) == CALL  # no tools: no grammar (the parser reads no call)
    cut = await _text(engine, _constrained({"tool_choice": "required"}, [TIME], CALL, max_tokens=5))
    assert CALL.startswith(cut)  # cut by max_tokens: a prefix of a grammatical turn is fine


@pytest.mark.parametrize("params,tools,script,why", [
    ({"tool_choice": "none"}, [TIME], CALL, "none: a call cannot begin"),
    ({}, [WEATHER], CALL, "a tool the request did not offer"),
    ({"tool_choice": "required"}, [TIME], "It is noon.", "required: the turn must be a call"),
    ({"tool_choice": {"name": "get_weather"}}, [TIME, WEATHER], CALL, "the named tool is another"),
    ({}, [TIME], CALL.replace('"UTC"', "3"), "arguments off the schema"),
])
async def test_a_script_that_breaks_the_requests_grammar_is_refused(params: dict, tools: list, script: str,
                                                                     why: str) -> None:
    with pytest.raises(ReplayEngineError, match="breaks the request's grammar"):
        await _text(ReplayEngine(MODEL, rate=10_000), _constrained(params, tools, script))


async def test_each_script_and_constraint_is_checked_once_and_refused_every_time() -> None:
    engine = ReplayEngine(MODEL, rate=10_000)
    checks = []
    check = engine._violation
    engine._violation = lambda req, text: checks.append(text) or check(req, text)  # type: ignore[method-assign]
    bad = CALL.replace('"UTC"', "3")
    for _ in range(3):
        assert await _text(engine, _constrained({}, [TIME], CALL)) == CALL
        with pytest.raises(ReplayEngineError, match="breaks the request's grammar"):
            await _text(engine, _constrained({}, [TIME], bad))
    assert checks == [CALL, bad]  # the repeats took the first verdict
    cut = await _text(engine, _constrained({"tool_choice": "required"}, [TIME], CALL, max_tokens=5))
    assert CALL.startswith(cut) and len(checks) == 3  # another constraint and limit: checked anew


def _plain(rid: str, text: str) -> GenerateRequest:
    return GenerateRequest(rid=rid, session=rid, messages=[{"role": "user", "content": "go"}],
                           params=SamplingParams.from_dict({"max_tokens": 500}), metadata={"replay": [text]})


async def _deltas(engine: ReplayEngine, req: GenerateRequest, abort_after: int = 0) -> list:
    out = []
    async for d in engine.generate(req):
        out.append(d)
        if abort_after and len(out) == abort_after:
            await engine.abort(req.rid)
    return out


async def test_batched_mode_steps_every_running_request_together() -> None:
    import asyncio

    engine = ReplayEngine(MODEL, rate=2_000, mode="batched")
    texts = {"a": "one two three four five six", "b": CALL, "c": ""}
    runs = await asyncio.gather(*(_deltas(engine, _plain(rid, t)) for rid, t in texts.items()))
    for (rid, text), deltas in zip(texts.items(), runs, strict=True):
        assert "".join(d.text for d in deltas) == text, rid
        assert deltas[-1].finished and deltas[-1].finish_reason == "stop"
        if text:  # one token per delta, counted
            assert [d.completion_tokens for d in deltas] == list(range(1, len(deltas) + 1))
    longest = max(sum(d.n_tokens for d in deltas) for deltas in runs)
    assert engine.steps == longest  # one step served every request: no request had its own timer
    assert engine.tokens_out == sum(d.n_tokens for deltas in runs for d in deltas)
    assert engine.stats()["running"] == 0 and not engine._batch


async def test_batched_mode_aborts_at_the_next_step() -> None:
    engine = ReplayEngine(MODEL, rate=2_000, mode="batched")
    deltas = await _deltas(engine, _plain("a", "one two three four five six seven eight"), abort_after=2)
    assert len(deltas) == 3 and deltas[-1].finish_reason == "abort" and deltas[-1].finished
    assert not engine._batch


async def test_batched_mode_drops_a_request_whose_reader_left() -> None:
    engine = ReplayEngine(MODEL, rate=2_000, mode="batched")
    gen = engine.generate(_plain("a", "one two three four five six"))
    assert (await gen.__anext__()).n_tokens == 1
    await gen.aclose()
    assert not engine._batch and engine.stats()["running"] == 0
    await engine.stop()


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ReplayEngineError, match="mode"):
        ReplayEngine(MODEL, mode="fast")


async def test_stop_strings_cut_a_script_as_they_cut_a_model() -> None:
    engine = ReplayEngine(MODEL, rate=10_000)

    def req(stop: tuple[str, ...], max_tokens: int = 500) -> GenerateRequest:
        return GenerateRequest(rid="r", session="s", messages=[{"role": "user", "content": "go"}],
                               params=SamplingParams.from_dict({"max_tokens": max_tokens, "stop": list(stop)}),
                               metadata={"replay": ["one two STOP three END"]})

    deltas = await _deltas(engine, req(("END", "STOP")))
    assert "".join(d.text for d in deltas) == "one two "
    assert (deltas[-1].finish_reason, deltas[-1].stop_sequence) == ("stop", "STOP")
    whole = await _deltas(engine, req(("nowhere",)))
    assert (whole[-1].finish_reason, whole[-1].stop_sequence) == ("stop", None)
    cut = await _deltas(engine, req(("END",), max_tokens=2))  # the length limit comes first
    assert (cut[-1].finish_reason, cut[-1].stop_sequence) == ("length", None)
