"""Helpers for the playground's browser tests: open the page with a key, read what it shows,
and the session totals the server's own event log implies."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from cdp import Browser, Page
from gateway_harness import GwStack, read_sse

KEY = "playground-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TOOLS_LOADED = "document.querySelectorAll('#tools input').length >= 5"

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
