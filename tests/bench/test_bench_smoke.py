"""Every ``turnstream bench NAME`` runs at a smoke size, exits 0 and validates its own scenario; a
deliberately broken scenario exits 1.  Never a timing: the figures of a smoke run mean nothing.

The vLLM sides of ``engine``, ``serve`` and ``agent`` run in ``test_bench_vllm_smoke.py`` (``make test-vllm``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import BENCHES
from tests.bench.bench_harness import assert_valid, run_bench

pytestmark = pytest.mark.timeout(660)  # minutes only on a loaded machine: a run is seconds on an idle one

SMOKE = {
    "parser": ["--sizes", "500,1000", "--deltas", "4", "--formats", "hermes", "--repeat", "1"],
    "engine": ["--contexts", "64", "--batches", "1,2", "--new-tokens", "4", "--repeats", "1", "--vllm", "off"],
    "serve": ["--servers", "turnstream-native", "--concurrency", "1,2", "--requests", "1", "--min-requests", "1",
              "--rounds", "1", "--max-tokens", "8"],
    "agent": ["--small", "--tasks", "2", "--min-tasks", "1", "--concurrency", "1,2", "--memory", "tight",
              "--sides", "turnstream-native"],
    "dispatch": ["--calls", "4", "--rate", "50", "--burst", "2", "--bursts", "2", "--workers", "1"],
    "overlap": ["--rate", "200", "--calls", "2", "--tool-seconds", "0.3", "--decode-seconds", "0.6",
                "--sessions", "1"],
    "load": ["--sessions", "3", "--tokens", "10", "--rate", "100", "--ramp", "0.1"],
    "reads": ["--sessions", "10", "--entries", "40", "--rate", "200", "--burst", "3"],
    "grammar": ["--cases", "20", "--max-tokens", "48", "--heldout-scale", "0.05"],
    "grammar_libs": ["--batches", "1,2", "--large-vocab", "4000", "--repeats", "1"],
    "routing": ["--decoders", "1", "--conversations", "2", "--turns", "2", "--concurrency", "2", "--rounds", "1",
                "--result-tokens", "20"],
}


def test_every_benchmark_has_a_smoke_size() -> None:
    assert set(SMOKE) == set(BENCHES)


@pytest.mark.parametrize("name", [n for n in SMOKE if n != "agent"])  # agent: below, with its own checks
def test_benchmark_runs_its_scenario(name: str, tmp_path: Path) -> None:
    assert_valid(run_bench(name, tmp_path, *SMOKE[name]), name)


def test_overlap_on_an_engine_that_makes_no_calls_is_void(tmp_path: Path) -> None:
    """The bundled model does not run the replay script: no call is made, so no figure may stand."""
    run = run_bench("overlap", tmp_path, *SMOKE["overlap"], "--engine", "native")
    assert run.rc == 1, run.output[-4000:]
    assert "INVALID" in run.output
    assert run.result("overlap")["problems"]


def test_serve_without_any_server_it_can_run_is_void(tmp_path: Path) -> None:
    run = run_bench("serve", tmp_path, "--servers", "vllm-server", "--vllm-venv", str(tmp_path / "none"),
                    "--concurrency", "1", "--requests", "1", "--rounds", "1")
    assert run.rc == 1 and "skipping vllm-server" in run.output and "no server could be run" in run.output


def test_agent_checks_what_every_side_did_and_prints_the_headline(tmp_path: Path) -> None:
    run = run_bench("agent", tmp_path, *SMOKE["agent"], "--vllm-venv", str(tmp_path / "none"))
    data = assert_valid(run, "agent")
    figures = data["results"]["tight"]["turnstream-native"]["2"]  # JSON keys
    assert figures["tasks"] == 2 and figures["completion_tokens_per_task"] > 0 and figures["dispatch_p50_ms"] >= 0
    headline = [line for line in run.output.splitlines() if line.startswith("agent: at concurrency 4")]
    assert len(headline) == 1 and "task p50 n/a" in headline[0]  # no vLLM side: no ratio
    assert (tmp_path / "agent-trace.json").exists()
