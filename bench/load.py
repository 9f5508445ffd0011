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
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import redis

from bench import load_report
from bench.common import DEFAULT_OUT, percentile, progress, write_results
from bench.load_client import run_sessions
from bench.profile import Profiler
from runtime import aio
from runtime.config import load_config
from schemas import keys
from turnstream.embedded import EmbeddedRedis, free_port
from turnstream.stack import start_processes, stop_all, wait_for_decoders
from workers.decode.replay import MODES, load_tokenizer


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commands(r: redis.Redis) -> dict[str, int]:
    """Calls of every command so far (those run inside scripts included), by name."""
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}


def engine_cpu_seconds(r: redis.Redis) -> float:
    """CPU seconds the decoders' ReplayEngines spent making tokens, from their heartbeats."""
    return sum(json.loads(r.get(k) or "{}").get("cpu_s", 0.0) for k in r.keys(keys.decoder_heartbeat("*")))


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """``"a:loop=asyncio,ws_compression=deflate;b:"`` -> {"a": {...}, "b": {}}: configurations compared in one run."""
    out: dict[str, dict[str, str]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, sets = part.partition(":")
        out[name.strip()] = dict(kv.split("=", 1) for kv in filter(None, (x.strip() for x in sets.split(","))))
    return out or {"default": {}}


def measure(mode: str, level: int, args: argparse.Namespace, variant: str = "default",
            overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """One run of ``level`` sessions in ``mode`` on a fresh server and fresh processes."""
    with EmbeddedRedis() as server:
        cfg = load_config(**{"log_level": "WARNING", **(overrides or {}), "redis_url": server.url, "port": free_port(),
                             "engine": "replay", "replay_rate": args.rate, "replay_mode": mode})
        procs = dict(start_processes(cfg, ["decode", "parser", "tools", "gateway"]))
        pids = {**{k: p.pid for k, p in procs.items()}, "client": os.getpid(), "redis": server.proc.pid}
        try:
            wait_for_decoders(server.url, 1)
            r = redis.Redis.from_url(server.url)
            profiler = Profiler.start(args.profile, f"{variant}-{mode}-{level}", pids, args.profile_format)
            cpu0, cmd0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, commands(r), time.monotonic()
            engine0 = engine_cpu_seconds(r)
            tally = aio.run(run_sessions(f"http://{cfg.host}:{cfg.port}", level, args.tokens, args.ramp,
                                         load_tokenizer(cfg.model)), cfg.loop)
            wall = time.monotonic() - t0
            cpu = {k: round(cpu_seconds(p) - cpu0[k], 3) for k, p in pids.items()}
            cmds = {k: n - cmd0.get(k, 0) for k, n in commands(r).items() if n > cmd0.get(k, 0)}
            profiler.stop()
            time.sleep(cfg.heartbeat_ms / 1000 + 0.2)  # the decoder's next heartbeat carries its engine's CPU
            cpu["engine"] = round(engine_cpu_seconds(r) - engine0, 3)
        finally:
            stop_all(list(procs.values()))
    row = {"variant": variant, "mode": mode, "sessions": level, "rate": args.rate, "p50_ms": percentile(tally.lat_ms, 50),
           "p99_ms": percentile(tally.lat_ms, 99), "max_ms": max(tally.lat_ms, default=float("nan")),
           "samples": len(tally.lat_ms), "lost": level - tally.sessions_ok, "problems": tally.problems[:20],
           "tokens": tally.tokens, "events": tally.events, "cmds_per_token": round(sum(cmds.values()) / max(1, tally.tokens), 2),
           "cmds_by_name_per_token": {k: round(n / max(1, tally.tokens), 3) for k, n in
                                      sorted(cmds.items(), key=lambda kv: -kv[1])[:12]},
           "wall_s": round(wall, 2), "cpu_s": cpu, "loadavg": round(os.getloadavg()[0], 1)}
    row["us_per_token"] = load_report.us_per_token(row)
    return row


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench load", description=__doc__)
    ap.add_argument("--sessions", default="100,300,1000", help="comma-separated concurrency levels")
    ap.add_argument("--modes", default="batched,per_session", help=f"comma-separated load modes: {', '.join(MODES)}")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per session")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per turn (two turns per session)")
    ap.add_argument("--ramp", type=float, default=2.0, help="seconds over which sessions start")
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
    return row


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    progress(f"load: machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = []
    for level in [int(x) for x in args.sessions.split(",")]:
        for mode in args.modes:
            for variant, overrides in args.variants.items():
                progress(f"load: {variant} {overrides or ''} {mode}, {level} sessions × {args.rate:g} tokens/s "
                         f"× 2 turns of {args.tokens} tokens")
                rows.append(_report(measure(mode, level, args, variant, overrides)))
    rows.sort(key=lambda r: (r["variant"], r["mode"], r["sessions"]))
    out = write_results("load", args.out, {"rows": rows}, load_report.tables(rows))
    load_report.plot(Path(out) / "load.png", rows, args.rate)
    ok = all(r["lost"] == 0 and not r["problems"] and r["tokens"] > 0 for r in rows)
    if not ok:
        progress("load: FAILED -- some session lost an event or a token (see the problems above)")
    return 0 if ok else 1
