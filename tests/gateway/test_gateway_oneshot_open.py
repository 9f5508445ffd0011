"""gateway.oneshot.open_session: a session whose start fails leaves no watch in the relay."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.oneshot import open_session


class RecordingRelay:
    """Stands in for the relay: records subscriptions (the relay itself is tested on a real server)."""

    def __init__(self) -> None:
        self.subs: list[object] = []

    async def subscribe(self, sid: str, after: Any, stop_turn: int = 0) -> object:
        sub = SimpleNamespace(session=sid)
        self.subs.append(sub)
        return sub

    def unsubscribe(self, sub: object) -> None:
        self.subs.remove(sub)


class Context:
    async def fits(self, messages: Any, tools: Any, max_tokens: int, sent: bool, prefill: str) -> int:
        return max_tokens


class Ops:
    def __init__(self, start_error: BaseException | None) -> None:
        self.start_error = start_error

    async def create(self, who: Any, messages: Any, **kw: Any) -> str:
        return "s1"

    async def start(self, sid: str, route_key: str) -> None:
        if self.start_error is not None:
            raise self.start_error


PLAN = SimpleNamespace(messages=[{"role": "user", "content": "hi"}], tools=[], params={"max_tokens": 8}, meta={})


async def test_a_start_that_fails_leaves_no_subscription() -> None:
    relay = RecordingRelay()
    state = SimpleNamespace(context=Context(), ops=Ops(ConnectionError("redis went away")), relay=relay)
    with pytest.raises(ConnectionError):
        await open_session(state, None, PLAN)
    assert relay.subs == []
    state.ops = Ops(None)
    sid, sub = await open_session(state, None, PLAN)
    assert sid == "s1" and relay.subs == [sub]
