"""Paged attention with plain torch ops (CPU and CUDA): write K/V into blocks, gather, SDPA.

The KV cache of one layer is ``[2, num_blocks, block_size, kv_heads, head_dim]``; token
position ``p`` of a sequence lives in slot ``block_table[p // bs] * bs + p % bs`` of the
flattened ``[num_blocks * block_size]`` axis.  A step's tokens are flattened, decodes first::

    rows   0 .. D-1              one token per decoding sequence  -> one batched SDPA call
    rows   D .. D+n1-1           prefill chunk of sequence 1       -> one SDPA call each
    rows   D+n1 .. D+n1+n2-1     prefill chunk of sequence 2
    ...

Decode tables are padded to the longest one with block 0; the padding is masked out by length.
A chunk that starts at position ``start > 0`` attends to the cached prefix too::

    key j:     0 ........ start-1 | start ......... start+n-1
    query i:   all visible        | visible while j <= start + i
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PrefillChunk:
    row: int  # first flattened row of the chunk
    num_tokens: int
    start: int  # tokens of the sequence computed before this chunk
    table: torch.Tensor  # [blocks] the sequence's block table (needed when start > 0)
    mask: torch.Tensor | None  # [num_tokens, start + num_tokens] additive, None when start == 0 (causal)


@dataclass
class AttnMeta:
    slots: torch.Tensor  # [T] cache slot of every row
    num_decodes: int
    decode_blocks: torch.Tensor  # [D * max_blocks] the decodes' block tables, padded and flattened
    decode_mask: torch.Tensor  # [D, 1, 1, max_blocks * block_size] additive (0 or -inf)
    prefills: list[PrefillChunk]


@dataclass(frozen=True, slots=True)
class LayerKV:
    """One layer's cache as blocks [2, num_blocks, block_size, kv_heads, d] (gathered by block) and as K
    and V slots [num_blocks * block_size, kv_heads, d] (written by slot): views of the same memory."""

    blocks: torch.Tensor
    k_slots: torch.Tensor
    v_slots: torch.Tensor

    @classmethod
    def of(cls, cache: torch.Tensor) -> "LayerKV":
        slots = cache.view(2, -1, *cache.shape[-2:])
        return cls(cache, slots[0], slots[1])


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: LayerKV,
                    meta: AttnMeta) -> torch.Tensor:
    """Store ``k``/``v`` [T, kv_heads, d] in ``kv``, attend ``q`` [T, heads, d]; returns [T, heads, d]."""
    kv.k_slots.index_copy_(0, meta.slots, k)
    kv.v_slots.index_copy_(0, meta.slots, v)
    d = meta.num_decodes
    if not meta.prefills:
        return _decode(q, kv.blocks, meta)
    if not d and len(meta.prefills) == 1:
        return _prefill(q, k, v, kv.blocks, meta.prefills[0])
    out = torch.empty_like(q)
    if d:
        out[:d] = _decode(q[:d], kv.blocks, meta)
    for chunk in meta.prefills:
        rows = slice(chunk.row, chunk.row + chunk.num_tokens)
        out[rows] = _prefill(q[rows], k[rows], v[rows], kv.blocks, chunk)
    return out


def _gather(cache: torch.Tensor, blocks: torch.Tensor, *lead: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block ids [n * blocks] -> keys and values [*lead, kv_heads, blocks * block_size, d] (one copy)."""
    kv = cache.index_select(1, blocks)  # [2, n * blocks, bs, kv_heads, d]
    return kv.view(2, *lead, -1, *cache.shape[-2:]).transpose(-3, -2).unbind(0)


def _decode(q: torch.Tensor, cache: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
    """One query per sequence; the query heads sharing a KV head attend as one group of rows."""
    keys, values = _gather(cache, meta.decode_blocks, meta.num_decodes)  # [D, kv_heads, L, d]
    d, heads, head_dim = q.shape
    grouped = q.view(d, keys.shape[1], heads // keys.shape[1], head_dim)  # head h -> kv head h // group
    o = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=meta.decode_mask)
    return o.view(d, heads, head_dim)


def _prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor,
             chunk: PrefillChunk) -> torch.Tensor:
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, heads, n, d]
    if chunk.mask is None:
        keys, values = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)
        o = F.scaled_dot_product_attention(qh, keys, values, is_causal=True, enable_gqa=True)
    else:
        ctx = chunk.start + chunk.num_tokens
        keys, values = _gather(cache, chunk.table)
        keys, values = keys[:, :ctx].unsqueeze(0), values[:, :ctx].unsqueeze(0)
        o = F.scaled_dot_product_attention(qh, keys, values, attn_mask=chunk.mask, enable_gqa=True)
    return o.squeeze(0).transpose(0, 1)


def chunk_mask(start: int, num_tokens: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[n, start + n] additive mask: query i sees keys j <= start + i (0), others are -inf."""
    keys = torch.arange(start + num_tokens, device=device)
    queries = torch.arange(start, start + num_tokens, device=device)
    return _additive(keys.unsqueeze(0) <= queries.unsqueeze(1), dtype)


def length_mask(lengths: torch.Tensor, max_len: int, dtype: torch.dtype) -> torch.Tensor:
    """[D, 1, 1, max_len] additive mask: key j visible (0) while j < length, else -inf."""
    visible = torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
    return _additive(visible, dtype)[:, None, None, :]


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float masks spare SDPA a bool-to-float conversion in every layer."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))
