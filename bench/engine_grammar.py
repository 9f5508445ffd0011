"""(c) of ``turnstream bench engine``: decode tokens/s with and without grammar constraints.

The same B concurrent requests run unconstrained, under ``auto`` (free text; calls held to five
offered tools) and under ``required`` (the turn is calls), on two models: the bundled
tiny-agent (2k vocabulary, real completions) and a random Qwen2 with a 150k-token byte-level
vocabulary (as large as Qwen's; its completions under ``required`` are long JSON strings).
Rate = completion tokens / time from the first token to the last, best of the repeats, the
modes interleaved.  The masks' share of step time comes from the engine's own counters
(``workers/decode/native/guided.Timing``): ``critical`` is what the step waited for and spent
applying masks after the forward pass (masks are computed beside it); ``total`` adds all mask
computation and token consumption, wherever it ran.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from bench.common import progress
from workers.decode.constraints import constraint_for
from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.native.config import EngineConfig
from workers.decode.native.engine import NativeEngine
from workers.decode.synthetic import build_checkpoint, build_large_tokenizer

TINY = Path(__file__).resolve().parent.parent / "models" / "tiny-agent"
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": p,
                                                                      "required": list(p)}}}
         for n, p in (("get_weather", {"city": {"type": "string"}}), ("get_time", {"timezone": {"type": "string"}}),
                      ("search", {"query": {"type": "string"}}), ("calculator", {"expression": {"type": "string"}}),
                      ("book_restaurant", {"restaurant": {"type": "string"}, "party_size": {"type": "integer"}}))]
MODES = {"off": None, "auto": {}, "required": {"tool_choice": "required"}}
USER = "What's the weather in Paris today, and what time is it in Tokyo?"
_ids = itertools.count()


def large_vocab_model(tmp: Path) -> Path:
    progress("building a random Qwen2 with a 150k-token vocabulary")
    return build_checkpoint(tmp / "qwen2-150k", "qwen2", hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                            intermediate_size=384, tokenizer=build_large_tokenizer(150_000))


async def constrained_all(models: dict[str, Path], batches: list[int], new_tokens: int,
                          repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name, path in models.items():
        engine = NativeEngine(EngineConfig(model=str(path), num_blocks=4096, max_num_seqs=64,
                                           max_num_batched_tokens=2048, pin_max_share=0.0))
        await engine.start()
        try:
            for batch in batches:
                rows.append(await _point(engine, name, batch, new_tokens, repeats))
        finally:
            await engine.stop()
    return rows


async def _point(engine: NativeEngine, model: str, batch: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    best: dict[str, dict[str, float]] = {}
    await _timed(engine, "auto", batch, 4)  # warm-up (grammar cache, threads)
    for _ in range(repeats):
        for mode in MODES:
            r = await _timed(engine, mode, batch, new_tokens)
            if mode not in best or r["tok_s"] > best[mode]["tok_s"]:
                best[mode] = r
    row: dict[str, Any] = {"model": model, "batch": batch}
    for mode, r in best.items():
        row |= {f"{mode}_{k}": v for k, v in r.items()}
    progress(f"{model} batch {batch}: " + ", ".join(
        f"{m} {best[m]['tok_s']:.0f} tok/s" + (f" (mask {100 * best[m]['critical_share']:.1f} % of step time)"
                                                 if m != "off" else "") for m in MODES))
    return row


async def _timed(engine: NativeEngine, mode: str, batch: int, new_tokens: int) -> dict[str, float]:
    timing = engine.core.guide.timing
    before = (timing.critical_s, timing.fill_s + timing.advance_s + timing.critical_s)
    reqs = [_request(mode, new_tokens) for _ in range(batch)]
    spans = await asyncio.gather(*(_span(engine, r) for r in reqs))
    window = max(s[1] for s in spans) - min(s[0] for s in spans)
    tokens = sum(s[2] for s in spans) - batch  # the first token of each is not in the window
    critical = timing.critical_s - before[0]
    total = timing.fill_s + timing.advance_s + timing.critical_s - before[1]
    return {"tok_s": tokens / window, "tokens": tokens, "critical_share": critical / window,
            "total_share": total / window}


def _request(mode: str, new_tokens: int) -> GenerateRequest:
    n = next(_ids)
    params = MODES[mode]
    constraint = None if params is None else constraint_for("hermes", None, TOOLS, params)
    return GenerateRequest(rid=f"c{n}", session=f"c{n}", messages=[{"role": "user", "content": USER}],
                           tools=TOOLS, params=SamplingParams(max_tokens=new_tokens), constraint=constraint)


async def _span(engine: NativeEngine, req: GenerateRequest) -> tuple[float, float, int]:
    first, tokens = None, 0
    async for d in engine.generate(req):
        first = first or time.perf_counter()
        tokens = d.completion_tokens
    return first or 0.0, time.perf_counter(), tokens


def table(rows: list[dict[str, Any]]) -> str:
    """(c) as markdown: tok/s per mode, and the masks' share of step time (critical path / total)."""
    from bench.common import markdown_table

    return markdown_table(
        ["model", "batch", "off tok/s", "auto tok/s", "required tok/s", "auto / off", "required / off",
         "mask share, auto", "mask share, required"],
        [[r["model"], r["batch"], round(r["off_tok_s"]), round(r["auto_tok_s"]), round(r["required_tok_s"]),
          f"{r['auto_tok_s'] / r['off_tok_s']:.2f}x", f"{r['required_tok_s'] / r['off_tok_s']:.2f}x",
          f"{100 * r['auto_critical_share']:.1f} % / {100 * r['auto_total_share']:.1f} %",
          f"{100 * r['required_critical_share']:.1f} % / {100 * r['required_total_share']:.1f} %"] for r in rows])
