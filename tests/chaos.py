"""The chaos harness: N concurrent agent sessions while workers of every type are SIGKILLed.

Each session runs three turns on the ReplayEngine (greedy-equivalent: deterministic text):
turn 0 calls an idempotent tool and a non-idempotent one (``append_line``, whose side effect is
a line in a file), turn 1 calls another tool, turn 2 answers from turn 1's result.  A killer
task SIGKILLs a random process of a random kind (decode, parser, tools, gateway) at random
moments and starts a replacement.  Clients reconnect through gateway deaths, resuming from
their last event id.  ``check`` then proves, per session: the final answer equals the
undisturbed one, the event stream has no duplicate and no gap, and the non-idempotent tool
ran at most once (exactly once unless it reported that it was interrupted).
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from workers.tools import default_registry

TOOLS_TOML = """
[registry]
include_debug = true

[python.append_line]
target = "workers.tools.debug:append_line"
"""


def script(i: int, path: Path) -> list[str]:
    calc = {"name": "calculator", "arguments": {"expression": f"{i + 2} * {i + 7}"}}
    append = {"name": "append_line", "arguments": {"path": str(path), "line": f"session {i}"}}
    weather = {"name": "get_weather", "arguments": {"city": f"Chaosville {i}"}}
    return [
        f"Session {i}: computing and booking, both at once.\n<tool_call>\n{json.dumps(calc)}\n</tool_call>\n"
        f"<tool_call>\n{json.dumps(append)}\n</tool_call>",
        "Computed {{ results[0] }}; booking said {{ results[1] }}. Now the weather.\n"
        f"<tool_call>\n{json.dumps(weather)}\n</tool_call>",
        "Final answer: the weather is {{ results[0] }}.",
    ]


async def expected_final(i: int) -> str:
    outcome = await default_registry().run("get_weather", json.dumps({"city": f"Chaosville {i}"}))
    return f"Final answer: the weather is {outcome.content}."


@dataclass
class Client:
    """One session's client: creates it, then follows its events through reconnects."""

    url: str
    index: int
    side_effects: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    received: list[float] = field(default_factory=list)  # when each event arrived (time.time())
    reconnects: int = 0
    sid: str = ""

    async def create(self) -> None:
        body = {"messages": [{"role": "user", "content": f"chaos {self.index}"}], "max_turns": 4,
                "replay": script(self.index, self.side_effects)}
        while True:
            try:
                async with httpx.AsyncClient(base_url=self.url, timeout=5) as http:
                    resp = await http.post("/v1/sessions", json=body)
                if resp.status_code == 201:
                    self.sid = resp.json()["id"]
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)  # the gateway is being restarted

    async def follow(self) -> None:
        last = "0-0"
        while True:
            try:
                async with websockets.connect(f"{self.url.replace('http', 'ws', 1)}/v1/sessions/{self.sid}/ws"
                                              f"?after={last}", open_timeout=5) as ws:
                    async for frame in ws:
                        ev = json.loads(frame)
                        self.events.append(ev)
                        self.received.append(time.time())
                        last = ev["id"]
                        if ev["body"]["type"] == "session.ended":
                            return
            except (OSError, websockets.WebSocketException, asyncio.TimeoutError):
                pass
            self.reconnects += 1
            await asyncio.sleep(0.2)

    async def run(self) -> None:
        await self.create()
        await self.follow()

    def where(self) -> str:
        """Where this session got to (for a failure message): its last events."""
        last = [(e["turn"], e["attempt"], e["src"], e["body"]["type"]) for e in self.events[-4:]]
        return f"session {self.index} ({self.sid or 'not created'}): {len(self.events)} events, last {last}"


async def finish_all(clients: list[Client], timeout_s: float) -> None:
    """Every client's session ends within ``timeout_s``, or the failure names where each one stopped."""
    tasks = [asyncio.create_task(c.run()) for c in clients]
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert not pending, f"{len(pending)} sessions did not end in {timeout_s:.0f} s:\n" + "\n".join(
        c.where() for c in clients)


