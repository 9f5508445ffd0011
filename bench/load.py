"""``turnstream bench load``: S concurrent agent sessions against the ReplayEngine, per load mode.

Each session is a two-turn agent conversation (``bench.load_client``) whose tokens the ReplayEngine
emits at ``--rate`` tokens/s, in each ``--modes``:

* ``batched`` (the headline): one decoder step serves every running session, one token each, as
  a batching engine does;
* ``per_session``: every session runs its own timer.

Reported per (mode, S): added latency p50/p99/max (client receive time minus the time the decoder
took the token from its engine), sessions lost, Redis commands per token (every command, those
run inside Lua scripts included), and the CPU microseconds per streamed token of every process:
the pipeline (decoder shell, parser, gateway, Redis), the tool worker, and the bench client.  The
run fails (exit 1) unless every session delivered every event exactly once and every token.
``--profile`` records a py-spy flame graph of the decoder, parser and gateway of each run.
Everything runs on this machine: the client, every worker, the gateway and the server share its cores.

``--cluster`` runs the same on a 3-master Valkey Cluster (3 replicas; the tool queues on a plain
server beside it): commands and Redis CPU are summed over the masters, and how the work spread
over them is printed too (``bench.load_cluster``); the run fails unless the per-token work
spread within ``SPREAD_GOAL_PCT``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from bench import load_report
from bench.common import DEFAULT_OUT, markdown_table, percentile, progress, write_results
from bench.load_client import run_sessions
from bench.load_cluster import balance, broker, cpu_seconds
from bench.profile import Profiler
from runtime import aio, cluster
from runtime.config import load_config
from schemas import keys
from turnstream.embedded import free_port
from turnstream.processes import stop_all
from turnstream.stack import start_processes, wait_for_decoders
from workers.decode.replay import MODES, load_tokenizer


SPREAD_GOAL_PCT = 25.0  # --cluster: the largest deviation of a master's per-token work from the mean


def engine_cpu_seconds(r: Any) -> float:
    """CPU seconds the decoders' ReplayEngines spent making tokens, from their heartbeats (one server or
    a cluster: SCAN visits every master)."""
    beats = set(r.scan_iter(match=keys.decoder_heartbeat("*"), count=500))
    return sum(json.loads(r.get(k) or "{}").get("cpu_s", 0.0) for k in beats)


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """``"a:loop=asyncio,ws_compression=deflate;b:"`` -> {"a": {...}, "b": {}}: configurations compared in one run."""
    out: dict[str, dict[str, str]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, sets = part.partition(":")
        out[name.strip()] = dict(kv.split("=", 1) for kv in filter(None, (x.strip() for x in sets.split(","))))
    return out or {"default": {}}


def measure(mode: str, level: int, args: argparse.Namespace, variant: str = "default",
            overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """One run of ``level`` sessions in ``mode`` on a fresh broker (a server, or ``--cluster``) and fresh processes."""
    with broker(args.cluster) as b:
        cfg = load_config(**{"log_level": "WARNING", **(overrides or {}), "redis_url": b.url,
                             "queue_url": b.queue_url or None, "port": free_port(), "engine": "replay",
                             "replay_rate": args.rate, "replay_mode": mode})
        procs = dict(start_processes(cfg, ["decode", "parser", "tools", "gateway"]))
        pids = {**{k: p.pid for k, p in procs.items()}, "client": os.getpid(), **b.pids}
        try:
            wait_for_decoders(b.url, 1)
            r = cluster.connect_sync(b.url)
            profiler = Profiler.start(args.profile, f"{variant}-{mode}-{level}", pids, args.profile_format)
            cpu0, cmd0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, b.command_calls(), time.monotonic()
            nodes0, slots0, engine0 = b.nodes(), b.slot_cpu(), engine_cpu_seconds(r)
            tally = aio.run(run_sessions(f"http://{cfg.host}:{cfg.port}", level, args.tokens, args.ramp,
                                         load_tokenizer(cfg.model)), cfg.loop)
            wall = time.monotonic() - t0
            cpu = {k: round(cpu_seconds(p) - cpu0[k], 3) for k, p in pids.items()}
            cmds = {k: n - cmd0.get(k, 0) for k, n in b.command_calls().items() if n > cmd0.get(k, 0)}
            nodes1, slots1 = b.nodes(), b.slot_cpu()
            profiler.stop()
            time.sleep(cfg.heartbeat_ms / 1000 + 0.2)  # the decoder's next heartbeat carries its engine's CPU
            cpu["engine"] = round(engine_cpu_seconds(r) - engine0, 3)
            r.close()
        finally:
            stop_all(list(procs.values()))
    cpu["redis"] = _redis_cpu(cpu)
    row = {"variant": variant, "mode": mode, "sessions": level, "rate": args.rate, "p50_ms": percentile(tally.lat_ms, 50),
           "p99_ms": percentile(tally.lat_ms, 99), "max_ms": max(tally.lat_ms, default=float("nan")),
           "samples": len(tally.lat_ms), "lost": level - tally.sessions_ok, "problems": tally.problems[:20],
           "tokens": tally.tokens, "events": tally.events, "cmds_per_token": round(sum(cmds.values()) / max(1, tally.tokens), 2),
           "cmds_by_name_per_token": {k: round(n / max(1, tally.tokens), 3) for k, n in
                                      sorted(cmds.items(), key=lambda kv: -kv[1])[:12]},
           "wall_s": round(wall, 2), "cpu_s": cpu, "loadavg": round(os.getloadavg()[0], 1)}
    row["us_per_token"] = load_report.us_per_token(row)
    if args.cluster:
        row["balance"] = balance(nodes0, nodes1, slots0, slots1, tally.sids)
    return row


def _redis_cpu(cpu: dict[str, float]) -> float:
    """The data servers' CPU seconds: the server, or every master of a cluster (the queue server apart)."""
    return round(sum(v for k, v in cpu.items() if k == "redis" or k.startswith("redis:")), 3)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench load", description=__doc__)
    ap.add_argument("--sessions", default="100,300,1000", help="comma-separated concurrency levels")
    ap.add_argument("--modes", default="batched,per_session", help=f"comma-separated load modes: {', '.join(MODES)}")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per session")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per turn (two turns per session)")
    ap.add_argument("--ramp", type=float, default=2.0, help="seconds over which sessions start")
    ap.add_argument("--cluster", action="store_true", help="on a 3-master Valkey Cluster (3 replicas)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", nargs="?", const=str(DEFAULT_OUT / "flame"), default=None, metavar="DIR",
                    help="py-spy flame graphs of the decoder, parser and gateway of every run (default dir: %(const)s)")
    ap.add_argument("--profile-format", default="flamegraph", choices=["flamegraph", "raw", "speedscope"])
    ap.add_argument("--variants", default="", metavar="NAME:KEY=VALUE,...;...",
                    help="configurations to compare side by side, each level run once per variant, interleaved")
    args = ap.parse_args(argv)
    args.variants = parse_variants(args.variants)
    args.modes = [m for m in args.modes.split(",") if m]
    if unknown := set(args.modes) - set(MODES):
        ap.error(f"unknown modes {sorted(unknown)}; expected {', '.join(MODES)}")
    return args


