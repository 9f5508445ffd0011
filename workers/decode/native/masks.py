"""llguidance masks onto torch logits (the native engine's side of ``constraints.guide``; a decoder
without torch -- the replay engine -- checks scripts against the grammar with no masks at all).

    bitmask = allocate_bitmask(rows, vocab); fill_mask(m, bitmask, row); apply_masks(logits, bitmask, rows)
"""

from __future__ import annotations

import llguidance
import numpy as np
import torch


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """An all-allowed bitmask for ``rows`` sequences (32 tokens per int32 word)."""
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def fill_mask(m: llguidance.LLMatcher, bitmask: torch.Tensor, row: int) -> None:
    """Write ``m``'s next-token mask into ``bitmask[row]`` (drops the GIL while it computes)."""
    v = bitmask[row]
    m.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * v.element_size())


def apply_masks(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
    """Set to -inf the logits of tokens ``bitmask[i]`` forbids, for logits row ``rows[i]`` (in place)."""
    if not rows:
        return
    vocab = logits.shape[-1]
    bits = np.unpackbits(bitmask[:len(rows)].numpy().view(np.uint8), axis=-1, bitorder="little")[:, :vocab]
    if logits.device.type != "cpu" or logits.dtype == torch.bfloat16:  # numpy cannot view these
        forbid = torch.from_numpy(bits == 0).to(logits.device)
        index = torch.tensor(rows, device=logits.device)
        logits[index] = logits[index].masked_fill(forbid, float("-inf"))
        return
    values = logits.numpy()  # shares memory with the tensor
    for i, row in enumerate(rows):
        values[row][bits[i] == 0] = -np.inf
