"""The playground's states in headless Chromium, each as the header pill, the banner and the
transcript show it: a cancel mid-call and one while the session is starting, New session
while one runs, the turn limit, a failure; and a session rebuilt from the server's event log
-- a reload mid-session that then follows it live, a link to a session with follow-ups, a link
opened without the key.  The ReplayEngine scripts every turn.  Needs a ``chromium`` binary."""

from __future__ import annotations

import pytest
from cdp import Browser, find_chromium
from gateway_harness import GwStack
from playground_page import (KEY, SAME_COLOUR, SLOW_CALL, STREAMING, TOOLS_LOADED, TWO_CALLS, WEATHER, calls,
                             cancel_mid_call, keyed_stack, open_playground, server_log, session_id, session_status,
                             set_replay, shown_totals, start_run, totals_of, view, wait_state)

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
gw = keyed_stack  # the module's stack: it requires an API key; debug_sleep is among its tools


# --------------------------------------------------------------------------- cancelling
async def test_cancel_mid_call(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await start_run(browser, gw, [SLOW_CALL, "never reached"])
        v = await cancel_mid_call(page)
        [call], [turn] = v["calls"], v["turns"]
        assert call["state"] == "cancelled" and call["pill"] == "cancelled: arguments cut off"
        assert turn["finish"] == "cancelled" and turn["foot"] == "cancelled before the turn finished"
        assert v["status"] == "cancelled" and [(e["reason"], e["state"]) for e in v["ended"]] == [("cancelled", "cancelled")]
        assert await page.eval(SAME_COLOUR), "the header pill and the banner say the same thing"
        assert v["send"] is False and v["cancel"] is True
        assert session_status(gw, session_id(v)) == "cancelled"
        assert page.errors == []


async def test_cancel_while_starting(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw)
        await page.wait_for(TOOLS_LOADED)
        await set_replay(page, [SLOW_CALL, "never reached"])
        at_click = await page.eval("""(() => {
          document.getElementById('send').click();  // the create request is in flight: no session id yet
          const seen = [document.body.dataset.state, document.getElementById('cancel').disabled];
          document.getElementById('cancel').click();
          return seen; })()""")
        assert at_click == ["starting", False]
        v = await wait_state(page, "cancelled")
        sid = session_id(v)
        assert session_status(gw, sid) == "cancelled"
        assert [e["reason"] for e in v["ended"]] == ["cancelled"] and v["status"] == "cancelled"
        assert all(t["finish"] for t in v["turns"]) and all(c["state"] != "streaming" for c in v["calls"])
        log = await server_log(gw, sid)
        assert log[-1]["body"] == {"type": "session.ended", "reason": "cancelled", "content": ""}
        assert page.errors == []


async def test_new_session_while_one_runs_cancels_it(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await start_run(browser, gw, [SLOW_CALL, "never reached"])
        await page.wait_for(STREAMING)
        sid = session_id(await view(page))
        await page.click("#new")
        v = await view(page)
        assert (v["state"], v["search"], v["turns"], v["ended"], v["send"]) == ("idle", "", [], [], False)
        log = await server_log(gw, sid)  # ends at the session's end
        assert log[-1]["body"]["reason"] == "cancelled" and session_status(gw, sid) == "cancelled"
        assert page.errors == []


# --------------------------------------------------------------------------- the turn limit, a failure
async def test_the_turn_limit_is_shown_as_a_stop_not_an_answer(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw)
        await page.wait_for(TOOLS_LOADED)
        await page.type("#max-turns", "1")
        await set_replay(page, TWO_CALLS)
        await page.click("#send")
        v = await wait_state(page, "stopped", "done", timeout_s=60)
        assert v["status"] == "stopped: turn limit" and [e["reason"] for e in v["ended"]] == ["max_turns"]
        assert v["ended"][0]["text"].startswith("Stopped: the session reached its turn limit")
        assert await page.eval(SAME_COLOUR) and not any(t["final"] for t in v["turns"])
        assert page.errors == []


async def test_a_failed_session_says_so(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await start_run(browser, gw, ["Checking.\n" + calls(WEATHER), "{{ results[7] }}"])  # turn 1 cannot render
        v = await wait_state(page, "failed", "done", "stopped", timeout_s=60)
        assert v["status"] == "failed" and [e["state"] for e in v["ended"]] == ["failed"]
        why = v["ended"][0]["text"]  # the error event's message, e.g. "decode <worker> failed: ..."
        assert why.startswith("Failed: decode") and why.endswith("replay script turn 1: list object has no element 7")
        assert await page.eval(SAME_COLOUR)
        assert [(c["name"], c["state"]) for c in v["calls"]] == [("get_weather", "done")], "what ran stays shown"
        assert v["turns"][0]["foot"].startswith("called 1 tool") and v["send"] is False
        assert page.errors == []


# --------------------------------------------------------------------------- reload and shared links
SLEEP = {"name": "debug_sleep", "arguments": {"text": "slept well", "seconds": 4}}
THREE_TURNS = ["Checking the weather first.\n" + calls(WEATHER),
               "Now something slow.\n" + calls(SLEEP),
               "All done: {{ results[0] }}."]
REBUILT = "[...document.querySelectorAll('.note')].some(n => n.textContent.startsWith('rebuilt from'))"


def steady(v: dict) -> dict:
    """What a rebuilt page must show as the live one did (timings aside)."""
    return {"user": v["user"], "turns": [{k: t[k] for k in ("turn", "finish", "final", "kv", "content", "foot")}
                                         for t in v["turns"]],
            "calls": [{k: c[k] for k in ("name", "state", "args", "result")} for c in v["calls"]],
            "ended": v["ended"], "totals": shown_totals(v)}


async def test_a_reload_mid_session_rebuilds_it_and_follows_it_live(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await start_run(browser, gw, THREE_TURNS)
        await page.wait_for("Boolean(document.querySelector('.call[data-name=debug_sleep][data-state=running]'))")
        sid = session_id(await view(page))
        await page.reload()
        await page.wait_for(REBUILT)
        v = await view(page)  # rebuilt while the tool still sleeps
        assert v["state"] == "running" and v["status"] == "following live" and session_id(v) == sid
        assert [(c["name"], c["state"], c["result"]) for c in v["calls"]] == [
            ("get_weather", "done", v["calls"][0]["result"]), ("debug_sleep", "running", None)]
        assert len(v["user"]) == 1 and [t["turn"] for t in v["turns"]] == [0, 1]

        v = await wait_state(page, "done")
        assert [c["state"] for c in v["calls"]] == ["done", "done"] and v["calls"][1]["result"] == "slept well"
        assert [t["turn"] for t in v["turns"]] == [0, 1, 2] and v["turns"][2]["final"]
        assert v["turns"][2]["content"] == "All done: slept well."
        assert shown_totals(v) == totals_of(await server_log(gw, sid))
        assert page.errors == []

        shared = await open_playground(browser, gw, path=f"/?session={sid}")  # the link, on another tab
        w = await wait_state(shared, "done")
        assert steady(w) == steady(v) and shared.errors == []


async def test_a_link_to_a_session_with_follow_ups_rebuilds_every_exchange(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await start_run(browser, gw, [SLOW_CALL, "You said: {{ user }}."])
        await cancel_mid_call(page)
        await page.type("#message", "never mind, just say hi")
        await page.click("#send")
        await page.wait_for("document.querySelectorAll('.ended').length === 2")
        live = await wait_state(page, "done")
        await page.reload()
        await page.wait_for(REBUILT)
        rebuilt = await wait_state(page, "done")
        assert [u["text"] for u in rebuilt["user"]][1:] == ["never mind, just say hi"]
        assert steady(rebuilt) == steady(live) and [e["reason"] for e in rebuilt["ended"]] == ["cancelled", "stop"]
        assert page.errors == []


async def test_a_link_without_the_key_asks_for_it(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        owner = await start_run(browser, gw)
        sid = session_id(await wait_state(owner, "done"))
        page = await open_playground(browser, gw, path=f"/?session={sid}", key=None)
        v = await wait_state(page, "error")
        assert v["status"] == "key required" and f"Session {sid} needs the API key" in v["banner"]
        await page.type("#key", KEY)
        v = await wait_state(page, "done")
        assert steady(v) == steady(await view(owner)) and v["banner"] is None
        assert page.errors and all("status of 401" in e for e in page.errors), page.errors
