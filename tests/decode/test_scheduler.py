"""Scheduler without a model: admission under memory pressure, pin eviction order, preemption, budgets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine_harness import FakeClock
from workers.decode.native.block_manager import BlockManager
from workers.decode.native.config import EngineConfig
from workers.decode.engine import SamplingParams
from workers.decode.native.pins import PinTable
from workers.decode.native.scheduler import Scheduler
from workers.decode.native.sequence import Sequence, SequenceStatus

BS = 4


def _scheduler(num_blocks: int = 16, budget: int = 64, max_seqs: int = 8) -> Scheduler:
    cfg = EngineConfig(model="unused", block_size=BS, num_blocks=num_blocks, max_num_batched_tokens=budget,
                       max_num_seqs=max_seqs, pin_max_share=1.0)
    pins = PinTable(num_blocks, default_s=5.0, max_s=60.0, clock=FakeClock())
    return Scheduler(cfg, BlockManager(num_blocks, BS), pins, eos_token_ids=frozenset())


def _seq(session: str, n: int, first: int = 0, max_tokens: int = 100, max_total: int = 1000) -> Sequence:
    return Sequence(rid=f"{session}-{first}", session=session, token_ids=list(range(first, first + n)),
                    params=SamplingParams(max_tokens=max_tokens), block_size=BS, max_total_tokens=max_total)


def _step(s: Scheduler, token: int = 7) -> dict[Sequence, int]:
    batch = s.schedule()
    chunks = dict(batch.chunks)
    sampled = [token for seq, n in batch.items() if seq.num_computed_tokens + n == seq.num_tokens]
    s.postprocess(batch, sampled)
    s.blocks.check_integrity(s.tables())
    return chunks


def _pinned(s: Scheduler, session: str, n: int, first: int, seconds: float) -> Sequence:
    seq = _seq(session, n, first, max_tokens=1)
    s.add(seq)
    s.pin(session, seconds)  # requested while running: applies at the turn's end
    while seq.status is not SequenceStatus.FINISHED:
        _step(s)
    return seq


def test_admission_evicts_the_pin_with_the_largest_wait_times_blocks() -> None:
    s = _scheduler(num_blocks=16)
    _pinned(s, "a", 16, first=100, seconds=20.0)  # holds 4 blocks for 20 s: cost 80
    _pinned(s, "b", 16, first=200, seconds=2.0)  # 4 blocks for 2 s: cost 8
    assert s.pins.num_blocks == 8
    c = _seq("c", 39, first=300)  # 10 blocks: one pin must go
    s.add(c)
    _step(s)
    assert c.status is SequenceStatus.RUNNING
    assert s.pins.get("a") is None and s.pins.get("b") is not None


def test_a_decode_that_needs_a_block_takes_pins_before_preempting() -> None:
    s = _scheduler(num_blocks=6)
    _pinned(s, "p", 8, first=100, seconds=30.0)  # 2 blocks
    run = _seq("r", 15, first=0)  # 4 blocks; its 17th token needs a fifth block
    s.add(run)
    while run.num_computed_tokens < 17:
        _step(s)
    assert s.pins.get("p") is None and s.num_preemptions == 0


def test_without_pins_the_newest_running_sequence_is_preempted_and_requeued_first() -> None:
    s = _scheduler(num_blocks=8)
    old, new = _seq("old", 15, first=0), _seq("new", 15, first=100)
    s.add(old)
    s.add(new)
    while s.num_preemptions == 0:
        _step(s)
    assert new.status is SequenceStatus.WAITING and new.block_table == [] and new.num_computed_tokens == 0
    assert s.waiting_continuations[0] is new and old.status is SequenceStatus.RUNNING
    s.finish(old, "length")
    s.release("old")
    _step(s)
    assert new.status is SequenceStatus.RUNNING  # readmitted, recomputing its tokens


def test_token_budget_chunks_prefill_and_decodes_go_first() -> None:
    s = _scheduler(num_blocks=64, budget=10)
    a = _seq("a", 3)
    s.add(a)
    _step(s)  # a: 3-token prefill
    b = _seq("b", 30, first=100)
    s.add(b)
    assert _step(s) == {a: 1, b: 9}
    assert _step(s) == {a: 1, b: 9}
    assert s.prefill_tokens_computed == 3 + 18


def test_continuation_queue_goes_first_and_aborted_waiting_sequences_are_skipped() -> None:
    s = _scheduler(max_seqs=1)
    new, gone, cont = _seq("n", 5), _seq("g", 5, first=50), _seq("c", 5, first=90)
    cont.continuation = gone.continuation = True
    for seq in (new, gone, cont):
        s.add(seq)
    s.abort(gone)
    assert s.num_waiting == 2
    _step(s)
    assert list(s.running.values()) == [cont]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 3), st.booleans(),
                          st.sampled_from(["none", "pin", "release", "abort"])), min_size=1, max_size=10),
       st.integers(11, 24))  # a 40-token prompt needs 10 blocks, plus one to generate
def test_random_workloads_always_finish_with_consistent_blocks(requests: list, num_blocks: int) -> None:
    """Small pools, shared sessions, pins, aborts: every request ends, integrity holds every step."""
    s = _scheduler(num_blocks=num_blocks, budget=16, max_seqs=4)
    seqs = []
    for i, (n, max_tokens, session, continuation, event) in enumerate(requests):
        # like the core, cap a sequence's length at the pool's capacity: alone, it always fits
        seq = _seq(f"s{session}", n, first=10 * session, max_tokens=max_tokens, max_total=BS * num_blocks)
        seq.rid, seq.continuation = f"r{i}", continuation
        s.add(seq)
        seqs.append((seq, event))
    for step in range(2000):
        if not s.has_work():
            break
        _step(s, token=step % 5)
        seq, event = seqs[step % len(seqs)]
        if event == "pin":
            s.pin(seq.session, 3.0)
        elif event == "release":
            s.release(seq.session)
        elif event == "abort" and step % 7 == 0:
            s.abort(seq)
        s.blocks.check_integrity(s.tables())
        s.pins.check_integrity()
    assert not s.has_work() and all(seq.status is SequenceStatus.FINISHED for seq, _ in seqs)
    assert s.pins.num_blocks <= num_blocks
    assert s.blocks.num_free + len({b for p in s.pins.pins.values() for b in p.seq.block_table}) == num_blocks


def test_pins_that_would_free_nothing_are_kept() -> None:
    s = _scheduler(num_blocks=8)
    pinned = _pinned(s, "p", 9, first=0, seconds=30.0)  # 2 full blocks (published) + 1 partial tail
    assert len(pinned.block_table) == 3
    run = _seq("r", 20, first=0)  # same first 8 tokens: shares the pin's 2 full blocks, 3 more of its own
    s.add(run)
    _step(s)
    assert s.pins.get("p") is not None
    new = _seq("n", 16, first=500)  # 4 blocks; 2 free; the pin could free only its tail block
    s.add(new)
    _step(s)
    assert new.status is SequenceStatus.WAITING and s.pins.get("p") is pinned
