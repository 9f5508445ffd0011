"""``while_connected``: a request answered at once (non-streaming) runs its work until the work ends or
the client leaves; both oneshot runs and Responses read how it ended from one ``Outcome``."""

from __future__ import annotations

import asyncio

import pytest

from gateway.sse import Outcome, while_connected


class ScriptedReceive:
    """An ASGI request whose client sends ``http.disconnect`` once ``leave`` is set (never otherwise)."""

    def __init__(self) -> None:
        self.leave = asyncio.Event()

    async def receive(self) -> dict:
        await self.leave.wait()
        return {"type": "http.disconnect"}


async def test_work_that_finishes_is_completed() -> None:
    async def work() -> None:
        await asyncio.sleep(0)

    outcome = await while_connected(work(), ScriptedReceive())
    assert outcome == Outcome(left=False) and outcome.completed


async def test_work_that_raises_carries_its_error_and_is_not_completed() -> None:
    async def work() -> None:
        raise ValueError("relay dropped")

    outcome = await while_connected(work(), ScriptedReceive())
    assert not outcome.left and isinstance(outcome.error, ValueError) and not outcome.completed


async def test_a_client_that_leaves_first_cancels_the_work() -> None:
    request, cancelled = ScriptedReceive(), asyncio.Event()

    async def work() -> None:
        try:
            request.leave.set()
            await asyncio.Event().wait()  # would never end on its own
        except asyncio.CancelledError:
            cancelled.set()
            raise

    outcome = await asyncio.wait_for(while_connected(work(), request), 5)
    assert outcome.left and outcome.error is None and not outcome.completed
    assert cancelled.is_set()


@pytest.mark.parametrize("left, error, completed", [(False, None, True), (True, None, False)])
def test_completed_means_finished_without_error(left: bool, error: BaseException | None, completed: bool) -> None:
    assert Outcome(left=left, error=error).completed is completed
