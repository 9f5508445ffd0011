"""The vLLM sides of ``bench engine``, ``bench serve`` and ``bench agent`` run at a smoke size and validate their scenario
(``make test-vllm``: this module runs in ``.venv-vllm``).  Never a timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.bench_harness import assert_valid, run_bench

pytest.importorskip("vllm", reason="needs the vllm extra (make test-vllm)")

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

# Eager (no torch.compile: starts in ~15 s instead of ~45 s), fp32, vLLM's CPU block size.
EAGER = json.dumps({"enforce_eager": True, "dtype": "float32", "max_model_len": 2048, "block_size": 32})


def test_engine_bench_runs_vllm_beside_native_and_transformers(tmp_path: Path) -> None:
    run = run_bench("engine", tmp_path, "--contexts", "64", "--batches", "1,2", "--new-tokens", "4", "--repeats", "1",
                    "--vllm-args", EAGER, timeout_s=1500)
    data = assert_valid(run, "engine")
    assert [r["batch"] for r in data["decode"]] == [1, 2] and all(r["vllm_tok_s"] > 0 for r in data["decode"])


def test_serve_bench_runs_vllms_server_turnstream_on_vllm_and_native(tmp_path: Path) -> None:
    run = run_bench("serve", tmp_path, "--concurrency", "1,2", "--requests", "1", "--min-requests", "1", "--rounds", "1",
                    "--max-tokens", "8",
                    "--vllm-args", EAGER, timeout_s=1500)
    data = assert_valid(run, "serve")
    assert set(data["summary"]) == {"vllm-server", "turnstream-vllm", "turnstream-native"}
    assert all(s["2"]["tokens"] > 0 and s["2"]["cpu_ms_per_token"] > 0 for s in data["summary"].values())  # JSON keys
    # every level started with the others quiet, and what they used meanwhile is reported
    assert all(0 <= lvl["background_cores"] < 2 for s in data["summary"].values() for lvl in s.values())


def test_agent_bench_runs_every_side_on_the_same_tokens(tmp_path: Path) -> None:
    """vLLM's server with both client loops, turnstream on vLLM (sessions and chat completions) and on
    the native engine (with and without a host KV tier) make the trace's calls with the same tokens per
    turn, in tight memory."""
    run = run_bench("agent", tmp_path, "--small", "--tasks", "2", "--min-tasks", "2", "--concurrency", "2",
                    "--memory", "tight", timeout_s=1700)
    data = assert_valid(run, "agent")
    sides = data["results"]["tight"]
    assert set(sides) == {"vllm-client", "vllm-client-early", "turnstream-vllm", "turnstream-native",
                          "turnstream-native-host", "turnstream-vllm-chat"}
    assert len({s["2"]["completion_tokens_per_task"] for s in sides.values()}) == 1  # the same work everywhere
    kept = sides["turnstream-vllm"]["2"]["residency_per_task"]  # scraped from its /metrics
    assert set(kept) == {"pins_lapsed", "admission_waits", "kv_refreshes"} and min(kept.values()) >= 0, kept
    assert sides["vllm-client"]["2"]["residency_per_task"] == {}  # vLLM's server has none
    assert any(line.startswith("agent: at concurrency 4, task p50 n/a") for line in run.output.splitlines())


def test_the_engine_client_alone_runs_the_serve_requests_and_reports_its_cpu() -> None:
    """``bench.engine_alone`` (``bench serve --split``'s reference): vLLM's AsyncLLM with nothing around it
    generates every request's tokens and reports its CPU per request and per further token."""
    import subprocess
    import sys

    from bench import engine_alone
    from bench.common import REPO
    from runtime.config import DEFAULT_MODEL_DIR

    done = subprocess.run([sys.executable, "-m", "bench.engine_alone", "--model", str(DEFAULT_MODEL_DIR),
                           "--concurrency", "2", "--one-token", "4", "--requests", "4", "--max-tokens", "8",
                           "--vllm-args", EAGER], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = engine_alone.result_of(done.stdout)
    assert result is not None, done.stdout[-3000:]
    assert result["problems"] == [] and result["one_token_requests"] == 4 and result["requests"] == 4
    assert 1 < result["tokens_per_request"] <= 8 and result["cpu_ms_per_request"] > 0 and result["cpu_us_per_token"] > 0
