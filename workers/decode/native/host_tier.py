"""The host tier: full KV blocks kept in host memory after the device pool evicted them.

A session waiting on its tools loses its pin when the pin's deadline passes or memory runs
short; its blocks become evictable and, under pressure, are reused for other sequences.  With a
host tier the evicted block's KV is first copied to a host slot, keyed by the block's prefix
hash (the hash chains every token before it, so equal hashes mean equal prefixes).  A later
prefix lookup that misses the device pool finds it here and copies it back instead of
recomputing it -- the continuation of a session whose pin was lost, or a new session with the
same system prompt.

This module is bookkeeping only (which slot holds which prefix, least recently used first);
the block manager queues the copies (``Copy``) and the model runner performs them, in order,
before the next forward pass.  A block moves: restored to the device, its host slot is freed;
evicted again later, it is copied out again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import NamedTuple

from workers.decode.errors import BlockIntegrityError


class Copy(NamedTuple):
    """One block's KV copied between the tiers: device block -> host slot (``out``) or back."""

    out: bool
    src: int
    dst: int


class HostBlock(NamedTuple):
    slot: int
    token_ids: tuple[int, ...]


class HostTier:
    """``num_blocks`` host slots holding evicted blocks by prefix hash, evicting least recently used."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free: deque[int] = deque(range(num_blocks))
        self.entries: OrderedDict[int, HostBlock] = OrderedDict()  # prefix hash -> slot, in LRU order

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, block_hash: int, token_ids: list[int]) -> bool:
        """Whether a slot holds this prefix with exactly these tokens (a hash collision is no hit)."""
        entry = self.entries.get(block_hash)
        return entry is not None and entry.token_ids == tuple(token_ids)

    def store(self, block_hash: int, token_ids: tuple[int, ...]) -> int | None:
        """A slot for this block's KV (evicting the least recently used), or None if it is here already."""
        if block_hash in self.entries:
            self.entries.move_to_end(block_hash)
            return None
        if self.free:
            slot = self.free.popleft()
        else:
            _, (slot, _) = self.entries.popitem(last=False)
        self.entries[block_hash] = HostBlock(slot, token_ids)
        return slot

    def take(self, block_hash: int) -> HostBlock:
        """Remove the entry (its block goes back to the device); the caller frees its slot with
        ``free_slot`` once the copy out of it is queued, so no later copy overwrites it first."""
        return self.entries.pop(block_hash)

    def free_slot(self, slot: int) -> None:
        self.free.append(slot)

    def clear(self) -> int:
        """Forget every entry (benchmarks: a cold cache); returns how many were dropped."""
        dropped = len(self.entries)
        self.free.extend(entry.slot for entry in self.entries.values())
        self.entries.clear()
        return dropped

    def check_integrity(self) -> None:
        slots = [entry.slot for entry in self.entries.values()] + list(self.free)
        if sorted(slots) != list(range(self.num_blocks)):
            raise BlockIntegrityError(f"host tier slots are lost or doubled: {len(slots)} of {self.num_blocks}")
