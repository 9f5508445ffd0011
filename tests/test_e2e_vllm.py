"""End to end on the vLLM backend: gateway -> decode (engine=vllm) -> parser -> tools ->
continuation -> decode, with the scripted checkpoint (it calls get_weather on every turn).

The continuation turn must hit vLLM's prefix cache: ``turn.started`` of turn 1 reports
``cached_tokens`` covering turn 0's prompt and completion (vLLM cannot pin, but the
conversation is re-rendered byte for byte and nothing evicts a 1 GiB cache here).
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.decode.scripted_model import build_scripted_checkpoint
from tests.decode.vllm_env import BLOCK_SIZE, ENGINE_ARGS, set_vllm_env
from tests.hub_cache import add_snapshot
from tests.test_e2e import assert_exactly_once_in_order, kinds, run_session
from runtime.config import DEFAULT_MODEL_DIR
from turnstream.stack import DEMO_MESSAGE

pytest.importorskip("vllm", reason="needs the vllm extra (make test-vllm)")

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


async def test_tool_session_on_vllm_reuses_the_prefix_cache(stack_factory, tmp_path) -> None:
    script = build_scripted_checkpoint(tmp_path / "model")
    set_vllm_env(tmp_path / "cache")
    # the scripted model writes its call's JSON as one added token, which no grammar admits (the
    # contract check a_constraint_holds_the_completion_to_its_grammar covers vLLM's constraints)
    stack = stack_factory(engine="vllm", model=str(script.path), vllm_args=json.dumps(ENGINE_ARGS),
                          grammar_auto="off")
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": ["get_weather"],
            "max_turns": 2}
    _, events = await run_session(stack.url, body)
    assert_exactly_once_in_order(events)
    assert events[-1]["body"]["type"] == "session.ended" and events[-1]["body"]["reason"] == "max_turns"
    results = [e["body"] for e in events if e["body"]["type"] == "tool.result"]
    assert [(r["name"], r["is_error"]) for r in results] == [("get_weather", False)] * 2, kinds(events)
    assert all(json.loads(r["content"])["city"] == "Paris" for r in results)
    started = {e["turn"]: e["body"] for e in events if e["body"]["type"] == "turn.started"}
    ended = {e["turn"]: e["body"] for e in events if e["body"]["type"] == "turn.ended"}
    assert sorted(started) == [0, 1] and started[1]["continuation"]
    computed = started[0]["prompt_tokens"] + ended[0]["completion_tokens"] - 1  # the last token is never fed
    assert started[1]["cached_tokens"] >= computed // BLOCK_SIZE * BLOCK_SIZE > 0
    print(f"turn 1: prompt {started[1]['prompt_tokens']} tokens, {started[1]['cached_tokens']} from vLLM's "
          f"prefix cache (turn 0: {started[0]['prompt_tokens']} + {ended[0]['completion_tokens']})")


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "config.json").exists(), reason="the bundled model is not there yet")
async def test_demo_session_with_the_bundled_model_on_vllm(stack_factory, tmp_path) -> None:
    set_vllm_env(tmp_path / "cache")
    stack = stack_factory(engine="vllm", vllm_args=json.dumps(ENGINE_ARGS))
    body = {"messages": [{"role": "user", "content": DEMO_MESSAGE}], "max_turns": 4}
    _, events = await run_session(stack.url, body)
    assert_exactly_once_in_order(events)
    assert events[-1]["body"]["type"] == "session.ended" and events[-1]["body"]["reason"] in ("stop", "max_turns")
    assert "tool.result" in kinds(events), "the bundled model called no tool"
    started = {e["turn"]: e["body"] for e in events if e["body"]["type"] == "turn.started"}
    ended = {e["turn"]: e["body"] for e in events if e["body"]["type"] == "turn.ended"}
    computed = started[0]["prompt_tokens"] + ended[0]["completion_tokens"] - 1
    assert started[1]["continuation"] and started[1]["cached_tokens"] >= computed // BLOCK_SIZE * BLOCK_SIZE > 0
    print(f"bundled model, turn 1: prompt {started[1]['prompt_tokens']} tokens, {started[1]['cached_tokens']} from "
          f"vLLM's prefix cache (turn 0: {started[0]['prompt_tokens']} + {ended[0]['completion_tokens']})")


async def test_a_hub_id_is_served_on_vllm_from_the_cache_offline(stack_factory, tmp_path, monkeypatch) -> None:
    """Each process resolves ``acme/tiny-agent`` itself (the decoder with the weights) and infers its format."""
    set_vllm_env(tmp_path / "cache")
    add_snapshot(tmp_path / "hf", "acme/tiny-agent")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    stack = stack_factory(engine="vllm", model="acme/tiny-agent", vllm_args=json.dumps(ENGINE_ARGS))
    client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused")
    reply = await client.chat.completions.create(model="acme/tiny-agent", max_tokens=16,
                                                 messages=[{"role": "user", "content": "Hello! How are you?"}])
    assert reply.choices[0].message.content and reply.model == "acme/tiny-agent"
