"""``turnstream bench reads``: how a reader of many sessions' event streams wakes, on one server
and on a 3-master cluster, side by side.

A writer XADDs to S streams (random ones, ``--rate`` entries/s in all); one reader follows them all
from their cursors.  For every entry: receive time - write time.  Also: the connections the reader
holds, its CPU time and the server's (summed over a cluster's masters; the writer's commands
included, the same on every design).  The designs:

* ``server``   one server: one blocking XREAD over every stream (``runtime.bus.ServerReads``);
* ``server-tracked``  one server: a tracked connection woken by invalidations, one XREAD of the
               streams that changed (``runtime.tracked_reads.ServerTrackedReads``, the default);
* ``tracked``  a cluster: per master, a tracked connection woken by invalidations, pipelined
               XREADs of the streams that changed (``runtime.tracked_reads.ClusterReads``);
* ``per-slot`` a cluster: one blocking XREAD per stream, each on its own connection -- the only
               way to block on streams of different slots (a command cannot span slots).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import time
from typing import Any

import redis

from bench.common import markdown_table, percentile, progress, save_figure, verdict, write_results
from runtime import bus
from schemas import keys
from turnstream.embedded import EmbeddedRedis
from turnstream.embedded_cluster import EmbeddedCluster


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _write(r: Any, streams: list[str], n: int, rate: float) -> None:
    rng = random.Random(1)
    for i in range(n):
        await bus.add(r, rng.choice(streams), repr(time.time()).encode())
        await asyncio.sleep(1 / rate)


def _record(rows: list, lat: list[float]) -> None:
    now = time.time()
    lat += [(now - float(fields[bus.FIELD])) * 1000 for _, fields in rows]


async def _many(reader: Any, streams: list[str], n: int, lat: list[float]) -> None:
    cursors = {s: "0-0" for s in streams}
    while len(lat) < n:
        for stream, rows in await reader.read(dict(cursors), 256, 1000):
            _record(rows, lat)
            cursors[stream] = rows[-1][0].decode() if isinstance(rows[-1][0], bytes) else rows[-1][0]


async def _per_slot(r: Any, streams: list[str], n: int, lat: list[float]) -> None:
    async def one(stream: str) -> None:
        cursor = "0-0"
        while len(lat) < n:
            for e in await bus.tail(r, stream, cursor, block_ms=1000):
                _record([(e.id, {bus.FIELD: e.data})], lat)
                cursor = e.id

    tasks = [asyncio.create_task(one(s)) for s in streams]
    while len(lat) < n:
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _server_cpu(urls: list[str]) -> float:
    """Seconds of CPU the servers (a cluster's masters) spent so far."""
    total = 0.0
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            info = client.info("cpu")
        finally:
            client.close()
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


async def run(design: str, url: str, sessions: int, n: int, rate: float, servers: list[str]) -> dict[str, Any]:
    r, w = bus.connect(url), bus.connect(url)
    streams = [keys.events(f"{design}-{i}") for i in range(sessions)]  # fresh streams for each design
    for s in streams:
        await bus.add(w, s, repr(time.time()).encode())  # every stream exists; these count too
    lat: list[float] = []
    cpu0, server0, t0 = _cpu(), _server_cpu(servers), time.monotonic()
    reader = None if design == "per-slot" else bus.many_reader(r, tracked=design != "server")
    follow = _per_slot(r, streams, n + sessions, lat) if reader is None else _many(reader, streams, n + sessions, lat)
    await asyncio.gather(follow, _write(w, streams, n, rate))
    wall, cpu, server_cpu = time.monotonic() - t0, _cpu() - cpu0, _server_cpu(servers) - server0
    conns = sessions if reader is None else reader.connections  # per-slot: one blocked connection per stream
    if reader is not None:
        await reader.aclose()
    await r.aclose()
    await w.aclose()
    lat = lat[sessions:]
    return {"design": design, "streams": sessions, "entries": n, "received": len(lat), "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat), "connections": conns,
            "process_cpu_pct": round(100 * cpu / wall, 1), "server_cpu_pct": round(100 * server_cpu / wall, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream bench reads", description=__doc__)
    ap.add_argument("--sessions", type=int, default=300, help="streams the reader follows")
    ap.add_argument("--entries", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=500.0, help="entries per second, all streams together")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = []
    with EmbeddedRedis() as server, EmbeddedCluster(3, replicas=0) as c:
        masters = [node.url for node in c.nodes[: c.n_masters]]
        for design, url, servers in (("server", server.url, [server.url]), ("server-tracked", server.url, [server.url]),
                                     ("tracked", c.url, masters), ("per-slot", c.url, masters)):
            progress(f"reads: {design}, {args.sessions} streams, {args.entries} entries at {args.rate:g}/s")
            rows.append(asyncio.run(run(design, url, args.sessions, args.entries, args.rate, servers)))
            progress(f"  {rows[-1]}")
    table = markdown_table(["design", "streams", "entries", "p50 ms", "p99 ms", "max ms", "reader connections",
                            "bench process CPU %", "server CPU %"],
                           [[r["design"], r["streams"], r["entries"], r["p50_ms"], r["p99_ms"], r["max_ms"],
                             r["connections"], r["process_cpu_pct"], r["server_cpu_pct"]] for r in rows])
    problems = [f"{r['design']}: {r['received']} of {r['entries']} entries read" for r in rows
                if r["received"] < r["entries"]]
    out = write_results("reads", args.out, {"rows": rows, "problems": problems}, table)
    _plot(out / "reads.png", rows)
    return verdict("reads", problems)


def _plot(path: Any, rows: list[dict[str, Any]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    xs = list(range(len(rows)))
    labels = [f"{r['design']}\n({r['connections']} conn)" for r in rows]
    lat.bar([x - 0.2 for x in xs], [r["p50_ms"] for r in rows], 0.4, label="p50")
    lat.bar([x + 0.2 for x in xs], [r["p99_ms"] for r in rows], 0.4, label="p99")
    lat.set(xticks=xs, xticklabels=labels, ylabel="write -> read latency (ms)",
            title=f"one reader of {rows[0]['streams']} streams", yscale="log")
    cpu.bar([x - 0.2 for x in xs], [r["server_cpu_pct"] for r in rows], 0.4, label="server(s)")
    cpu.bar([x + 0.2 for x in xs], [r["process_cpu_pct"] for r in rows], 0.4, label="bench process (reader, writer)")
    cpu.set(xticks=xs, xticklabels=labels, ylabel="CPU, % of one core", title="what following them costs")
    save_figure(fig, path, [lat, cpu])
