"""How each side of ``bench agent`` runs one task, and what it observed (``TaskRun``).

    client_task(http, url, task, early=False)    the agent loop in the client, over chat completions:
                                                 stream a turn, run its tools, send the whole conversation
                                                 back (``early``: start each tool as soon as its call's
                                                 deltas close, the best a client can do)
    session_task(http, url, task)                the loop in the server: one session, its events over SSE

Times are wall clock (``time.time()``), comparable with the tools' own stamps.  A call "closes" when
the client could first know it was complete (the next call's first delta, or the turn's end) or,
in a session, when the parser published ``tool_call.ready``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.agent_trace import Task, grammar
from bench.agent_tools import registry

SERVED = "agent-bench"


@dataclass
class TurnObs:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, arguments) as parsed
    closed: dict[str, float] = field(default_factory=dict)  # call ref -> when it closed
    first_token: float | None = None  # the turn's first token reached the client (a session: turn.started)
    end: float = 0.0  # the turn's end reached the client
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    text: str = ""


@dataclass
class TaskRun:
    task: str
    start: float = 0.0
    end: float = 0.0
    turns: list[TurnObs] = field(default_factory=list)
    error: str = ""

    @property
    def wall_s(self) -> float:
        return self.end - self.start


# --------------------------------------------------------------------------- the client loop
async def client_task(http: httpx.AsyncClient, url: str, task: Task, tools: list[dict[str, Any]],
                      early: bool = False, tag: str = "") -> TaskRun:
    run, messages, reg = TaskRun(task.id, start=time.time()), task.messages(tag), registry()
    try:
        for turn in task.turns:
            obs, calls, running = TurnObs(), {}, {}
            run.turns.append(obs)
            body = {"model": SERVED, "messages": messages, "tools": tools, "tool_choice": "auto", "temperature": 0,
                    "max_tokens": len(turn.ids) + 8, "stream": True, "stream_options": {"include_usage": True},
                    "structured_outputs": {"grammar": grammar(turn)}}
            async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
                async for chunk in _sse_json(resp):
                    _take_chunk(chunk, obs, calls, running, reg, early)
            for i in calls:
                _close(i, obs, calls, running, reg, start=True)  # the naive loop starts every tool here
            results = await asyncio.gather(*(running[i] for i in sorted(calls)))
            if calls:
                messages = messages + [_assistant(calls)] + [
                    {"role": "tool", "tool_call_id": calls[i]["id"], "content": r.content}
                    for i, r in zip(sorted(calls), results)]
    except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    run.end = time.time()
    return run


def _take_chunk(chunk: dict[str, Any], obs: TurnObs, calls: dict[int, dict[str, Any]],
                running: dict[int, asyncio.Task], reg: Any, early: bool) -> None:
    now = time.time()
    if chunk.get("usage"):
        u = chunk["usage"]
        obs.prompt_tokens, obs.completion_tokens = u["prompt_tokens"], u["completion_tokens"]
        obs.cached_tokens = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    for choice in chunk.get("choices", []):
        obs.first_token = obs.first_token or now  # the first chunk (vLLM: its role, sent with the first token)
        if choice.get("finish_reason"):
            obs.end = now
        delta = choice.get("delta") or {}
        if delta.get("content"):
            obs.text += delta["content"]
            obs.first_token = obs.first_token or now
        for tc in delta.get("tool_calls") or []:
            obs.first_token = obs.first_token or now
            i = tc["index"]
            if i not in calls:
                for j in calls:  # a new call begins: every earlier one is complete
                    _close(j, obs, calls, running, reg, start=early)
                calls[i] = {"id": tc.get("id") or f"call_{i}", "name": "", "arguments": ""}
            fn = tc.get("function") or {}
            calls[i]["name"] += fn.get("name") or ""
            calls[i]["arguments"] += fn.get("arguments") or ""


def _close(i: int, obs: TurnObs, calls: dict[int, dict[str, Any]], running: dict[int, asyncio.Task], reg: Any,
           start: bool) -> None:
    """Call ``i`` is complete: note when (once), and start its tool if ``start`` and not yet started."""
    c = calls[i]
    if "ref" not in c:
        args = json.loads(c["arguments"] or "{}")
        c["ref"] = args.get("ref", f"?{i}")
        obs.calls.append((c["name"], args))
        obs.closed[c["ref"]] = time.time()
    if start and i not in running:
        running[i] = asyncio.ensure_future(reg.run(c["name"], c["arguments"]))


def _assistant(calls: dict[int, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[i]["id"], "type": "function",
         "function": {"name": calls[i]["name"], "arguments": calls[i]["arguments"]}} for i in sorted(calls)]}


# --------------------------------------------------------------------------- the server loop
async def session_task(http: httpx.AsyncClient, url: str, task: Task, tools: list[dict[str, Any]],
                       tag: str = "") -> TaskRun:
    run = TaskRun(task.id, start=time.time())
    body = {"messages": task.messages(tag), "tools": [t["function"]["name"] for t in tools],  # server tools
            "max_turns": len(task.turns), "max_tokens": max(len(t.ids) for t in task.turns) + 8, "temperature": 0,
            "structured_outputs": [{"grammar": grammar(t)} for t in task.turns]}
    try:
        r = await http.post(url + "/v1/sessions", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        async with http.stream("GET", url + r.json()["events_url"]) as resp:
            async for ev in _sse_json(resp):
                if _take_event(ev, run):
                    break
    except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    run.end = time.time()
    return run


def _take_event(ev: dict[str, Any], run: TaskRun) -> bool:
    """Fold one session event into ``run``; True once the session ended."""
    body, now, k = ev["body"], time.time(), ev["turn"]
    kind = body["type"]
    while len(run.turns) <= k:
        run.turns.append(TurnObs())
    obs = run.turns[k]
    if kind == "turn.started":  # published with the turn's first token
        obs.prompt_tokens, obs.cached_tokens = body.get("prompt_tokens", 0), body.get("cached_tokens", 0)
        obs.first_token = obs.first_token or now
    elif kind == "content.delta":
        obs.text += body["text"]
    elif kind == "tool_call.ready":
        args = json.loads(body["arguments"])
        obs.calls.append((body["name"], args))
        obs.closed[args.get("ref", "?")] = ev["ts"]
    elif kind == "turn.ended":
        obs.completion_tokens, obs.end = body.get("completion_tokens", 0), now
    elif kind in ("error", "tool_call.invalid"):
        run.error = run.error or f"{kind}: {json.dumps(body)[:300]}"
    return kind == "session.ended"


async def _sse_json(resp: httpx.Response):
    """The JSON of each ``data:`` line of a server-sent event stream (``[DONE]`` ends it)."""
    async for line in resp.aiter_lines():
        if line.startswith("data: "):
            if line == "data: [DONE]":
                return
            yield json.loads(line[6:])
