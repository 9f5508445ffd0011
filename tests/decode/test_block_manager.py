"""Block manager: prefix cache, ref counts, LRU eviction, donor adoption; integrity after every operation.

A shadow KV store records, for every slot, the token prefix whose KV was written there; every
admission checks that the reused slots hold exactly the new sequence's own prefixes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from workers.decode.native.block_manager import BlockManager, chain_hash
from workers.decode.engine import SamplingParams
from workers.decode.errors import BlockIntegrityError, NoFreeBlocks
from workers.decode.native.sequence import Sequence

BS = 4


def _seq(tokens: list[int], rid: str = "r", session: str = "s") -> Sequence:
    return Sequence(rid=rid, session=session, token_ids=list(tokens), params=SamplingParams(), block_size=BS,
                    max_total_tokens=10_000)


class Shadow:
    """What KV each slot holds: the token prefix ending at that position."""

    def __init__(self) -> None:
        self.kv: dict[tuple[int, int], tuple[int, ...]] = {}

    def compute(self, bm: BlockManager, seq: Sequence, n: int) -> None:
        for p in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            self.kv[(seq.block_table[p // BS], p % BS)] = tuple(seq.token_ids[:p + 1])
        seq.num_computed_tokens += n
        bm.publish(seq)

    def check(self, seq: Sequence) -> None:
        for p in range(seq.num_computed_tokens):
            assert self.kv.get((seq.block_table[p // BS], p % BS)) == tuple(seq.token_ids[:p + 1])


def _admit(bm: BlockManager, seq: Sequence, donor: Sequence | None = None) -> None:
    plan = bm.plan(seq, donor)
    assert bm.can_allocate(plan)
    bm.allocate(seq, plan, donor)


def test_full_blocks_are_reused_and_the_last_token_is_always_computed() -> None:
    bm, shadow = BlockManager(16, BS), Shadow()
    a = _seq(list(range(12)))
    _admit(bm, a)
    shadow.compute(bm, a, 12)
    b = _seq(list(range(12)))  # identical prompt: 2 full blocks reused, the third recomputed
    _admit(bm, b)
    assert b.num_computed_tokens == 8 and b.block_table[:2] == a.block_table[:2]
    shadow.check(b)
    c = _seq(list(range(6)) + [99] * 6)  # shares only the first block
    _admit(bm, c)
    assert c.num_computed_tokens == 4
    bm.check_integrity([a.block_table, b.block_table, c.block_table])


def test_freed_blocks_stay_cached_and_are_evicted_lru_tail_first() -> None:
    bm, shadow = BlockManager(4, BS), Shadow()
    a = _seq(list(range(9)))
    _admit(bm, a)
    shadow.compute(bm, a, 8)  # 2 full blocks published, 1 partial
    bm.deallocate(a)
    assert bm.num_cached == 2 and bm.num_free == 4
    bm.check_integrity([])
    filler = _seq([50] * 9)  # 3 blocks: the 2 empty ones, then the LRU cached one (a's second block)
    _admit(bm, filler)
    b = _seq(list(range(9)))
    plan = bm.plan(b)
    assert plan.num_cached_tokens == 4  # a's first block survived, its second was evicted
    bm.check_integrity([filler.block_table])


def test_hash_is_chained_and_token_checked() -> None:
    assert chain_hash(None, [1, 2]) != chain_hash(chain_hash(None, [0]), [1, 2])
    bm = BlockManager(8, BS)
    a = _seq([1, 2, 3, 4, 5])
    _admit(bm, a)
    a.num_computed_tokens = 4
    bm.publish(a)
    h = a.block_hashes[0]
    assert bm.lookup(h, [1, 2, 3, 4]) == a.block_table[0]
    assert bm.lookup(h, [1, 2, 3, 5]) is None  # a collision with other tokens is not a hit


def test_donor_partial_tail_is_adopted_and_leaves_the_donor() -> None:
    bm, shadow = BlockManager(16, BS), Shadow()
    donor = _seq(list(range(10)))
    _admit(bm, donor)
    shadow.compute(bm, donor, 10)
    donor.append_token(10)  # sampled, never computed: KV covers 10 tokens (2 full blocks + 2 in the tail)
    cont = _seq(list(range(11)) + [20, 21, 22])
    plan = bm.plan(cont, donor)
    assert plan.tail == donor.block_table[2] and plan.num_cached_tokens == 10
    _admit(bm, cont, donor)
    assert cont.block_table[2] not in donor.block_table
    shadow.check(cont)
    bm.deallocate(donor)
    bm.check_integrity([cont.block_table])


def test_errors_are_typed() -> None:
    bm = BlockManager(2, BS)
    big = _seq(list(range(20)))
    with pytest.raises(NoFreeBlocks):
        bm.allocate(big, bm.plan(big))
    with pytest.raises(BlockIntegrityError):
        bm._release(0)
    bm.empty.append(0)  # corrupt: a block twice in the empty queue
    with pytest.raises(BlockIntegrityError):
        bm.check_integrity()


PREFIXES = [[0] * 12, [1, 2, 3, 0, 1, 2, 3, 0, 1, 2], [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]]


class BlockMachine(RuleBasedStateMachine):
    """Random admit / compute / decode / finish / preempt / donor sequences, with integrity checks."""

    def __init__(self) -> None:
        super().__init__()
        self.bm, self.shadow = BlockManager(12, BS), Shadow()
        self.live: list[Sequence] = []  # hold blocks, may still compute
        self.parked: list[Sequence] = []  # finished, holding blocks (like pins)
        self.n = 0

    def _tables(self) -> list[list[int]]:
        return [s.block_table for s in self.live + self.parked]

    @rule(data=st.data(), extra=st.lists(st.integers(0, 3), min_size=1, max_size=6), use_donor=st.booleans())
    def admit(self, data: st.DataObject, extra: list[int], use_donor: bool) -> None:
        donor = self.parked[0] if use_donor and self.parked else None
        source = donor.token_ids if donor else data.draw(st.sampled_from(PREFIXES))
        cut = data.draw(st.one_of(st.just(len(source)), st.integers(0, len(source))))
        tokens = source[:cut] + extra
        self.n += 1
        seq = _seq(tokens, rid=f"r{self.n}")
        plan = self.bm.plan(seq, donor)
        if not self.bm.can_allocate(plan):
            return
        self.bm.allocate(seq, plan, donor)
        self.shadow.check(seq)
        if donor is not None:
            self.parked.remove(donor)
            self.bm.deallocate(donor)
        self.live.append(seq)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def compute(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.live))
        if seq.num_uncomputed_tokens == 0:
            return
        n = data.draw(st.integers(1, seq.num_uncomputed_tokens))
        self.shadow.compute(self.bm, seq, n)

    @rule()
    def compute_all(self) -> None:
        for seq in self.live:
            if seq.num_uncomputed_tokens:
                self.shadow.compute(self.bm, seq, seq.num_uncomputed_tokens)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), token=st.integers(0, 3))
    def decode_token(self, data: st.DataObject, token: int) -> None:
        seq = data.draw(st.sampled_from(self.live))
        if seq.num_uncomputed_tokens:
            return
        seq.append_token(token)
        if self.bm.can_append(seq):
            self.bm.append(seq)
        else:
            seq.token_ids.pop()

    @precondition(lambda self: self.live)
    @rule(data=st.data(), park=st.booleans())
    def finish(self, data: st.DataObject, park: bool) -> None:
        seq = data.draw(st.sampled_from(self.live))
        self.live.remove(seq)
        if park and seq.num_computed_tokens:
            self.parked.append(seq)
        else:
            self.bm.deallocate(seq)

    @precondition(lambda self: self.parked)
    @rule()
    def unpark(self) -> None:
        self.bm.deallocate(self.parked.pop(0))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.live))
        self.bm.deallocate(seq)
        seq.reset_kv()
        self.live.remove(seq)

    @rule()
    def reset_cache(self) -> None:
        self.bm.reset_prefix_cache()

    @invariant()
    def consistent(self) -> None:
        self.bm.check_integrity(self._tables())
        for seq in self.live + self.parked:
            self.shadow.check(seq)


TestBlockMachine = BlockMachine.TestCase
TestBlockMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
