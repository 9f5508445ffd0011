"""Pluggable greedy decoders for evaluation: ``torch`` (ours, KV cache), ``transformers``, ``native``.

A backend completes a conversation: it returns the assistant turn's text, special tokens kept,
ending in ``<|im_end|>`` when the model stopped by itself.  The system prompt lists ``tools``
(by default the runtime's own list, ``SERVER_TOOLS``).
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from tokenizers import Tokenizer

from training.export import EOS_ID, PAD_ID, load_hf_dir
from training.template import render
from training.tools_spec import SERVER_TOOLS

EOS_TEXT = "<|im_end|>"


class Backend(Protocol):
    def complete(self, messages: list[dict[str, Any]], max_new_tokens: int,
                 tools: list[dict[str, Any]] = SERVER_TOOLS) -> str:
        """Greedy assistant turn for ``messages`` with ``tools`` in the system prompt."""
        ...


class _TokenBackend:
    """Renders with our template, encodes with the model's tokenizer, decodes with specials kept."""

    def __init__(self, model_dir: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def complete(self, messages: list[dict[str, Any]], max_new_tokens: int,
                 tools: list[dict[str, Any]] = SERVER_TOOLS) -> str:
        prompt = self.tokenizer.encode(render(messages, tools, add_generation_prompt=True)).ids
        return self.tokenizer.decode(self.generate(prompt, max_new_tokens), skip_special_tokens=False)

    def generate(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        raise NotImplementedError


class TorchBackend(_TokenBackend):
    """The plain-torch Qwen2 with its own KV-cache greedy loop."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__(model_dir)
        self.model, _ = load_hf_dir(model_dir)

    def generate(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        return self.model.greedy(prompt, max_new_tokens, {EOS_ID, PAD_ID})


class TransformersBackend(_TokenBackend):
    """``Qwen2ForCausalLM.from_pretrained`` + ``generate(do_sample=False)``."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__(model_dir)
        from transformers import Qwen2ForCausalLM

        self.model = Qwen2ForCausalLM.from_pretrained(str(model_dir)).eval()

    @torch.no_grad()
    def generate(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        out = self.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                  max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=[EOS_ID, PAD_ID],
                                  pad_token_id=PAD_ID)
        return out[0, len(prompt):].tolist()


class NativeBackend:
    """turnstream's own engine (``workers.decode.native.NativeEngine``), driven one request at a time."""

    def __init__(self, model_dir: Path) -> None:
        from workers.decode.native.config import EngineConfig
        from workers.decode.native.engine import NativeEngine

        self.loop = asyncio.new_event_loop()
        self.engine = NativeEngine(EngineConfig(model=str(model_dir), device="cpu"))
        self.loop.run_until_complete(self.engine.start())
        self.ids = itertools.count()

    def complete(self, messages: list[dict[str, Any]], max_new_tokens: int,
                 tools: list[dict[str, Any]] = SERVER_TOOLS) -> str:
        return self.loop.run_until_complete(self._complete(messages, max_new_tokens, tools))

    async def _complete(self, messages: list[dict[str, Any]], max_new_tokens: int, tools: list[dict[str, Any]]) -> str:
        from workers.decode.engine import GenerateRequest, SamplingParams

        rid = f"eval-{next(self.ids)}"
        req = GenerateRequest(rid=rid, session=rid, messages=messages, tools=tools,
                              params=SamplingParams(max_tokens=max_new_tokens, temperature=0.0))
        parts, reason = [], None
        async for delta in self.engine.generate(req):
            parts.append(delta.text)
            reason = delta.finish_reason
        self.engine.release(rid)
        text = "".join(parts)
        return text + EOS_TEXT if reason == "stop" and not text.endswith(EOS_TEXT) else text

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.stop())
        self.loop.close()


BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "torch": TorchBackend, "transformers": TransformersBackend, "native": NativeBackend,
}


def make_backend(name: str, model_dir: Path) -> Backend:
    if name not in BACKENDS:
        raise SystemExit(f"unknown backend {name!r}; choose from {sorted(BACKENDS)}")
    return BACKENDS[name](model_dir)
