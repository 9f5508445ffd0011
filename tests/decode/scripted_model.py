"""A Qwen2 checkpoint whose greedy output is known in advance: the engine-contract test model.

Random weights tell an engine test nothing about *what* text should come out.  This
checkpoint is a real Qwen2 model (any engine loads it, and ``transformers`` agrees with it)
rigged so that the next token depends only on the current one:

    hidden  = embed[t]                       attention o_proj = 0, mlp down_proj = 0
    logits  = lm_head @ rmsnorm(hidden)      lm_head[succ(t)] = unit(embed[t]) * SCALE

so ``argmax`` is ``succ(t)`` (cosine 1 against < 0.6 for every other row).  A chat prompt
ends with the generation prompt's ``"\\n"``; from there the model writes ``SCRIPT``:

    START("\\n") -> word ... word  Ã ©(= "é")  word ... word  <tool_call> JSON </tool_call> -> eos

Every script id is distinct, so the chain never loops.  The script holds a split UTF-8
character (two byte tokens), special tokens (``<tool_call>`` is marked special here, as
DeepSeek-style markers are) and one hermes tool call, so a session on this model calls
``get_weather`` on every turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer

from workers.decode.synthetic import CHAT_TEMPLATE, build_tokenizer

HIDDEN, HEADS, KV_HEADS, INTER = 64, 2, 1, 64  # head_dim 32: vLLM's CPU attention has no 16
SCALE = 1.0  # top logit 8 (= SCALE * sqrt(HIDDEN)): p ~ 0.85 at temperature 1, so sampling shows
TOOL_JSON = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
EOS = "<|im_end|>"


@dataclass(frozen=True)
class Script:
    """What the checkpoint at ``path`` generates after any chat prompt, greedily."""

    path: Path
    ids: tuple[int, ...]  # the completion's token ids, eos excluded
    text: str  # their text, special tokens kept
    eos_id: int

    def prefix(self, n: int) -> str:
        """The text of the first ``n`` tokens (``n`` never splits the é)."""
        return self.text_of(self.ids[:n])

    def text_of(self, ids: tuple[int, ...]) -> str:
        return Tokenizer.from_file(str(self.path / "tokenizer.json")).decode(list(ids), skip_special_tokens=False)


def build_scripted_checkpoint(path: str | Path, seed: int = 0) -> Script:
    """Write the rigged checkpoint (config, safetensors, tokenizer, chat template) to ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer()
    tok.save(str(path / "tokenizer.json"))
    start = tok.encode("<|im_start|>assistant\n").ids[-1]
    ids = _script_ids(tok)
    eos = tok.token_to_id(EOS)
    assert len(set(ids) | {start, eos}) == len(ids) + 2, "script ids must be distinct"
    succ = dict(zip((start, *ids), (*ids, eos)))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    save_file(_weights(vocab, succ, seed), str(path / "model.safetensors"), metadata={"format": "pt"})
    _write_configs(path, vocab, eos)
    return Script(path, tuple(ids), tok.decode(ids, skip_special_tokens=False), eos)


def _tokenizer() -> Tokenizer:
    tok = build_tokenizer(512)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<tool_call>", "</tool_call>")])
    tok.add_tokens([AddedToken(TOOL_JSON, special=False, normalized=False)])
    return tok


def _script_ids(tok: Tokenizer) -> list[int]:
    words = sorted(i for t, i in tok.get_vocab(with_added_tokens=False).items() if re.fullmatch(r"Ġ[a-zA-Z]{2,}", t))
    e_acute = [tok.token_to_id("Ã"), tok.token_to_id("©")]  # the two UTF-8 bytes of "é"
    half = len(words) // 2
    markers = [tok.token_to_id("<tool_call>"), tok.token_to_id(TOOL_JSON), tok.token_to_id("</tool_call>")]
    return words[:half] + e_acute + words[half:] + markers


def _weights(vocab: int, succ: dict[int, int], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(vocab, HIDDEN, generator=g)
    lm_head = torch.zeros(vocab, HIDDEN)
    for t, nxt in succ.items():
        lm_head[nxt] += SCALE * embed[t] / embed[t].norm()
    head_dim = HIDDEN // HEADS
    small = lambda *shape: 0.02 * torch.randn(*shape, generator=g)  # noqa: E731
    p = "model.layers.0."
    w = {
        "model.embed_tokens.weight": embed, "lm_head.weight": lm_head, "model.norm.weight": torch.ones(HIDDEN),
        p + "input_layernorm.weight": torch.ones(HIDDEN), p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        p + "self_attn.q_proj.weight": small(HEADS * head_dim, HIDDEN),
        p + "self_attn.q_proj.bias": small(HEADS * head_dim),
        p + "self_attn.k_proj.weight": small(KV_HEADS * head_dim, HIDDEN),
        p + "self_attn.k_proj.bias": small(KV_HEADS * head_dim),
        p + "self_attn.v_proj.weight": small(KV_HEADS * head_dim, HIDDEN),
        p + "self_attn.v_proj.bias": small(KV_HEADS * head_dim),
        p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, HEADS * head_dim),
        p + "mlp.gate_proj.weight": small(INTER, HIDDEN), p + "mlp.up_proj.weight": small(INTER, HIDDEN),
        p + "mlp.down_proj.weight": torch.zeros(HIDDEN, INTER),
    }
    return {k: v.contiguous() for k, v in w.items()}


def _write_configs(path: Path, vocab: int, eos: int) -> None:
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": vocab,
              "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": 1,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
              "torch_dtype": "float32", "eos_token_id": eos, "bos_token_id": None, "use_sliding_window": False}
    tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": "<|endoftext|>",
               "bos_token": None, "chat_template": CHAT_TEMPLATE, "model_max_length": 4096}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": None}))
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
