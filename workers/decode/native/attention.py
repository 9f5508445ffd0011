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
    decode_tables: torch.Tensor  # [D, max_blocks]
    decode_mask: torch.Tensor  # [D, 1, 1, max_blocks * block_size] additive (0 or -inf)
    prefills: list[PrefillChunk]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor,
                    meta: AttnMeta) -> torch.Tensor:
    """Store ``k``/``v`` [T, kv_heads, d] in ``cache``, attend ``q`` [T, heads, d]; returns [T, heads, d]."""
    store_kv(cache, k, v, meta.slots)
    d = meta.num_decodes
    if not meta.prefills:
        return _decode(q, cache, meta)
    if not d and len(meta.prefills) == 1:
        return _prefill(q, k, v, cache, meta.prefills[0])
    out = torch.empty_like(q)
    if d:
        out[:d] = _decode(q[:d], cache, meta)
    for chunk in meta.prefills:
        rows = slice(chunk.row, chunk.row + chunk.num_tokens)
        out[rows] = _prefill(q[rows], k[rows], v[rows], cache, chunk)
    return out


def store_kv(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    kv_heads, head_dim = k.shape[1:]
    cache[0].view(-1, kv_heads, head_dim).index_copy_(0, slots, k)
    cache[1].view(-1, kv_heads, head_dim).index_copy_(0, slots, v)


def _gather(cache: torch.Tensor, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block ids [..., blocks] -> keys and values [..., kv_heads, blocks * block_size, d] (one copy)."""
    kv = cache.index_select(1, tables.flatten())  # [2, n * blocks, bs, kv_heads, d]
    kv = kv.view(2, *tables.shape[:-1], -1, *cache.shape[-2:]).transpose(-3, -2)
    return kv[0], kv[1]


def _decode(q: torch.Tensor, cache: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
    """One query per sequence; the query heads sharing a KV head attend as one group of rows."""
    keys, values = _gather(cache, meta.decode_tables)  # [D, kv_heads, L, d]
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
