"""Configuration of the native engine: one frozen object, validated on construction."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from runtime.config import ConfigError
from runtime.cpu import usable_cores

_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class EngineConfig:
    """Everything the native engine needs; invalid values raise ``ConfigError`` naming the key."""

    model: str
    device: str = "cpu"
    dtype: str = "auto"  # auto: core.resolve_dtype (bfloat16 on CUDA; on a CPU for a half-precision checkpoint
    # where the CPU computes bfloat16 natively, else float32)
    block_size: int = 16
    num_blocks: int = 2048  # KV pool size in blocks
    host_kv_blocks: int = -1  # host tier under the pool, in blocks: -1 auto (2x num_blocks with CUDA, 0 on CPU)
    max_num_seqs: int = 64  # sequences running at once
    max_num_batched_tokens: int = 512  # token budget of one step (chunked prefill)
    max_model_len: int = 0  # 0: the checkpoint's max_position_embeddings
    pin_default_s: float = 5.0  # cold-start pin when the worker gave no estimate
    pin_max_s: float = 60.0  # cap of any pin deadline
    pin_max_share: float = 0.5  # share of the pool that pins may hold (0 disables pins)
    max_session_records: int = 1024  # sessions whose last-turn token ids are remembered
    ignore_eos: bool = False  # benchmarks: generate exactly max_tokens
    threads: int = 0  # torch's CPU threads for the engine's steps; 0: auto (``cpu_threads``)
    seed: int = 0  # seeds requests that carry no seed of their own

    def __post_init__(self) -> None:
        _require(self.dtype in _DTYPES, "dtype", self.dtype, f"one of {_DTYPES}")
        for name in ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens", "max_session_records"):
            _require(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        _require(self.max_model_len >= 0, "max_model_len", self.max_model_len, ">= 0")
        _require(self.threads >= 0, "threads", self.threads, ">= 0 (0: auto)")
        _require(self.host_kv_blocks >= -1, "host_kv_blocks", self.host_kv_blocks, ">= -1 (-1: auto)")
        _require(self.pin_default_s >= 0, "pin_default_s", self.pin_default_s, ">= 0")
        _require(self.pin_max_s >= self.pin_default_s, "pin_max_s", self.pin_max_s, ">= pin_default_s")
        _require(0.0 <= self.pin_max_share <= 1.0, "pin_max_share", self.pin_max_share, "in [0, 1]")
        _require(self.max_num_batched_tokens >= self.max_num_seqs, "max_num_batched_tokens",
                 self.max_num_batched_tokens, ">= max_num_seqs (every running sequence decodes each step)")

    @classmethod
    def from_process_config(cls, cfg: Any, **overrides: Any) -> "EngineConfig":
        """From the process-wide ``runtime.config.Config``: model, device, pin durations, and the
        JSON object ``cfg.native_args`` (if the process config has it) for any other field."""
        try:
            extra = json.loads(getattr(cfg, "native_args", "") or "{}")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"native_args: invalid JSON {cfg.native_args!r} ({exc})") from exc
        unknown = set(extra) - {f.name for f in fields(cls)}
        if not isinstance(extra, dict) or unknown:
            raise ConfigError(f"native_args: invalid value {extra!r}; unknown keys {sorted(unknown)}")
        base = dict(model=cfg.model, device=cfg.device, pin_default_s=cfg.pin_default_s, pin_max_s=cfg.pin_max_s)
        return cls(**{**base, **extra, **overrides})


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: invalid value {value!r}; must be {expected}")


def cpu_threads(threads: int) -> int:
    """Torch's CPU threads for the engine: ``threads``, or when 0 one fewer than the cores this process
    may use (``runtime.cpu.usable_cores``: its affinity, a container's CPU quota; at least one).  The gateway, the parser and Redis run beside the engine: on two cores,
    two torch threads spin against them (``bench serve`` at 32: 0.37 ms of decoder CPU per token and
    0.72-0.85x vLLM's throughput with two, 0.29-0.30 ms and 1.08-1.17x with one)."""
    return threads or max(1, usable_cores() - 1)
