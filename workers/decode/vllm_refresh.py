"""Refreshes on vLLM: a kept session's blocks taken out of vLLM's free queue and freed again at its tail.

    to refresh (``Residency.to_refresh``) ──> AsyncLLM.add_request(ids[:whole blocks + 1], max_tokens=1,
                                              priority -1)  awaited before the request that made it is sent
                                         └──> a task drains its one output

The prompt is the session's remembered ids cut one token past its last full block: every full
block is a prefix-cache hit (vLLM ``touch``es it, so it leaves the free queue), one token is
computed, and when the request finishes vLLM frees the blocks at the queue's tail, behind the
blocks of sessions that ended earlier.  The priority puts the refresh ahead of the request in
vLLM's waiting queue, so the request's allocation cannot take the blocks first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from workers.decode.prompts import SessionPrompts

log = logging.getLogger(__name__)

_PRIORITY = -1  # before the request that made it (continuations are 0, new sessions 1)


class Refresher:
    """Sends refreshes to one ``AsyncLLM``; counts the prompt tokens they had to compute."""

    def __init__(self, llm: Any, prompts: SessionPrompts, block_size: int) -> None:
        self.llm, self.prompts, self.block_size = llm, prompts, block_size
        self.computed_tokens = 0  # prompt tokens refreshes did not find cached (one a refresh, if all went well)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count()

    async def send(self, sessions: list[str]) -> None:
        """Add a refresh of each session to vLLM (returns once vLLM has them, not when they finish)."""
        for session in sessions:
            ids = self.prompts.ids(session)
            whole = len(ids) // self.block_size * self.block_size
            if whole == 0:
                continue
            prompt = list(ids[:min(len(ids), whole + 1)])
            collector = await self.llm.add_request(f"{session}:refresh:{next(self._ids)}", _tokens(prompt),
                                                   _one_token(), priority=_PRIORITY)
            task = asyncio.create_task(self._drain(session, collector, len(prompt)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _drain(self, session: str, collector: Any, n_prompt: int) -> None:
        out = collector.get_nowait() or await collector.get()
        while not out.finished:
            out = collector.get_nowait() or await collector.get()
        cached = out.num_cached_tokens or 0
        self.computed_tokens += n_prompt - cached
        log.debug("sid=%s refreshed: %d of %d prompt tokens cached", session, cached, n_prompt)


def _tokens(ids: list[int]) -> Any:
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=ids)


def _one_token() -> Any:
    """One greedy token, reported once when finished: a refresh only wants its prompt's blocks touched."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(max_tokens=1, temperature=0.0, output_kind=RequestOutputKind.FINAL_ONLY)
