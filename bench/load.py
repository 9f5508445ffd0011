"""``turnstream bench load``: S concurrent agent sessions against the ReplayEngine.

Each session is a two-turn agent conversation (text + one tool call, then an answer) whose
tokens the ReplayEngine emits at ``--rate`` tokens/s.  For every content event the client
records receive time minus the event's origin time (when the decoder emitted its tokens):
the latency the pipeline adds.  Also printed: events lost (expected vs received content),
Redis commands per token, and CPU of each process (percent of the run, and microseconds per
token: what one more process of that stage buys).  Everything runs on this machine: the client,
every worker, the gateway and the server share its cores.

``--cluster`` runs the same on a 3-master Valkey Cluster (3 replicas; the tool queues on a plain
server beside it) and prints how the work spread over the masters (``bench.load_cluster``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx
import websockets

from bench.common import markdown_table, percentile, plot, progress, write_results
from bench.load_cluster import balance, broker, cpu_seconds
from runtime.config import load_config
from turnstream.embedded import free_port
from turnstream.stack import start_processes, stop_all

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing".split()


def script(tokens: int) -> tuple[list[str], str]:
    """A two-turn replay script of about ``tokens`` tokens per turn, and turn 0's content."""
    body = " ".join(WORDS[i % len(WORDS)] for i in range(tokens // 2))
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
    return [f"{body}.\n{call}", f"The answer is {{{{ results[0] }}}}. {body}."], f"{body}.\n"


async def one_session(url: str, body: dict[str, Any], lat: list[float], stats: dict[str, int],
                      sids: list[str]) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        sid = (await http.post("/v1/sessions", json=body)).json()["id"]
    sids.append(sid)
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
    sids: list[str] = []

    async def delayed(i: int) -> str:
        await asyncio.sleep(ramp_s * i / sessions)
        return await one_session(url, body, lat, stats, sids)

    contents = await asyncio.gather(*(delayed(i) for i in range(sessions)), return_exceptions=True)
    failed = [c for c in contents if isinstance(c, BaseException)]
    lost = sum(1 for c in contents if not isinstance(c, BaseException) and c != expected)
    return {"lat": lat, "failed": len(failed), "lost": lost, "stats": stats, "sids": sids,
            "errors": sorted({repr(f)[:200] for f in failed})[:3]}


def measure(level: int, args: argparse.Namespace) -> dict[str, Any]:
    with broker(args.cluster) as b:
        cfg = load_config(redis_url=b.url, queue_url=b.queue_url or None, port=free_port(), engine="replay",
                          replay_rate=args.rate, log_level="WARNING")
        procs = dict(start_processes(cfg, ["decode", "parser", "tools", "gateway"]))
        pids = {**{k: p.pid for k, p in procs.items()}, **b.pids, "client": os.getpid()}
        try:
            cpu0, nodes0, slots0 = {k: cpu_seconds(p) for k, p in pids.items()}, b.nodes(), b.slot_cpu()
            t0 = time.monotonic()
            res = asyncio.run(run_level(f"http://{cfg.host}:{cfg.port}", level, args.tokens, args.ramp))
            wall = time.monotonic() - t0
            cpu = {k: round(cpu_seconds(p) - cpu0[k], 2) for k, p in pids.items()}
            nodes1, slots1 = b.nodes(), b.slot_cpu()
            if args.commandstats:
                _print_top_commands(b.url)
        finally:
            stop_all(list(procs.values()))
    tokens, lat, sids = res["stats"].get("tokens", 0), res.pop("lat"), res.pop("sids")
    cmds = sum(n["commands"] for n in nodes1.values()) - sum(n["commands"] for n in nodes0.values())
    row = {"sessions": level, "rate": args.rate, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
           "max_ms": max(lat, default=float("nan")), "samples": len(lat), "lost": res["lost"],
           "failed": res["failed"], "tokens": tokens, "cmds_per_token": cmds / max(1, tokens), "wall_s": wall,
           "cpu_s": cpu, "cpu_pct": {k: round(100 * v / wall, 1) for k, v in cpu.items()},
           "cpu_us_per_token": {k: round(1e6 * v / max(1, tokens), 1) for k, v in cpu.items()}, **res}
    if args.cluster:
        row["balance"] = balance(nodes0, nodes1, slots0, slots1, sids)
    return row


def _print_top_commands(url: str) -> None:
    from runtime import cluster

    r = cluster.connect_sync(url)
    stats = r.info("commandstats")
    if cluster.is_cluster(r):  # per node: add them up
        merged: dict[str, int] = {}
        for node_stats in stats.values():
            for k, v in node_stats.items():
                merged[k] = merged.get(k, 0) + v["calls"]
        top = sorted(merged.items(), key=lambda kv: -kv[1])[:8]
    else:
        top = sorted(((k, v["calls"]) for k, v in stats.items()), key=lambda kv: -kv[1])[:8]
    progress("  top commands: " + ", ".join(f"{k[8:]}={n}" for k, n in top))
    r.close()


KINDS = ("gateway", "decode", "parser", "tools", "redis", "client")
SPREAD_GOAL_PCT = 25.0


def _stage(values: dict[str, float], kind: str) -> float:
    """A stage's figure; "redis" sums every master of a cluster (the tool-queue server is apart)."""
    if kind == "redis":
        return round(sum(v for k, v in values.items() if k == "redis" or k.startswith("redis:")), 1)
    return values[kind]


def _tables(rows: list[dict[str, Any]]) -> str:
    headers = ["sessions", "tok/s each", "tokens", "p50 ms", "p99 ms", "max ms", "lost", "failed", "cmds/token"]
    table = markdown_table(headers + [f"{k} cpu%" for k in KINDS], [
        [r["sessions"], r["rate"], r["tokens"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["lost"], r["failed"],
         r["cmds_per_token"]] + [_stage(r["cpu_pct"], k) for k in KINDS] for r in rows])
    cost = markdown_table(["sessions"] + [f"{k} CPU µs/token" for k in KINDS], [
        [r["sessions"]] + [_stage(r["cpu_us_per_token"], k) for k in KINDS] for r in rows])
    out = [table, "", cost]
    for r in rows:
        if "balance" in r:
            out += ["", _balance_table(r)]
    return "\n".join(out)


def _balance_table(r: dict[str, Any]) -> str:
    b = r["balance"]
    table = markdown_table(["sessions", "master", "its sessions", "commands", "CPU s", "session slots CPU ms",
                            "other slots CPU ms"],
                           [[r["sessions"], m["port"], m["sessions"], m["commands"], m["cpu_s"],
                             m["session_slots_cpu_ms"], m["other_slots_cpu_ms"]] for m in b["masters"]])
    return (f"{table}\n\nspread over the masters (largest deviation from the mean): per-token work "
            f"(session slots' CPU) ±{b['per_token_spread_pct']} %, commands ±{b['commands_spread_pct']} %, "
            f"sessions ±{b['sessions_spread_pct']} % (goal for per-token work: ±{SPREAD_GOAL_PCT:g} %)")


def _ok(r: dict[str, Any]) -> bool:
    balanced = "balance" not in r or r["balance"]["per_token_spread_pct"] <= SPREAD_GOAL_PCT
    return r["lost"] == 0 and r["failed"] == 0 and balanced


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream bench load", description=__doc__)
    ap.add_argument("--sessions", default="100,300,1000", help="comma-separated concurrency levels")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per session")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per turn (two turns per session)")
    ap.add_argument("--ramp", type=float, default=2.0, help="seconds over which sessions start")
    ap.add_argument("--cluster", action="store_true", help="on a 3-master Valkey Cluster (3 replicas)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commandstats", action="store_true", help="print the most frequent Redis commands")
    args = ap.parse_args(argv)
    rows = []
    for level in [int(x) for x in args.sessions.split(",")]:
        progress(f"load: {level} sessions × {args.rate:g} tokens/s × 2 turns of {args.tokens} tokens"
                 + (" on a 3-master cluster" if args.cluster else ""))
        row = measure(level, args)
        progress(f"  p50 {row['p50_ms']:.1f} ms  p99 {row['p99_ms']:.1f} ms  lost {row['lost']}  "
                 f"failed {row['failed']}  {row['cmds_per_token']:.2f} cmds/token  cpu% {row['cpu_pct']}")
        rows.append(row)
    name = "load-cluster" if args.cluster else "load"
    out = write_results(name, args.out, {"rows": rows, "cluster": args.cluster}, _tables(rows))
    xs = [r["sessions"] for r in rows]
    plot(out / f"{name}.png", f"added latency, token produced → client received ({args.rate:g} tok/s per session"
         + (", 3-master cluster)" if args.cluster else ")"),
         "concurrent sessions", "ms", {"p50": (xs, [r["p50_ms"] for r in rows]),
                                       "p99": (xs, [r["p99_ms"] for r in rows])}, logy=True)
    return 0 if all(map(_ok, rows)) else 1
