"""The worker contract every decode engine must keep, one async check per property.

Each check takes a ``Case``: a started engine serving the scripted checkpoint
(``scripted_model.py``), whose greedy completion after any chat prompt is ``case.script``,
and the engine's KV block size.  A test module of an engine runs them all::

    @pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
    async def test_contract(case, check):
        await check(case)

The engine may be shared by the checks (its prefix cache is warm from earlier ones), so a
check asserts lower bounds on ``cached_tokens``, never that a prompt missed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from dataclasses import dataclass
from typing import Any

from tests.decode.scripted_model import Script
from workers.decode.constraints import constraint_for
from workers.decode.constraints.guide import GrammarCompiler
from workers.decode.engine import Engine, GenerateDelta, GenerateRequest, SamplingParams

SYSTEM = "You are a helpful assistant. Answer the question and call tools when you need them. " * 3
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
GET_TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC"]}},
                                       "required": ["tz"]}}}
FINISH_REASONS = {"stop", "length", "abort"}
_ids = itertools.count()


@dataclass(frozen=True)
class Case:
    engine: Engine
    script: Script
    block_size: int


def request(history: list[dict[str, Any]] | None = None, *, session: str | None = None, max_tokens: int = 256,
            continuation: bool = False, **params: Any) -> GenerateRequest:
    """A request with a fresh rid (and session unless given) over the standard conversation."""
    n = next(_ids)
    messages = history or [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather in Paris?"}]
    return GenerateRequest(rid=f"r{n}", session=session or f"s{n}", messages=messages, tools=TOOLS,
                           params=SamplingParams(max_tokens=max_tokens, **params), continuation=continuation)


async def collect(engine: Engine, req: GenerateRequest) -> list[GenerateDelta]:
    """Every delta of ``req``, checked for well-formedness."""
    deltas = [d async for d in engine.generate(req)]
    assert_well_formed(deltas)
    return deltas


def text_of(deltas: list[GenerateDelta]) -> str:
    return "".join(d.text for d in deltas)


def assert_well_formed(deltas: list[GenerateDelta]) -> None:
    """Only the last delta is finished, with a known reason; counts add up; no split characters."""
    assert deltas, "no delta"
    assert [d.finished for d in deltas] == [False] * (len(deltas) - 1) + [True]
    assert deltas[-1].finish_reason in FINISH_REASONS
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert list(itertools.accumulate(d.n_tokens for d in deltas)) == [d.completion_tokens for d in deltas]
    assert len({(d.prompt_tokens, d.cached_tokens) for d in deltas}) == 1, "prompt/cached tokens changed mid-stream"
    assert 0 <= deltas[0].cached_tokens <= deltas[0].prompt_tokens
    assert not any("\ufffd" in d.text for d in deltas), "a delta split a UTF-8 character"


def continuation(first: GenerateRequest, raw: str, result: str = '{"temp": 18}') -> list[dict[str, Any]]:
    """The conversation after ``first``'s turn (generated as ``raw``) and one tool result."""
    return first.messages + [{"role": "assistant", "content": None, "raw": raw},
                             {"role": "tool", "name": "get_weather", "content": result}]


# ---- the checks ---------------------------------------------------------------------------
async def first_delta_comes_with_the_first_token_and_prompt_counts(case: Case) -> None:
    deltas = await collect(case.engine, request())
    first = deltas[0]
    # Streamed, not buffered: the first delta is a prefix of the completion, not all of it.  How many
    # tokens it holds is how many the engine made before the consumer looked (one on an idle machine,
    # more when the runner is loaded: vLLM merges the deltas a slow consumer has not taken), so the
    # check bounds it by the whole completion, not by one.
    assert not first.finished and 1 <= first.n_tokens < len(case.script.ids)
    assert first.text and case.script.text.startswith(first.text)
    assert first.prompt_tokens > case.block_size
    assert text_of(deltas) == case.script.text


async def deltas_concatenate_to_the_whole_completion(case: Case) -> None:
    deltas = await collect(case.engine, request())
    assert text_of(deltas) == case.script.text
    assert deltas[-1].finish_reason == "stop"
    assert len(case.script.ids) <= deltas[-1].completion_tokens <= len(case.script.ids) + 1  # eos may count


