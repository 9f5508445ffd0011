"""The vLLM engine (``--engine vllm``) against the engine contract, on the scripted checkpoint.

Needs the vllm extra (``make test-vllm`` installs it into .venv-vllm and runs these).  One
engine serves the whole module: each start costs 10-20 s on CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.decode import engine_contract
from tests.decode.engine_contract import Case
from tests.decode.scripted_model import Script, build_scripted_checkpoint
from tests.decode.vllm_env import BLOCK_SIZE, ENGINE_ARGS, set_vllm_env
from runtime.config import ConfigError, load_config
from workers.decode.constraints import constraint_for
from workers.decode.errors import EngineError, ModelLoadError, RequestTooLarge

pytest.importorskip("vllm", reason="needs the vllm extra (make test-vllm)")
from runtime.chat_template import template_messages  # noqa: E402
from workers.decode.vllm_engine import (VllmConfig, VllmEngine, _parsed_arguments,  # noqa: E402
                                        _scheduler_stats_only)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
module_loop = pytest.mark.asyncio(loop_scope="module")  # the async tests share the module's engine and its loop


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Script:
    return build_scripted_checkpoint(tmp_path_factory.mktemp("scripted"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(script: Script, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[VllmEngine]:
    set_vllm_env(tmp_path_factory.mktemp("vllm-cache"))
    eng = VllmEngine(VllmConfig(model=str(script.path), engine_args=ENGINE_ARGS))
    await eng.start()
    yield eng
    await eng.stop()


@pytest.fixture
def case(engine: VllmEngine, script: Script) -> Case:
    return Case(engine, script, BLOCK_SIZE)


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
@module_loop
async def test_engine_contract(case: Case, check) -> None:
    await check(case)


@module_loop
async def test_load_report_counts_prefix_hits(case: Case) -> None:
    await engine_contract.collect(case.engine, engine_contract.request())
    stats = case.engine.stats()
    assert stats["engine"] == "vllm" and stats["running"] == 0 and stats["pinned_blocks"] == 0
    assert stats["block_size"] == BLOCK_SIZE and stats["total_blocks"] > 0
    assert case.engine.llm.vllm_config.scheduler_config.policy == "priority"  # continuations go first
    assert 0 < stats["prefix_hit_tokens"] <= stats["prompt_tokens"]
    assert 0 < stats["prefix_cache_hits"] <= stats["prefix_cache_queries"]


@module_loop
async def test_only_the_scheduler_stats_are_kept(case: Case) -> None:
    """vLLM's Prometheus logger and per-step stats are dropped; the heartbeat's scheduler stats still come."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    llm = case.engine.llm
    assert not any(type(s) is PrometheusStatLogger for s in llm.logger_manager.stat_loggers)
    assert llm.logger_manager.stat_loggers  # ours (_SchedulerLoad), through vLLM's per-engine adapter
    assert not llm.log_stats and not llm.output_processor.log_stats
    before = case.engine.stats()["prefix_cache_queries"]
    await engine_contract.collect(case.engine, engine_contract.request())
    assert case.engine.stats()["prefix_cache_queries"] > before


def test_with_tracing_on_vllms_stats_stay() -> None:
    """A trace is made from a request's stats: an engine traced (otlp_traces_endpoint) keeps all of them."""
    from types import SimpleNamespace

    from vllm.v1.metrics.loggers import PrometheusStatLogger

    prometheus = object.__new__(PrometheusStatLogger)
    handler = SimpleNamespace(cancel=lambda: pytest.fail("the output handler was stopped"))
    llm = SimpleNamespace(log_stats=True, output_handler=handler, logger_manager=SimpleNamespace(stat_loggers=[prometheus]),
                          output_processor=SimpleNamespace(log_stats=True, tracing_enabled=True))
    _scheduler_stats_only(llm)
    assert llm.log_stats and llm.output_processor.log_stats and llm.logger_manager.stat_loggers == [prometheus]
    assert llm.output_handler is handler


