"""Serving: the bundled model through vLLM's own OpenAI server, through ``turnstream up --engine vllm`` and
through ``turnstream up`` on the native engine, with the same streaming client.

    turnstream bench serve [--out DIR] [--concurrency 1,4,32] [--requests 8] [--min-requests 16] [--rounds 3]
                           [--max-tokens 128]
                           [--servers vllm-server,turnstream-vllm,turnstream-native] [--vllm-args JSON]
                           [--profile [DIR]] [--split]

Each server is started once (``bench.servers``) and the concurrency levels run interleaved, round by
round, so that load from other processes hits all of them alike.  A level sends ``--requests`` x
concurrency streamed chat completions, at least ``--min-requests`` (plain-text replies, greedy,
``--max-tokens``), at most concurrency in flight: a level's first request after the quiet wait pays
for waking the idle engine (~30-80 ms more here), and among too few requests it is the p50.
Printed per server and level: time to the first content token (p50/p90), output tokens/s over the
level, and the CPU seconds of the server's whole process tree per output token.  Each level starts
once every server is quiet (``settle``: vLLM's engine keeps a core busy for about a second after its
last request, which the server measured next would otherwise pay for), and the CPU the other servers
used during it is reported (``background_cores``).  The vLLM sides need
``.venv-vllm`` (``make venv-vllm``) and are skipped, saying why, without it.  Every request must
stream text and report its tokens (usage), else the run is void (exit 1).
Goals: turnstream-vllm TTFT p50 <= 1.1 x vllm-server + 5 ms at every level and throughput >= 0.95 x;
turnstream-native ahead of vllm-server on both.  Writes ``serve.json``, ``serve.md`` and ``serve.png``.

``--split``: after the measured rounds, one-token requests at the top level (at least 512 a server, not
counted; each must report its one token in usage, text or not) give each server's CPU per request, and
the measured requests' CPU beyond it, over their other tokens, its CPU per further token.  With a vLLM
side, vLLM's engine client then runs alone on the same requests (``bench.engine_alone``, its own
engine): the part of the API server's and of the decoder's figures that is vLLM's ``AsyncLLM`` itself.  ``--profile``:
then one more run at the top level per server, not counted, with py-spy flame graphs of its serving
processes (``bench.profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import engine_alone
from bench.common import (DEFAULT_OUT, QUIET_TIMEOUT_S, REPO, VLLM_VENV, percentile, progress, serve_prompt,
                          verdict, vllm_env, vllm_python, wait_quiet, write_results)
from bench.profile import Profiler, ProfilerMissing, py_spy
from bench.serve_report import ENGINE_ALONE, goals, plot, table
from bench.servers import KINDS, Server, make_server
from runtime.config import DEFAULT_MODEL_DIR

SERVED = "tiny-agent"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--concurrency", default="1,4,32", help="requests in flight, one level each")
    ap.add_argument("--requests", type=int, default=8, help="requests per level per round, x concurrency")
    ap.add_argument("--min-requests", type=int, default=16, help="requests per level per round, at least")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all levels and servers")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--servers", default=",".join(KINDS), help=f"any of {', '.join(KINDS)}")
    ap.add_argument("--vllm-args", default="{}", help="JSON engine arguments for both vLLM sides")
    ap.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--vllm-venv", type=Path, default=VLLM_VENV, help="the venv of the vLLM sides")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds a server may take to start")
    ap.add_argument("--profile", nargs="?", const=str(DEFAULT_OUT / "flame"), default=None, metavar="DIR",
                    help="after the measured rounds, one more run at the top level per server, not counted, with "
                         "py-spy flame graphs of its serving processes (default dir: %(const)s)")
    ap.add_argument("--profile-format", default="flamegraph", choices=["flamegraph", "raw", "speedscope"])
    ap.add_argument("--split", action="store_true",
                    help="after the measured rounds, one-token requests at the top level per server, not counted: "
                         "its CPU per request and per further token, apart")
    args = ap.parse_args(argv)
    if args.profile:
        try:
            py_spy()  # before the measured rounds, not after them
        except ProfilerMissing as exc:
            ap.error(str(exc))
    args.levels = [int(x) for x in args.concurrency.split(",")]
    args.kinds = [k for k in args.servers.split(",") if k]
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        ap.error(f"--servers: unknown {sorted(unknown)}; known: {', '.join(KINDS)}")
    return args


# --------------------------------------------------------------------------- one request
async def request(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One streamed completion: time to the first content token, text length, usage, finish reason, and
    the SSE frames that carried JSON (what the client parsed)."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0, ttft, text, usage, finish, frames = time.perf_counter(), None, "", None, None, 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            return {"error": f"HTTP {resp.status_code}", "ttft": None, "tokens": 0}
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            frames += 1
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                delta = choice["delta"].get("content") or ""
                if delta and ttft is None:
                    ttft = time.perf_counter() - t0
                text += delta
                finish = choice.get("finish_reason") or finish
    return {"ttft": ttft, "chars": len(text), "tokens": (usage or {}).get("completion_tokens", 0),
            "usage": usage is not None, "finish": finish, "prompt": prompt, "frames": frames, "error": None}


async def run_level(server: Server, concurrency: int, n: int, max_tokens: int) -> dict[str, Any]:
    """``n`` requests, ``concurrency`` in flight; per-request results, wall seconds and CPU seconds."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> dict[str, Any]:
        async with sem:
            prompt = serve_prompt(i)
            try:
                return await request(client, server.url, prompt, max_tokens)
            except httpx.HTTPError as exc:
                return {"error": repr(exc), "ttft": None, "tokens": 0}

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        cpu0, t0 = server.cpu_by_process(), time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(n)))
        wall, cpu1 = time.perf_counter() - t0, server.cpu_by_process()
    cpu = {k: v - cpu0.get(k, 0.0) for k, v in cpu1.items()}
    return {"results": results, "wall_s": wall, "cpu_s": sum(cpu.values()), "cpu_by_process": cpu}


