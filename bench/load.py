"""``turnstream bench load``: S concurrent agent sessions against the ReplayEngine.

Each session is a two-turn agent conversation (text + one tool call, then an answer) whose
tokens the ReplayEngine emits at ``--rate`` tokens/s.  For every content event the client
records receive time minus the event's origin time (when the decoder emitted its tokens):
the latency the pipeline adds.  Also printed: events lost (expected vs received content),
Redis commands per token, and CPU seconds of each process.  Everything runs on this machine:
the client, every worker, the gateway and the server share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx
import redis
import websockets

from bench.common import markdown_table, percentile, plot, progress, write_results
from runtime.config import load_config
from turnstream.embedded import EmbeddedRedis, free_port
from turnstream.stack import start_processes, stop_all

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing".split()


def script(tokens: int) -> tuple[list[str], str]:
    """A two-turn replay script of about ``tokens`` tokens per turn, and turn 0's content."""
    body = " ".join(WORDS[i % len(WORDS)] for i in range(tokens // 2))
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
    return [f"{body}.\n{call}", f"The answer is {{{{ results[0] }}}}. {body}."], f"{body}.\n"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def total_commands(r: redis.Redis) -> int:
    return sum(v["calls"] for k, v in r.info("commandstats").items())


async def one_session(url: str, body: dict[str, Any], lat: list[float], stats: dict[str, int]) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        sid = (await http.post("/v1/sessions", json=body)).json()["id"]
    content: list[str] = []
    async with websockets.connect(url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/ws", max_queue=None) as ws:
        subscribed = time.time()  # events emitted before this are history, not relay latency
        async for frame in ws:
            now = time.time()
            ev = json.loads(frame)
            kind = ev["body"]["type"]
            if kind == "turn.ended":
                stats["tokens"] = stats.get("tokens", 0) + ev["body"]["completion_tokens"]
            elif kind == "content.delta":
                if ev.get("t0", 0) >= subscribed:
                    lat.append((now - ev["t0"]) * 1000)
                if ev["turn"] == 0:
                    content.append(ev["body"]["text"])
            elif kind == "session.ended":
                stats["ended_" + ev["body"]["reason"]] = stats.get("ended_" + ev["body"]["reason"], 0) + 1
    return "".join(content)


async def run_level(url: str, sessions: int, tokens: int, ramp_s: float) -> dict[str, Any]:
    replay, expected = script(tokens)
    body = {"messages": [{"role": "user", "content": "go"}], "replay": replay, "max_tokens": 4 * tokens}
    lat: list[float] = []
    stats: dict[str, int] = {}

    async def delayed(i: int) -> str:
        await asyncio.sleep(ramp_s * i / sessions)
        return await one_session(url, body, lat, stats)

    contents = await asyncio.gather(*(delayed(i) for i in range(sessions)), return_exceptions=True)
    failed = [c for c in contents if isinstance(c, BaseException)]
    lost = sum(1 for c in contents if not isinstance(c, BaseException) and c != expected)
    return {"lat": lat, "failed": len(failed), "lost": lost, "stats": stats,
            "errors": sorted({repr(f)[:200] for f in failed})[:3]}


def measure(level: int, args: argparse.Namespace) -> dict[str, Any]:
    with EmbeddedRedis() as server:
        cfg = load_config(redis_url=server.url, port=free_port(), engine="replay", replay_rate=args.rate,
                          log_level="WARNING")
        procs = dict(start_processes(cfg, ["decode", "parser", "tools", "gateway"]))
        try:
            url = f"http://{cfg.host}:{cfg.port}"
            r = redis.Redis.from_url(server.url)
            cpu0 = {k: cpu_seconds(p.pid) for k, p in procs.items()}
            cpu0["client"], cpu0["redis"] = cpu_seconds(os.getpid()), cpu_seconds(server.proc.pid)
            cmd0, t0 = total_commands(r), time.monotonic()
            res = asyncio.run(run_level(url, level, args.tokens, args.ramp))
            wall = time.monotonic() - t0
            cmds = total_commands(r) - cmd0
            if args.commandstats:
                top = sorted(r.info("commandstats").items(), key=lambda kv: -kv[1]["calls"])[:8]
                progress("  top commands: " + ", ".join(f"{k[8:]}={v['calls']}" for k, v in top))
            cpu = {k: round(cpu_seconds(p.pid) - cpu0[k], 2) for k, p in procs.items()}
            cpu["client"] = round(cpu_seconds(os.getpid()) - cpu0["client"], 2)
            cpu["redis"] = round(cpu_seconds(server.proc.pid) - cpu0["redis"], 2)
        finally:
            stop_all(list(procs.values()))
    tokens = res["stats"].get("tokens", 0)
    lat = res.pop("lat")
    return {"sessions": level, "rate": args.rate, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "max_ms": max(lat, default=float("nan")), "samples": len(lat), "lost": res["lost"],
            "failed": res["failed"], "tokens": tokens, "cmds_per_token": cmds / max(1, tokens), "wall_s": wall,
            "cpu_s": cpu, "cpu_pct": {k: round(100 * v / wall, 1) for k, v in cpu.items()}, **res}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream bench load", description=__doc__)
    ap.add_argument("--sessions", default="100,300,1000", help="comma-separated concurrency levels")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per session")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per turn (two turns per session)")
    ap.add_argument("--ramp", type=float, default=2.0, help="seconds over which sessions start")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commandstats", action="store_true", help="print the most frequent Redis commands")
    args = ap.parse_args(argv)
    rows = []
    for level in [int(x) for x in args.sessions.split(",")]:
        progress(f"load: {level} sessions × {args.rate:g} tokens/s × 2 turns of {args.tokens} tokens")
        row = measure(level, args)
        progress(f"  p50 {row['p50_ms']:.1f} ms  p99 {row['p99_ms']:.1f} ms  lost {row['lost']}  "
                 f"failed {row['failed']}  {row['cmds_per_token']:.2f} cmds/token  cpu% {row['cpu_pct']}")
        rows.append(row)
    kinds = ("gateway", "decode", "parser", "tools", "redis", "client")
    headers = ["sessions", "tok/s each", "tokens", "p50 ms", "p99 ms", "max ms", "lost", "failed", "cmds/token"]
    headers += [f"{k} cpu%" for k in kinds]
    table = markdown_table(headers, [[r["sessions"], r["rate"], r["tokens"], r["p50_ms"], r["p99_ms"], r["max_ms"],
                                      r["lost"], r["failed"], r["cmds_per_token"]]
                                     + [r["cpu_pct"][k] for k in kinds] for r in rows])
    out = write_results("load", args.out, {"rows": rows}, table)
    xs = [r["sessions"] for r in rows]
    plot(out / "load.png", f"added latency, token produced → client received ({args.rate:g} tok/s per session)",
         "concurrent sessions", "ms", {"p50": (xs, [r["p50_ms"] for r in rows]),
                                       "p99": (xs, [r["p99_ms"] for r in rows])}, logy=True)
    return 0 if all(r["lost"] == 0 and r["failed"] == 0 for r in rows) else 1
