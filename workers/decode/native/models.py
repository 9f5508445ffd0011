"""Llama / Qwen2 / Qwen3 decoder-only transformers over a paged KV cache.

Module names mirror Hugging Face's (``model.layers.N.self_attn.o_proj`` ...), except that
q/k/v and gate/up are packed into ``qkv_proj`` and ``gate_up_proj`` (one matmul each); the
loader fills the packed weights shard by shard.  The modules only hold the weights: the forward
pass runs over plain tensors bound once (``bound.py``).  Numerics follow transformers: RMSNorm
in float32, RoPE tables in float32 cast to the activation dtype, rotate-half RoPE.  Per step, the
RoPE tables are looked up once and q and k are rotated together.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from workers.decode.native.attention import AttnMeta
from workers.decode.native.bound import Bound, bind
from workers.decode.native.loader import ModelArgs, inv_freq, load_weights


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps


class Rotary(nn.Module):
    """cos/sin tables [max_len, head_dim / 2] in float32; rotate-half RoPE on [T, heads, head_dim]."""

    def __init__(self, args: ModelArgs, max_len: int) -> None:
        super().__init__()
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq(args))
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin [T, 1, head_dim] for the step's positions, computed once per step::

            cos = [cos, cos]    sin = [-sin, sin]    (the sign of rotate-half folded into the table)
        """
        cos, sin = self.cos[positions].to(dtype), self.sin[positions].to(dtype)
        return torch.cat((cos, cos), dim=-1).unsqueeze(1), torch.cat((-sin, sin), dim=-1).unsqueeze(1)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        q_size, kv_size = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
        self.qkv_proj = nn.Linear(args.hidden_size, q_size + 2 * kv_size, bias=args.qkv_bias)
        self.o_proj = nn.Linear(q_size, args.hidden_size, bias=args.o_bias)
        if args.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps)
            self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class Body(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class CausalLM(nn.Module):
    """The checkpoint's modules (what the loader fills); ``bind`` attaches the KV cache, then ``forward``
    maps flattened step tokens to hidden states and ``logits`` projects chosen rows."""

    def __init__(self, args: ModelArgs, max_len: int) -> None:
        super().__init__()
        self.args = args
        self.model = Body(args)
        self.rotary = Rotary(args, max_len)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.bound: Bound | None = None

    def bind(self, kv_cache: torch.Tensor) -> None:
        """Attach the KV cache [layers, 2, blocks, block_size, kv_heads, head_dim]; call after loading and
        moving the weights (the forward pass reads the tensors bound here)."""
        self.bound = bind(self, kv_cache)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        assert self.bound is not None, "bind() the KV cache first"  # a programming error, not input
        return self.bound.forward(input_ids, self.rotary.tables(positions, self.bound.embed.dtype), meta)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.bound is not None, "bind() the KV cache first"
        return F.linear(hidden, self.bound.lm_head).float()


def load_model(path: str | Path, device: torch.device, dtype: torch.dtype, max_len: int) -> CausalLM:
    """Build the model for the checkpoint at ``path`` and load its weights onto ``device``."""
    args = ModelArgs.from_dir(path)
    model = CausalLM(args, max_len)
    load_weights(model, path, args)
    return model.to(device=device, dtype=dtype).eval()
