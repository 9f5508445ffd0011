"""Pins on the vLLM engine (``workers.decode.residency``) against a real vLLM with a tight KV pool.

The pool holds two sessions' contexts and one block more, so a third session must wait, and a
session kept while another is generating survives only because its blocks were refreshed behind
an ended session's.  Its own engine (a small pool); the rule's cases are in test_residency.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.decode import engine_contract
from tests.decode.engine_contract import collect, text_of
from tests.decode.scripted_model import Script, build_scripted_checkpoint
from tests.decode.vllm_env import BLOCK_SIZE, ENGINE_ARGS, set_vllm_env

pytest.importorskip("vllm", reason="needs the vllm extra (make test-vllm)")
from workers.decode.vllm_engine import VllmConfig, VllmEngine  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
module_loop = pytest.mark.asyncio(loop_scope="module")


def conversation(name: str) -> list[dict[str, Any]]:
    """A conversation no other session shares a block with (its system prompt starts with ``name``)."""
    return [{"role": "system", "content": f"{name}. {engine_contract.SYSTEM}"},
            {"role": "user", "content": "Weather in Paris?"}]


def blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE)


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Script:
    return build_scripted_checkpoint(tmp_path_factory.mktemp("scripted"))


@pytest.fixture(scope="module")
def kept_blocks(script: Script) -> int:
    """Blocks one session's first turn fills (prompt, completion and its end token)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(script.path))
    text = tok.apply_chat_template(conversation("Agent A"), tools=engine_contract.TOOLS, add_generation_prompt=True,
                                   tokenize=False)
    return blocks(len(tok.encode(text, add_special_tokens=False)) + len(script.ids) + 1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(script: Script, kept_blocks: int, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[VllmEngine]:
    set_vllm_env(tmp_path_factory.mktemp("vllm-cache"))
    pool = 2 * kept_blocks + 1 + 1  # two kept sessions and a block; vLLM keeps one block back
    args = dict(ENGINE_ARGS, num_gpu_blocks_override=pool, max_model_len=(pool - 1) * BLOCK_SIZE)
    eng = VllmEngine(VllmConfig(model=str(script.path), engine_args=args))
    await eng.start()
    yield eng
    await eng.stop()


async def first_turn(engine: VllmEngine, name: str) -> tuple[Any, list[Any]]:
    req = engine_contract.request(conversation(name), session=name)
    return req, await collect(engine, req)


@module_loop
async def test_pins_hold_new_sessions_back_and_refresh_the_pinned_prefix(engine: VllmEngine, script: Script) -> None:
    a, a_deltas = await first_turn(engine, "Agent A")
    engine.pin("Agent A", 60.0)  # waiting on its tool
    await first_turn(engine, "Agent E")  # fits beside A; ends
    engine.release("Agent E")
    await first_turn(engine, "Agent B")  # fits beside A; before it, A's blocks go behind E's (else B evicts them)
    engine.pin("Agent B", 60.0)
    stats = engine.stats()
    assert (stats["refreshes"], stats["admission_waits"], stats["pinned_sessions"]) == (1, 0, 2)

    new_session = asyncio.create_task(collect(engine, engine_contract.request(conversation("Agent D"),
                                                                               session="Agent D")))
    await asyncio.sleep(0.5)
    assert engine.stats()["admission_waits"] == 1 and not new_session.done()  # A + B + D exceed the pool

    history = engine_contract.continuation(a, text_of(a_deltas))
    after = await collect(engine, engine_contract.request(history, session="Agent A", continuation=True))
    computed = a_deltas[0].prompt_tokens + a_deltas[-1].completion_tokens - 1  # the last token is never fed
    assert after[0].cached_tokens >= computed // BLOCK_SIZE * BLOCK_SIZE  # A's prefix outlived E's and B's turns
    assert text_of(after) == script.text
    assert not new_session.done()  # still waiting: A (in its grace) and B are before it

    engine.release("Agent A")
    engine.release("Agent B")
    d_deltas = await asyncio.wait_for(new_session, 120.0)
    assert text_of(d_deltas) == script.text
    stats = engine.stats()
    assert (stats["pinned_sessions"], stats["pinned_blocks"], stats["admission_waiting"]) == (0, 0, 0)
    assert stats["refresh_computed_tokens"] <= BLOCK_SIZE  # a refresh computes one token (at most a block)


@module_loop
async def test_an_abort_ends_a_wait_without_vllm(engine: VllmEngine) -> None:
    await first_turn(engine, "Agent F")
    engine.pin("Agent F", 60.0)
    await first_turn(engine, "Agent G")
    engine.pin("Agent G", 60.0)
    req = engine_contract.request(conversation("Agent H"), session="Agent H")
    stream = engine.generate(req)
    waiting = asyncio.create_task(anext(stream))
    await asyncio.sleep(0.2)
    await engine.abort(req.rid)
    last = await asyncio.wait_for(waiting, 10.0)
    assert (last.finished, last.finish_reason, last.n_tokens) == (True, "abort", 0)
    await stream.aclose()
    engine.release("Agent F")
    engine.release("Agent G")
    assert engine.stats()["running"] == 0 and engine.stats()["resident_sessions"] == 0


@module_loop
async def test_a_client_loops_next_request_continues_its_conversation_in_place(engine: VllmEngine,
                                                                              script: Script) -> None:
    """A client that runs the agent loop itself sends the next turn as a new request, a new session: it
    takes the pinned session's place (it would wait behind it and the session after it otherwise) and
    reuses its ids (its prefix is cached)."""
    a, a_deltas = await first_turn(engine, "Agent J")
    engine.pin("Agent J", 60.0)  # the chat completion ended with a call; the client runs its tool
    await first_turn(engine, "Agent K")
    engine.pin("Agent K", 60.0)
    waits = engine.stats()["admission_waits"]
    history = engine_contract.continuation(a, text_of(a_deltas))
    nxt = await asyncio.wait_for(collect(engine, engine_contract.request(history, session="Agent J2")), 60.0)
    assert engine.stats()["admission_waits"] == waits  # J + K + J2 would exceed the pool: it took J's place
    assert nxt[0].cached_tokens >= a_deltas[0].prompt_tokens // BLOCK_SIZE * BLOCK_SIZE
    assert text_of(nxt) == script.text
    for session in ("Agent J2", "Agent K"):
        engine.release(session)
    assert engine.stats()["resident_sessions"] == 0
