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
from workers.decode.native.host_tier import HostTier
from workers.decode.native.sequence import Sequence

BS = 4


def _seq(tokens: list[int], rid: str = "r", session: str = "s") -> Sequence:
    return Sequence(rid=rid, session=session, token_ids=list(tokens), params=SamplingParams(), block_size=BS,
                    max_total_tokens=10_000)


class Shadow:
    """What KV each slot holds: the token prefix ending at that position (device blocks and host slots)."""

    def __init__(self) -> None:
        self.kv: dict[tuple[int, int], tuple[int, ...]] = {}
        self.host: dict[tuple[int, int], tuple[int, ...] | None] = {}

    def sync(self, bm: BlockManager) -> None:
        """Perform the copies the block manager queued, in its order, as the model runner does."""
        for out, src, dst in bm.take_copies():
            for off in range(BS):
                if out:
                    self.host[(dst, off)] = self.kv.get((src, off))
                else:
                    self.kv[(dst, off)] = self.host.get((src, off))

    def compute(self, bm: BlockManager, seq: Sequence, n: int) -> None:
        self.sync(bm)  # the runner copies before the forward pass writes
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


def test_evicted_blocks_go_to_the_host_tier_and_come_back_in_order() -> None:
    bm, shadow = BlockManager(4, BS, HostTier(4)), Shadow()
    a = _seq(list(range(13)))
    _admit(bm, a)
    shadow.compute(bm, a, 12)  # 3 full blocks published
    bm.deallocate(a)
    filler = _seq([50] * 13)  # needs 4 blocks: the empty one, then a's 3 cached blocks, tail first
    _admit(bm, filler)
    assert [c.out for c in bm.copies] == [True] * 3 and bm.offloaded_blocks == 3
    shadow.compute(bm, filler, 13)
    bm.deallocate(filler)
    b = _seq(list(range(13)) + [7, 7])
    plan = bm.plan(b)
    assert (plan.hits, len(plan.restores), plan.num_cached_tokens) == ((), 3, 12)
    _admit(bm, b)  # takes filler's cached blocks (they go out first) and copies a's back into them
    copies = bm.copies[:]
    restored = [c for c in copies if not c.out]
    assert len(restored) == 3 and [c.dst for c in restored] == b.block_table[:3]
    for c in restored:  # every block a restore writes was copied out before, never after
        assert not any(o.out and o.src == c.dst for o in copies[copies.index(c):])
    shadow.sync(bm)
    shadow.check(b)
    assert b.num_computed_tokens == 12 and bm.restored_blocks == 3
    bm.check_integrity([b.block_table])
    assert bm.plan(_seq(list(range(13)))).hits == tuple(b.block_table[:3])  # registered on the device again
    assert bm.reset_prefix_cache() >= 0 and len(bm.host) == 0


def test_a_restore_into_a_full_host_tier_keeps_its_slot_until_the_copy_back_is_queued() -> None:
    """The device block a restore takes evicts another block, whose copy out needs a host slot:
    it must not get the slot being restored from (that copy would run first and overwrite it)."""
    bm, shadow = BlockManager(4, BS, HostTier(2)), Shadow()
    a = _seq(list(range(8)) + [99])
    _admit(bm, a)
    shadow.compute(bm, a, 8)
    bm.deallocate(a)
    crowd = _seq([100] * 16)  # a's two blocks to the host tier, which is now full
    _admit(bm, crowd)
    bm.deallocate(crowd)
    d = _seq([50 + i for i in range(8)] + [98])
    _admit(bm, d)
    shadow.compute(bm, d, 8)
    bm.deallocate(d)  # two evictable blocks on the device
    live = _seq([200] * 8)
    _admit(bm, live)  # the empty blocks are gone: the next block taken evicts one of d's
    b = _seq(list(range(4)) + [97])
    plan = bm.plan(b)
    assert len(plan.restores) == 1 and bm.can_allocate(plan)
    bm.allocate(b, plan)
    shadow.sync(bm)
    shadow.check(b)  # a's first block, not d's
    bm.check_integrity([live.block_table, b.block_table])


def test_a_host_tier_full_evicts_its_least_recently_used() -> None:
    host = HostTier(2)
    assert (host.store(1, (1,)), host.store(2, (2,))) == (0, 1)
    assert host.store(1, (1,)) is None  # here already: refreshed, no copy
    assert host.store(3, (3,)) == 1 and not host.lookup(2, [2]) and host.lookup(1, [1])
    assert not host.lookup(1, [9])  # a hash collision is no hit
    host.check_integrity()
    host.free.append(0)
    with pytest.raises(BlockIntegrityError):
        host.check_integrity()


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
        self.shadow.sync(self.bm)
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
        self.shadow.sync(self.bm)
        for seq in self.live + self.parked:
            self.shadow.check(seq)


TestBlockMachine = BlockMachine.TestCase
TestBlockMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


class HostBlockMachine(BlockMachine):
    """The same, over a host tier smaller than the pool: evicted blocks come back with their own KV."""

    def __init__(self) -> None:
        super().__init__()
        self.bm = BlockManager(12, BS, HostTier(6))

    @rule()
    def crowd_out(self) -> None:
        """A sequence as large as the free pool passes through: every cached block goes to the host tier."""
        if not self.bm.num_free:
            return
        self.n += 1
        crowd = _seq([100 + self.n] * (self.bm.num_free * BS), rid=f"crowd{self.n}")
        _admit(self.bm, crowd)
        self.bm.deallocate(crowd)


TestHostBlockMachine = HostBlockMachine.TestCase
TestHostBlockMachine.settings = settings(max_examples=80, stateful_step_count=60, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
