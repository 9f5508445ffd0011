"""Token sampling: greedy at temperature 0, else temperature, top-k, top-p with a per-request generator."""

from __future__ import annotations

import torch

from workers.decode.engine import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of ``logits`` [S, V] (float32)."""
    tokens = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.temperature > 0:
            tokens[i] = _sample_row(logits[i], p, generators[i])
    return tokens


def _sample_row(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator | None) -> int:
    logits = logits / p.temperature
    if 0 < p.top_k < logits.shape[-1]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        logits = _top_p(logits, p.top_p)
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches ``top_p`` (always the top one)."""
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs > top_p
    return logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