def _report(row: dict[str, Any]) -> dict[str, Any]:
    progress(f"  p50 {row['p50_ms']:.1f} ms  p99 {row['p99_ms']:.1f} ms  lost {row['lost']}  "
             f"{row['cmds_per_token']:.2f} cmds/token  µs/token {row['us_per_token']}")
    progress(f"  commands per token: {row['cmds_by_name_per_token']}")
    for problem in row["problems"][:5]:
        progress(f"  PROBLEM {problem}")
    if "balance" in row:
        progress(f"  spread over the masters: per-token work ±{row['balance']['per_token_spread_pct']} %")
    return row


def _balance_table(r: dict[str, Any]) -> str:
    b = r["balance"]
    table = markdown_table(["mode", "sessions", "master", "its sessions", "commands", "CPU s", "session slots CPU ms",
                            "other slots CPU ms"],
                           [[r["mode"], r["sessions"], m["port"], m["sessions"], m["commands"], m["cpu_s"],
                             m["session_slots_cpu_ms"], m["other_slots_cpu_ms"]] for m in b["masters"]])
    return (f"{table}\n\nspread over the masters (largest deviation from the mean): per-token work "
            f"(session slots' CPU) ±{b['per_token_spread_pct']} %, commands ±{b['commands_spread_pct']} %, "
            f"sessions ±{b['sessions_spread_pct']} % (goal for per-token work: ±{SPREAD_GOAL_PCT:g} %)")


def _ok(r: dict[str, Any]) -> bool:
    balanced = "balance" not in r or r["balance"]["per_token_spread_pct"] <= SPREAD_GOAL_PCT
    return r["lost"] == 0 and not r["problems"] and r["tokens"] > 0 and balanced


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    progress(f"load: machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = []
    for level in [int(x) for x in args.sessions.split(",")]:
        for mode in args.modes:
            for variant, overrides in args.variants.items():
                progress(f"load: {variant} {overrides or ''} {mode}, {level} sessions × {args.rate:g} tokens/s "
                         f"× 2 turns of {args.tokens} tokens" + (" on a 3-master cluster" if args.cluster else ""))
                rows.append(_report(measure(mode, level, args, variant, overrides)))
    rows.sort(key=lambda r: (r["variant"], r["mode"], r["sessions"]))
    name = "load-cluster" if args.cluster else "load"
    tables = "\n\n".join([load_report.tables(rows), *(_balance_table(r) for r in rows if "balance" in r)])
    out = write_results(name, args.out, {"rows": rows, "cluster": args.cluster}, tables)
    load_report.plot(Path(out) / f"{name}.png", rows, args.rate)
    ok = all(map(_ok, rows))
    if not ok:
        progress("load: FAILED -- some session lost an event or a token, or a cluster's work was uneven (see above)")
    return 0 if ok else 1
