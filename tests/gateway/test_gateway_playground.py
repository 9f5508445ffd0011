"""The playground (``/``) in headless Chromium: it runs a session with tool calls and renders
the live stream -- content, each call with its streamed arguments, each result, timings and
the KV reuse of each turn.  Needs a ``chromium`` binary (Debian: ``apt-get install chromium``).

The screenshot goes to ``docs/playground.png`` when that file does not exist yet or when
``TURNSTREAM_UPDATE_SCREENSHOT=1``; otherwise to a temporary directory."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from cdp import Browser, find_chromium
from gateway_harness import GwStack

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
GATEWAY_CONFIG = dict(replay_rate=150)  # the default ReplayEngine script: two parallel calls, then an answer
DOCS = Path(__file__).resolve().parents[2] / "docs" / "playground.png"

RENDERED = """(() => ({
  state: document.body.dataset.state,
  user: [...document.querySelectorAll('.user')].map(u => u.textContent),
  calls: [...document.querySelectorAll('.call')].map(c => ({
    name: c.dataset.name, state: c.dataset.state, args: c.querySelector('.args').textContent,
    result: (c.querySelector('.result') || {}).textContent || null,
    timing: c.querySelector('.timing').textContent})),
  turns: [...document.querySelectorAll('.turn')].map(t => ({
    turn: t.dataset.turn, finish: t.dataset.finish || null,
    kv: t.querySelector('.kv') ? {...t.querySelector('.kv').dataset} : null,
    kvText: (t.querySelector('.kv-text') || {}).textContent || null,
    content: [...t.querySelectorAll('.content')].map(c => c.textContent).join(''),
    foot: t.querySelector('.turn-foot').textContent})),
  ended: (document.querySelector('.ended') || {dataset: {}}).dataset.reason || null,
}))()"""


def _screenshot_path() -> Path:
    if not DOCS.exists() or os.environ.get("TURNSTREAM_UPDATE_SCREENSHOT") == "1":
        DOCS.parent.mkdir(exist_ok=True)
        return DOCS
    return Path(tempfile.mkdtemp(prefix="turnstream-playground-")) / "playground.png"


async def test_playground_runs_a_session_and_renders_its_events(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await browser.open(gw.url + "/")
        await page.wait_for("document.querySelectorAll('#tools input').length >= 5")
        await page.eval("document.getElementById('send').click()")
        await page.wait_for("document.body.dataset.state === 'ended'", timeout_s=60)
        view = await page.eval(RENDERED)
        png = await page.screenshot()
    out = _screenshot_path()
    out.write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert view["ended"] == "stop" and len(view["user"]) == 1
    calls = {c["name"]: c for c in view["calls"]}
    assert set(calls) == {"get_weather", "book_restaurant"}, json.dumps(view, indent=1)
    assert json.loads(calls["get_weather"]["args"]) == {"city": "Paris", "date": "today"}
    assert json.loads(calls["book_restaurant"]["args"])["restaurant"] == "Chez Nous"
    for c in calls.values():
        assert c["state"] == "done" and c["result"] and "ran" in c["timing"] and "dispatched" in c["timing"]
    turn0, turn1 = view["turns"]
    assert turn0["finish"] == "tool_calls" and turn1["finish"] == "stop"
    for t in view["turns"]:
        assert t["kv"] is not None and "prompt tokens" in t["kvText"] and "tok/s" in t["foot"]
    assert turn0["content"].startswith("I'll check the weather in Paris")
    assert "Enjoy your evening!" in turn1["content"]
    assert json.loads(calls["get_weather"]["result"])["city"] == "Paris"
