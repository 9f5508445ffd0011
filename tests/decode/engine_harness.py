"""Helpers for the native-engine tests: random checkpoints, a fake clock, a stepping loop."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from workers.decode.native.config import EngineConfig
from workers.decode.native.core import EngineCore
from workers.decode.engine import GenerateDelta, GenerateRequest, SamplingParams
from workers.decode.synthetic import build_checkpoint

torch.set_num_threads(1)

_ROOT = Path(tempfile.mkdtemp(prefix="ts-decode-tests-"))
atexit.register(shutil.rmtree, _ROOT, True)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SYSTEM = "You are a helpful assistant. Answer the question and call tools when you need them. " * 3


_BUILT: dict[str, Path] = {}


def checkpoint(arch: str = "qwen2", **kwargs: Any) -> Path:
    """A random-weight checkpoint directory, built once per process and argument set."""
    key = arch + json.dumps(kwargs, sort_keys=True)
    if key not in _BUILT:
        _BUILT[key] = build_checkpoint(_ROOT / f"{arch}-{len(_BUILT)}", arch, **kwargs)
    return _BUILT[key]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_core(arch: str = "qwen2", clock: FakeClock | None = None, **overrides: Any) -> EngineCore:
    cfg = dict(model=str(checkpoint(arch)), block_size=4, num_blocks=256, max_num_batched_tokens=64,
               max_num_seqs=16, pin_default_s=5.0, pin_max_s=30.0)
    cfg.update(overrides)
    return EngineCore(EngineConfig(**cfg), clock=clock or FakeClock())


def request(rid: str, session: str, user: str = "What is the weather in Paris?", *, history: list | None = None,
            max_tokens: int = 8, continuation: bool = False, tools: list | None = None,
            **params: Any) -> GenerateRequest:
    messages = history if history is not None else [{"role": "system", "content": SYSTEM},
                                                      {"role": "user", "content": user}]
    return GenerateRequest(rid=rid, session=session, messages=messages, tools=tools,
                           params=SamplingParams(max_tokens=max_tokens, **params), continuation=continuation)


def run(core: EngineCore, max_steps: int = 10_000) -> dict[str, list[GenerateDelta]]:
    """Step until idle, checking block integrity after every step; deltas per request id."""
    out: dict[str, list[GenerateDelta]] = defaultdict(list)
    for _ in range(max_steps):
        if not core.has_work():
            return dict(out)
        for rid, delta in core.step():
            out[rid].append(delta)
        core.check_integrity()
    raise AssertionError("the engine did not go idle")


def text_of(deltas: list[GenerateDelta]) -> str:
    return "".join(d.text for d in deltas)


def continue_with_tool(history: list[dict], raw: str, result: str = '{"temp": 18}') -> list[dict]:
    """The conversation after an assistant turn (given as raw text) and a tool result."""
    return history + [{"role": "assistant", "content": raw, "raw": raw}, {"role": "tool", "content": result}]