async def killer(stack: Any, stop: asyncio.Event, rng: random.Random, interval: tuple[float, float],
                 kinds: tuple[str, ...], log: list[tuple[float, str]]) -> None:
    """SIGKILL a random live process of a random kind, start a replacement, repeat."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(*interval))
            return
        except asyncio.TimeoutError:
            pass
        kind = rng.choice(kinds)
        live = [p for p in stack.procs.get(kind, []) if p.poll() is None]
        if not live:
            continue
        victim = rng.choice(live)
        stack.kill(victim)
        stack.start(kind)
        log.append((time.monotonic(), f"{kind}:{victim.pid}"))


def duplicates(events: list[dict[str, Any]]) -> list[tuple]:
    marks = [(e["turn"], e["attempt"], e["src"], e["seq"]) for e in events]
    ids = [e["id"] for e in events]
    return [m for m in set(marks) if marks.count(m) > 1] + [i for i in set(ids) if ids.count(i) > 1]


def gaps(events: list[dict[str, Any]]) -> list[str]:
    """Turns whose final attempt's parser events are not exactly seq 1..n ending in turn.ended."""
    out = []
    for turn in sorted({e["turn"] for e in events}):
        attempts = [e["attempt"] for e in events if e["turn"] == turn and e["src"] == "parser"]
        if not attempts:
            continue
        final = [e for e in events if (e["turn"], e["attempt"], e["src"]) == (turn, max(attempts), "parser")]
        seqs = [e["seq"] for e in final]
        if seqs != list(range(1, len(seqs) + 1)) or final[-1]["body"]["type"] != "turn.ended":
            out.append(f"turn {turn}: seqs {seqs[:5]}..{seqs[-3:]} last {final[-1]['body']['type']}")
    return out


@dataclass
class Verdict:
    problems: list[str]
    kills: list[tuple[float, str]]
    reconnects: int


async def run_chaos(stack: Any, sessions: int, start_over_s: float, interval: tuple[float, float],
                    seed: int, timeout_s: float, kinds: tuple[str, ...] = ("decode", "parser", "tools", "gateway")
                    ) -> Verdict:
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="turnstream-chaos-"))
    clients = [Client(stack.url, i, workdir / f"effects-{i}.txt") for i in range(sessions)]
    stop, kills = asyncio.Event(), []
    chaos = asyncio.create_task(killer(stack, stop, rng, interval, kinds, kills))

    async def started(c: Client) -> None:
        await asyncio.sleep(start_over_s * c.index / max(1, sessions))
        await c.run()

    try:
        await asyncio.wait_for(asyncio.gather(*(started(c) for c in clients)), timeout_s)
    finally:
        stop.set()
        await chaos
    return Verdict(await check(clients), kills, sum(c.reconnects for c in clients))


async def check(clients: list[Client]) -> list[str]:
    problems = []
    for c in clients:
        tag = f"session {c.index} ({c.sid})"
        end = c.events[-1]["body"] if c.events else {}
        lines = c.side_effects.read_text().splitlines() if c.side_effects.exists() else []
        interrupted = any(e["body"]["type"] == "tool.result" and e["body"]["name"] == "append_line"
                          and e["body"]["is_error"] for e in c.events)
        if end.get("type") != "session.ended" or end.get("reason") != "stop":
            problems.append(f"{tag}: ended with {end}")
        elif end["content"] != await expected_final(c.index):
            problems.append(f"{tag}: final answer differs: {end['content'][:120]!r}")
        if dup := duplicates(c.events):
            problems.append(f"{tag}: duplicate events {dup[:3]}")
        if gap := gaps(c.events):
            problems.append(f"{tag}: incomplete turns {gap}")
        if len(lines) > 1 or (len(lines) == 0 and not interrupted):
            problems.append(f"{tag}: non-idempotent tool ran {len(lines)} times (interrupted={interrupted})")
    return problems
