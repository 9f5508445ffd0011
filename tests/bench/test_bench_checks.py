"""The benchmarks' self-checks, on plain values: each accepts its scenario and names what went missing."""

from __future__ import annotations

import argparse

from bench import dispatch, overlap, parser, routing
from bench.engine import check_ttft
from bench.engine_decode import check_runs


def _timeline(**changes: object) -> dict:
    t = {"turn0_tokens": 300, "tool_start": [1.0, 2.0], "tool_end": [3.0, 4.0], "tool_errors": 0, "turns": 2,
         "reason": "stop"}
    return {**t, **changes}


def test_overlap_accepts_its_scenario_and_names_each_missing_step() -> None:
    args = argparse.Namespace(calls=2)
    shape = {"tokens": [300, 10]}
    assert overlap.check_scenario({"on_close": [_timeline()], "after_turn": [_timeline()]}, args, shape) == []
    problems = overlap.check_scenario({"on_close": [_timeline(tool_start=[], tool_end=[], turns=1, turn0_tokens=40)]},
                                      args, shape)
    assert problems == ["on_close session 0: turn 0 tokens 40, expected 300",
                        "on_close session 0: tools started 0, expected 2", "on_close session 0: tool results 0, expected 2",
                        "on_close session 0: turns 1, expected 2"]
    assert overlap.check_scenario({"after_turn": [_timeline(tool_errors=1)]}, args, shape) == [
        "after_turn session 0: tool errors 1, expected 0"]


def test_decode_runs_must_generate_every_token_asked_for() -> None:
    good = {"native": [(0.5, [8, 8])], "transformers": [(0.4, [8, 8])], "vllm": []}
    assert check_runs(2, 8, good) == []
    bad = {"native": [(0.5, [8, 3])], "transformers": [(0.0, [8])]}
    assert check_runs(2, 8, bad) == ["native batch 2 run 0: tokens each {8, 3}, expected {8}",
                                     "transformers batch 2 run 0: requests 1, expected 2",
                                     "transformers batch 2 run 0: timed False, expected True"]


def test_continuation_ttft_must_reuse_the_pin_or_the_host_tier_and_recompute_without_them() -> None:
    row = {"context": 256, "kept_prefill": 47, "kept_prompt": 325, "kept_cached": 278, "restored_prefill": 53,
           "restored_prompt": 325, "restored_cached": 272, "restored_blocks": 17, "evicted_prefill": 327,
           "evicted_prompt": 327}
    assert check_ttft([row]) == []
    assert len(check_ttft([{**row, "kept_prefill": 325, "kept_cached": 0}])) == 1  # the pin was not used
    assert len(check_ttft([{**row, "restored_prefill": 325, "restored_cached": 0}])) == 1  # nor the host tier
    assert len(check_ttft([{**row, "restored_blocks": 0}])) == 1  # the device kept the blocks: nothing restored
    assert len(check_ttft([{**row, "evicted_prefill": 40}])) == 1  # the "evicted" run still hit the cache


def test_dispatch_every_call_must_run_on_each_kind_of_worker() -> None:
    args = argparse.Namespace(calls=2, burst=2, bursts=1)
    lat = {"single": {"waking": [1.0, 2.0], "stock": [300.0, 200.0]}, "burst": {"waking": [1.0, 1.0],
                                                                              "stock": [100.0, 100.0]}}
    assert dispatch.check(args, {"latency_ms": lat, "missing": 0}) == []
    lat["burst"]["stock"] = [100.0]
    assert dispatch.check(args, {"latency_ms": lat, "missing": 1}) == [
        "1 calls got no result", "burst calls run on stock workers: 1, expected 2"]


def test_routing_every_request_must_be_served() -> None:
    args = argparse.Namespace(rounds=1, conversations=1, turns=2)
    row = {"turn": 0, "prompt": 50, "completion": 8, "owner": True}
    assert routing.check({"prefix": [row, {**row, "turn": 1}], "off": [row, row]}, args) == []
    assert routing.check({"prefix": [row], "off": [row, {**row, "completion": 0}]}, args) == [
        "kv_routing=prefix: 1 requests answered, expected 2",
        "kv_routing=off, turn 0: 50 prompt and 0 completion tokens, decoder known: True"]


def test_parser_every_call_must_be_parsed() -> None:
    rows = [{"format": "hermes", "size": 500, "delta": 4, "calls": 2, "calls_parsed": [2, 1]}]
    assert parser.check(rows) == ["hermes 500 chars in 4-char deltas: parsed 1 calls, expected 2"]
