"""``runtime.mailbox.Mailbox``: asyncio.Queue's order and wake-up for one consumer; nothing lost to a
cancelled wait."""

from __future__ import annotations

import asyncio

import pytest

from runtime.mailbox import Mailbox


async def test_items_come_out_in_order_and_a_waiting_consumer_wakes() -> None:
    box: Mailbox[int] = Mailbox()
    assert box.empty() and box.qsize() == 0
    with pytest.raises(asyncio.QueueEmpty):
        box.get_nowait()
    getter = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    assert not getter.done()  # waits while empty
    box.put_nowait(1)
    box.put_nowait(2)
    assert await getter == 1 and box.qsize() == 1
    box.put_nowait(3)
    assert [box.get_nowait(), await box.get()] == [2, 3] and box.empty()


async def test_a_cancelled_wait_loses_nothing() -> None:
    box: Mailbox[str] = Mailbox()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await box.get()
    getter = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    box.put_nowait("a")  # arrives as the waiting consumer is cancelled: it stays queued
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert box.qsize() == 1 and await box.get() == "a"
