"""The playground (``/``) in headless Chromium, used as a user would, on a stack that requires
an API key: a run with two tool calls and a follow-up, a wrong key, the chat completions
route, and a 390 x 844 phone where every control is reachable.  No console errors, except the
401s a missing or wrong key gets.  The ReplayEngine scripts every turn.  Needs a ``chromium``
binary (Debian: ``apt-get install chromium``).  States and rebuilds: ``..._states.py``."""

from __future__ import annotations

import json

import pytest
from cdp import Browser, find_chromium
from gateway_harness import GwStack
from playground_page import (KEY, SAME_COLOUR, SLOW_CALL, TOOLS_LOADED, TWO_CALLS, WEATHER, calls, cancel_mid_call,
                             keyed_stack, open_playground, server_log, session_id, set_replay, shown_totals,
                             totals_of, view, wait_state)

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
gw = keyed_stack  # the module's stack: it requires an API key; debug_sleep is among its tools


# --------------------------------------------------------------------------- a run and a follow-up
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
