"""A one-consumer queue for the per-token hops inside a process: an engine's deltas to the turn that
streams them, the relay's frames to the client they are for.

``asyncio.Queue`` serves any number of producers and consumers, bounded or not, with ``join``: each
``put_nowait`` also counts an unfinished task and clears an event, and each ``get`` looks its loop up
again.  A hop with one consumer needs a deque and the one future that consumer waits on while it is
empty: the same order and the same wake-up, for a fraction of the calls per item.  A consumer that is
cancelled while it waits loses nothing: an item stays queued until ``get`` returns it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """FIFO of items for ONE consumer (see the module doc); unbounded (a caller bounds it by ``qsize``)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> T:
        """The oldest item; ``asyncio.QueueEmpty`` when there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> T:
        """The oldest item, once there is one."""
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("a Mailbox has one consumer; another is waiting")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()
