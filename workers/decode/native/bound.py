"""The forward pass over plain tensors: each layer's weights and KV cache fetched once, at ``bind``.

A decode step of a small model on CPU is bound by per-operation overhead, not arithmetic: an
``nn.Module`` call costs about as much as the small matmul inside it, and every attribute
lookup through ``nn.Module.__getattr__`` costs more than a tuple field.  So the modules in
``models.py`` only hold the checkpoint's weights; ``bind`` reads them into frozen records
(views of the same memory, nothing copied), and one decoder layer is one function::

    x ── rms_norm ── qkv ──┬── q,k: [q_norm, k_norm] ── rotate ──┐
    │                      └── v ─────────────────────────────────┴── paged_attention ── o ──(+)── x
    x ── rms_norm ── gate_up ── silu(gate) * up ── down ──(+)── x

A projection followed by the residual add is one ``addmm`` when the projection has no bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workers.decode.native.attention import AttnMeta, LayerKV, paged_attention


@dataclass(frozen=True, slots=True)
class Heads:
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True, slots=True)
class BoundLayer:
    eps: float
    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None  # Qwen3
    k_norm: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    kv: LayerKV


@dataclass(frozen=True, slots=True)
class Bound:
    heads: Heads
    eps: float
    embed: torch.Tensor
    layers: tuple[BoundLayer, ...]
    norm: torch.Tensor
    lm_head: torch.Tensor

    def forward(self, input_ids: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                meta: AttnMeta) -> torch.Tensor:
        """Hidden states [T, hidden] of the step's flattened tokens (after the final norm)."""
        x = F.embedding(input_ids, self.embed)
        for layer in self.layers:
            x = decoder_layer(layer, self.heads, x, rope, meta)
        return rms_norm(x, self.norm, self.eps)


def decoder_layer(w: BoundLayer, s: Heads, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                  meta: AttnMeta) -> torch.Tensor:
    t = x.shape[0]
    heads = F.linear(rms_norm(x, w.input_norm, w.eps), w.qkv, w.qkv_bias)
    qk, v = heads.view(t, -1, s.head_dim).split((s.num_heads + s.num_kv_heads, s.num_kv_heads), dim=1)
    if w.q_norm is not None:
        q, k = qk.split((s.num_heads, s.num_kv_heads), dim=1)
        qk = torch.cat((rms_norm(q, w.q_norm, w.eps), rms_norm(k, w.k_norm, w.eps)), dim=1)
    q, k = rotate(qk, *rope).split((s.num_heads, s.num_kv_heads), dim=1)
    o = paged_attention(q, k, v, w.kv, meta).reshape(t, s.num_heads * s.head_dim)
    x = project_add(o, w.o, w.o_bias, x)
    gate, up = F.linear(rms_norm(x, w.post_norm, w.eps), w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
    return project_add(F.silu(gate).mul_(up), w.down, w.down_bias, x)


def project_add(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                residual: torch.Tensor) -> torch.Tensor:
    """residual + h @ weight.T (+ bias)."""
    if bias is None:
        return torch.addmm(residual, h, weight.t())
    return residual + F.linear(h, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers computes it: in float32, the weight applied in the activation dtype."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    return weight * F.rms_norm(x.float(), weight.shape, eps=eps).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, where rotate_half(x) = [-x2, x1] = [x2, x1] * the signs in ``sin``
    (``Rotary.tables`` folds them in).  Transformers' values exactly: (-x2) * s == x2 * (-s)."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin


def bind(model: torch.nn.Module, kv_cache: torch.Tensor) -> Bound:
    """The forward pass's tensors of ``model`` (a ``models.CausalLM``) with its KV cache
    [layers, 2, blocks, block_size, kv_heads, head_dim]: views, nothing copied."""
    args, body = model.args, model.model
    layers = tuple(_bind_layer(layer, LayerKV.of(kv_cache[i]), args.rms_norm_eps)
                   for i, layer in enumerate(body.layers))
    return Bound(Heads(args.num_heads, args.num_kv_heads, args.head_dim), args.rms_norm_eps,
                 _t(body.embed_tokens.weight), layers, _t(body.norm.weight), _t(model.lm_head.weight))


def _bind_layer(layer: torch.nn.Module, kv: LayerKV, eps: float) -> BoundLayer:
    attn, mlp = layer.self_attn, layer.mlp
    qk_norm = hasattr(attn, "q_norm")
    return BoundLayer(eps, _t(layer.input_layernorm.weight), _t(attn.qkv_proj.weight), _t(attn.qkv_proj.bias),
                      _t(attn.q_norm.weight) if qk_norm else None, _t(attn.k_norm.weight) if qk_norm else None,
                      _t(attn.o_proj.weight), _t(attn.o_proj.bias), _t(layer.post_attention_layernorm.weight),
                      _t(mlp.gate_up_proj.weight), _t(mlp.gate_up_proj.bias), _t(mlp.down_proj.weight),
                      _t(mlp.down_proj.bias), kv)


def _t(p: torch.Tensor | None) -> torch.Tensor | None:
    return None if p is None else p.detach()
