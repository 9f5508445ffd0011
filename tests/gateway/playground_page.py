"""Helpers for the playground's browser tests: a stack that requires a key, ReplayEngine
scripts, opening the page with the key, reading what it shows, and the session totals the
server's own event log implies."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cdp import Browser, Page
from gateway_harness import GwStack, read_sse, start_stack

KEY = "playground-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TOOLS_LOADED = "document.querySelectorAll('#tools input').length >= 5"
TOOLS_TOML = "[registry]\ninclude_debug = true\n"  # debug_sleep: a tool that takes its time


@pytest.fixture(scope="module")
def keyed_stack(redis_server, tmp_path_factory) -> Iterator[GwStack]:
    """A module's stack: it requires the API key ``KEY``; debug_sleep is among its tools."""
    toml = tmp_path_factory.mktemp("playground") / "tools.toml"
    toml.write_text(TOOLS_TOML)
    stack = start_stack(redis_server.url, replay_rate=150, api_keys=(KEY,), tools_config=str(toml))
    yield stack
    stack.stop()


# --------------------------------------------------------------------------- ReplayEngine scripts
def calls(*calls: dict) -> str:
    """Tool calls as the model writes them (hermes format)."""
    return "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>\n" for c in calls).rstrip("\n")


WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "date": "today"}}
BOOKING = {"name": "book_restaurant", "arguments": {"restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}}
TWO_CALLS = ["I'll check the weather and book your table at once.\n" + calls(WEATHER, BOOKING),
             "It is {{ results[0] }} in Paris; your booking: {{ results[1] }}. Enjoy your evening!",
             "You said: {{ user }}. Anything else?"]
LONG_QUERY = " ".join(f"word{i}" for i in range(150))  # arguments that stream for a couple of seconds
SLOW_CALL = "Let me search for that.\n" + calls({"name": "search", "arguments": {"query": LONG_QUERY}})

# --------------------------------------------------------------------------- page conditions
STREAMING = """(() => { const c = document.querySelector('.call');
  return Boolean(c) && c.dataset.state === 'streaming' && c.querySelector('.args').textContent.length > 20; })()"""
SAME_COLOUR = """getComputedStyle(document.getElementById('status')).color ===
  getComputedStyle(document.querySelector('.ended')).color"""

# What the page shows, as plain data.
VIEW = """(() => {
  const q = (sel, root = document) => [...root.querySelectorAll(sel)];
  const text = (sel, root) => { const e = (root || document).querySelector(sel); return e ? e.textContent : null; };
  return {
    state: document.body.dataset.state, status: text('#status'), search: location.search,
    send: document.getElementById('send').disabled, cancel: document.getElementById('cancel').disabled,
    banner: document.getElementById('banner').hidden ? null : text('#banner'),
    message: document.getElementById('message').value,
    user: q('.user').map(u => ({text: text('.user-text', u), failed: u.classList.contains('failed'),
                                fail: text('.user-fail', u)})),
    calls: q('.call').map(c => ({name: c.dataset.name, state: c.dataset.state, pill: text('.state', c),
      args: text('.args', c), result: text('.result', c), timing: text('.timing', c),
      labels: q('.label', c).map(l => l.textContent)})),
    turns: q('.turn').map(t => ({turn: +t.dataset.turn, finish: t.dataset.finish || null,
      final: t.classList.contains('final'), kv: t.querySelector('.kv') ? {...t.querySelector('.kv').dataset} : null,
      content: q('.content', t).map(c => c.textContent).join(''), foot: text('.turn-foot', t)})),
    ended: q('.ended').map(e => ({reason: e.dataset.reason, state: e.dataset.state, text: e.textContent})),
    notes: q('.note').map(n => n.textContent),
    totals: {...document.getElementById('totals').dataset},
  };
})()"""


async def open_playground(browser: Browser, gw: GwStack, path: str = "/", key: str | None = KEY,
                          **viewport: Any) -> Page:
    """A tab on the playground; ``key`` is put in the browser's storage first, as a returning user has it."""
    page = await browser.open(gw.url + "/static/favicon.svg", **viewport)  # same origin, to reach its storage
    await page.wait_for("location.pathname === '/static/favicon.svg' && document.readyState === 'complete'")
    if key is not None:
        await page.eval(f"localStorage.setItem('turnstream-key', {json.dumps(key)})")
    await page.send("Page.navigate", {"url": gw.url + path})
    await page.wait_for("document.getElementById('key-hint') && document.getElementById('key-hint').textContent")
    return page


async def start_run(browser: Browser, gw: GwStack, script: list[str] | None = None, **viewport: Any) -> Page:
    """A tab (with the key) that sends the composer's message, under ``script`` when given."""
    page = await open_playground(browser, gw, **viewport)
    await page.wait_for(TOOLS_LOADED)
    if script is not None:
        await set_replay(page, script)
    await page.click("#send")
    return page


async def view(page: Page) -> dict[str, Any]:
    return await page.eval(VIEW)


async def set_replay(page: Page, script: list[str]) -> None:
    """Give the session a ReplayEngine script (the settings' replay box)."""
    await page.eval("document.querySelector('#settings details').open = true")
    await page.type("#replay", json.dumps(script))


async def wait_state(page: Page, *states: str, timeout_s: float = 60) -> dict[str, Any]:
    await page.wait_for(f"{json.dumps(list(states))}.includes(document.body.dataset.state)", timeout_s=timeout_s)
    return await view(page)


async def cancel_mid_call(page: Page) -> dict[str, Any]:
    """Press Cancel while the first call's arguments stream; the view once cancelled."""
    await page.wait_for(STREAMING)
    await page.click("#cancel")
    return await wait_state(page, "cancelled")


def session_status(gw: GwStack, sid: str) -> str:
    return httpx.get(f"{gw.url}/v1/sessions/{sid}", headers=AUTH, timeout=10).json()["status"]


def session_id(v: dict[str, Any]) -> str:
    return v["search"].split("session=")[1].split("&")[0]


async def server_log(gw: GwStack, sid: str) -> list[dict[str, Any]]:
    """The session's whole event log as the server replays it (SSE from the start)."""
    return await read_sse(gw.url, f"/v1/sessions/{sid}/events", headers=AUTH)


def totals_of(events: list[dict[str, Any]]) -> dict[str, int]:
    """Turns, calls and tokens of a session from its log (a restarted turn counts once)."""
    started: dict[int, dict[str, Any]] = {}
    ended: dict[int, int] = defaultdict(int)
    calls: set[tuple[int, int]] = set()
    for e in events:
        b = e["body"]
        if b["type"] == "turn.started":
            started[e["turn"]] = b
        elif b["type"] == "turn.ended":
            ended[e["turn"]] = b["completion_tokens"]
        elif b["type"] == "tool_call.begin":
            calls.add((e["turn"], b["index"]))
    return {"turns": len(started), "calls": len(calls), "completion": sum(ended.values()),
            "prompt": sum(b["prompt_tokens"] for b in started.values()),
            "cached": sum(b["cached_tokens"] for b in started.values())}


def shown_totals(v: dict[str, Any]) -> dict[str, int]:
    return {k: int(v["totals"][k]) for k in ("turns", "calls", "completion", "prompt", "cached")}