async def special_tokens_and_split_characters_come_out_whole(case: Case) -> None:
    text = text_of(await collect(case.engine, request()))
    assert "<tool_call>" in text and "</tool_call>" in text  # special tokens in this tokenizer
    assert "é" in text  # generated as two byte tokens


async def finish_reasons_are_stop_and_length(case: Case) -> None:
    whole = await collect(case.engine, request())
    assert whole[-1].finish_reason == "stop" and whole[-1].stop_sequence is None  # the end of sequence, no string
    short = await collect(case.engine, request(max_tokens=5))
    assert (short[-1].finish_reason, short[-1].completion_tokens) == ("length", 5)


async def max_tokens_is_respected(case: Case) -> None:
    for n in (1, 3, 8, 30):  # none cuts the two bytes of the é apart
        deltas = await collect(case.engine, request(max_tokens=n))
        assert deltas[-1].completion_tokens == n
        assert text_of(deltas) == case.script.prefix(n)


async def stop_strings_end_the_text_before_them(case: Case) -> None:
    text, prefix = case.script.text, case.script.prefix
    spanning = prefix(12)[len(prefix(10)):]  # two tokens: held back until it is known to match
    for stop in ((spanning,), ("<tool_call>",), ("</tool_call>", spanning)):
        deltas = await collect(case.engine, request(stop=stop))
        assert deltas[-1].finish_reason == "stop"
        assert text_of(deltas) == text[:min(text.index(s) for s in stop)]
        # the string that ended it is named (Anthropic's stop_sequence): the one completed first
        assert deltas[-1].stop_sequence == min(stop, key=lambda s: (text.index(s) + len(s), text.index(s)))


async def stop_token_ids_end_the_text_before_them(case: Case) -> None:
    deltas = await collect(case.engine, request(stop_token_ids=(case.script.ids[6],)))
    assert deltas[-1].finish_reason == "stop" and deltas[-1].stop_sequence is None
    assert text_of(deltas) == case.script.prefix(6)


async def abort_ends_the_stream(case: Case) -> None:
    req = request()
    deltas: list[GenerateDelta] = []
    async for d in case.engine.generate(req):
        if not deltas:
            await case.engine.abort(req.rid)
        deltas.append(d)
    assert_well_formed(deltas)
    assert deltas[-1].finish_reason == "abort"
    assert deltas[-1].completion_tokens < len(case.script.ids)
    await case.engine.abort(req.rid)  # no longer live: nothing happens
    await case.engine.abort("never-seen")


async def leaving_the_stream_early_aborts_the_request(case: Case) -> None:
    stream = case.engine.generate(request())
    await anext(stream)
    await stream.aclose()
    deadline = time.monotonic() + 5.0
    while case.engine.stats()["running"] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert case.engine.stats()["running"] == 0
    assert text_of(await collect(case.engine, request())) == case.script.text  # still serving


async def greedy_is_deterministic_and_sampling_follows_its_parameters(case: Case) -> None:
    assert text_of(await collect(case.engine, request())) == text_of(await collect(case.engine, request()))
    sampled = [[d async for d in case.engine.generate(request(max_tokens=20, temperature=1.0, seed=7))]
               for _ in range(2)]  # (off the script, bytes may not form UTF-8: no well-formedness check)
    assert text_of(sampled[0]) == text_of(sampled[1]) != case.script.prefix(20)  # p(script) ~ 0.86 a token
    assert text_of(await collect(case.engine, request(temperature=1.0, top_k=1))) == case.script.text


async def concurrent_requests_are_batched(case: Case) -> None:
    order: list[tuple[str, int, bool]] = []

    async def run(i: int, n: int) -> list[GenerateDelta]:
        deltas = []
        async for d in case.engine.generate(request(max_tokens=n)):
            order.append(("delta", i, d.finished))
            deltas.append(d)
        assert_well_formed(deltas)
        return deltas

    sizes = [200, 3, 30, 200, 8, 200, 1, 45]
    results = await asyncio.gather(*(run(i, n) for i, n in enumerate(sizes)))
    for n, deltas in zip(sizes, results):
        assert text_of(deltas) == case.script.prefix(min(n, len(case.script.ids)))
    firsts = [next(k for k, (_, i, _f) in enumerate(order) if i == j) for j in range(len(sizes))]
    long_ends = [k for k, (_, i, fin) in enumerate(order) if fin and sizes[i] == 200]
    assert max(firsts) < min(long_ends), "requests ran one after another, not batched"


