"""Random-weight checkpoints built from nothing (no download), for tests and benchmarks.

``build_checkpoint(dir, arch)`` writes a Hugging Face directory: ``config.json``,
``generation_config.json``, ``model.safetensors`` (transformers ``save_pretrained``), a small
byte-level BPE ``tokenizer.json`` trained on a built-in corpus, and ``tokenizer_config.json``
with a Qwen2.5-style chat template (system, tools, ``<tool_call>``, ``<tool_response>``).
Needs ``transformers`` (a test dependency).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

CHAT_TEMPLATE = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\\n" }}
{%- else %}
{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
{%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
{%- elif message.role == "assistant" %}
{{- '<|im_start|>' + message.role }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == "tool" %}
{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

_CORPUS = [
    "You are a helpful assistant. Answer the question and call tools when you need them.",
    "What is the weather in Paris today? Let me check the forecast for you.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"name": "search", "arguments": {"query": "population of Tokyo"}}',
    "The result is 42. The temperature is 18 degrees and it is sunny with light wind.",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    "Héllo wörld, ça va? Ünïcödé façade naïve café.",
    "中文测试：你好，世界。日本語のテキストです。",
    "Emoji test 🙂🚀✨ and symbols ∑ ∫ √ π ≈ ≠ ≤ ≥.",
    "The quick brown fox jumps over the lazy dog 0123456789 times.",
]


def build_tokenizer(vocab_size: int = 512) -> Tokenizer:
    """A byte-level BPE tokenizer with chat special tokens (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tok


def build_checkpoint(path: str | Path, arch: str = "qwen2", *, hidden_size: int = 64, num_layers: int = 2,
                     num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128,
                     max_position_embeddings: int = 4096, vocab_size: int = 512, tie_word_embeddings: bool = True,
                     rope_scaling: dict[str, Any] | None = None, init_std: float = 0.1, seed: int = 0,
                     tokenizer: Tokenizer | None = None, dtype: str = "float32") -> Path:
    """Write a random-weight ``arch`` checkpoint (llama / qwen2 / qwen3) with tokenizer into ``path``
    (``tokenizer``: instead of the small trained one, e.g. ``build_large_tokenizer()``; ``dtype``: the
    weights' and the config's, e.g. ``bfloat16`` as the hub's checkpoints are published)."""
    import torch
    import transformers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = tokenizer or build_tokenizer(vocab_size)
    tok.save(str(path / "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    config_cls, model_cls = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
                             "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}[arch]
    extra: dict[str, Any] = {"head_dim": hidden_size // num_heads} if arch == "qwen3" else {}
    if rope_scaling is not None:
        extra["rope_parameters"] = {"rope_theta": 10000.0, **rope_scaling}
    config = getattr(transformers, config_cls)(
        vocab_size=tok.get_vocab_size(), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_kv_heads, intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=tie_word_embeddings,
        initializer_range=init_std, eos_token_id=eos, bos_token_id=None, pad_token_id=None, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval().to(getattr(torch, dtype))
    model.save_pretrained(path)  # config.json's dtype is the weights'
    _write_tokenizer_config(path)
    return path


def _write_tokenizer_config(path: Path) -> None:
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "bos_token": None, "chat_template": CHAT_TEMPLATE, "model_max_length": 4096}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


_PIECES = ("e t a o i n s r h l d c u m f p g w y b v k x j q z E T A O I N S R H L D C 0 1 2 3 4 5 6 7 8 9 "
           "_ - . , : ; \" ' { } [ ] ( ) / \\ < > = + * ! ? @ # $ % & | ~ ^ é ü ç 中 文 日").split()


def build_large_tokenizer(vocab_size: int = 150_000, seed: int = 0) -> Tokenizer:
    """A byte-level BPE tokenizer with ``vocab_size`` tokens (like Qwen's ~150k), built without training.

    The vocabulary is prefix-closed: each multi-byte token extends a shorter token by one piece,
    and that pair is its merge, so every token is reachable and encoding works.  Tokens look
    like a real vocabulary's: words with and without a leading space, digits, JSON punctuation.
    """
    import random

    rng = random.Random(seed)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    pieces = [_bytelevel(p) for p in _PIECES] + ["Ġ", "Ċ"]
    for p in pieces:  # multi-byte characters: their byte pairs first
        for k in range(2, len(p) + 1):
            vocab.setdefault(p[:k], len(vocab))
    merges: list[tuple[str, str]] = [(p[:k - 1], p[k - 1]) for p in pieces for k in range(2, len(p) + 1)]
    grown = list(vocab)[len(SPECIAL_TOKENS):]
    while len(vocab) < vocab_size - len(ADDED_TOKENS):
        base, piece = rng.choice(grown[-20000:] if rng.random() < 0.7 else grown), rng.choice(pieces)
        if base + piece not in vocab and len(base) < 24:
            vocab[base + piece] = len(vocab)
            merges.append((base, piece))
            grown.append(base + piece)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tok


def _bytelevel(text: str) -> str:
    """``text`` in the byte-level alphabet (each UTF-8 byte as its printable stand-in)."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)[0][0]
