"""Agents end to end: the same agent tasks through vLLM's own server with the loop in the client, and
through turnstream with the loop in the server.

    turnstream bench agent [--out DIR] [--tasks 8] [--concurrency 1,4,16] [--memory ample,tight]
                           [--sides vllm-client,vllm-client-early,turnstream-vllm,turnstream-native,
                                    turnstream-native-host,turnstream-vllm-chat] [--model DIR|ORG/NAME] [--seed 7]
                           [--vllm-args JSON]

The workload (``bench.agent_trace``) is drawn from ``--seed`` and written to ``agent-trace.json``:
1-4k-token system prompts, 3-8 turns of 1-3 tool calls (some parallel), heavy-tailed tool latencies,
results of 50-800 tokens, a final answer.  The model (``--model``; default a random Qwen2 with a
150k-token vocabulary built here) is held to each turn's exact tokens by a grammar, so every side
computes the same tokens; the bench checks that every side made the trace's calls with its arguments
and the same number of tokens per turn, and exits 1 (INVALID) otherwise.  Sides:

    vllm-client            vLLM's OpenAI server + the loop users write: stream a turn, run its tools
                           when it ends, send the whole conversation back
    vllm-client-early      the same server + the best client: each tool starts when its call closes
    turnstream-vllm        turnstream --engine vllm, sessions API (the loop in the server)
    turnstream-native      turnstream's native engine, sessions API
    turnstream-native-host the same with a host KV tier twice the pool: a pin lost to pressure is copied
                           back instead of recomputed (``workers.decode.native.host_tier``)
    turnstream-vllm-chat   turnstream --engine vllm through chat completions with the loop of vllm-client

Memory: ``ample`` (every context fits many times over) and ``tight`` (the contexts of 4 tasks in flight
are twice the KV pool), each with its own servers.  Per side, level and memory: task time p50/p99,
tasks per minute, prompt tokens computed per task, call-closed -> tool-started, last result -> next
turn's first token, CPU seconds per task of the server's process tree, and on turnstream's vLLM engine the
residency's pins lapsed and admission waits per task (its /metrics).  Writes ``agent.json``,
``agent.md`` and ``agent.png``; the last line printed is the headline ratio (side 1 / side 3 at
concurrency 4, tight memory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.agent_report import HEADLINE_LEVEL, check, headline, phase_table, plot, summarise, table
from bench.agent_sides import SERVED, TaskRun, client_task, session_task
from bench.agent_tools import STAMPS_ENV, TRACE_ENV, clear_stamps, read_stamps, tools_toml
from bench.agent_trace import Shape, Trace, build_trace
from bench.common import DEFAULT_OUT, VLLM_VENV, progress, verdict, vllm_python, wait_quiet, write_results
from bench.servers import Server, make_server
from gateway import metrics
from runtime.model_source import local_dir

# side -> (server kind, loop, early dispatch)
SIDES = {"vllm-client": ("vllm-server", "client", False), "vllm-client-early": ("vllm-server", "client", True),
         "turnstream-vllm": ("turnstream-vllm", "session", False),
         "turnstream-native": ("turnstream-native", "session", False),
         "turnstream-native-host": ("turnstream-native-host", "session", False),
         "turnstream-vllm-chat": ("turnstream-vllm", "client", False)}
NATIVE_BLOCK = 16


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench agent", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--tasks", type=int, default=8, help="tasks in the trace (at least as many as a level runs); "
                    "a level runs max(concurrency, --min-tasks) of them")
    ap.add_argument("--min-tasks", type=int, default=4, help="tasks run at each level at least")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--memory", default="ample,tight")
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--model", default="", help="a checkpoint directory or a hub id, downloaded once into the hub "
                    "cache (default: build the 150k-vocab model)")
    ap.add_argument("--revision", default="", help="the hub revision of a hub-id --model (default: main)")
    ap.add_argument("--small", action="store_true", help="a smoke-size workload (short prompts and results)")
    ap.add_argument("--vllm-args", default='{"enforce_eager": true}', help="JSON engine arguments, both vLLM sides")
    ap.add_argument("--vllm-block-size", type=int, default=128, help="KV block of both vLLM sides (128: vLLM's "
                    "CPU default; 16 on a GPU)")
    ap.add_argument("--vllm-venv", type=Path, default=VLLM_VENV)
    ap.add_argument("--start-timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    args.levels = [int(x) for x in args.concurrency.split(",")]
    args.memories = [m for m in args.memory.split(",") if m]
    args.side_names = [s for s in args.sides.split(",") if s]
    bad = (set(args.side_names) - set(SIDES)) | (set(args.memories) - {"ample", "tight"})
    if bad:
        ap.error(f"unknown {sorted(bad)}; sides: {', '.join(SIDES)}; memory: ample, tight")
    return args


def build_model(tmp: Path) -> Path:
    """A random Qwen2 (hidden 128, 4 layers) with a 150k-token byte-level vocabulary, in bfloat16: like Qwen's,
    so that vLLM and the native engine both compute in it (on a CPU with native bfloat16)."""
    from workers.decode.synthetic import build_checkpoint, build_large_tokenizer

    progress("building the bench model (random Qwen2, 150k-token vocabulary)")
    return build_checkpoint(tmp / "agent-model", "qwen2", hidden_size=128, num_layers=4, num_heads=4,
                            num_kv_heads=2, intermediate_size=512, max_position_embeddings=16384, init_std=0.02,
                            tokenizer=build_large_tokenizer(150_000), dtype="bfloat16")


def shape(args: argparse.Namespace) -> Shape:
    """The trace's shape.  It holds at least as many tasks as a level runs: a call is known by its
    ``ref`` (the tools' stamps, the checks), so a task run twice in one level would mix its two runs'
    stamps."""
    tasks = max(args.tasks, args.min_tasks, *args.levels)
    if args.small:  # the smoke size: same structure, short texts and quick tools
        return Shape(tasks=tasks, seed=args.seed, turns=(1, 2), system_tokens=(200, 300),
                     result_tokens=(20, 60), answer_tokens=(5, 10), latency_p50_s=0.05, max_latency_s=0.3)
    return Shape(tasks=tasks, seed=args.seed)


# --------------------------------------------------------------------------- memory
def context_tokens(trace: Trace, tok: Any) -> list[int]:
    """Each task's final context in tokens (estimated: parts counted separately, 8 per message)."""
    tools = len(tok.encode(json.dumps(trace.tools)).ids)
    out = []
    for t in trace.tasks:
        n = tools + len(tok.encode(t.system).ids) + len(tok.encode(t.user).ids) + 16
        for turn in t.turns:
            n += len(turn.ids) + 8 + sum(len(tok.encode(c.result).ids) + 8 for c in turn.calls)
        out.append(n)
    return out


def pools(contexts: list[int], levels: list[int], block: int = 128) -> dict[str, dict[str, int]]:
    """KV pool sizes in tokens and model length: ``tight`` holds half of what 4 tasks in flight need."""
    longest = max(contexts) + 512
    mean = sum(contexts) / len(contexts)
    ample = int(2 * max(levels) * longest)
    tight = max(int(HEADLINE_LEVEL * mean / 2), longest + block)
    return {"ample": {"tokens": ample, "max_model_len": longest}, "tight": {"tokens": tight, "max_model_len": longest}}


# --------------------------------------------------------------------------- servers
def make_servers(kinds: list[str], model: Path, pool: dict[str, int], args: argparse.Namespace, tmp: Path,
                 trace_path: Path, stamps: Path) -> dict[str, Server]:
    vpython, _ = vllm_python(args.vllm_venv)
    blocks = -(-pool["tokens"] // args.vllm_block_size)
    engine = {**json.loads(args.vllm_args), "max_model_len": pool["max_model_len"],
              "num_gpu_blocks_override": blocks, "block_size": args.vllm_block_size}
    native = {"num_blocks": -(-pool["tokens"] // NATIVE_BLOCK), "block_size": NATIVE_BLOCK,
              "max_model_len": pool["max_model_len"], "host_kv_blocks": 0}
    (tmp / "tools.toml").write_text(tools_toml())
    servers = {}
    for kind in kinds:
        s = make_server(kind, str(model), SERVED, engine, vpython, tmp, args.start_timeout)
        if kind == "vllm-server":
            s.argv += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--enable-prompt-tokens-details",
                       "--structured-outputs-config", '{"backend": "guidance"}']
        else:
            s.argv += ["--tools-config", str(tmp / "tools.toml"), "--tool-max-jobs", "64", "--max-turns", "16"]
            if kind.startswith("turnstream-native"):  # -host: a host tier twice the pool (its default on a GPU)
                host = 2 * native["num_blocks"] if kind.endswith("-host") else 0
                s.argv += ["--native-args", json.dumps({**native, "host_kv_blocks": host})]
        s.env = {**s.env, TRACE_ENV: str(trace_path), STAMPS_ENV: str(stamps)}
        servers[kind] = s
    return servers


def start(servers: dict[str, Server], tmp: Path, timeout_s: float) -> None:
    for kind, server in servers.items():  # one at a time: start-up is CPU-bound
        progress(f"starting {kind} (log {tmp / kind}.log)")
        server.start(tmp / f"{kind}.log")
        try:
            server.wait_ready(SERVED, timeout_s)
        except RuntimeError:
            print((tmp / f"{kind}.log").read_text()[-3000:], flush=True)
            raise


# --------------------------------------------------------------------------- one level of one side
async def run_level(side: str, server: Server, trace: Trace, level: int, n: int, tag: str) -> dict[str, Any]:
    """``n`` tasks, ``level`` in flight, each task's prompt tagged ``tag`` (no cache shared with other runs)."""
    _, loop, early = SIDES[side]
    sem = asyncio.Semaphore(level)
    tasks = [trace.tasks[i % len(trace.tasks)] for i in range(n)]

    async def one(i: int, task: Any) -> TaskRun:
        async with sem:
            if loop == "session":
                return await session_task(http, server.url, task, trace.tools, f"{tag}{i:03d}")
            return await client_task(http, server.url, task, trace.tools, early, f"{tag}{i:03d}")

    limits = httpx.Limits(max_connections=2 * level + 8)
    async with httpx.AsyncClient(timeout=900, limits=limits) as http:
        kept0 = await residency(http, server.url)
        cpu0, t0 = server.cpu_seconds(), time.time()
        runs = await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
        wall, cpu = time.time() - t0, server.cpu_seconds() - cpu0
        kept = {k: v - kept0.get(k, 0.0) for k, v in (await residency(http, server.url)).items()}
    return {"runs": runs, "wall_s": wall, "cpu_s": cpu, "residency": kept}


RESIDENCY = {f"turnstream_decoder_{name}" for _, name, _ in metrics.RESIDENCY}  # the series gateway.metrics exports


async def residency(http: httpx.AsyncClient, url: str) -> dict[str, float]:
    """The vLLM engine's residency counters summed over a turnstream server's decoders (its /metrics; the
    heartbeats behind them beat every second, so a level's last second may be missing); {} elsewhere."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = (await http.get(url + "/metrics", timeout=10)).text
    except httpx.HTTPError:
        return {}
    return {fam.name: sum(s.value for s in fam.samples if s.name.endswith("_total"))
            for fam in text_string_to_metric_families(text) if fam.name in RESIDENCY}


def measure(args: argparse.Namespace, trace: Trace, servers: dict[str, Server], sides: list[str],
            stamps: Path, memory: str) -> tuple[dict[str, Any], list[str]]:
    out: dict[str, Any] = {}
    problems: list[str] = []
    for side in sides:  # warm-up: one task per side (compiled shapes, connections, imports)
        asyncio.run(run_level(side, servers[SIDES[side][0]], trace, 1, 1, f"w{list(SIDES).index(side)}"))
    for level in args.levels:
        for side in sides:
            server = servers[SIDES[side][0]]
            wait_quiet(lambda: sum(s.cpu_seconds() for s in servers.values()))
            clear_stamps(stamps)
            tag = f"{memory[0]}{list(SIDES).index(side)}{level:03d}"  # one length: the same prompt sizes
            result = asyncio.run(run_level(side, server, trace, level, max(level, args.min_tasks), tag))
            result["stamps"] = read_stamps(stamps)
            problems += check(trace, side, memory, level, result)
            out.setdefault(side, {})[level] = summarise(trace, result)
            s = out[side][level]
            progress(f"{memory} c={level} {side}: task p50 {s['task_p50_s']:.2f} s, {s['tasks_per_min']:.1f} tasks/min, "
                     f"{s['prompt_computed_per_task']:.0f} prompt tokens computed per task")
    return out, problems


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from tokenizers import Tokenizer

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would bury the progress

    with tempfile.TemporaryDirectory(prefix="ts-bench-agent-") as tmp_s:
        tmp = Path(tmp_s)
        model = local_dir(args.model, args.revision, weights=True) if args.model else build_model(tmp)
        tok = Tokenizer.from_file(str(model / "tokenizer.json"))
        trace = build_trace(shape(args), tok)
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        trace_path = out_dir / "agent-trace.json"
        trace.save(trace_path)
        os.environ[TRACE_ENV] = str(trace_path)  # the client loops run the same tools in this process
        stamps = tmp / "stamps"
        stamps.mkdir()
        os.environ[STAMPS_ENV] = str(stamps)
        vpython, why = vllm_python(args.vllm_venv)
        sides = [s for s in args.side_names if vpython is not None or "vllm" not in SIDES[s][0]]
        for s in sorted(set(args.side_names) - set(sides), key=args.side_names.index):
            print(f"turnstream bench agent: skipping {s}: {why}", flush=True)
        sizes = pools(context_tokens(trace, tok), args.levels, args.vllm_block_size)
        results: dict[str, Any] = {}
        problems: list[str] = [] if sides else ["no side could be run"]
        for memory in args.memories:
            kinds = list(dict.fromkeys(SIDES[s][0] for s in sides))
            servers = make_servers(kinds, model, sizes[memory], args, tmp, trace_path, stamps)
            try:
                start(servers, tmp, args.start_timeout)
                results[memory], found = measure(args, trace, servers, sides, stamps, memory)
                problems += found
                (out_dir / "agent.partial.json").write_text(json.dumps(results))  # a long run keeps what it has
            finally:
                for server in servers.values():
                    server.stop()
    line = headline(results)
    data = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "pools": sizes, "results": results, "headline": line, "problems": problems}
    phases = "\n\n".join(f"Seconds per task by phase, concurrency {c}:\n\n{phase_table(results, c)}"
                           for c in dict.fromkeys([args.levels[0], HEADLINE_LEVEL]) if c in args.levels)
    out = write_results("agent", args.out, data, table(results, args.levels) + "\n\n" + phases)
    plot(out / "agent.png", results, args.levels)
    (out / "agent.partial.json").unlink(missing_ok=True)
    progress(f"wrote {out}/agent.{{json,md,png}} and the trace {trace_path.name}")
    rc = verdict("agent", problems)
    print(line, flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
