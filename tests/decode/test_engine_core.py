"""EngineCore end to end on a random Qwen2: prefix reuse, pins, preemption, sampling, stops.

Every ``run`` checks block integrity after each step.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from engine_harness import (SYSTEM, TOOLS, FakeClock, checkpoint, continue_with_tool, make_core, request, run,
                            text_of)
from runtime import cpu
from workers.decode.errors import DuplicateRequest, RequestTooLarge
from workers.decode.native.core import resolve_dtype

HISTORY = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the weather in Paris?"}]


def _turn(core, rid: str, session: str, history: list, tools: list | None = TOOLS, **kw):
    seq = core.add_request(request(rid, session, history=history, tools=tools, **kw))
    before = core.stats()["prefill_tokens_computed"]
    deltas = run(core)[rid]
    return seq, deltas, core.stats()["prefill_tokens_computed"] - before


def test_greedy_tokens_match_transformers_generate() -> None:
    core = make_core()
    seq, deltas, _ = _turn(core, "r", "s", HISTORY, max_tokens=12)
    hf = transformers.AutoModelForCausalLM.from_pretrained(checkpoint("qwen2"), dtype=torch.float32).eval()
    prompt = torch.tensor([seq.token_ids[:seq.num_prompt_tokens]])
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False)[0, prompt.shape[1]:].tolist()
    assert seq.completion_token_ids == expected[:len(seq.completion_token_ids)]
    assert deltas[0].prompt_tokens == seq.num_prompt_tokens and deltas[-1].finished
    assert deltas[-1].completion_tokens == sum(d.n_tokens for d in deltas) == len(seq.completion_token_ids)


def test_prefix_blocks_are_reused_across_sessions() -> None:
    core = make_core()
    _turn(core, "a", "sa", HISTORY)
    other = HISTORY[:1] + [{"role": "user", "content": "And in Tokyo?"}]
    seq, deltas, computed = _turn(core, "b", "sb", other)
    assert deltas[0].cached_tokens >= 64 and deltas[0].cached_tokens % 4 == 0
    assert computed == seq.num_prompt_tokens - deltas[0].cached_tokens
    fresh, _, _ = _turn(make_core(), "b", "sb", other)
    assert seq.completion_token_ids == fresh.completion_token_ids


def test_pinned_continuation_computes_only_new_tokens_and_a_lost_pin_recomputes_the_same() -> None:
    results = {}
    for case in ("pinned", "lost"):
        core = make_core()
        first, deltas, _ = _turn(core, "t1", "s", HISTORY)
        if case == "lost":
            core.release("s")
            assert core.reset_prefix_cache() > 0 and core.stats()["cached_blocks"] == 0
        kv_tokens = first.num_tokens - 1  # the last sampled token was never fed to the model
        assert core.stats()["pinned_blocks"] == (first.blocks_needed(kv_tokens) if case == "pinned" else 0)
        history = continue_with_tool(HISTORY, text_of(deltas))
        second, deltas2, computed = _turn(core, "t2", "s", history, continuation=True)
        assert second.token_ids[:first.num_tokens] == first.token_ids  # generated ids reused byte for byte
        if case == "pinned":
            assert deltas2[0].cached_tokens == kv_tokens
            assert computed == second.num_prompt_tokens - kv_tokens  # tool result + headers (+ that last token)
            assert computed < 40
        else:
            assert deltas2[0].cached_tokens == 0 and computed == second.num_prompt_tokens
        results[case] = second.completion_token_ids
    assert results["pinned"] == results["lost"]


def test_a_pin_lost_to_memory_pressure_comes_back_from_the_host_tier_with_the_same_tokens() -> None:
    """The session's pin goes, other sessions crowd its blocks out of a small pool: with a host tier
    the continuation copies them back (the device holds exactly the KV it had) and generates the
    tokens a kept pin gives; without one it recomputes them."""
    results, cached = {}, {}
    for case in ("pinned", "host tier", "recomputed"):
        core = make_core(num_blocks=128, pin_max_share=0.9, host_kv_blocks=0 if case == "recomputed" else 256)
        first, deltas, _ = _turn(core, "t1", "s", HISTORY)
        full = (first.num_tokens - 1) // 4 * 4  # the partial last block is not hashed: it is recomputed
        if case != "pinned":
            core.release("s")
            for i in range(2):  # each about as large as the pool
                _turn(core, f"f{i}", f"f{i}", [{"role": "user", "content": f"crowd {i} " * 60}], tools=None)
                core.release(f"f{i}")
        history = continue_with_tool(HISTORY, text_of(deltas))
        second, deltas2, computed = _turn(core, "t2", "s", history, continuation=True)
        stats = core.stats()
        if case == "host tier":
            assert stats["host_offloaded_blocks"] > 0 and stats["host_restored_blocks"] * 4 <= full
            assert deltas2[0].cached_tokens == full and computed == second.num_prompt_tokens - full
            assert 0 < deltas2[0].host_cached_tokens <= full  # the rest: leading blocks the crowd shared
        else:
            assert deltas2[0].host_cached_tokens == 0
        cached[case] = deltas2[0].cached_tokens
        results[case] = second.completion_token_ids
    assert cached["recomputed"] < cached["host tier"] <= cached["pinned"]
    assert results["pinned"] == results["host tier"] == results["recomputed"]


def test_pins_expire_into_ordinary_cached_blocks() -> None:
    clock = FakeClock()
    core = make_core(clock=clock)
    first, deltas, _ = _turn(core, "t1", "s", HISTORY)
    assert core.stats()["pinned_blocks"] > 0
    clock.advance(4.0)
    core.expire_pins()
    assert core.stats()["pinned_sessions"] == 1
    core.pin("s", 1.0)  # the worker's estimate replaces the default
    clock.advance(1.5)
    core.expire_pins()
    stats = core.stats()
    assert stats["pinned_blocks"] == 0 and stats["cached_blocks"] == (first.num_tokens - 1) // 4
    second, deltas2, _ = _turn(core, "t2", "s", continue_with_tool(HISTORY, text_of(deltas)), continuation=True)
    assert deltas2[0].cached_tokens == (first.num_tokens - 1) // 4 * 4  # full blocks only: the tail was freed


def test_pinned_share_is_capped() -> None:
    core = make_core(num_blocks=256, pin_max_share=0.25)  # 64 blocks; each turn holds about 23
    for i in range(6):
        history = [{"role": "system", "content": f"session {i} " * 10}, {"role": "user", "content": "hi"}]
        _turn(core, f"r{i}", f"s{i}", history, tools=None)
        assert core.stats()["pinned_blocks"] <= 64
    assert core.stats()["pinned_sessions"] == 2


def test_pool_exhaustion_preempts_and_outputs_are_unchanged() -> None:
    def generate(num_blocks: int) -> tuple[list[list[int]], dict]:
        core = make_core(num_blocks=num_blocks, ignore_eos=True)
        seqs = [core.add_request(request(f"r{i}", f"s{i}", history=[{"role": "user", "content": f"question {i}"}],
                                         max_tokens=30)) for i in range(4)]
        run(core)
        return [s.completion_token_ids for s in seqs], core.stats()

    small, stats = generate(num_blocks=24)
    big, _ = generate(num_blocks=256)
    assert stats["preemptions"] > 0
    assert small == big and all(len(c) == 30 for c in small)


def test_requests_that_can_never_fit_fail_clearly() -> None:
    core = make_core(num_blocks=8)
    with pytest.raises(RequestTooLarge, match="fits at most 31"):
        core.add_request(request("r", "s", history=HISTORY))
    core = make_core()
    core.add_request(request("r", "s"))
    with pytest.raises(DuplicateRequest):
        core.add_request(request("r", "s"))


def test_continuations_are_admitted_ahead_of_new_sessions() -> None:
    core = make_core(max_num_seqs=1, max_num_batched_tokens=64)
    _, deltas, _ = _turn(core, "t1", "a", HISTORY)
    core.add_request(request("new", "b", max_tokens=2))
    cont = core.add_request(request("t2", "a", history=continue_with_tool(HISTORY, text_of(deltas)),
                                    continuation=True, max_tokens=2))
    core.step()
    assert list(core.scheduler.running.values()) == [cont]
    run(core)


def test_chunked_prefill_gives_the_same_tokens() -> None:
    small, _, _ = _turn(make_core(max_num_batched_tokens=16, max_num_seqs=4), "r", "s", HISTORY, max_tokens=10)
    big, _, _ = _turn(make_core(max_num_batched_tokens=512), "r", "s", HISTORY, max_tokens=10)
    assert small.completion_token_ids == big.completion_token_ids


def test_stop_strings_and_stop_token_ids() -> None:
    core = make_core(ignore_eos=True)
    seq, deltas, _ = _turn(core, "r0", "s0", HISTORY, max_tokens=16)
    text = text_of(deltas)
    assert deltas[-1].finish_reason == "length"
    stop = text[4:6]
    _, deltas, _ = _turn(core, "r1", "s1", HISTORY, max_tokens=16, stop=(stop,))
    assert text_of(deltas) == text[:text.find(stop)] and deltas[-1].finish_reason == "stop"
    token = seq.completion_token_ids[5]
    seq2, deltas, _ = _turn(core, "r2", "s2", HISTORY, max_tokens=16, stop_token_ids=(token,))
    assert seq2.completion_token_ids == seq.completion_token_ids[:seq.completion_token_ids.index(token) + 1]
    assert deltas[-1].finish_reason == "stop" and deltas[-1].completion_tokens == len(seq2.completion_token_ids)
    assert text.startswith(text_of(deltas)) and len(text_of(deltas)) < len(text)


def test_seeded_sampling_is_reproducible_and_top_k_1_is_greedy() -> None:
    core = make_core()
    outs = [_turn(core, f"r{i}", f"s{i}", HISTORY, max_tokens=10, temperature=1.0, top_p=0.9, seed=seed)[0]
            for i, seed in enumerate((7, 7, 8))]
    assert outs[0].completion_token_ids == outs[1].completion_token_ids
    assert outs[0].completion_token_ids != outs[2].completion_token_ids
    greedy = _turn(core, "g", "g", HISTORY, max_tokens=10)[0]
    top1 = _turn(core, "k", "k", HISTORY, max_tokens=10, temperature=0.8, top_k=1, seed=3)[0]
    assert top1.completion_token_ids == greedy.completion_token_ids


def test_abort_frees_blocks_without_pinning() -> None:
    core = make_core()
    core.add_request(request("r", "s", max_tokens=50))
    core.step()
    core.step()
    delta = core.abort("r")
    assert delta is not None and delta.finished and delta.finish_reason == "abort"
    core.check_integrity()
    assert core.stats()["pinned_blocks"] == 0 and core.stats()["free_blocks"] == 256
    assert core.abort("r") is None and not core.has_work()


def test_auto_dtype_follows_the_checkpoint_and_the_cpu() -> None:
    """bfloat16 on a CPU only for a half-precision checkpoint where the CPU computes it natively; a float32
    checkpoint (the bundled model) keeps float32; an explicit dtype wins."""
    cpu_dev, cuda = torch.device("cpu"), torch.device("cuda")
    bf16, avx2 = {"avx2", "avx512f", "avx512_bf16"}, {"avx2", "fma"}
    assert resolve_dtype("auto", cpu_dev, "float32", bf16)[0] is torch.float32
    assert resolve_dtype("auto", cpu_dev, None, {"amx_bf16"})[0] is torch.float32
    assert resolve_dtype("auto", cpu_dev, "bfloat16", bf16) == (torch.bfloat16, "auto: a bfloat16 checkpoint, "
                                                                               "native bfloat16 (AVX-512 BF16)")
    assert resolve_dtype("auto", cpu_dev, "float16", {"amx_bf16"})[0] is torch.bfloat16
    assert resolve_dtype("auto", cpu_dev, "bfloat16", avx2)[0] is torch.float32  # emulated: ~9x slower
    assert resolve_dtype("float32", cpu_dev, "bfloat16", bf16) == (torch.float32, "set")
    assert resolve_dtype("auto", cuda, "float16")[0] is torch.float16
    assert resolve_dtype("auto", cuda, "float32")[0] is torch.bfloat16


def test_a_bfloat16_checkpoint_runs_in_the_dtype_auto_chose() -> None:
    core = make_core(model=str(checkpoint("qwen2", dtype="bfloat16")))
    expected = torch.bfloat16 if cpu.native_bf16() else torch.float32
    assert core.dtype is expected
    assert {p.dtype for p in core.model.parameters()} == {expected}
    seq, deltas, _ = _turn(core, "r", "s", HISTORY, max_tokens=6)
    assert deltas[-1].finished and deltas[-1].completion_tokens == len(seq.completion_token_ids) > 0