def level_requests(args: argparse.Namespace, level: int) -> int:
    """Requests a level sends per round: ``--requests`` x concurrency, at least ``--min-requests``."""
    return max(args.requests * level, args.min_requests)


# --------------------------------------------------------------------------- quiet
def tree_cpu(servers: dict[str, Server]) -> float:
    """CPU seconds so far of the servers' whole process trees together."""
    return sum(server.cpu_seconds() for server in servers.values())


def settle(servers: dict[str, Server], timeout_s: float = QUIET_TIMEOUT_S) -> float | None:
    """Wait until every server is quiet (``bench.common.wait_quiet``): the seconds waited, or None."""
    return wait_quiet(lambda: tree_cpu(servers), timeout_s)


def settle_before(servers: dict[str, Server], doing: str) -> None:
    """``settle``, saying so when the servers did not go quiet (``doing`` goes on anyway)."""
    if settle(servers) is None:
        progress(f"the servers did not go quiet within {QUIET_TIMEOUT_S:g} s; {doing} anyway")


# --------------------------------------------------------------------------- the run
def check(name: str, level: int, results: list[dict[str, Any]]) -> list[str]:
    """Every request streamed text, reported its tokens in usage, and finished."""
    problems = []
    for i, r in enumerate(results):
        what = f"{name} at concurrency {level}, request {i}"
        if r.get("error"):
            problems.append(f"{what}: {r['error']}")
        elif not (r["ttft"] is not None and r["chars"] > 0 and r["usage"] and r["tokens"] > 0 and r["finish"]):
            got = ", ".join(f"{k} {r[k]!r}" for k in ("chars", "usage", "tokens", "finish"))
            problems.append(f"{what}: no text, token count or finish reason ({got})")
    return problems