@module_loop
async def test_a_pin_keeps_a_finished_session_and_a_release_lets_it_go(case: Case) -> None:
    case.engine.pin("s-never-seen", 30.0)  # not resident: nothing to keep
    assert case.engine.stats()["pinned_sessions"] == 0
    req = engine_contract.request()
    deltas = await engine_contract.collect(case.engine, req)
    assert case.engine.stats()["pinned_sessions"] == 0  # a finished request's grace is not a pin
    case.engine.pin(req.session, 30.0)
    kept = -(-(deltas[0].prompt_tokens + deltas[-1].completion_tokens) // BLOCK_SIZE)
    assert (case.engine.stats()["pinned_sessions"], case.engine.stats()["pinned_blocks"]) == (1, kept)
    case.engine.release(req.session)
    assert (case.engine.stats()["pinned_sessions"], case.engine.stats()["pinned_blocks"]) == (0, 0)


@module_loop
async def test_a_duplicate_live_request_id_is_refused(case: Case) -> None:
    req = engine_contract.request()
    stream = case.engine.generate(req)
    await anext(stream)
    with pytest.raises(EngineError, match="already streaming"):
        await anext(case.engine.generate(req))
    await stream.aclose()


@module_loop
async def test_vllm_errors_raise_engine_error(case: Case) -> None:
    too_long = engine_contract.request([{"role": "user", "content": "weather " * 3000}])
    with pytest.raises(RequestTooLarge, match="fits at most"):  # refused before vLLM sees it
        await engine_contract.collect(case.engine, too_long)
    with pytest.raises(EngineError, match="vllm"):
        await engine_contract.collect(case.engine, engine_contract.request(top_p=0.0))
    assert case.engine.stats()["running"] == 0


def test_raw_assistant_turns_render_as_generated() -> None:
    raw = 'Sure.<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    call = {"function": {"name": "g", "arguments": '{"x": 1}'}}
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure.", "raw": raw, "tool_calls": [{"function": {"name": "f"}}]},
            {"role": "assistant", "content": None, "tool_calls": [call]}]
    out = template_messages(msgs, _parsed_arguments)
    assert out[1] == {"role": "assistant", "content": raw}
    assert out[2]["tool_calls"][0]["function"]["arguments"] == {"x": 1}


@module_loop
async def test_configuration_errors_name_the_key(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="not a local model directory"):
        VllmConfig(model="Qwen/Qwen2.5-0.5B-Instruct")  # a hub id: never downloaded
    with pytest.raises(ConfigError, match="vllm_args"):
        VllmConfig.from_process_config(load_config(model=str(tmp_path), vllm_args="[1]"))
    with pytest.raises(ConfigError, match="no_such_arg"):
        await VllmEngine(VllmConfig(model=str(tmp_path), engine_args={"no_such_arg": 1})).start()


def test_build_engine_picks_vllm(tmp_path) -> None:
    from turnstream.cli import build_engine

    eng = build_engine(load_config(engine="vllm", model=str(tmp_path), vllm_args='{"enforce_eager": true}'))
    assert isinstance(eng, VllmEngine) and eng.config.engine_args == {"enforce_eager": True}


@module_loop
async def test_a_short_free_request_reaches_vllm_without_a_thread_hop_and_a_constrained_one_with_it(
        case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short prompt with no grammar goes to vLLM as an engine input already rendered, checked on the
    event loop (the renderer's thread pool, ``process_inputs_async``, never used); a constrained one
    through that pool, whose checks compile its grammar off the loop."""
    processor = case.engine.llm.input_processor
    inline, hopped = [], []
    checked, checked_async = processor.process_inputs, processor.process_inputs_async

    def counted(*args, **kwargs):
        inline.append(args[1].get("type"))
        return checked(*args, **kwargs)

    async def hop(*args, **kwargs):
        hopped.append(args[1])
        return await checked_async(*args, **kwargs)

    monkeypatch.setattr(processor, "process_inputs", counted)
    monkeypatch.setattr(processor, "process_inputs_async", hop)
    deltas = await engine_contract.collect(case.engine, engine_contract.request())
    assert inline == ["token"] and hopped == [] and deltas[-1].completion_tokens > 0
    inline.clear()
    constrained = dataclasses.replace(engine_contract.request(max_tokens=20), constraint=constraint_for(
        "hermes", None, engine_contract.TOOLS, {"tool_choice": "required"}))
    deltas = await engine_contract.collect(case.engine, constrained)
    assert len(hopped) == 1 and "type" not in hopped[0] and inline == [] and deltas[-1].completion_tokens > 0


@module_loop
async def test_requests_that_ended_every_way_leave_no_session_counted_in_generate(case: Case) -> None:
    """After the module's requests (finished, aborted, abandoned by their reader, refused, failed),
    no session is left counted as on its way to the residency rule (``_entering``), which would keep
    it a candidate for continuation for ever.  (The last test of the module: it shares the engine.)"""
    gen = case.engine.generate(engine_contract.request(max_tokens=50))
    await gen.__anext__()
    await gen.aclose()  # the reader leaves early
    assert case.engine._entering == {} and case.engine.stats()["running"] == 0
