"""One mutable ``Sequence`` per request: its tokens, its KV blocks and where it stands.

Token and KV bookkeeping of one sequence (block_size 4 in the picture)::

    token_ids      t0 t1 t2 t3 | t4 t5 t6 t7 | t8 t9
    block_table    [   b7      |    b2       |  b5 ...]      one block per block_size tokens
    computed       <----- num_computed_tokens ----->          KV written for t0..t8
    to compute                                  t9            the last sampled token (decode)
    published      <-- num_published_blocks -->               full blocks whose hash is registered

The last token of ``token_ids`` never has KV when a step ends: it was just sampled.  A step
computes ``token_ids[num_computed_tokens : num_computed_tokens + n]`` and, when that reaches the
end, samples one more token.  Prefill and decode are the same operation with different ``n``.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.decode.engine import SamplingParams

_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # queued (new, continuation, or preempted and requeued)
    RUNNING = "running"  # holds KV blocks and is scheduled every step
    FINISHED = "finished"  # done; its blocks are pinned, cached or freed


@dataclass(eq=False)
class Sequence:
    """A request in flight; identity-compared, mutated only by the scheduler and the engine core."""

    rid: str
    session: str
    token_ids: list[int]
    params: SamplingParams
    block_size: int
    max_total_tokens: int  # model length or pool capacity, whichever is smaller
    continuation: bool = False
    generator: torch.Generator | None = None
    matcher: Any = None  # the grammar matcher of a constrained request (llguidance.LLMatcher)
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0  # tokens whose KV is in block_table
    num_cached_tokens: int = 0  # prompt tokens reused from the cache at first admission
    num_host_cached_tokens: int = 0  # of those, copied back from the host tier
    num_prefill_target: int = 0  # tokens known at (re)admission: computing them counts as prefill
    num_published_blocks: int = 0  # leading full blocks offered to the prefix cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chain hashes of full blocks, lazily extended
    finish_reason: str | None = None
    admitted: bool = False  # has been admitted at least once (cached_tokens is final)

    def __post_init__(self) -> None:
        self.num_prompt_tokens = self.num_prompt_tokens or len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def block_tokens(self, index: int) -> list[int]:
        """Token ids of block ``index`` (full or partial)."""
        return self.token_ids[index * self.block_size:(index + 1) * self.block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def reset_kv(self) -> None:
        """Forget all KV (preemption): the next admission recomputes every token."""
        self.block_table = []
        self.num_computed_tokens = 0
        self.num_published_blocks = 0
        self.status = SequenceStatus.WAITING
