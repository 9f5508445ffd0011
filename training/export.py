"""Write a trained model as a Hugging Face ``Qwen2ForCausalLM`` directory, and read it back."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from training.model import ModelConfig, Qwen2
from training.template import CHAT_TEMPLATE
from training.tokenizer import EOS, PAD

PAD_ID, EOS_ID = 0, 2


def hf_config(cfg: ModelConfig) -> dict:
    """config.json for ``Qwen2ForCausalLM`` with tied embeddings."""
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rms_norm_eps": cfg.rms_norm_eps, "hidden_act": "silu", "tie_word_embeddings": True,
        "use_cache": True, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": cfg.num_hidden_layers, "attention_dropout": 0.0, "initializer_range": 0.02,
        "bos_token_id": PAD_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, "torch_dtype": "float32",
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": EOS, "pad_token": PAD,
        "unk_token": None, "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": 2048, "split_special_tokens": False, "chat_template": CHAT_TEMPLATE,
    }


def save_hf_dir(model: Qwen2, tokenizer: Tokenizer, out: Path, card: str | None = None) -> None:
    """Write config, weights, tokenizer and generation config to ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)
    (out / "config.json").write_text(json.dumps(hf_config(model.cfg), indent=2) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    tokenizer.save(str(out / "tokenizer.json"))
    gen = {"bos_token_id": PAD_ID, "eos_token_id": [EOS_ID, PAD_ID], "pad_token_id": PAD_ID, "do_sample": False,
           "max_new_tokens": 256}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    if card is not None:
        (out / "README.md").write_text(card)


def load_hf_dir(path: Path) -> tuple[Qwen2, Tokenizer]:
    """Load a directory written by ``save_hf_dir`` into the plain-torch model (eval mode)."""
    c = json.loads((path / "config.json").read_text())
    fields = ModelConfig.__dataclass_fields__
    cfg = ModelConfig(**{k: c[k] for k in fields if k in c})
    model = Qwen2(cfg)
    state = load_file(str(path / "model.safetensors"))
    state.pop("lm_head.weight", None)
    model.load_state_dict(state)
    model.eval()
    return model, Tokenizer.from_file(str(path / "tokenizer.json"))
