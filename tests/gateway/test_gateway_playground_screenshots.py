"""The README's screenshots of the playground, each from a checked run of the demo question on
an open-mode stack: ``docs/playground.png`` (desktop, 1280 x 860) and
``docs/playground-phone.png`` (a 390 x 844 phone).  Needs a ``chromium`` binary.

Re-take both (the bundled model instead of the ReplayEngine's demo script)::

    TURNSTREAM_UPDATE_SCREENSHOT=1 TURNSTREAM_SCREENSHOT_ENGINE=native \\
        .venv/bin/python -m pytest -q -p no:cacheprovider tests/gateway/test_gateway_playground_screenshots.py

A file is written only when ``TURNSTREAM_UPDATE_SCREENSHOT=1`` or when it does not exist yet,
and only after the run checks out; otherwise the picture goes to a temporary directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cdp import Browser, Page, find_chromium
from gateway_harness import GwStack
from playground_page import TOOLS_LOADED, open_playground, wait_state

from turnstream.stack import wait_for_decoders

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
ENGINE = os.environ.get("TURNSTREAM_SCREENSHOT_ENGINE", "replay")
GATEWAY_CONFIG = dict(engine=ENGINE, replay_rate=150)  # replay: the demo script (two parallel calls, an answer)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _target(name: str) -> Path:
    path = DOCS / name
    if not path.exists() or os.environ.get("TURNSTREAM_UPDATE_SCREENSHOT") == "1":
        return path
    return Path(tempfile.mkdtemp(prefix="turnstream-playground-")) / name


async def _run_demo(page: Page, gw: GwStack) -> dict[str, Any]:
    await page.wait_for(TOOLS_LOADED)
    wait_for_decoders(gw.cfg.redis_url, 1)  # the user presses Send on a stack that is up
    await page.click("#send")
    v = await wait_state(page, "done", "stopped", "failed", "cancelled", timeout_s=120)
    assert v["state"] == "done" and v["ended"][-1]["reason"] == "stop", v
    assert {c["name"] for c in v["calls"]} == {"get_weather", "book_restaurant"}, v["calls"]
    assert all(c["state"] == "done" and c["result"] for c in v["calls"]), v["calls"]
    assert v["turns"][-1]["final"] and v["turns"][-1]["content"].strip()
    assert page.errors == []
    return v


async def _save(page: Page, name: str) -> None:
    png = await page.screenshot()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    path = _target(name)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(png)


async def test_desktop_screenshot(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw, key=None)
        await _run_demo(page, gw)
        await _save(page, "playground.png")


async def test_phone_screenshot(gw: GwStack) -> None:
    async with Browser(CHROMIUM) as browser:
        page = await open_playground(browser, gw, key=None, width=390, height=844, mobile=True)
        await _run_demo(page, gw)
        await _save(page, "playground-phone.png")  # the end of the run: the last call, the answer
