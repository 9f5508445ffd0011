"""A minimal Chrome DevTools Protocol client for the playground tests (headless Chromium,
no extra dependency: the protocol is JSON over a WebSocket).

Each ``Browser.open`` gets its own browser context (its own storage, as a fresh profile would)
and a ``Page`` that records what a user would see in the console: uncaught exceptions,
``console.error`` and the browser's own error lines (a failed resource load, a 404)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
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
        self._pages: dict[str, Page] = {}

    async def __aenter__(self) -> Browser:
        # its temporary files (the profile's singleton socket dir) go in the profile, which is removed after
        tmp = Path(self.profile) / "tmp"
        tmp.mkdir()
        self.proc = subprocess.Popen([self.executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "TMPDIR": str(tmp)})
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
            if "id" not in msg:
                page = self._pages.get(msg.get("sessionId", ""))
                if page is not None:
                    page.on_event(msg["method"], msg.get("params", {}))
                continue
            fut = self._waiting.pop(msg["id"], None)
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

    async def open(self, url: str, width: int = 1280, height: int = 860, mobile: bool = False) -> Page:
        """A new tab, in a browser context of its own, showing ``url`` at ``width`` x ``height``."""
        context = (await self.send("Target.createBrowserContext"))["browserContextId"]
        target = (await self.send("Target.createTarget", {"url": "about:blank",
                                                          "browserContextId": context}))["targetId"]
        session = (await self.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        page = self._pages[session] = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        await page.viewport(width, height, mobile)
        await page.send("Page.navigate", {"url": url})
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session
        self.errors: list[str] = []  # what the console showed as errors, in order

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            e = params["entry"]
            self.errors.append(f"{e['source']}: {e['text']} {e.get('url', '')}".strip())

    async def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        await self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                               "deviceScaleFactor": 1, "mobile": mobile})
        await self.send("Emulation.setTouchEmulationEnabled", {"enabled": mobile})

    async def reload(self) -> None:
        await self.send("Page.reload", {"ignoreCache": True})

    async def click(self, selector: str) -> None:
        """Click ``selector`` with the mouse, as a user would: scrolled into view, at its centre;
        fails if something else is on top there, or if the centre is off-screen."""
        x, y = await self.reachable(selector)
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                         "clickCount": 1})

    async def reachable(self, selector: str) -> tuple[float, float]:
        """The on-screen centre of ``selector`` after scrolling it into view; CdpError if a user
        could not reach it there (off-screen, covered, or not displayed)."""
        where = await self.eval(_REACHABLE % json.dumps(selector))
        if not where or "error" in where:
            raise CdpError(f"{selector} is not reachable: {where and where['error']}")
        return where["x"], where["y"]

    async def type(self, selector: str, text: str) -> None:
        """Focus ``selector``, replace its text with ``text`` as typed input, and fire ``change``."""
        await self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); "
                        f"e.select && e.select(); }})()")
        await self.send("Input.insertText", {"text": text})
        await self.eval(f"document.querySelector({json.dumps(selector)}).dispatchEvent(new Event('change'))")

    async def press(self, key: str, code: int, modifiers: int = 0) -> None:
        """Press and release a key in the focused element (modifiers: 2 Ctrl, 4 Meta, 8 Shift)."""
        for kind in ("keyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                       "windowsVirtualKeyCode": code, "modifiers": modifiers})

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


_REACHABLE = """(() => {
  const e = document.querySelector(%s);
  if (!e) return {error: 'no such element'};
  e.scrollIntoView({block: 'center', inline: 'center'});
  const r = e.getBoundingClientRect();
  if (!r.width || !r.height) return {error: 'not displayed'};
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (x < 0 || y < 0 || x > innerWidth || y > innerHeight) return {error: `centre ${x},${y} is off-screen`};
  const hit = document.elementFromPoint(x, y);
  if (!hit || !(hit === e || e.contains(hit) || (e.labels && [...e.labels].some(l => l.contains(hit)))))
    return {error: `covered by ${hit && hit.outerHTML.slice(0, 80)}`};
  return {x, y};
})()"""