def summarise(levels: dict[int, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    out = {}
    for level, runs in levels.items():
        results = [r for run in runs for r in run["results"]]
        ttft = [r["ttft"] * 1e3 for r in results if r.get("ttft") is not None]
        tokens = sum(r["tokens"] for r in results)
        wall, cpu = sum(run["wall_s"] for run in runs), sum(run["cpu_s"] for run in runs)
        background = sum(run.get("background_cpu_s", 0.0) for run in runs)
        by_process: dict[str, float] = {}
        for run in runs:
            for k, v in run["cpu_by_process"].items():
                by_process[k] = by_process.get(k, 0.0) + v
        out[level] = {"requests": len(results), "tokens": tokens, "ttft_p50_ms": percentile(ttft, 50),
                      "ttft_p90_ms": percentile(ttft, 90), "tok_s": tokens / wall if wall else 0.0,
                      "cpu_ms_per_token": 1e3 * cpu / tokens if tokens else float("nan"),
                      "background_cores": background / wall if wall else 0.0,  # other servers' CPU meanwhile
                      "frames_per_request": sum(r.get("frames", 0) for r in results) / max(len(results), 1),
                      "cpu_ms_per_token_by_process": {k: round(1e3 * v / max(tokens, 1), 3)
                                                      for k, v in sorted(by_process.items(), key=lambda kv: -kv[1])},
                      "lengths": sorted((r.get("prompt", ""), r["tokens"]) for r in results)}
    return out


def _start_all(args: argparse.Namespace, tmp: Path) -> dict[str, Server]:
    python, why = vllm_python(args.vllm_venv)
    kinds = [k for k in args.kinds if k == "turnstream-native" or python is not None]
    for k in sorted(set(args.kinds) - set(kinds)):
        print(f"turnstream bench serve: skipping {k}: {why}", flush=True)
    servers = {k: make_server(k, args.model, SERVED, json.loads(args.vllm_args), python, tmp, args.start_timeout)
               for k in kinds}
    for kind, server in servers.items():  # one at a time: start-up is CPU-bound
        progress(f"starting {kind} (log {tmp / kind}.log)")
        server.start(tmp / f"{kind}.log")
        try:
            server.wait_ready(SERVED, args.start_timeout)
        except RuntimeError:
            print((tmp / f"{kind}.log").read_text()[-3000:], flush=True)
            raise
    return servers


def _measure(args: argparse.Namespace, servers: dict[str, Server]) -> tuple[dict, list[str]]:
    runs: dict[str, dict[int, list]] = {k: {c: [] for c in args.levels} for k in servers}
    problems: list[str] = []
    for name, server in servers.items():  # warm-up at the top level: compiled shapes, caches, connections
        asyncio.run(run_level(server, max(args.levels), max(args.levels), 8))
    for rnd in range(args.rounds):
        for level in args.levels:
            for name, server in servers.items():
                settle_before(servers, "measuring")
                others = {k: v for k, v in servers.items() if k != name}
                before = tree_cpu(others)
                run = asyncio.run(run_level(server, level, level_requests(args, level), args.max_tokens))
                run["background_cpu_s"] = tree_cpu(others) - before
                problems += check(name, level, run["results"])
                runs[name][level].append(run)
                ttft = [r["ttft"] * 1e3 for r in run["results"] if r.get("ttft")]
                progress(f"round {rnd + 1} c={level} {name}: TTFT p50 {percentile(ttft, 50):.1f} ms, "
                         f"{sum(r['tokens'] for r in run['results']) / run['wall_s']:.0f} tok/s, "
                         f"other servers meanwhile {100 * run['background_cpu_s'] / run['wall_s']:.0f} % of a core")
    if not servers:
        problems.append("no server could be run")
    return {name: summarise(levels) for name, levels in runs.items()}, problems


FLAME_NAMES = {"worker decode": "decode", "worker parser": "parser", "gateway": "gateway",
               "vllm api server": "api-server"}  # process label -> flame graph name


def flame_targets(pids: dict[str, list[int]]) -> dict[str, int]:
    """The processes ``--profile`` records, by flame graph name: ``gateway``, or ``gateway-1``,
    ``gateway-2``... where several processes share a label."""
    out = {}
    for label, found in pids.items():
        if label in FLAME_NAMES:
            name = FLAME_NAMES[label]
            out.update({name: found[0]} if len(found) == 1 else
                       {f"{name}-{i}": pid for i, pid in enumerate(found, 1)})
    return out


def _profile(args: argparse.Namespace, servers: dict[str, Server]) -> list[str]:
    """One uncounted run per server at the top level with its serving processes under py-spy
    (``--profile``): what each spends per token, side by side.  Returns the run's problems."""
    level, problems = max(args.levels), []
    for name, server in servers.items():
        settle_before(servers, "profiling")
        targets = flame_targets(server.pids())
        profiler = Profiler.start(args.profile, f"serve-{name}-{level}", targets, args.profile_format,
                                  names=tuple(targets))
        try:
            run = asyncio.run(run_level(server, level, level_requests(args, level), args.max_tokens))
        finally:
            files = profiler.stop()
        problems += check(f"{name} (profiled)", level, run["results"])
        if not files:
            problems.append(f"{name}: no flame graph was written (py-spy could not attach?)")
        progress(f"profiled {name} at c={level}: {', '.join(str(f) for f in files) or 'no flame graph written'}")
    return problems


def check_one_token(name: str, level: int, results: list[dict[str, Any]]) -> list[str]:
    """Every one-token request (``--split``) got an answer that reports its one token (a token that is
    not a whole character yet streams no text)."""
    return [f"{name} at concurrency {level}, one-token request {i}: {r.get('error') or 'no usage of one token'}"
            for i, r in enumerate(results) if r.get("error") or not (r["usage"] and r["tokens"] == 1)]


def _split(args: argparse.Namespace, servers: dict[str, Server]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``--split``: per server, one-token requests at the top level (uncounted), and their CPU per request
    by process."""
    level, out, problems = max(args.levels), {}, []
    for name, server in servers.items():
        settle_before(servers, "measuring")
        n = max(2 * level_requests(args, level), 512)  # /proc counts CPU in 10 ms ticks: enough to resolve Valkey's
        run = asyncio.run(run_level(server, level, n, 1))
        problems += check_one_token(name, level, run["results"])
        out[name] = {"requests": n, "cpu_ms_per_request_by_process": {k: round(1e3 * v / n, 3)
                                                                      for k, v in run["cpu_by_process"].items()}}
        progress(f"one-token requests, {name} at c={level}: {1e3 * run['cpu_s'] / n:.2f} ms of CPU a request")
    if {"vllm-server", "turnstream-vllm"} & servers.keys():
        alone, found = _engine_alone(args, level)
        problems += found
        if alone:
            out[ENGINE_ALONE] = alone
    return out, problems


def _engine_alone(args: argparse.Namespace, level: int) -> tuple[dict[str, Any], list[str]]:
    """``--split``: vLLM's engine client with nothing around it (``bench.engine_alone``), the same requests at
    ``level``: what the API server and the decoder both carry, set apart from the rest of each."""
    python, _ = vllm_python(args.vllm_venv)
    assert python is not None  # a vLLM side ran
    n = max(2 * level_requests(args, level), 512)
    argv = [str(python), "-m", "bench.engine_alone", "--model", args.model, "--concurrency", str(level),
            "--one-token", str(n), "--requests", str(n // 2), "--max-tokens", str(args.max_tokens),
            "--vllm-args", args.vllm_args]
    progress(f"vLLM's engine client alone at c={level} (bench.engine_alone, its own engine)")
    with tempfile.TemporaryDirectory(prefix="ts-engine-alone-") as tmp:
        proc = subprocess.Popen(argv, cwd=REPO, env=vllm_env(Path(tmp)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)  # its engine core too
        try:
            out, err = proc.communicate(timeout=args.start_timeout + 600)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {}, [f"engine alone: no result within {args.start_timeout + 600:g} s"]
    result = engine_alone.result_of(out)
    if result is None:
        return {}, [f"engine alone: no result (exit {proc.returncode}): {err[-2000:]}"]
    progress(f"  {result['cpu_ms_per_request']:.2f} ms of CPU a request, {result['cpu_us_per_further_token']:.0f} µs "
             f"a further token")
    return result, [f"engine alone: {p}" for p in result["problems"]] + (
        [f"engine alone: exit {proc.returncode}"] if proc.returncode else [])


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    with tempfile.TemporaryDirectory(prefix="ts-bench-serve-") as tmp:
        servers: dict[str, Server] = {}
        try:
            servers = _start_all(args, Path(tmp))
            summary, problems = _measure(args, servers)
            split: dict[str, dict[str, Any]] = {}
            if args.split:
                split, found = _split(args, servers)
                problems += found
            if args.profile:
                problems += _profile(args, servers)
        finally:
            for server in servers.values():
                server.stop()
    met = goals(summary, args.levels)
    data = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "summary": summary, "goals": met, "split": split,
            "problems": problems}
    out = write_results("serve", args.out, data, table(summary, args.levels, met, split))
    plot(out / "serve.png", summary, args.levels)
    progress(f"wrote {out}/serve.{{json,md,png}}")
    return verdict("serve", problems)


if __name__ == "__main__":
    raise SystemExit(main())
