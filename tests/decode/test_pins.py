"""PinTable: deadlines, caps, expiry, and the eviction order (largest remaining wait x blocks first)."""

from __future__ import annotations

from engine_harness import FakeClock
from workers.decode.engine import SamplingParams
from workers.decode.native.pins import PinTable
from workers.decode.native.sequence import Sequence, SequenceStatus


def _finished(session: str, num_blocks: int) -> Sequence:
    seq = Sequence(rid=f"{session}-r", session=session, token_ids=[1] * (4 * num_blocks), params=SamplingParams(),
                   block_size=4, max_total_tokens=1000)
    seq.block_table = list(range(num_blocks))
    seq.status = SequenceStatus.FINISHED
    return seq


def _table(max_blocks: int = 100) -> tuple[PinTable, FakeClock]:
    clock = FakeClock()
    return PinTable(max_blocks, default_s=5.0, max_s=30.0, clock=clock), clock


def test_default_deadline_then_set_extend_and_cap() -> None:
    pins, clock = _table()
    assert pins.hold(_finished("a", 2)) == []
    assert pins.deadline("a") == clock.now + 5.0
    pins.set_deadline("a", 12.0)
    assert pins.deadline("a") == clock.now + 12.0
    pins.set_deadline("a", 1000.0)
    assert pins.deadline("a") == clock.now + 30.0  # capped
    pins.check_integrity()


def test_duration_requested_before_the_turn_ends_is_used() -> None:
    pins, clock = _table()
    pins.set_deadline("a", 9.0)  # the worker knew the tool before the turn finished
    pins.hold(_finished("a", 1))
    assert pins.deadline("a") == clock.now + 9.0


def test_pins_expire_and_are_returned_for_release() -> None:
    pins, clock = _table()
    a, b = _finished("a", 2), _finished("b", 3)
    pins.hold(a)
    pins.set_deadline("b", 20.0)
    pins.hold(b)
    clock.advance(5.0)
    assert pins.expire() == [a]
    assert pins.num_blocks == 3 and pins.get("a") is None
    clock.advance(15.0)
    assert pins.expire() == [b] and pins.num_blocks == 0


def test_release_take_and_replacement() -> None:
    pins, _ = _table()
    old, new = _finished("a", 2), _finished("a", 3)
    pins.hold(old)
    assert pins.hold(new) == [old]  # a newer turn replaces the session's pin
    assert pins.take("a") is new and pins.num_blocks == 0
    pins.hold(_finished("b", 1))
    assert [s.session for s in pins.release("b")] == ["b"]
    assert pins.release("b") == []


def test_share_cap_evicts_largest_remaining_wait_times_blocks() -> None:
    pins, clock = _table(max_blocks=10)
    a, b, c = _finished("a", 4), _finished("b", 2), _finished("c", 4)
    pins.set_deadline("a", 10.0)  # cost 10 * 4 = 40
    pins.hold(a)
    pins.set_deadline("b", 25.0)  # cost 25 * 2 = 50
    pins.hold(b)
    pins.set_deadline("c", 3.0)  # cost 3 * 4 = 12; 4 + 2 + 4 = 10 blocks fit the cap
    assert pins.hold(c) == []
    d = _finished("d", 1)  # 11 blocks > 10: b (cost 50) goes, not the newest pin
    assert pins.hold(d) == [b]
    assert pins.num_blocks == 9 <= pins.max_blocks
    clock.advance(2.0)  # a: 8 * 4 = 32, c: 1 * 4 = 4, d: 3 * 1 = 3
    assert pins.evict() is a
    assert pins.evict(exclude="c") is d
    assert pins.evict(exclude="c") is None
    pins.check_integrity()


def test_a_pin_larger_than_the_cap_is_not_held() -> None:
    pins, _ = _table(max_blocks=3)
    big = _finished("a", 4)
    assert pins.hold(big) == [big] and len(pins) == 0


def test_zero_seconds_means_do_not_pin() -> None:
    pins, _ = _table()
    pins.hold(_finished("a", 1))
    assert len(pins.set_deadline("a", 0)) == 1 and len(pins) == 0