async def a_repeated_prompt_hits_the_prefix_cache(case: Case) -> None:
    first = await collect(case.engine, request())
    again = await collect(case.engine, request())
    p = first[0].prompt_tokens
    assert again[0].prompt_tokens == p
    assert again[0].cached_tokens >= (p - 1) // case.block_size * case.block_size > 0


async def a_continuation_hits_the_previous_turn(case: Case) -> None:
    turn0 = request()
    deltas = await collect(case.engine, turn0)
    turn1 = request(continuation(turn0, text_of(deltas)), session=turn0.session, continuation=True)
    after = await collect(case.engine, turn1)
    computed = deltas[0].prompt_tokens + deltas[-1].completion_tokens - 1  # the last token is never fed
    assert after[0].prompt_tokens > computed
    assert after[0].cached_tokens >= computed // case.block_size * case.block_size
    assert text_of(after) == case.script.text  # the model's reply does not depend on history



async def a_prefill_is_continued_not_repeated(case: Case) -> None:
    plain = await collect(case.engine, request())
    prefill = case.script.prefix(4)  # what tool_choice forces: the turn starts with it
    forced = await collect(case.engine, request(prefill=prefill))
    assert text_of(forced) == case.script.text[len(prefill):]
    assert forced[0].prompt_tokens == plain[0].prompt_tokens + 4  # the prefill is prompt, not completion
    assert forced[-1].completion_tokens <= plain[-1].completion_tokens - 4


async def a_constraint_holds_the_completion_to_its_grammar(case: Case) -> None:
    """The scripted model writes its call's JSON as one added token, which no grammar admits (text in
    a grammar never matches an added token): under a constraint it must write something else."""
    grammars = GrammarCompiler.from_dir(case.script.path, [case.script.eos_id])
    head = case.script.text[:case.script.text.index("<tool_call>")]

    async def run(tools: list[dict[str, Any]], **params: Any) -> str:
        c = constraint_for("hermes", None, tools, params, constrain_plain=not tools)  # as grammar_plain=on
        req = dataclasses.replace(request(max_tokens=60), tools=tools or None, constraint=c)
        deltas = await collect(case.engine, req)
        text = text_of(deltas)
        ids = grammars.tokenizer.tokenize_str(text, parse_special=True)
        assert grammars.violation(c, ids, complete=deltas[-1].finish_reason == "stop") is None, text
        return text

    assert (await run(TOOLS, tool_choice="required")).startswith('<tool_call>\n{"name": "get_weather", "arguments": ')
    named = await run(TOOLS + [GET_TIME], tool_choice={"name": "get_time"})
    assert named.startswith('<tool_call>\n{"name": "get_time", "arguments": ')
    for text in (await run([]), await run(TOOLS, tool_choice="none")):  # the script's call cannot begin
        assert text.startswith(head) and "<tool_call>" not in text
    assert constraint_for("hermes", None, [], {}) is None  # grammar_plain=off (default): a plain request is free
    assert (await run(TOOLS)).startswith(head + "<tool_call>\n")  # auto: the offered call may begin


CHECKS = [
    first_delta_comes_with_the_first_token_and_prompt_counts,
    deltas_concatenate_to_the_whole_completion,
    special_tokens_and_split_characters_come_out_whole,
    finish_reasons_are_stop_and_length,
    max_tokens_is_respected,
    stop_strings_end_the_text_before_them,
    stop_token_ids_end_the_text_before_them,
    abort_ends_the_stream,
    leaving_the_stream_early_aborts_the_request,
    greedy_is_deterministic_and_sampling_follows_its_parameters,
    concurrent_requests_are_batched,
    a_repeated_prompt_hits_the_prefix_cache,
    a_continuation_hits_the_previous_turn,
    a_prefill_is_continued_not_repeated,
    a_constraint_holds_the_completion_to_its_grammar,
]
