"""Continuous batching: which sequences compute how many tokens in the next step.

One step, within a token budget (``max_num_batched_tokens``)::

    1. expire pins                      deadlines passed -> ordinary cached blocks
    2. running sequences                decodes first (1 token each), then prefill chunks;
                                        a decode that needs a block gets one from the free pool,
                                        else from evicted pins, else by preempting the newest
                                        running sequence (recompute: its blocks are freed and it
                                        is requeued at the front)
    3. waiting sequences                continuations (and preempted ones) before new sessions;
                                        admission reuses cached/pinned blocks and may evict other
                                        pins, never running sequences; the head waits otherwise

Pins are evicted only when evicting them can cover the shortfall (a pin whose blocks are all
shared with running sequences frees nothing), the largest expected wait x blocks first.

State changes happen in ``schedule`` (admit, preempt), ``postprocess`` (tokens, finish) and
``finish``/``abort``.  Waiting queues delete lazily: an aborted waiting sequence is skipped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator

from workers.decode.native.block_manager import BlockManager, PrefixPlan
from workers.decode.native.config import EngineConfig
from workers.decode.native.pins import PinTable
from workers.decode.native.sequence import Sequence, SequenceStatus

log = logging.getLogger(__name__)


class ScheduledBatch:
    """The sequences of one step and how many tokens each computes (insertion-ordered)."""

    def __init__(self) -> None:
        self.chunks: dict[Sequence, int] = {}

    def __len__(self) -> int:
        return len(self.chunks)

    def add(self, seq: Sequence, num_tokens: int) -> None:
        self.chunks[seq] = num_tokens

    def items(self) -> Iterator[tuple[Sequence, int]]:
        return iter(list(self.chunks.items()))

    @property
    def num_tokens(self) -> int:
        return sum(self.chunks.values())


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager, pins: PinTable,
                 eos_token_ids: frozenset[int]) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.blocks, self.pins, self.eos_token_ids = blocks, pins, eos_token_ids
        self.waiting_continuations: deque[Sequence] = deque()
        self.waiting_new: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}  # seq_id -> seq, in admission order
        self.num_waiting = 0
        self.prefill_tokens_computed = 0
        self.prefix_hit_tokens = 0
        self.num_preemptions = 0

    # ---- queue membership ------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a new sequence; continuations go ahead of new sessions."""
        seq.status = SequenceStatus.WAITING
        (self.waiting_continuations if seq.continuation else self.waiting_new).append(seq)
        self.num_waiting += 1

    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def abort(self, seq: Sequence) -> None:
        """Stop ``seq`` wherever it is; its blocks are freed, not pinned."""
        if seq.status is not SequenceStatus.FINISHED:
            self.finish(seq, "abort")

    def finish(self, seq: Sequence, reason: str) -> None:
        """End ``seq``: pin its KV for the session's next turn, or free it on abort."""
        if seq.status is SequenceStatus.RUNNING:
            del self.running[seq.seq_id]
        elif seq.status is SequenceStatus.WAITING:
            self.num_waiting -= 1  # stays in its deque until popped
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
        if reason == "abort" or not seq.block_table:
            self.blocks.deallocate(seq)
        else:
            self._free(self.pins.hold(seq))

    def pin(self, session: str, seconds: float) -> None:
        """Keep the session's KV for ``seconds`` from now (capped); applies at turn end if still running."""
        self._free(self.pins.set_deadline(session, seconds))

    def release(self, session: str) -> None:
        """Drop the session's pin: its blocks become ordinary cached blocks."""
        self._free(self.pins.release(session))

    def expire_pins(self) -> None:
        self._free(self.pins.expire())

    # ---- the step --------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """Choose this step's sequences and token counts (see the module docstring)."""
        self.expire_pins()
        batch = ScheduledBatch()
        budget = self._schedule_running(batch, self.max_num_batched_tokens)
        self._admit_waiting(batch, budget)
        return batch

    def postprocess(self, batch: ScheduledBatch, sampled: list[int]) -> list[tuple[Sequence, int]]:
        """Advance computed counts, publish full blocks, append sampled tokens, finish on stop/length."""
        tokens = iter(sampled)
        appended = []
        for seq, n in batch.items():
            self._count_prefill(seq, n)
            seq.num_computed_tokens += n
            self.blocks.publish(seq)
            if seq.num_uncomputed_tokens:
                continue  # a prefill chunk that did not reach the end samples nothing
            token = next(tokens)
            seq.append_token(token)
            appended.append((seq, token))
            reason = self._finish_reason(seq, token)
            if reason is not None:
                self.finish(seq, reason)
        return appended

    def preempt(self, seq: Sequence) -> None:
        """Free ``seq``'s blocks and requeue it first; it recomputes all its tokens later."""
        log.info("session %s: preempted %s (KV pool exhausted); %d tokens to recompute", seq.session, seq.rid,
                 seq.num_tokens)
        del self.running[seq.seq_id]
        self.blocks.deallocate(seq)
        seq.reset_kv()
        self.waiting_continuations.appendleft(seq)
        self.num_waiting += 1
        self.num_preemptions += 1

    def tables(self) -> list[list[int]]:
        """Every block table holding references: running sequences and pins."""
        return [s.block_table for s in self.running.values()] + [p.seq.block_table for p in self.pins.pins.values()]

    # ---- running ---------------------------------------------------------------------------
    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        running = list(self.running.values())
        ordered = [s for s in running if s.num_uncomputed_tokens == 1] + \
                  [s for s in running if s.num_uncomputed_tokens > 1]
        for seq in ordered:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING or not self._make_room(seq):
                continue  # preempted during this pass
            n = min(seq.num_uncomputed_tokens, budget)
            batch.add(seq, n)
            budget -= n
        return budget

    def _make_room(self, seq: Sequence) -> bool:
        """Give ``seq`` the blocks its tokens need; False if ``seq`` itself had to be preempted."""
        while not self.blocks.can_append(seq):
            if self._evict_pin_for(self.blocks.blocks_missing(seq) - self.blocks.num_free, exclude=None):
                continue
            victim = next(reversed(self.running.values()))
            self.preempt(victim)
            if victim is seq:
                return False
        self.blocks.append(seq)
        return True

    # ---- waiting ---------------------------------------------------------------------------
    def _admit_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self._peek_waiting()
            if seq is None:
                return
            plan = self._plan_with_room(seq)
            if plan is None:
                return  # head of line waits until running sequences free blocks
            self._pop_waiting()
            self._admit(seq, plan)
            n = min(seq.num_uncomputed_tokens, budget)
            batch.add(seq, n)
            budget -= n

    def _plan_with_room(self, seq: Sequence) -> PrefixPlan | None:
        """A plan that fits, evicting other sessions' pins (and, when idle, the own pin) as needed."""
        while True:
            plan = self.blocks.plan(seq, self.pins.get(seq.session))
            if self.blocks.can_allocate(plan):
                return plan
            if self._evict_pin_for(plan.num_new + plan.num_revived - self.blocks.num_free, exclude=seq.session):
                continue
            if not self.running and self.pins.get(seq.session) is not None:
                self._free(self.pins.release(seq.session))
                continue
            return None

    def _admit(self, seq: Sequence, plan: PrefixPlan) -> None:
        donor = self.pins.take(seq.session)  # this turn supersedes the session's pinned one
        self.blocks.allocate(seq, plan, donor)
        if donor is not None:
            self.blocks.deallocate(donor)
        if not seq.admitted:
            seq.num_cached_tokens, seq.admitted = plan.num_cached_tokens, True
            seq.num_host_cached_tokens = len(plan.restores) * self.blocks.block_size
        self.prefix_hit_tokens += plan.num_cached_tokens
        seq.num_prefill_target = seq.num_tokens
        seq.status = SequenceStatus.RUNNING
        self.running[seq.seq_id] = seq

    def _peek_waiting(self) -> Sequence | None:
        for queue in (self.waiting_continuations, self.waiting_new):
            while queue and queue[0].status is SequenceStatus.FINISHED:
                queue.popleft()  # aborted while waiting
            if queue:
                return queue[0]
        return None

    def _pop_waiting(self) -> None:
        queue = self.waiting_continuations if self.waiting_continuations else self.waiting_new
        queue.popleft()
        self.num_waiting -= 1

    # ---- helpers ---------------------------------------------------------------------------
    def _evict_pin_for(self, deficit: int, exclude: str | None) -> bool:
        """Evict one pin (largest wait x blocks first), but only if evicting pins can cover ``deficit``."""
        others = [p.seq.block_table for s, p in self.pins.pins.items() if s != exclude]
        if not others or self.blocks.freeable(others) < deficit:
            return False  # pins sharing their blocks with running sequences would die for nothing
        victim = self.pins.evict(exclude)
        if victim is None:
            return False
        log.info("session %s: pin of %d blocks evicted under memory pressure", victim.session,
                 len(victim.block_table))
        self.blocks.deallocate(victim)
        return True

    def _free(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            self.blocks.deallocate(seq)

    def _count_prefill(self, seq: Sequence, n: int) -> None:
        start = seq.num_computed_tokens
        self.prefill_tokens_computed += max(0, min(start + n, seq.num_prefill_target) - start)

    def _finish_reason(self, seq: Sequence, token: int) -> str | None:
        if token in self.eos_token_ids or token in seq.params.stop_token_ids:
            return "stop"
        if seq.num_completion_tokens >= seq.params.max_tokens or seq.num_tokens >= seq.max_total_tokens:
            return "length"
        return None
