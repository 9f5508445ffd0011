"""``turnstream chat``: create a session and print its live event stream, readably.

Content is printed as it arrives; each tool call when it is dispatched, each tool result
when it lands, and the final answer.  Exit code 0 when the session ends normally.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import websockets

_TTY = sys.stdout.isatty()


def _c(code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if _TTY else text


class Printer:
    """Renders session events as a conversation transcript."""

    def __init__(self, out: Any = sys.stdout) -> None:
        self.out = out
        self.at_line_start = True
        self.final: dict[str, Any] | None = None
        self.t0: float | None = None

    def _line(self, text: str) -> None:
        if not self.at_line_start:
            self.out.write("\n")
        self.out.write(text + "\n")
        self.out.flush()
        self.at_line_start = True

    def _ms(self, ev: dict[str, Any]) -> str:
        if self.t0 is None:
            self.t0 = ev.get("ts", 0.0)
        return f"{(ev.get('ts', 0.0) - self.t0) * 1000:7.0f} ms"

    def event(self, ev: dict[str, Any]) -> None:
        body = ev["body"]
        kind = body["type"]
        stamp = _c("2", f"[{self._ms(ev)}]")
        if kind == "turn.started":
            cached = body.get("cached_tokens", 0)
            self._line(_c("1;34", f"── turn {ev['turn']} ") + _c("2", f"(prompt {body.get('prompt_tokens', 0)} tokens, "
                                                                         f"{cached} from KV cache) {stamp}"))
            self.out.write(_c("1", "assistant › "))
            self.at_line_start = False
        elif kind in ("content.delta", "reasoning.delta"):
            self.out.write(body["text"] if kind == "content.delta" else _c("2;3", body["text"]))
            self.out.flush()
            self.at_line_start = body["text"].endswith("\n")
        elif kind == "tool_call.ready":
            self._line(_c("33", f"  ⚙ call {body['name']}({body['arguments']}) dispatched ") + stamp)
        elif kind == "tool_call.invalid":
            self._line(_c("31", f"  ✗ invalid call {body.get('name', '')}: {body.get('error', '')} ") + stamp)
        elif kind == "tool.started":
            self._line(_c("2", f"  ▶ {body['name']} started on {body.get('worker', '?')} ") + stamp)
        elif kind == "tool.result":
            mark = _c("31", "✗") if body.get("is_error") else _c("32", "✓")
            self._line(f"  {mark} {body['name']} → {body['content']} " + _c("2", f"({body.get('duration_ms', 0):.1f} ms) ")
                       + stamp)
        elif kind == "turn.restarted":
            self._line(_c("31", f"  ↻ turn {ev['turn']} restarted: {body.get('reason', '')}"))
        elif kind == "error":
            self._line(_c("31", f"  error: {body['message']}"))
        elif kind == "session.ended":
            self.final = body
            self._line(_c("1;32", f"── session ended: {body['reason']} ") + stamp)
            if body.get("content"):
                self._line(_c("1", "final answer › ") + body["content"].strip())


async def chat(url: str, message: str, max_turns: int = 8, api_key: str | None = None,
               extra: dict[str, Any] | None = None) -> int:
    """Run one session to its end, printing the stream; 0 when it ended normally."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"messages": [{"role": "user", "content": message}], "max_turns": max_turns, **(extra or {})}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30.0) as http:
        resp = await http.post("/v1/sessions", json=body)
    if resp.status_code >= 400:
        print(f"turnstream chat: {resp.status_code} {resp.text}", file=sys.stderr)
        return 1
    sid = resp.json()["id"]
    printer = Printer()
    printer._line(_c("1", "you › ") + message + _c("2", f"   (session {sid})"))
    ws_url = url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/ws"
    async with websockets.connect(ws_url, additional_headers=headers) as ws:
        async for frame in ws:
            printer.event(json.loads(frame))
    ok = printer.final is not None and printer.final["reason"] in ("stop", "max_turns")
    return 0 if ok else 1
