"""Named stand-ins for the gateway's relay and session operations in unit tests of what uses them
(the relay itself is tested on a real server in ``test_gateway_relay.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from gateway.relay import Dropped
from runtime.session import Status


class DroppedSubscription:
    """A subscription the relay dropped (a slow client) before any event."""

    last_id = "0-0"

    def __init__(self) -> None:
        self.ended = asyncio.Event()
        self.ended.set()

    def backlog(self) -> bool:
        return False

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Any]:
        raise Dropped("slow", self.last_id)
        yield  # an async generator


class CancelRecordingOps:
    """Stands in for ``SessionOps`` where a run cancels: every session is running; records the cancels."""

    def __init__(self) -> None:
        self.cancelled: list[tuple[str, int]] = []
        self.sessions = SimpleNamespace(get=self._get)

    async def _get(self, sid: str) -> Any:
        return SimpleNamespace(status=Status.ACTIVE, turn=0)

    async def cancel_unchecked(self, sid: str, turn: int) -> None:
        self.cancelled.append((sid, turn))
