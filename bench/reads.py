"""``turnstream bench reads``: how a reader of many sessions' event streams wakes, on one server
and on a 3-master cluster, side by side.

A writer XADDs to S streams (random ones, ``--rate`` entries/s in all; ``--burst`` at a time, to as many
streams, in one pipeline, as a decoder's step writes its sessions' chunks); one reader follows them all
from their cursors.  For every entry: receive time - write time.  Also: the connections the reader
holds, its CPU time and the server's (summed over a cluster's masters; the writer's commands
included, the same on every design).  The designs:

* ``server``   one server: one blocking XREAD over every stream (``runtime.bus.ServerReads``);
* ``server-tracked``  one server: a tracked connection woken by invalidations, one XREAD of the
               streams that changed (``runtime.tracked_reads.ServerTrackedReads``, the default);
* ``tracked``  a cluster: per master, a tracked connection woken by invalidations, pipelined
               XREADs of the streams that changed (``runtime.tracked_reads.ClusterReads``);
* ``per-slot`` a cluster: one blocking XREAD per stream, each on its own connection -- the only
               way to block on streams of different slots (a command cannot span slots);
* ``server-pushed``  one server: a design not in the product yet, measured here before it is built.
               The writer's script XADDs the entry and PUBLISHes it on the stream's own channel with the
               id before it (``PUSH``); the reader SUBSCRIBEs to the streams' channels on one connection
               and takes each entry from its push, with no read round trip, whenever the push follows its
               cursor (else, a gap: an XREAD from the cursor repairs it, ``PushedReads``).

Printed beside the CPU shares: each side's CPU per entry written (µs; the reads of the entries written
before the clock starts, one a stream, count too).  The writer's part is in the bench
process's figure, the same on every design but ``server-pushed``, whose writes run a script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import resource
import time
from typing import Any

import redis

from bench.common import markdown_table, percentile, progress, save_figure, verdict, write_results
from gateway.frames import stream_pos
from runtime import bus
from runtime.tracked_reads import entry_rows
from schemas import keys
from turnstream.embedded import EmbeddedRedis
from turnstream.embedded_cluster import EmbeddedCluster


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# XADD one entry and PUBLISH "<id before it> <its id> <data>" on the stream's channel (its own name).
PUSH = """
local before = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])
redis.call('PUBLISH', KEYS[1], (before[1] and before[1][1] or '0-0') .. ' ' .. id .. ' ' .. ARGV[1])
return id
"""


async def _write(r: Any, streams: list[str], n: int, rate: float, pushed: bool = False, burst: int = 1) -> None:
    """``n`` entries at ``rate`` a second: one at a time to random streams, or ``burst`` at a time to as many
    distinct ones in one pipeline, as a decoder's step writes its sessions' chunks."""
    rng = random.Random(1)
    sha = await r.script_load(PUSH) if pushed else None

    def write(target: Any, stream: str, data: bytes) -> Any:  # on the client: a coroutine; on a pipeline: queued
        return bus.add_to(target, stream, data) if sha is None else target.execute_command("EVALSHA", sha, 1,
                                                                                           stream, data)

    done = 0
    while done < n:
        k = min(burst, n - done, len(streams))
        picks = [rng.choice(streams)] if k == 1 else rng.sample(streams, k)
        data = repr(time.time()).encode()
        if k == 1:
            await write(r, picks[0], data)
        else:
            async with r.pipeline(transaction=False) as pipe:
                for stream in picks:
                    write(pipe, stream, data)
                await pipe.execute()
        done += k
        await asyncio.sleep(k / rate)


class PushedReads:
    """``server-pushed``'s reader (a bench prototype, not the product's): ``read(streams, count, block_ms)``
    as ``runtime.bus.many_reader``'s.  One listener connection SUBSCRIBEd to every stream's channel keeps
    the pushes that arrive; a read hands out, per stream, the pushed entries past its cursor while each
    push's "id before it" is the last one handed out.  A push that does not follow (entries written before
    the subscription, or by a writer that does not push) marks its stream broken: one XREAD from its cursor
    reads what was missed, and the pushes after it follow again."""

    def __init__(self, r: Any) -> None:
        self.r = r
        kw = r.connection_pool.connection_kwargs
        self.listener = r.connection_pool.connection_class(**{**kw, "socket_timeout": None})
        self.pending: dict[str, list[tuple[bytes, bytes, bytes]]] = {}
        self.broken: set[str] = set()
        self.arrived = asyncio.Event()
        self._task: asyncio.Task | None = None

    connections = 2  # the listener, and the client's connection for the repairs

    async def open(self, streams: list[str]) -> None:
        await self.listener.connect()
        await self.listener.send_command("SUBSCRIBE", *streams)
        for _ in streams:
            await self.listener.read_response()
        self.broken.update(streams)  # what came before the subscription: read once
        self._task = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            kind, channel, payload = await self.listener.read_response()
            if kind == b"message":
                before, entry_id, data = payload.split(b" ", 2)
                self.pending.setdefault(channel.decode(), []).append((before, entry_id, data))
                self.arrived.set()

    async def read(self, streams: dict[str, str], count: int, block_ms: int) -> list[tuple[str, list]]:
        if self._task is not None and self._task.done():
            self._task.result()  # the listener failed: its error, not a read that waits for ever
        if not self.pending and not self.broken & streams.keys():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(block_ms / 1000):
                    await self.arrived.wait()
        self.arrived.clear()
        got: dict[str, list] = {}
        after = dict(streams)  # each stream's cursor past what this read hands out
        pending, self.pending = self.pending, {}
        for stream, pushes in pending.items():
            if stream in self.broken or stream not in after:
                continue  # its repair reads them; not followed now
            for before, entry_id, data in pushes:
                if stream_pos(entry_id.decode()) <= stream_pos(after[stream]):
                    continue  # read already
                if before.decode() != after[stream]:
                    self.broken.add(stream)
                    break
                got.setdefault(stream, []).append((entry_id, {bus.FIELD: data}))
                after[stream] = entry_id.decode()
        repair = {stream: after[stream] for stream in self.broken if stream in after}
        if repair:  # one XREAD for every gap (one server); a stream whose reply is full may have more
            self.broken -= repair.keys()
            for name, rows in await self.r.xread(repair, count=count) or ():  # raw: fields flat, as sent
                stream = name.decode()
                if len(rows) >= count:
                    self.broken.add(stream)
                got.setdefault(stream, []).extend(entry_rows(rows))
        return list(got.items())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.listener.disconnect()


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


async def run(design: str, url: str, sessions: int, n: int, rate: float, servers: list[str],
              burst: int = 1) -> dict[str, Any]:
    r, w = bus.connect(url), bus.connect(url)
    streams = [keys.events(f"{design}-{i}") for i in range(sessions)]  # fresh streams for each design
    for s in streams:
        await bus.add(w, s, repr(time.time()).encode())  # every stream exists; these count too
    lat: list[float] = []
    reader: Any = None
    if design == "server-pushed":
        reader = PushedReads(r)
        await reader.open(streams)  # before the clock: subscribing is once per stream, not per entry
    elif design != "per-slot":
        reader = bus.many_reader(r, tracked=design != "server")
    cpu0, server0, t0 = _cpu(), _server_cpu(servers), time.monotonic()
    follow = _per_slot(r, streams, n + sessions, lat) if reader is None else _many(reader, streams, n + sessions, lat)
    await asyncio.gather(follow, _write(w, streams, n, rate, pushed=design == "server-pushed", burst=burst))
    wall, cpu, server_cpu = time.monotonic() - t0, _cpu() - cpu0, _server_cpu(servers) - server0
    conns = sessions if reader is None else reader.connections  # per-slot: one blocked connection per stream
    if reader is not None:
        await reader.aclose()
    await r.aclose()
    await w.aclose()
    lat = lat[sessions:]
    return {"design": design, "streams": sessions, "entries": n, "received": len(lat), "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat), "connections": conns,
            "process_cpu_pct": round(100 * cpu / wall, 1), "server_cpu_pct": round(100 * server_cpu / wall, 1),
            "process_us_per_entry": round(1e6 * cpu / n, 1), "server_us_per_entry": round(1e6 * server_cpu / n, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream bench reads", description=__doc__)
    ap.add_argument("--sessions", type=int, default=300, help="streams the reader follows")
    ap.add_argument("--entries", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=500.0, help="entries per second, all streams together")
    ap.add_argument("--burst", type=int, default=1, help="entries written together, to as many streams, in one "
                                                         "pipeline (a decoder's step writes about S/2)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.burst < 1:
        ap.error("--burst must be at least 1")
    rows = []
    with EmbeddedRedis() as server, EmbeddedCluster(3, replicas=0) as c:
        masters = [node.url for node in c.nodes[: c.n_masters]]
        for design, url, servers in (("server", server.url, [server.url]), ("server-tracked", server.url, [server.url]),
                                     ("server-pushed", server.url, [server.url]),
                                     ("tracked", c.url, masters), ("per-slot", c.url, masters)):
            progress(f"reads: {design}, {args.sessions} streams, {args.entries} entries at {args.rate:g}/s"
                     + (f", {args.burst} at a time" if args.burst > 1 else ""))
            rows.append(asyncio.run(run(design, url, args.sessions, args.entries, args.rate, servers, args.burst)))
            progress(f"  {rows[-1]}")
    table = markdown_table(["design", "streams", "entries", "p50 ms", "p99 ms", "max ms", "reader connections",
                            "bench process CPU %", "server CPU %", "bench process µs/entry", "server µs/entry"],
                           [[r["design"], r["streams"], r["entries"], r["p50_ms"], r["p99_ms"], r["max_ms"],
                             r["connections"], r["process_cpu_pct"], r["server_cpu_pct"], r["process_us_per_entry"],
                             r["server_us_per_entry"]] for r in rows])
    problems = [f"{r['design']}: {r['received']} of {r['entries']} entries read" for r in rows
                if r["received"] < r["entries"]]
    out = write_results("reads", args.out, {"rows": rows, "problems": problems}, table)
    _plot(out / "reads.png", rows)
    return verdict("reads", problems)


def _plot(path: Any, rows: list[dict[str, Any]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    xs = list(range(len(rows)))
    labels = [f"{r['design'].replace('-', '-' + chr(10))}\n({r['connections']} conn)" for r in rows]
    lat.bar([x - 0.2 for x in xs], [r["p50_ms"] for r in rows], 0.4, label="p50")
    lat.bar([x + 0.2 for x in xs], [r["p99_ms"] for r in rows], 0.4, label="p99")
    lat.set(xticks=xs, xticklabels=labels, ylabel="write -> read latency (ms)",
            title=f"one reader of {rows[0]['streams']} streams", yscale="log")
    cpu.bar([x - 0.2 for x in xs], [r["server_cpu_pct"] for r in rows], 0.4, label="server(s)")
    cpu.bar([x + 0.2 for x in xs], [r["process_cpu_pct"] for r in rows], 0.4, label="bench process (reader, writer)")
    cpu.set(xticks=xs, xticklabels=labels, ylabel="CPU, % of one core", title="what following them costs",
            ylim=(0, 1.3 * max(max(r["server_cpu_pct"], r["process_cpu_pct"]) for r in rows)))  # room for the legend
    save_figure(fig, path, [lat, cpu])
