"""The failover harness: agent sessions stream while a cluster master is SIGKILLed; its replica
takes over.

The sessions are the chaos harness's (``tests/chaos.py``: three turns, an idempotent and a
non-idempotent tool, clients that resume from their last event id).  A kill picks the master
serving the most sessions that are mid-stream, kills it, and waits until the cluster is healthy
again (its replica promoted); optionally the dead node is restarted, and rejoins as a replica.
``check`` then proves, per session, what chaos proves: the same final answer as an undisturbed
run, no event lost or repeated, the non-idempotent tool run at most once.

Recovery is measured per kill on the killed master's sessions: from the kill to the first event
*written after it* (its stream id's time is past the kill) reaching its client -- the first sign
that the promoted replica serves that session -- and to the moment every one of them had one.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from schemas import keys
from tests.chaos import Client, check


@dataclass
class Kill:
    at: float  # time.time() of the SIGKILL
    port: int
    sessions: list[Client]
    healthy_s: float = float("nan")  # kill -> the cluster says ok again (its replica promoted)
    first_s: float = float("nan")  # kill -> first post-kill event of one of its sessions at a client
    all_s: float = float("nan")  # kill -> every one of its sessions had one


@dataclass
class FailoverVerdict:
    problems: list[str]
    kills: list[Kill] = field(default_factory=list)
    reconnects: int = 0

    def summary(self) -> str:
        firsts = [k.first_s for k in self.kills]
        return (f"{len(self.kills)} master kills; kill -> cluster ok again (replica promoted): "
                f"{', '.join(f'{k.healthy_s * 1000:.0f} ms' for k in self.kills)}; kill -> first event after it: "
                f"{', '.join(f'{s * 1000:.0f} ms' for s in firsts)} (median {statistics.median(firsts) * 1000:.0f} ms); "
                f"-> every session of the killed master resumed: {', '.join(f'{k.all_s * 1000:.0f} ms' for k in self.kills)}; "
                f"{self.reconnects} client reconnects, {len(self.problems)} problems")


def _streaming(c: Client) -> bool:
    return bool(c.sid) and len(c.events) >= 3 and c.events[-1]["body"]["type"] != "session.ended"


async def _victim(cluster, clients: list[Client]) -> tuple[object, list[Client]]:
    """The master serving the most mid-stream sessions (waits until there is one)."""
    while True:
        by_port: dict[int, list[Client]] = {}
        for c in filter(_streaming, clients):
            by_port.setdefault(cluster.master_of(keys.session(c.sid)).port, []).append(c)
        if by_port:
            port, victims = max(by_port.items(), key=lambda kv: len(kv[1]))
            return next(m for m in cluster.masters() if m.port == port), victims
        await asyncio.sleep(0.05)


def _measure(kill: Kill) -> None:
    after: list[float] = []
    for c in kill.sessions:
        late = [t for ev, t in zip(c.events, c.received, strict=True) if int(ev["id"].split("-")[0]) > kill.at * 1000]
        if late:
            after.append(late[0] - kill.at)
    if after:
        kill.first_s, kill.all_s = min(after), max(after)


async def run_failover(stack, cluster, sessions: int, kills: int, start_over_s: float, timeout_s: float,
                       restart: bool = False) -> FailoverVerdict:
    workdir = Path(tempfile.mkdtemp(prefix="turnstream-failover-"))
    clients = [Client(stack.url, i, workdir / f"effects-{i}.txt") for i in range(sessions)]

    async def started(c: Client) -> None:
        await asyncio.sleep(start_over_s * c.index / max(1, sessions))
        await c.run()

    run = asyncio.ensure_future(asyncio.gather(*(started(c) for c in clients)))
    verdict = FailoverVerdict([])
    async with asyncio.timeout(timeout_s):
        for _ in range(kills):
            master, victims = await _victim(cluster, clients)
            if not await asyncio.to_thread(cluster.replicas_of, master):  # its slots and sessions would be lost
                raise AssertionError(f"master {master.port} has no replica to take over: the cluster was left "
                                     "degraded (a node killed and not restarted)")
            kill = Kill(time.time(), master.port, victims)
            verdict.kills.append(kill)
            cluster.kill(master)
            await asyncio.to_thread(cluster.wait_healthy)  # its replica took over
            kill.healthy_s = time.time() - kill.at
            if restart:
                await asyncio.to_thread(cluster.restart, master)  # rejoins as a replica of the new master
                await asyncio.to_thread(cluster.wait_healthy)
        await run
    for kill in verdict.kills:
        _measure(kill)
    verdict.problems = await check(clients)
    verdict.reconnects = sum(c.reconnects for c in clients)
    return verdict
