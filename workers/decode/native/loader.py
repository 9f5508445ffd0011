"""Read a Hugging Face checkpoint directory: ``config.json`` -> ``ModelArgs``, safetensors -> weights.

Supported architectures: Llama, Qwen2, Qwen3 (``model_type`` llama / qwen2 / qwen3).  RoPE
parameters are read in both the old (``rope_theta`` + ``rope_scaling``) and the new
(``rope_parameters``) layouts; scaling types ``default``, ``linear`` and ``llama3``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from workers.decode.errors import ModelLoadError

_ARCHS = ("llama", "qwen2", "qwen3")
_ROPE_TYPES = ("default", "linear", "llama3")
# HF weight name part -> (our packed parameter, shard index)
_PACKED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
_IGNORED = ("rotary_emb.inv_freq",)


@dataclass(frozen=True)
class ModelArgs:
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    torch_dtype: str | None
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelArgs":
        path = Path(path)
        cfg = _read_json(path / "config.json")
        gen = _read_json(path / "generation_config.json", missing_ok=True)
        return cls.from_hf(cfg, gen)

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], gen: dict[str, Any] | None = None) -> "ModelArgs":
        arch = cfg.get("model_type")
        if arch not in _ARCHS:
            raise ModelLoadError(f"model_type {arch!r} is not supported; expected one of {_ARCHS}")
        heads = cfg["num_attention_heads"]
        theta, scaling = _rope(cfg)
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(
            arch=arch, vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_layers=cfg["num_hidden_layers"], num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            rope_theta=theta, rope_scaling=scaling, tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=True if arch == "qwen2" else attention_bias, o_bias=attention_bias and arch != "qwen2",
            mlp_bias=bool(cfg.get("mlp_bias", False)), qk_norm=arch == "qwen3",
            torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
            eos_token_ids=_eos_ids(cfg, gen or {}),
        )


def inv_freq(args: ModelArgs) -> torch.Tensor:
    """RoPE inverse frequencies [head_dim / 2], float32, as transformers computes them."""
    d = args.head_dim
    inv = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = args.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        return _llama3(inv, scaling)
    return inv


def _llama3(inv: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * torch.pi / inv
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) * ~(wavelen > old_len / low)
    return torch.where(medium, smoothed, scaled)


def load_weights(model: torch.nn.Module, path: str | Path, args: ModelArgs) -> None:
    """Copy every tensor of the checkpoint into ``model``; raise if anything is missing or unknown."""
    params = dict(model.named_parameters())
    filled: set[tuple[str, int]] = set()
    for file in _weight_files(Path(path)):
        with safe_open(str(file), "pt", device="cpu") as f:
            for name in f.keys():
                _load_one(params, args, name, f.get_tensor(name), filled)
    expected = {(n, i) for n in params for i in range(_num_shards(n))}
    if args.tie_word_embeddings:
        expected.discard(("lm_head.weight", 0))
    missing = sorted(n for n, _ in expected - filled)
    if missing:
        raise ModelLoadError(f"checkpoint {path} lacks weights: {missing[:5]}")


def _load_one(params: dict[str, torch.nn.Parameter], args: ModelArgs, name: str, tensor: torch.Tensor,
              filled: set[tuple[str, int]]) -> None:
    if name.endswith(_IGNORED) or (name == "lm_head.weight" and args.tie_word_embeddings):
        return
    target, shard = name, 0
    for part, (packed, index) in _PACKED.items():
        if f".{part}." in name:
            target, shard = name.replace(f".{part}.", f".{packed}."), index
    param = params.get(target)
    if param is None:
        raise ModelLoadError(f"unexpected weight {name!r} in the checkpoint")
    offset, size = _shard_range(args, target, shard, param.shape[0])
    if tensor.shape[0] != size or tensor.shape[1:] != param.shape[1:]:
        raise ModelLoadError(f"weight {name!r} has shape {tuple(tensor.shape)}; expected {size} rows")
    with torch.no_grad():
        param.narrow(0, offset, size).copy_(tensor)
    filled.add((target, shard))


def _shard_range(args: ModelArgs, target: str, shard: int, rows: int) -> tuple[int, int]:
    if "qkv_proj" in target:
        sizes = [args.num_heads * args.head_dim] + [args.num_kv_heads * args.head_dim] * 2
    elif "gate_up_proj" in target:
        sizes = [args.intermediate_size] * 2
    else:
        sizes = [rows]
    return sum(sizes[:shard]), sizes[shard]


def _num_shards(name: str) -> int:
    return 3 if "qkv_proj" in name else 2 if "gate_up_proj" in name else 1


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        return [path / f for f in sorted(set(_read_json(index)["weight_map"].values()))]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no .safetensors files in {path}")
    return files


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    params = cfg.get("rope_parameters") or {}
    scaling = params if params else cfg.get("rope_scaling")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind not in _ROPE_TYPES:
        raise ModelLoadError(f"rope type {kind!r} is not supported; expected one of {_ROPE_TYPES}")
    return float(theta), (scaling if kind != "default" else None)


def _eos_ids(cfg: dict[str, Any], gen: dict[str, Any]) -> tuple[int, ...]:
    ids: list[int] = []
    for value in (cfg.get("eos_token_id"), gen.get("eos_token_id")):
        ids.extend(value if isinstance(value, list) else [value] if value is not None else [])
    return tuple(dict.fromkeys(ids))


def _read_json(path: Path, missing_ok: bool = False) -> dict[str, Any]:
    if not path.exists():
        if missing_ok:
            return {}
        raise ModelLoadError(f"{path} does not exist")
    return json.loads(path.read_text())
