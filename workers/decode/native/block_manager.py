"""Paged KV blocks: allocation, reference counts, and the prefix cache.

Every block is in exactly one of three states::

    empty      ref 0, no hash     deque, taken first                    (O(1) pop)
    evictable  ref 0, hashed      OrderedDict in release order (LRU)    (O(1) revive / evict)
    in use     ref > 0            held by sequences and pins

A full block gets its hash only after its KV is written (``publish``); the hash chains the
hash of the block before it, so equal hashes mean equal prefixes; a hit also compares the
block's own token ids.  Freed blocks keep their hash and stay reusable until evicted.
Mutations come in check-then-commit pairs: ``plan``/``can_allocate``/``allocate`` and
``can_append``/``append``.

With a host tier (``workers.decode.native.host_tier``) an evictable block that is evicted is
first copied to host memory, and a prefix lookup that misses the device pool continues there:
the plan's ``restores`` are host blocks copied back into fresh device blocks.  The copies are
queued in ``copies``, in the order they must happen, and performed by the model runner before
the next forward pass writes any block (``take_copies``).  A prefix is device hits first, then
host hits: the device evicts the tail of a released sequence first, so its head stays on the
device and its tail moves to the host.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from workers.decode.errors import BlockIntegrityError, NoFreeBlocks
from workers.decode.native.host_tier import Copy, HostTier
from workers.decode.native.sequence import Sequence


def chain_hash(prev: int | None, token_ids: list[int]) -> int:
    """64-bit hash of a block's tokens chained to the hash of the block before it."""
    h = hashlib.blake2b(digest_size=8)
    if prev is not None:
        h.update(prev.to_bytes(8, "little"))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PrefixPlan:
    """What admitting a sequence would reuse and take; valid until the pool changes."""

    hits: tuple[int, ...]  # full device blocks whose KV is reused, in order
    restores: tuple[int, ...]  # prefix hashes of the host blocks that continue the prefix, in order
    tail: int | None  # a donor's partial block taken over (its first ``tail_tokens`` are valid)
    tail_tokens: int
    num_new: int  # fresh blocks for the rest of the tokens
    num_revived: int  # hits that are evictable now (they use up free capacity, as restores do)
    num_cached_tokens: int  # tokens whose KV is reused


