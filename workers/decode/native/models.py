"""Llama / Qwen2 / Qwen3 decoder-only transformers over a paged KV cache.

Module names mirror Hugging Face's (``model.layers.N.self_attn.o_proj`` ...), except that
q/k/v and gate/up are packed into ``qkv_proj`` and ``gate_up_proj`` (one matmul each); the
loader fills the packed weights shard by shard.  Numerics follow transformers: RMSNorm in
float32, RoPE tables in float32 cast to the activation dtype, rotate-half RoPE.  Per step, the
RoPE tables are looked up once and q and k are rotated together.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from workers.decode.native.attention import AttnMeta, paged_attention
from workers.decode.native.loader import ModelArgs, inv_freq, load_weights


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class Rotary(nn.Module):
    """cos/sin tables [max_len, head_dim / 2] in float32; rotate-half RoPE on [T, heads, head_dim]."""

    def __init__(self, args: ModelArgs, max_len: int) -> None:
        super().__init__()
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq(args))
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for the step's positions, [T, 1, head_dim / 2], computed once per step."""
        return self.cos[positions].to(dtype).unsqueeze(1), self.sin[positions].to(dtype).unsqueeze(1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * [cos, cos] + rotate_half(x) * [sin, sin], written on the two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_heads, args.num_kv_heads, args.head_dim
        self.q_size, self.kv_size = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
        self.qkv_proj = nn.Linear(args.hidden_size, self.q_size + 2 * self.kv_size, bias=args.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, args.hidden_size, bias=args.o_bias)
        self.qk_norm = args.qk_norm
        if args.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps)
            self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps)
        self.kv_cache = torch.empty(0)  # [2, num_blocks, block_size, kv_heads, head_dim], set by the runner

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: AttnMeta) -> torch.Tensor:
        t = x.shape[0]
        heads = self.qkv_proj(x).view(t, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        qk, v = heads.split([self.num_heads + self.num_kv_heads, self.num_kv_heads], dim=1)
        if self.qk_norm:
            q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
            qk = torch.cat((self.q_norm(q), self.k_norm(k)), dim=1)
        q, k = rotate(qk, *rope).split([self.num_heads, self.num_kv_heads], dim=1)
        o = paged_attention(q, k, v, self.kv_cache, meta)
        return self.o_proj(o.reshape(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: AttnMeta) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class CausalLM(nn.Module):
    """``forward`` maps flattened step tokens to hidden states; ``logits`` projects chosen rows."""

    def __init__(self, args: ModelArgs, max_len: int) -> None:
        super().__init__()
        self.args = args
        self.model = Body(args)
        self.rotary = Rotary(args, max_len)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)
        rope = self.rotary.tables(positions, x.dtype)
        for layer in self.model.layers:
            x = layer(x, rope, meta)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


def load_model(path: str | Path, device: torch.device, dtype: torch.dtype, max_len: int) -> CausalLM:
    """Build the model for the checkpoint at ``path`` and load its weights onto ``device``."""
    args = ModelArgs.from_dir(path)
    model = CausalLM(args, max_len)
    load_weights(model, path, args)
    return model.to(device=device, dtype=dtype).eval()
