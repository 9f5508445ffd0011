"""The decoder's chunking: the first delta at once, then by count or time; a chunk dates from its first delta."""

from __future__ import annotations

import time

from workers.decode.chunks import Coalescer
from workers.decode.engine import GenerateDelta


def test_a_chunk_dates_from_its_oldest_delta_and_flushes_first_count_or_time() -> None:
    co = Coalescer(n=3, ms=1000)
    before = time.time()
    co.add(GenerateDelta("a", 1))
    assert co.due(0.0)  # the first delta leaves at once
    text, n, since = co.take(0.0)
    assert (text, n) == ("a", 1) and before <= since <= time.time()
    co.add(GenerateDelta("b", 1))
    first_taken = co.since
    time.sleep(0.01)
    co.add(GenerateDelta("c", 1))
    assert not co.due(0.5) and co.timeout(0.5) == 0.5
    co.add(GenerateDelta("d", 1))
    assert co.due(0.5)  # three tokens buffered
    assert co.take(0.5) == ("bcd", 3, first_taken)
    co.add(GenerateDelta("e", 1))
    assert co.due(1.5) and co.take(1.5)[:2] == ("e", 1)  # a second since the last flush
