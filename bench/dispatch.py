"""Dispatch latency: from "call ready" (the parser's dispatch, ``ToolJob.t_ready``) to "tool function
starts", for our waking arq worker and for a stock arq worker (default settings: poll_delay 0.5 s).

    turnstream bench dispatch [--out DIR] [--calls 150] [--rate 25] [--burst 4] [--workers 2]

Both kinds run side by side in one run, against a real embedded server, each kind as
``--workers`` processes on its own pool; every call goes through the real ``Dispatcher`` and the
same ``ToolRunner`` job body, and the tool (``workers.tools.debug:probe``) reports the moment it
starts.  Two phases: single calls at ``--rate`` per second (jittered, so arrivals are not in step
with the stock poll), then bursts of ``--burst`` calls at once (a turn's parallel calls).  Goal
for our worker on loopback: p50 <= 3 ms, p99 <= 15 ms.  Writes ``dispatch.json``, ``dispatch.md``
and ``dispatch.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DEFAULT_OUT, markdown_table, percentile, progress, verdict, write_results
from schemas import keys
from schemas.codec import decode_event
from schemas.events import ToolCallReady, ToolResult
from runtime import bus
from runtime.config import Config, load_config
from turnstream.embedded import EmbeddedRedis, _die_with_parent
from turnstream.processes import child_env, spawn, stop_all
from runtime import tool_catalog
from runtime.tool_queue import Dispatcher, arq_pool, tool_job
from workers.tools.config import load_registry_config
from workers.tools.worker import catalog_entries

GOAL_P50_MS, GOAL_P99_MS = 3.0, 15.0
KINDS = {"waking": "probe", "stock": "probe_stock"}  # pool -> the probe tool routed to it
TOOLS_TOML = """
[registry]
builtins = false

[python.probe]
target = "workers.tools.debug:probe"
pool = "waking"

[python.probe_stock]
target = "workers.tools.debug:probe"
pool = "stock"
"""


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench dispatch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--calls", type=int, default=150, help="single calls per worker kind")
    ap.add_argument("--rate", type=float, default=25.0, help="single calls per second (both kinds together)")
    ap.add_argument("--burst", type=int, default=4, help="calls per burst in the burst phase (0: skip it)")
    ap.add_argument("--bursts", type=int, default=30, help="bursts per worker kind")
    ap.add_argument("--workers", type=int, default=2, help="worker processes per kind")
    ap.add_argument("--stock-worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- the stock worker process
async def _stock_worker(cfg: Config) -> None:
    """arq's own Worker with its defaults, running our job body on the ``stock`` pool."""
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    from runtime.config import default_worker_id
    from runtime.tool_queue import RUN_TOOL, deserialize, serialize
    from workers.tools.runner import ToolRunner, job_timeout

    r = bus.connect(cfg.redis_url)
    registry = load_registry_config(cfg.tools_config)
    runner = ToolRunner(cfg, r, registry, default_worker_id("stock"))
    worker = Worker(functions=[func(runner.run_tool, name=RUN_TOOL, timeout=job_timeout(registry))],
                    queue_name=keys.tool_queue("stock"), redis_settings=RedisSettings.from_dsn(cfg.arq_url),
                    job_serializer=serialize, job_deserializer=deserialize, handle_signals=False)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    task = asyncio.create_task(worker.main())
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await worker.close()
    await r.aclose()


def _start_workers(cfg: Config, n: int) -> list[subprocess.Popen]:
    ours = [spawn(["worker", "tools", "--pool", "waking"], cfg) for _ in range(n)]
    stock = [subprocess.Popen([sys.executable, "-m", "bench.dispatch", "--stock-worker"],
                              env=child_env(cfg.replace(pool="stock")), preexec_fn=_die_with_parent)
             for _ in range(n)]
    return ours + stock


# --------------------------------------------------------------------------- the driver
class Driver:
    """Dispatches probe calls and reads back when each tool started."""

    def __init__(self, cfg: Config, dispatcher: Dispatcher) -> None:
        self.cfg, self.dispatcher = cfg, dispatcher
        self.r = bus.connect(cfg.redis_url)
        self.sent: dict[str, tuple[str, str, float]] = {}  # sid -> (kind, phase, t_ready)

    async def call(self, kind: str, phase: str, n: int) -> None:
        sid = f"{phase}-{kind}-{n}"
        job = tool_job(sid, 0, 0, ToolCallReady(index=0, id="call_0_0", name=KINDS[kind],
                                                 arguments=json.dumps({"tag": sid})))
        self.sent[sid] = (kind, phase, job.t_ready)
        await self.dispatcher.enqueue(job)

    async def started_at(self, sids: list[str], timeout_s: float = 15.0) -> dict[str, float]:
        """When each call's tool started (from its result), waiting for stragglers."""
        found: dict[str, float] = {}
        deadline = time.monotonic() + timeout_s
        while len(found) < len(sids) and time.monotonic() < deadline:
            todo = [s for s in sids if s not in found]
            pipe = self.r.pipeline(transaction=False)
            for sid in todo:
                pipe.xrange(keys.events(sid))
            for sid, rows in zip(todo, await pipe.execute()):
                for _, fields in rows:
                    body = decode_event(fields[bus.FIELD]).body
                    if isinstance(body, ToolResult) and not body.is_error:
                        found[sid] = float(body.content)
            await asyncio.sleep(0.05)
        return found


