"""Named stand-ins for the gateway's relay in unit tests of what reads it (the relay itself is tested
on a real server in ``test_gateway_relay.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.relay import Dropped


class DroppedSubscription:
    """A subscription the relay dropped (a slow client) before any event."""

    last_id = "0-0"

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Any]:
        raise Dropped("slow", self.last_id)
        yield  # an async generator