class BlockManager:
    """Owns the block pool; knows sequences only through their token ids and block tables."""

    def __init__(self, num_blocks: int, block_size: int, host: HostTier | None = None) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.empty: deque[int] = deque(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()
        self.hash_to_block: dict[int, int] = {}
        self.host = host
        self.copies: list[Copy] = []  # queued for the runner, in order (``take_copies``)
        self.offloaded_blocks = 0
        self.restored_blocks = 0

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take (empty plus evictable)."""
        return len(self.empty) + len(self.evictable)

    @property
    def num_cached(self) -> int:
        """Free blocks that still hold reusable KV."""
        return len(self.evictable)

    def hashes(self, seq: Sequence, num_full: int) -> list[int]:
        """Chain hashes of the first ``num_full`` full blocks of ``seq`` (memoised on the sequence)."""
        for i in range(len(seq.block_hashes), num_full):
            prev = seq.block_hashes[i - 1] if i else None
            seq.block_hashes.append(chain_hash(prev, seq.block_tokens(i)))
        return seq.block_hashes

    def lookup(self, block_hash: int, token_ids: list[int]) -> int | None:
        """The cached block with this hash and exactly these tokens, if any."""
        block_id = self.hash_to_block.get(block_hash)
        if block_id is None or self.blocks[block_id].token_ids != tuple(token_ids):
            return None
        return block_id

    def take_copies(self) -> list[Copy]:
        """The copies queued since the last call, to perform in this order before the next forward pass."""
        copies, self.copies = self.copies, []
        return copies

    def freeable(self, tables: Iterable[list[int]]) -> int:
        """Blocks that would become free if every one of ``tables`` were released (no one else holds them)."""
        held = Counter(b for table in tables for b in table)
        return sum(1 for b, n in held.items() if self.blocks[b].ref_count == n)

    # ---- admission: plan -> can_allocate -> allocate ---------------------------------------
    def plan(self, seq: Sequence, donor: Sequence | None = None) -> PrefixPlan:
        """Longest reusable prefix of ``seq``; pure (no block changes).

        ``donor`` is the session's pinned, finished sequence: while its tokens match, its blocks
        are reused directly (full ones shared, the partial last one taken over); past that,
        full blocks are looked up in the prefix cache.  At least one token is always left to
        compute, so the step that finishes the prompt produces logits.
        """
        bs = self.block_size
        common = _common_prefix(seq.token_ids, donor.token_ids[:donor.num_computed_tokens]) if donor else 0
        hits: list[int] = []
        restores: list[int] = []
        for i in range((seq.num_tokens - 1) // bs):
            if not restores:  # past the first host hit the prefix continues on the host only
                if donor is not None and (i + 1) * bs <= common and i < len(donor.block_table):
                    block_id: int | None = donor.block_table[i]
                else:
                    block_id = self.lookup(self.hashes(seq, i + 1)[i], seq.block_tokens(i))
                if block_id is not None:
                    hits.append(block_id)
                    continue
            if self.host is None or not self.host.lookup(self.hashes(seq, i + 1)[i], seq.block_tokens(i)):
                break
            restores.append(seq.block_hashes[i])
        reused = len(hits) + len(restores)
        tail, tail_tokens = self._donor_tail(donor, seq, reused, common)
        num_new = seq.blocks_needed(seq.num_tokens) - reused - (tail is not None)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return PrefixPlan(tuple(hits), tuple(restores), tail, tail_tokens, num_new, revived,
                          reused * bs + tail_tokens)

    def can_allocate(self, plan: PrefixPlan) -> bool:
        return plan.num_new + plan.num_revived + len(plan.restores) <= self.num_free

    def allocate(self, seq: Sequence, plan: PrefixPlan, donor: Sequence | None = None) -> None:
        """Give ``seq`` its blocks per ``plan``; the tail block moves out of ``donor``'s table."""
        if not self.can_allocate(plan):
            raise NoFreeBlocks(f"need {plan.num_new + plan.num_revived + len(plan.restores)} blocks, "
                               f"{self.num_free} free")
        for block_id in plan.hits:  # revive hits before taking fresh blocks, which may evict
            self._acquire(block_id)
        table = list(plan.hits) + self._restore(plan.restores)
        if plan.tail is not None:
            at = len(table)
            if donor is None or donor.block_table[at:at + 1] != [plan.tail]:
                raise BlockIntegrityError(f"tail block {plan.tail} is not held by the donor")
            del donor.block_table[at]
            table.append(plan.tail)
        table.extend(self._take_free() for _ in range(plan.num_new))
        seq.block_table = table
        seq.num_computed_tokens = plan.num_cached_tokens
        seq.num_published_blocks = len(plan.hits) + len(plan.restores)

    # ---- growth: can_append -> append -----------------------------------------------------
    def blocks_missing(self, seq: Sequence) -> int:
        """Blocks ``seq`` lacks to hold all its tokens."""
        return max(0, seq.blocks_needed(seq.num_tokens) - len(seq.block_table))

    def can_append(self, seq: Sequence) -> bool:
        return self.blocks_missing(seq) <= self.num_free

    def append(self, seq: Sequence) -> None:
        missing = self.blocks_missing(seq)
        if missing > self.num_free:
            raise NoFreeBlocks(f"sequence {seq.rid} needs {missing} blocks")
        for _ in range(missing):
            seq.block_table.append(self._take_free())

    # ---- release and publication -----------------------------------------------------------
    def deallocate(self, seq: Sequence) -> None:
        """Drop ``seq``'s references, tail first, so shared prefixes stay cached longest."""
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table = []

    def publish(self, seq: Sequence) -> None:
        """Register the hashes of ``seq``'s full, computed blocks in the prefix cache."""
        num_full = seq.num_computed_tokens // self.block_size
        if num_full <= seq.num_published_blocks:
            return  # nothing new (most decode steps)
        hashes = self.hashes(seq, num_full)
        for i in range(seq.num_published_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and hashes[i] not in self.hash_to_block:  # else a twin is cached
                block.hash, block.token_ids = hashes[i], tuple(seq.block_tokens(i))
                self.hash_to_block[hashes[i]] = block.block_id
        seq.num_published_blocks = num_full

    def reset_prefix_cache(self) -> int:
        """Forget every evictable block's KV, and the host tier's; returns how many were dropped."""
        return self._empty_evictable(offload=False) + (self.host.clear() if self.host is not None else 0)

    def spill(self) -> int:
        """Evict every evictable block to the host tier at once, as memory pressure does block by
        block (benchmarks: a session restored from the host); returns how many were evicted."""
        return self._empty_evictable(offload=True)

    # ---- invariants ------------------------------------------------------------------------
    def check_integrity(self, tables: Iterable[list[int]] | None = None) -> None:
        """Raise ``BlockIntegrityError`` unless the pool is consistent (and matches ``tables``)."""
        empty = set(self.empty)
        _check(len(empty) == len(self.empty), "a block is twice in the empty queue")
        _check(not empty & self.evictable.keys(), "a block is both empty and evictable")
        for block in self.blocks:
            self._check_block(block, block.block_id in empty, block.block_id in self.evictable)
        for block_hash, block_id in self.hash_to_block.items():
            _check(self.blocks[block_id].hash == block_hash, f"hash map points at block {block_id} wrongly")
        if tables is not None:
            held = Counter(b for table in tables for b in table)
            refs = {b.block_id: b.ref_count for b in self.blocks if b.ref_count}
            _check(held == refs, f"ref counts {refs} differ from holders {dict(held)}")
        if self.host is not None:
            self.host.check_integrity()

    def _check_block(self, block: Block, in_empty: bool, in_evictable: bool) -> None:
        bid = block.block_id
        _check(block.ref_count >= 0, f"block {bid} has a negative ref count")
        _check((block.ref_count == 0) == (in_empty or in_evictable), f"block {bid} free-list state is wrong")
        _check(not in_empty or block.hash is None, f"empty block {bid} has a hash")
        _check(not in_evictable or block.hash is not None, f"evictable block {bid} has no hash")
        if block.hash is not None:
            _check(self.hash_to_block.get(block.hash) == bid, f"hashed block {bid} is not in the hash map")
            _check(len(block.token_ids or ()) == self.block_size, f"hashed block {bid} is not full")

    # ---- internals -------------------------------------------------------------------------
    def _donor_tail(self, donor: Sequence | None, seq: Sequence, i: int, common: int) -> tuple[int | None, int]:
        """Donor's block ``i`` with its first k tokens' KV reusable, if only the donor holds it, unhashed."""
        if donor is None or i >= len(donor.block_table):
            return None, 0
        block = self.blocks[donor.block_table[i]]
        start = i * self.block_size
        k = min(common - start, self.block_size, seq.num_tokens - 1 - start)
        if k <= 0 or block.ref_count != 1 or block.hash is not None:
            return None, 0
        return block.block_id, k

    def _take_free(self) -> int:
        if self.empty:
            block_id = self.empty.popleft()
        elif self.evictable:
            block_id, _ = self.evictable.popitem(last=False)
            self._offload(self.blocks[block_id])
            self._unregister(self.blocks[block_id])
        else:
            raise NoFreeBlocks("the block pool is exhausted")
        self.blocks[block_id].ref_count = 1
        return block_id

    def _empty_evictable(self, offload: bool) -> int:
        dropped = len(self.evictable)
        while self.evictable:
            block_id, _ = self.evictable.popitem(last=False)
            if offload:
                self._offload(self.blocks[block_id])
            self._unregister(self.blocks[block_id])
            self.empty.append(block_id)
        return dropped

    def _offload(self, block: Block) -> None:
        """An evicted block's KV goes to the host tier (queued before whatever overwrites the block)."""
        if self.host is None or block.hash is None or block.token_ids is None:
            return
        slot = self.host.store(block.hash, block.token_ids)
        if slot is not None:
            self.copies.append(Copy(True, block.block_id, slot))
            self.offloaded_blocks += 1

    def _restore(self, hashes: tuple[int, ...]) -> list[int]:
        """Fresh device blocks for these host blocks, their copies back queued.  Every slot is taken
        out of the host tier first: a block evicted to make room meanwhile cannot reuse one of them
        before its copy back is queued."""
        if not hashes:
            return []
        assert self.host is not None
        taken = [self.host.take(h) for h in hashes]
        table = []
        for block_hash, (slot, token_ids) in zip(hashes, taken, strict=True):
            block_id = self._take_free()
            self.copies.append(Copy(False, slot, block_id))
            self.host.free_slot(slot)
            block = self.blocks[block_id]
            block.hash, block.token_ids = block_hash, token_ids
            self.hash_to_block[block_hash] = block_id
            table.append(block_id)
        self.restored_blocks += len(hashes)
        return table

    def _acquire(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.evictable.pop(block_id)
        block.ref_count += 1

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        _check(block.ref_count > 0, f"block {block_id} released more often than acquired")
        block.ref_count -= 1
        if block.ref_count:
            return
        if block.hash is None:
            self.empty.append(block_id)
        else:
            self.evictable[block_id] = None

    def _unregister(self, block: Block) -> None:
        if block.hash is not None and self.hash_to_block.get(block.hash) == block.block_id:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids = None, None


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise BlockIntegrityError(message)
