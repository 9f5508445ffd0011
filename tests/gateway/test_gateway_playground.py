"""The playground (``/``) in headless Chromium, as a user drives it, on a stack that requires an
API key: a run with two tool calls and a follow-up, a cancel mid-call and one while the
session is starting, a wrong key, a reload mid-session that resumes from the event log, the
chat completions route, and a 390 x 844 phone screen where every control is reachable.  No
console errors anywhere, except the 401s a missing or wrong key gets.  The ReplayEngine
scripts every turn.  Needs a ``chromium`` binary (Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from cdp import Browser, Page, find_chromium
from gateway_harness import GwStack, start_stack
from playground_page import (AUTH, KEY, TOOLS_LOADED, open_playground, server_log, session_id, set_replay,
                             shown_totals, start_run, totals_of, view, wait_state)

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
TOOLS_TOML = "[registry]\ninclude_debug = true\n"  # debug_sleep: a tool that takes its time

WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "date": "today"}}
BOOKING = {"name": "book_restaurant", "arguments": {"restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}}


def calls(*calls: dict) -> str:
    return "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>\n" for c in calls).rstrip("\n")


@pytest.fixture(scope="module")
def gw(redis_server, tmp_path_factory) -> Iterator[GwStack]:
    toml = tmp_path_factory.mktemp("playground") / "tools.toml"
    toml.write_text(TOOLS_TOML)
    stack = start_stack(redis_server.url, replay_rate=150, api_keys=(KEY,), tools_config=str(toml))
    yield stack
    stack.stop()


def session_status(gw: GwStack, sid: str) -> str:
    return httpx.get(f"{gw.url}/v1/sessions/{sid}", headers=AUTH, timeout=10).json()["status"]


# --------------------------------------------------------------------------- a run and a follow-up
TWO_CALLS = ["I'll check the weather and book your table at once.\n" + calls(WEATHER, BOOKING),
             "It is {{ results[0] }} in Paris; your booking: {{ results[1] }}. Enjoy your evening!",
             "You said: {{ user }}. Anything else?"]


async def test_two_tool_calls_then_a_follow_up(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw)
        await page.wait_for(TOOLS_LOADED)
        await set_replay(page, TWO_CALLS)
        await page.eval("document.getElementById('message').focus()")
        await page.press("Enter", 13)  # Enter sends
        running = await wait_state(page, "running")
        v = await wait_state(page, "done")
        sid = session_id(v)
        log = await server_log(gw, sid)

        assert running["send"] is True and running["cancel"] is False, "Send is disabled while a session runs"
        assert v["status"] == "done" and [e["state"] for e in v["ended"]] == ["done"]
        assert v["ended"][0]["text"].startswith("Done: the model answered")
        assert [u["text"] for u in v["user"]] == ["What's the weather in Paris today, and can you book a table "
                                                  "for 2 at Chez Nous at 19:00?"]
        by_name = {c["name"]: c for c in v["calls"]}
        assert set(by_name) == {"get_weather", "book_restaurant"}
        for c in v["calls"]:
            assert c["state"] == "done" and c["labels"] == ["arguments", "result"]
            assert "dispatched" in c["timing"] and "ran" in c["timing"]
        assert json.loads(by_name["get_weather"]["args"]) == WEATHER["arguments"]
        assert by_name["get_weather"]["args"] == '{ "city": "Paris", "date": "today" }', "spaced for reading"
        assert json.loads(by_name["get_weather"]["result"])["city"] == "Paris"
        turn0, turn1 = v["turns"]
        assert turn0["foot"].startswith("called 2 tools · ") and turn1["foot"].startswith("answered · ")
        assert not turn0["final"] and turn1["final"] and "Enjoy your evening!" in turn1["content"]
        assert shown_totals(v) == totals_of(log) and int(v["totals"]["ms"]) > 0

        await page.type("#message", "thanks")
        await page.press("Enter", 13, modifiers=2)  # Ctrl+Enter sends too
        await page.wait_for("document.querySelectorAll('.ended').length === 2")
        v = await view(page)
        assert [u["text"] for u in v["user"]][1:] == ["thanks"] and session_id(v) == sid
        assert [t["turn"] for t in v["turns"]] == [0, 1, 2] and v["turns"][2]["content"] == "You said: thanks. Anything else?"
        assert v["turns"][2]["final"] and shown_totals(v) == totals_of(await server_log(gw, sid))
        fixed = await page.eval("[document.getElementById('fixed').disabled, "
                                "document.getElementById('fixed-note').hidden, "
                                "document.getElementById('max-turns').disabled]")
        assert fixed == [True, False, False], "tools and max tokens are locked; max turns is not"
        assert page.errors == []


# --------------------------------------------------------------------------- cancelling
LONG_QUERY = " ".join(f"word{i}" for i in range(150))  # arguments that stream for a couple of seconds
SLOW_CALL = "Let me search for that.\n" + calls({"name": "search", "arguments": {"query": LONG_QUERY}})
STREAMING = """(() => { const c = document.querySelector('.call');
  return Boolean(c) && c.dataset.state === 'streaming' && c.querySelector('.args').textContent.length > 20; })()"""
SAME_COLOUR = """getComputedStyle(document.getElementById('status')).color ===
  getComputedStyle(document.querySelector('.ended')).color"""


async def cancel_mid_call(page: Page) -> dict:
    await page.wait_for(STREAMING)
    await page.click("#cancel")
    return await wait_state(page, "cancelled")


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


# --------------------------------------------------------------------------- keys
async def test_a_wrong_key_is_shown_and_not_kept(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw, key=None)
        hint = await page.eval("[document.getElementById('key').placeholder, document.getElementById('key-hint').textContent]")
        assert hint == ["required by this server", "This server requires an API key."]
        message = (await view(page))["message"]
        await page.type("#key", "not-the-key")
        await page.wait_for("document.getElementById('key').getAttribute('aria-invalid') === 'true'")
        await page.click("#send")
        v = await wait_state(page, "error")
        assert v["status"] == "key rejected" and "rejected the API key" in v["banner"]
        assert v["user"] == [{"text": message, "failed": True, "fail": "not sent: invalid API key"}]
        assert v["message"] == message, "the message is back in the composer, ready to send again"
        assert await page.eval("localStorage.getItem('turnstream-key')") is None
        assert await page.eval(SAME_COLOUR.replace("document.querySelector('.ended')",
                                                   "document.getElementById('banner')"))
        assert page.errors and all("status of 401" in e for e in page.errors), page.errors
        page.errors.clear()

        await page.type("#key", KEY)
        await page.wait_for(TOOLS_LOADED)
        assert await page.eval("localStorage.getItem('turnstream-key')") == KEY
        await page.click("#send")
        v = await wait_state(page, "done")
        assert v["banner"] is None and [u["failed"] for u in v["user"]] == [True, False]
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


# --------------------------------------------------------------------------- the chat completions route
async def test_the_same_turn_through_chat_completions(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw)
        await page.wait_for(TOOLS_LOADED)
        await page.click("input[name=route][value=chat]")
        await set_replay(page, ["Let me check.\n" + calls(WEATHER), "So it is {{ results[0] }} in Paris."])
        await page.click("#send")
        v = await wait_state(page, "done")
        assert v["search"] == "?api=chat" and [e["reason"] for e in v["ended"]] == ["tool_calls"]
        [call] = v["calls"]
        assert (call["name"], call["state"], call["pill"]) == ("get_weather", "returned", "returned to you")
        assert json.loads(call["args"]) == WEATHER["arguments"] and v["turns"][0]["content"] == "Let me check.\n"
        assert v["turns"][0]["foot"].startswith("called 1 tool · ")

        await page.type(".client-result", "sunny, 24 C")
        await page.click("#send")  # no new message: the result alone goes back, as role "tool"
        await page.wait_for("document.querySelectorAll('.ended').length === 2")
        v = await wait_state(page, "done")
        assert v["turns"][1]["content"] == "So it is sunny, 24 C in Paris." and v["turns"][1]["final"]
        assert v["notes"][-1] == "tool results sent back" and len(v["user"]) == 1
        assert shown_totals(v)["turns"] == 2 and int(v["totals"]["completion"]) > 0
        assert page.errors == []


async def test_cancel_through_chat_completions(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw, path="/?api=chat")
        await page.wait_for(TOOLS_LOADED)
        await set_replay(page, [SLOW_CALL, "never reached"])
        await page.click("#send")
        v = await cancel_mid_call(page)  # the request is aborted: the server cancels what nobody reads
        assert [(c["state"], c["pill"]) for c in v["calls"]] == [("cancelled", "cancelled: arguments cut off")]
        assert [e["reason"] for e in v["ended"]] == ["cancelled"] and v["turns"][0]["finish"] == "cancelled"
        assert page.errors == []


# --------------------------------------------------------------------------- a phone
PHONE = dict(width=390, height=844, mobile=True)
FITS = "document.documentElement.scrollWidth <= innerWidth && innerWidth === 390"
COMPOSER = ("#message", "#send", "#cancel", "#new", "#settings-toggle")
SETTINGS = ("input[name=route][value=session]", "input[name=route][value=chat]", "#key", "#max-turns",
            "#max-tokens", "#tools input[value=get_weather]", "#settings summary", "#replay")


async def test_on_a_phone_every_control_is_reachable(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw, key=None, **PHONE)
        await page.wait_for("document.body.classList.contains('settings-open')")  # a key is needed: settings open
        assert await page.eval(FITS), "no sideways scrolling"
        await page.type("#key", "not-the-key")
        await page.wait_for("document.getElementById('key').getAttribute('aria-invalid') === 'true'")
        await page.click("#send")
        assert (await wait_state(page, "error"))["status"] == "key rejected"
        assert await page.eval(FITS), "the longest states fit in the header"
        for selector in COMPOSER:
            await page.reachable(selector)
        assert all("status of 401" in e for e in page.errors), page.errors
        page.errors.clear()

        await page.type("#key", KEY)
        await page.wait_for(TOOLS_LOADED)
        await page.click("#settings summary")
        for selector in SETTINGS:
            await page.reachable(selector)
        await set_replay(page, TWO_CALLS)
        await page.click("#settings-toggle")
        assert await page.eval("getComputedStyle(document.getElementById('settings')).display") == "none"
        await page.click("#send")
        await wait_state(page, "running")
        await page.reachable("#cancel")
        v = await wait_state(page, "done")
        assert [c["state"] for c in v["calls"]] == ["done", "done"] and v["turns"][-1]["final"]
        assert await page.eval(FITS), "long arguments and results wrap"
        for selector in COMPOSER:
            await page.reachable(selector)
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
        assert v["ended"][0]["text"] == "Failed: decode failed: ReplayEngineError: replay script turn 1: list object " \
                                        "has no element 7"
        assert await page.eval(SAME_COLOUR)
        assert [(c["name"], c["state"]) for c in v["calls"]] == [("get_weather", "done")], "what ran stays shown"
        assert v["turns"][0]["foot"].startswith("called 1 tool") and v["send"] is False
        assert page.errors == []
