"""gateway.responses.run (over gateway.runner.Run): a stream the relay dropped (a slow client) goes on
when the response is stored, so the client can resume it with ``starting_after``; one not stored cannot
be read again and is cancelled."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from standins import CancelRecordingOps, DroppedSubscription

from gateway.responses.format import ResponseStream
from gateway.responses.output import Policy, ResponseHead
from gateway.responses.run import sse
from gateway.runner import Run

HEAD = ResponseHead("s1", 1700000000, {"model": "tiny", "instructions": None, "tools": [], "tool_choice": "auto",
                                       "parallel_tool_calls": True, "metadata": {}})


class Relay:
    def __init__(self, sub: object) -> None:
        self.subs = [sub]

    def unsubscribe(self, sub: object) -> None:
        self.subs.remove(sub)


@pytest.mark.parametrize(("stored", "says", "cancelled"), [
    (object(), "starting_after=1", []),  # stored: generation goes on for the reader to resume
    (None, "cannot be resumed", [("s1", 0)]),  # store=false: nobody can read the rest
])
async def test_a_dropped_stream_goes_on_only_when_it_can_be_resumed(stored: Any, says: str, cancelled: list) -> None:
    sub, ops = DroppedSubscription(), CancelRecordingOps()
    relay = Relay(sub)
    stream = ResponseStream(HEAD, Policy())
    run = Run(SimpleNamespace(ops=ops, relay=relay), sub, "s1", stream, resumable=stored is not None)
    body = b"".join([chunk async for chunk in sse(run, stream, stored, cancel=True)]).decode()
    events = [json.loads(line.removeprefix("data: ")) for line in body.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1]["code"] == "relay_dropped" and says in events[-1]["message"], events[-1]
    assert events[-1]["sequence_number"] == 2
    assert ops.cancelled == cancelled and relay.subs == []
