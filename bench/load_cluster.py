"""The load benchmark's brokers: one embedded server, or (``--cluster``) a 3-master Valkey Cluster
with a plain server beside it for the tool queues; and how a cluster's work spreads over its masters.

Per master, from the run's start to its end: commands (``INFO commandstats``), the CPU seconds of
its process, and -- from ``CLUSTER SLOT-STATS`` (cpu-usec per slot, ``cluster-slot-stats-enabled``)
-- the CPU spent on the slots of the run's sessions (the per-token path: token logs, event logs,
session records; every such key carries ``{sid}``) and on every other slot (global keys: job
streams, heartbeats, routes, load, active sessions, wake streams).  ``spread`` is the largest
deviation of a master's share from the mean, in percent.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from runtime import cluster as rcluster
from turnstream.embedded import EmbeddedRedis
from turnstream.embedded_cluster import SLOTS, EmbeddedCluster

MASTERS = 3


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commands(r: redis.Redis) -> int:
    return sum(v["calls"] for v in r.info("commandstats").values())


def spread(values: list[float]) -> float:
    """The largest deviation from the mean, in percent of the mean."""
    mean = sum(values) / len(values)
    return 100 * max(abs(v - mean) for v in values) / mean if mean else 0.0


@dataclass
class Broker:
    url: str
    queue_url: str
    pids: dict[str, int]  # "redis", or "redis:<port>" per master (and "queue")
    cluster: EmbeddedCluster | None = None

    def commands(self) -> int:
        return sum(n["commands"] for n in self.nodes().values())

    def command_calls(self) -> dict[str, int]:
        """Calls of every command so far (those run inside scripts included), by name, over the data nodes."""
        out: dict[str, int] = {}
        for port in self._ports():
            with redis.Redis(port=port) as r:
                for k, v in r.info("commandstats").items():
                    name = k.removeprefix("cmdstat_")
                    out[name] = out.get(name, 0) + v["calls"]
        return out

    def _ports(self) -> list[int]:
        """The nodes serving data now: the masters of a cluster, or the one server."""
        servers = self.cluster.masters() if self.cluster else []
        return [s.port for s in servers] or [int(self.url.rsplit(":", 1)[1].split("/")[0])]

    def nodes(self) -> dict[int, dict[str, Any]]:
        """Per node serving data now: its commands and CPU seconds so far."""
        out = {}
        for port in self._ports():
            with redis.Redis(port=port) as r:
                pid = int(r.info("server")["process_id"])
                out[port] = {"commands": commands(r), "cpu_s": cpu_seconds(pid)}
        return out

    def slot_cpu(self) -> dict[int, dict[int, int]]:
        """Per master: cpu-usec of each of its slots so far (cluster only)."""
        out: dict[int, dict[int, int]] = {}
        for node in self.cluster.masters() if self.cluster else []:
            with redis.Redis(port=node.port) as r:
                rows = r.execute_command("CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, SLOTS - 1)
            out[node.port] = {slot: dict(zip(st[::2], st[1::2]))[b"cpu-usec"] for slot, st in rows}
        return out


@contextlib.contextmanager
def broker(use_cluster: bool) -> Iterator[Broker]:
    """The broker of one run: an embedded server, or a 3+3 cluster and a queue server."""
    if not use_cluster:
        with EmbeddedRedis() as server:
            yield Broker(server.url, "", {"redis": server.proc.pid})
        return
    with EmbeddedRedis() as queue, EmbeddedCluster(MASTERS, replicas=1, node_timeout_ms=5000,
                                                   extra_args=("--cluster-slot-stats-enabled", "yes")) as c:
        pids = {f"redis:{m.port}": m.proc.pid for m in c.masters()}
        yield Broker(c.url, queue.url, {**pids, "queue": queue.proc.pid}, c)


def balance(before: dict[int, dict], after: dict[int, dict], slots0: dict[int, dict[int, int]],
            slots1: dict[int, dict[int, int]], sids: list[str]) -> dict[str, Any]:
    """How the run's work spread over the masters (see the module doc)."""
    session_slots = {rcluster.slot(f"{{{sid}}}") for sid in sids}
    rows = []
    for port in sorted(after):
        cpu = {s: us - slots0.get(port, {}).get(s, 0) for s, us in slots1.get(port, {}).items()}
        rows.append({"port": port, "commands": after[port]["commands"] - before[port]["commands"],
                     "cpu_s": round(after[port]["cpu_s"] - before[port]["cpu_s"], 2),
                     "sessions": sum(1 for sid in sids if rcluster.slot(f"{{{sid}}}") in cpu),
                     "session_slots_cpu_ms": sum(us for s, us in cpu.items() if s in session_slots) / 1000,
                     "other_slots_cpu_ms": sum(us for s, us in cpu.items() if s not in session_slots) / 1000})
    return {"masters": rows,
            "per_token_spread_pct": round(spread([r["session_slots_cpu_ms"] for r in rows]), 1),
            "commands_spread_pct": round(spread([r["commands"] for r in rows]), 1),
            "sessions_spread_pct": round(spread([r["sessions"] for r in rows]), 1)}