async def _wait_ready(r, timeout_s: float = 60.0) -> None:
    """Until a worker of each pool has polled once (arq's health-check key)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all([await r.exists(keys.tool_queue(p) + ":health-check") for p in KINDS]):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("tool workers did not come up")


async def _singles(d: Driver, phase: str, n: int, rate: float) -> None:
    for i in range(n):
        for kind in random.sample(list(KINDS), 2):
            await d.call(kind, phase, i)
            await asyncio.sleep(random.uniform(0.5, 1.5) / rate)
        if i % 50 == 49:
            progress(f"{phase}: {i + 1}/{n} calls per kind")


async def _bursts(d: Driver, n: int, size: int) -> None:
    for i in range(n):
        for kind in random.sample(list(KINDS), 2):
            for j in range(size):
                await d.call(kind, "burst", i * size + j)
            await asyncio.sleep(random.uniform(0.3, 0.7))
    progress(f"burst: {n} bursts of {size} per kind")


async def _run(args: argparse.Namespace, cfg: Config) -> dict:
    arq = await arq_pool(cfg.arq_url)
    r = bus.connect(cfg.redis_url)
    await tool_catalog.publish(r, catalog_entries(load_registry_config(cfg.tools_config)))  # both pools' tools
    d = Driver(cfg, Dispatcher(arq, tool_catalog.ToolCatalog(r)))
    await _wait_ready(d.r)
    await asyncio.sleep(1.0)  # the other workers of each pool
    await _singles(d, "warmup", 5, args.rate)
    await _singles(d, "single", args.calls, args.rate)
    if args.burst > 0:
        await _bursts(d, args.bursts, args.burst)
    started = await d.started_at(list(d.sent))
    await arq.aclose()
    await d.r.aclose()
    await r.aclose()
    lat: dict[str, dict[str, list[float]]] = {}
    for sid, (kind, phase, t_ready) in d.sent.items():
        if phase != "warmup" and sid in started:
            lat.setdefault(phase, {}).setdefault(kind, []).append((started[sid] - t_ready) * 1000)
    missing = sum(1 for s, v in d.sent.items() if v[1] != "warmup" and s not in started)
    return {"latency_ms": lat, "missing": missing}


# --------------------------------------------------------------------------- report
def _summary(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50": percentile(ms, 50), "p90": percentile(ms, 90), "p99": percentile(ms, 99),
            "max": max(ms) if ms else float("nan"), "mean": sum(ms) / len(ms) if ms else float("nan")}


def _plot(path: Path, lat: dict[str, dict[str, list[float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for phase, kinds in lat.items():
        for kind, ms in kinds.items():
            xs = sorted(ms)
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{kind} ({phase})",
                    linestyle="-" if kind == "waking" else "--")
    ax.axvline(GOAL_P99_MS, color="grey", linewidth=0.8, linestyle=":", label=f"goal p99 {GOAL_P99_MS:g} ms")
    ax.set_xscale("log")
    ax.set_title("call ready -> tool function starts")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction of calls")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _report(args: argparse.Namespace, result: dict) -> int:
    lat = result["latency_ms"]
    stats = {phase: {kind: _summary(ms) for kind, ms in kinds.items()} for phase, kinds in lat.items()}
    rows = [[phase, "ours (wake list)" if kind == "waking" else "stock arq (poll 0.5 s)", s["n"], s["p50"],
             s["p90"], s["p99"], s["max"]]
            for phase, kinds in stats.items() for kind, s in sorted(kinds.items(), reverse=True)]
    ours = stats["single"]["waking"]
    ok = ours["p50"] <= GOAL_P50_MS and ours["p99"] <= GOAL_P99_MS
    stock = stats["single"]["stock"]
    table = markdown_table(["phase", "worker", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows)
    table += (f"\n\nsingle calls: ours p50 {ours['p50']:.2f} ms / p99 {ours['p99']:.2f} ms "
              f"(goal <= {GOAL_P50_MS:g} / {GOAL_P99_MS:g}: {'met' if ok else 'NOT met'}); "
              f"stock arq p50 {stock['p50']:.0f} ms, {stock['p50'] / ours['p50']:.0f}x slower. "
              f"{args.workers} worker processes per kind; {result['missing']} calls without a result.")
    problems = check(args, result)
    out = write_results("dispatch", args.out, {"settings": vars(args), "stats": stats, "goal_met": ok,
                                                "missing": result["missing"], "latency_ms": lat,
                                                "problems": problems}, table)
    _plot(out / "dispatch.png", lat)
    progress(f"wrote {out}/dispatch.{{json,md,png}}")
    return verdict("dispatch", problems)


def check(args: argparse.Namespace, result: dict) -> list[str]:
    """Every call dispatched ran its tool, on each kind of worker, in each phase."""
    want = {"single": args.calls, **({"burst": args.bursts * args.burst} if args.burst > 0 else {})}
    got = {phase: {kind: len(ms) for kind, ms in kinds.items()} for phase, kinds in result["latency_ms"].items()}
    problems = [f"{result['missing']} calls got no result"] if result["missing"] else []
    return problems + [f"{phase} calls run on {kind} workers: {got.get(phase, {}).get(kind, 0)}, expected {n}"
                       for phase, n in want.items() for kind in KINDS if got.get(phase, {}).get(kind, 0) != n]


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.stock_worker:
        asyncio.run(_stock_worker(load_config()))
        return 0
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(prefix="ts-bench-") as tmp:
        toml = Path(tmp) / "tools.toml"
        toml.write_text(TOOLS_TOML)
        cfg = load_config(redis_url=server.url, tools_config=str(toml), log_level="WARNING")
        progress(f"server {server.url}; starting {args.workers} waking + {args.workers} stock arq workers")
        procs = _start_workers(cfg, args.workers)
        try:
            result = asyncio.run(_run(args, cfg))
        finally:
            stop_all(procs)
    return _report(args, result)


if __name__ == "__main__":
    sys.exit(main())
