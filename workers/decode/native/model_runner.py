"""Turns a ``ScheduledBatch`` into tensors, runs the model over the paged KV cache, samples.

Layout of one step's flattened rows: single-token sequences (decodes) first, then the prefill
chunks one after another (see ``attention.py``).  Sampled tokens come back in the batch's
own order, one per sequence whose chunk reaches its last token.
"""

from __future__ import annotations

import torch

from workers.decode.native.attention import AttnMeta, PrefillChunk, chunk_mask, length_mask
from workers.decode.native.guided import Guide
from workers.decode.native.host_tier import Copy
from workers.decode.native.models import CausalLM
from workers.decode.native.sampling import sample
from workers.decode.native.scheduler import ScheduledBatch
from workers.decode.native.sequence import Sequence


class ModelRunner:
    def __init__(self, model: CausalLM, num_blocks: int, block_size: int, vocab_limit: int | None = None,
                 host_blocks: int = 0) -> None:
        args = model.args
        p = next(model.parameters())
        self.model, self.block_size, self.device, self.dtype = model, block_size, p.device, p.dtype
        self.vocab_limit = min(vocab_limit or args.vocab_size, args.vocab_size)  # padded rows have no token
        shape = (args.num_layers, 2, num_blocks, block_size, args.num_kv_heads, args.head_dim)
        self.kv_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        model.bind(self.kv_cache)
        # the host tier (``host_tier``): separate memory even on CPU, page-locked beside a GPU so that
        # copies are DMA transfers queued on the stream, in order with the forward pass
        host_shape = (args.num_layers, 2, host_blocks, block_size, args.num_kv_heads, args.head_dim)
        self.host_cache = torch.zeros(host_shape, dtype=p.dtype, pin_memory=p.device.type == "cuda") \
            if host_blocks else None

    @torch.inference_mode()
    def copy_blocks(self, copies: list[Copy]) -> None:
        """Perform the block manager's queued copies between the tiers, in their order."""
        assert self.host_cache is not None or not copies
        for out, src, dst in copies:
            if out:
                self.host_cache[:, :, dst].copy_(self.kv_cache[:, :, src], non_blocking=True)
            else:
                self.kv_cache[:, :, dst].copy_(self.host_cache[:, :, src], non_blocking=True)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, guide: Guide | None = None) -> list[int]:
        """Compute the batch's chunks; return the sampled tokens in batch order (grammar-masked)."""
        logits, seqs = self.forward(batch, guide)
        if not seqs:
            return []
        return sample(logits, [s.params for s in seqs], [s.generator for s in seqs])

    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch, guide: Guide | None = None) -> tuple[torch.Tensor, list[Sequence]]:
        """Logits [S, V] for the sequences that sample this step, and those sequences (batch order)."""
        input_ids, positions, meta, rows, seqs = self.prepare(batch)
        masks = guide.start(seqs) if guide is not None else None  # filled while the model runs
        hidden = self.model(input_ids, positions, meta)
        logits = self.model.logits(hidden[rows])[:, :self.vocab_limit]
        if masks is not None:
            masks.apply(logits)
        return logits, seqs

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, torch.Tensor, AttnMeta, torch.Tensor,
                                                      list[Sequence]]:
        """Flattened input ids, positions, attention metadata, logit rows and sampling sequences."""
        items = list(batch.items())
        decodes = [s for s, n in items if n == 1]
        prefills = [(s, n) for s, n in items if n > 1]
        bs = self.block_size
        positions = [s.num_computed_tokens for s in decodes]
        ids = [s.token_ids[p] for s, p in zip(decodes, positions)]
        slots = [s.block_table[p // bs] * bs + p % bs for s, p in zip(decodes, positions)]
        last_row = {s: i for i, s in enumerate(decodes)}
        for seq, n in prefills:
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start:start + n])
            positions.extend(range(start, start + n))
            slots.extend(seq.block_table[p // bs] * bs + p % bs for p in range(start, start + n))
            last_row[seq] = len(ids) - 1
        sampling = [s for s, n in items if s.num_computed_tokens + n == s.num_tokens]
        meta = self._meta(decodes, prefills, slots)
        rows = self._tensor([last_row[s] for s in sampling])
        return self._tensor(ids), self._tensor(positions), meta, rows, sampling

    def _meta(self, decodes: list[Sequence], prefills: list[tuple[Sequence, int]], slots: list[int]) -> AttnMeta:
        width = max((len(s.block_table) for s in decodes), default=1)
        blocks = self._tensor([b for s in decodes for b in s.block_table + [0] * (width - len(s.block_table))])
        lengths = self._tensor([s.num_computed_tokens + 1 for s in decodes] or [0])
        chunks, row = [], len(decodes)
        for seq, n in prefills:
            start = seq.num_computed_tokens
            mask = chunk_mask(start, n, self.dtype, self.device) if start else None
            table = self._tensor(seq.block_table[:seq.blocks_needed(start + n)])
            chunks.append(PrefillChunk(row, n, start, table, mask))
            row += n
        return AttnMeta(self._tensor(slots), len(decodes), blocks,
                        length_mask(lengths, width * self.block_size, self.dtype)[:len(decodes)], chunks)

    def _tensor(self, values: list) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
