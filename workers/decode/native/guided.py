"""Grammar masks of one step, computed beside the forward pass.

    step:   masks = Masks.start(sampling seqs)     a worker thread fills the bitmask rows of
            hidden = model(...)                    the constrained sequences while the model runs
            masks.apply(logits)                    wait, then forbid what the grammars forbid
            sample -> postprocess -> advance(seq, token) for each appended token

A sequence is constrained when it carries a matcher (``Sequence.matcher``).  Matchers are
touched only between steps (``advance``) or inside the step's mask job, never both at once.
``Timing`` counts what the masks cost on the step's critical path (waiting for the job and
applying the masks) and in total, for the engine benchmark.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from workers.decode.constraints.guide import allocate_bitmask, apply_masks, fill_mask
from workers.decode.native.sequence import Sequence


@dataclass
class Timing:
    steps: int = 0  # steps with at least one constrained sequence
    fill_s: float = 0.0  # computing masks (on the worker thread)
    critical_s: float = 0.0  # waiting for them after the forward pass, and applying them
    advance_s: float = 0.0  # consuming sampled tokens


class Masks:
    """The mask job of one step: which logits rows are constrained, and their bitmask."""

    def __init__(self, rows: list[int], bitmask: torch.Tensor, job: Future[float], timing: Timing) -> None:
        self.rows, self.bitmask, self.job, self.timing = rows, bitmask, job, timing

    def apply(self, logits: torch.Tensor) -> None:
        t0 = time.perf_counter()
        self.timing.fill_s += self.job.result()
        apply_masks(logits, self.bitmask, self.rows)
        self.timing.critical_s += time.perf_counter() - t0


class Guide:
    """Starts each step's mask job and advances matchers; one per engine (one worker thread)."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.timing = Timing()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-masks")

    def start(self, seqs: list[Sequence]) -> Masks | None:
        """Begin filling the masks of the constrained sequences among ``seqs`` (logits rows in order)."""
        rows = [i for i, s in enumerate(seqs) if s.matcher is not None]
        if not rows:
            return None
        self.timing.steps += 1
        bitmask = allocate_bitmask(len(rows), self.vocab_size)
        matchers = [seqs[i].matcher for i in rows]
        return Masks(rows, bitmask, self._pool.submit(_fill, matchers, bitmask), self.timing)

    def advance(self, seq: Sequence, token: int) -> bool:
        """Feed the sampled token to ``seq``'s matcher; False if the grammar rejected it (never, after a mask)."""
        if seq.matcher is None:
            return True
        t0 = time.perf_counter()
        ok = seq.matcher.consume_token(token)
        self.timing.advance_s += time.perf_counter() - t0
        return ok

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _fill(matchers: list, bitmask: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for row, m in enumerate(matchers):
        fill_mask(m, bitmask, row)
    return time.perf_counter() - t0
