"""A minimal Chrome DevTools Protocol client for the playground test (headless Chromium,
no extra dependency: the protocol is JSON over a WebSocket)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1280,860", "--hide-scrollbars"]


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class CdpError(RuntimeError):
    """A DevTools command failed, or the browser did not come up."""


class Browser:
    """``async with Browser(path) as b: page = await b.open(url)``."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.profile = tempfile.mkdtemp(prefix="turnstream-chromium-")
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}

    async def __aenter__(self) -> Browser:
        self.proc = subprocess.Popen([self.executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port, path = await self._endpoint()
        self.ws = await websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None)
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        await self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def _endpoint(self, timeout_s: float = 30.0) -> tuple[str, str]:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if marker.exists() and len(lines := marker.read_text().split()) >= 2:
                return lines[0], lines[1]
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited with {self.proc.returncode}")
            await asyncio.sleep(0.1)
        raise CdpError("chromium did not open its DevTools port")

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            fut = self._waiting.pop(msg.get("id", -1), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict:
        msg_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = fut
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        await self.ws.send(json.dumps(msg))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return reply["result"]

    async def open(self, url: str) -> Page:
        target = (await self.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await self.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        page = Page(self, session)
        await page.send("Page.enable")
        await page.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 860, "deviceScaleFactor": 1,
                                                               "mobile": False})
        await page.send("Page.navigate", {"url": url})
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict:
        return await self.browser.send(method, params, self.session)

    async def eval(self, expression: str) -> Any:
        reply = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                     "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise CdpError(f"page script failed: {reply['exceptionDetails'].get('text')}: {expression[:80]}")
        return reply["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self._true(expression):
            if time.monotonic() > deadline:
                raise CdpError(f"timed out waiting for {expression}")
            await asyncio.sleep(0.1)

    async def _true(self, expression: str) -> bool:
        try:
            return bool(await self.eval(expression))
        except CdpError:
            return False  # e.g. the document is still loading

    async def screenshot(self) -> bytes:
        return base64.b64decode((await self.send("Page.captureScreenshot", {"format": "png"}))["data"])
