"""Native decode engine: continuation TTFT with the pin kept vs evicted; decode tokens/s vs transformers.

    turnstream bench engine [--out DIR] [--contexts 256,1024,4096] [--batches 1,8,32]
                            [--new-tokens 64] [--repeats 3] [--threads 1]

(a) A session's first turn ends, a tool result comes back, and the continuation's time to first
token is measured with the session's KV pinned, and again after the pin was released and the
cache emptied (what a decoder without pins pays).  Goal: >= 10x at the longest context.
(b) Greedy decode tokens/s of ``NativeEngine`` (through its async API) and of transformers'
``generate`` at several batch sizes, on the same random ~1M-parameter Qwen2, float32 CPU.
Decode rate = batch x (N - 1) / (time from the first to the last generated token), best of
``--repeats`` runs, the two engines interleaved so that load from other processes hits both.
(c) Decode tokens/s without and with grammar constraints, and the masks' share of step time,
on the bundled model and a 150k-vocabulary model (``bench/engine_grammar.py``).
Writes ``engine.json``, ``engine.md`` and ``engine.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench import engine_grammar
from bench.common import markdown_table, progress, write_results
from workers.decode.native.config import EngineConfig
from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.native.engine import NativeEngine
from workers.decode.synthetic import build_checkpoint
from runtime.chat_template import ChatTokenizer

MODEL = dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384,
             max_position_embeddings=16384)
TTFT_GOAL = 10.0
FILLER = "The agent reads the file, runs the tests and reports what it found in the logs. "


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ts-bench-engine-") as tmp:
        progress(f"building a random Qwen2 checkpoint ({MODEL['hidden_size']} hidden, {MODEL['num_layers']} layers)")
        path = build_checkpoint(Path(tmp) / "qwen2", "qwen2", **MODEL)
        ttft = asyncio.run(_ttft_all(path, args))
        decode = asyncio.run(_decode_all(path, args))
        models = {"tiny-agent": engine_grammar.TINY, "random 150k vocab": engine_grammar.large_vocab_model(Path(tmp))}
        grammar = asyncio.run(engine_grammar.constrained_all(models, args.batches, args.new_tokens, args.repeats))
    longest = ttft[-1]
    data = {"model": MODEL, "threads": args.threads, "ttft": ttft, "decode": decode, "grammar": grammar,
            "ttft_speedup_longest": longest["speedup"], "ttft_goal": TTFT_GOAL}
    tables = _table(ttft, decode) + "\n\n(c) decode with grammar constraints\n\n" + engine_grammar.table(grammar)
    out = write_results("engine", args.out, data, tables)
    _plot(out / "engine.png", ttft, decode)
    verdict = "met" if longest["speedup"] >= TTFT_GOAL else "MISSED"
    print(f"continuation TTFT at {longest['context']} tokens: {longest['speedup']:.1f}x faster with the pin "
          f"(goal >= {TTFT_GOAL:.0f}x: {verdict}); results in {out}", flush=True)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="turnstream bench engine", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="output directory (default bench/results)")
    p.add_argument("--contexts", default="256,1024,4096", help="first-turn prompt lengths in tokens")
    p.add_argument("--batches", default="1,8,32", help="decode batch sizes")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per request in (b)")
    p.add_argument("--repeats", type=int, default=3, help="repetitions per point (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args(argv)
    args.contexts = [int(x) for x in args.contexts.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    return args


# ---- (a) continuation TTFT ---------------------------------------------------------------
def _engine_config(path: Path, **overrides: Any) -> EngineConfig:
    base = dict(model=str(path), num_blocks=2048, block_size=16, max_num_batched_tokens=1024, max_num_seqs=64,
                pin_default_s=60.0, pin_max_s=60.0)
    return EngineConfig(**{**base, **overrides})


async def _ttft_all(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    tokenizer = ChatTokenizer.from_dir(path)
    engine = NativeEngine(_engine_config(path))
    await engine.start()
    rows = []
    try:
        for context in args.contexts:
            runs: dict[str, list[dict[str, Any]]] = {"kept": [], "evicted": []}
            for rep in range(args.repeats):
                for mode in runs:
                    runs[mode].append(await _continuation(engine, tokenizer, context, f"{mode}-{context}-{rep}", mode))
            rows.append(_summarise(context, runs))
            r = rows[-1]
            progress(f"context {context}: TTFT pin kept {r['kept_ms']:.1f} ms ({r['kept_prefill']} of "
                     f"{r['kept_prompt']} tokens computed), evicted {r['evicted_ms']:.1f} ms "
                     f"({r['evicted_prefill']} of {r['evicted_prompt']}) -> {r['speedup']:.1f}x")
    finally:
        await engine.stop()
    return rows


async def _continuation(engine: NativeEngine, tokenizer: ChatTokenizer, context: int, session: str,
                        mode: str) -> dict[str, Any]:
    history = _history(tokenizer, context, salt=session)
    first = [d async for d in engine.generate(_request(f"{session}-1", session, history, 8))]
    history = history + [{"role": "assistant", "content": "", "raw": "".join(d.text for d in first)},
                         {"role": "tool", "content": '{"status": "ok", "tests": 42, "failed": 0}'}]
    if mode == "evicted":
        engine.release(session)
        engine.reset_prefix_cache()
    before = engine.stats()["prefill_tokens_computed"]
    start = time.perf_counter()
    deltas = engine.generate(_request(f"{session}-2", session, history, 4, continuation=True))
    head = await anext(deltas)
    ttft = time.perf_counter() - start
    async for _ in deltas:
        pass
    engine.release(session)  # done with the session: its pins must not crowd out the next ones
    return {"ttft_s": ttft, "prefill": engine.stats()["prefill_tokens_computed"] - before,
            "prompt": head.prompt_tokens, "cached": head.cached_tokens, "first_prompt": first[0].prompt_tokens}


def _history(tokenizer: ChatTokenizer, context: int, salt: str) -> list[dict[str, Any]]:
    """A conversation whose rendered prompt has about ``context`` tokens."""
    def messages(n: int) -> list[dict[str, Any]]:
        return [{"role": "system", "content": f"[{salt}] " + FILLER * n},
                {"role": "user", "content": "Run the test suite and tell me what fails."}]
    base = len(tokenizer.encode(tokenizer.render(messages(0))))
    per = len(tokenizer.encode(FILLER * 8)) / 8
    return messages(max(0, round((context - base) / per)))


def _request(rid: str, session: str, history: list, max_tokens: int, continuation: bool = False) -> GenerateRequest:
    return GenerateRequest(rid=rid, session=session, messages=history, continuation=continuation,
                           params=SamplingParams(max_tokens=max_tokens))


def _summarise(context: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    kept, evicted = runs["kept"][0], runs["evicted"][0]  # token counts are the same in every repeat
    kept_s, evicted_s = (statistics.median(r["ttft_s"] for r in runs[m]) for m in ("kept", "evicted"))
    return {"context": context, "first_prompt_tokens": kept["first_prompt"],
            "kept_ms": kept_s * 1e3, "kept_prompt": kept["prompt"], "kept_prefill": kept["prefill"],
            "kept_cached": kept["cached"], "evicted_ms": evicted_s * 1e3, "evicted_prompt": evicted["prompt"],
            "evicted_prefill": evicted["prefill"], "speedup": evicted_s / kept_s}


# ---- (b) decode throughput ---------------------------------------------------------------
async def _decode_all(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Native and transformers timings interleaved per repeat, so machine load hits both alike."""
    import transformers

    tokenizer = ChatTokenizer.from_dir(path)
    history = [{"role": "user", "content": "Summarise the test report in one paragraph."}]
    prompt = tokenizer.encode(tokenizer.render(history))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = NativeEngine(_engine_config(path, ignore_eos=True, pin_max_share=0.0))
    await engine.start()
    rows = []
    try:
        native = _NativeTimer(engine, history)
        for batch in args.batches:
            await native.timed(batch, 4)  # warm-up
            _hf_timed(hf, prompt, batch, 4)
            ours, ref = [], []
            for _ in range(args.repeats):
                ours.append(await native.timed(batch, args.new_tokens))
                ref.append(_hf_timed(hf, prompt, batch, args.new_tokens))
            rate, ref_rate = _rate(batch, args, ours), _rate(batch, args, ref)
            rows.append({"batch": batch, "native_tok_s": rate, "transformers_tok_s": ref_rate,
                         "ratio": rate / ref_rate})
            progress(f"batch {batch}: native {rate:.0f} tok/s, transformers {ref_rate:.0f} tok/s "
                     f"({rate / ref_rate:.2f}x)")
    finally:
        await engine.stop()
    return rows


class _NativeTimer:
    def __init__(self, engine: NativeEngine, history: list) -> None:
        self.engine, self.history, self.n = engine, history, 0

    async def timed(self, batch: int, new_tokens: int) -> float:
        """Seconds from the first token of all ``batch`` concurrent requests to their last."""
        self.n += 1
        reqs = [_request(f"r{self.n}-{i}", f"s{i}", self.history, new_tokens) for i in range(batch)]
        spans = await asyncio.gather(*(self._span(r) for r in reqs))
        return max(last for _, last in spans) - max(first for first, _ in spans)

    async def _span(self, req: GenerateRequest) -> tuple[float, float]:
        first = None
        async for _ in self.engine.generate(req):
            first = first or time.perf_counter()
        return first or 0.0, time.perf_counter()


def _hf_timed(hf: Any, prompt: list[int], batch: int, new_tokens: int) -> float:
    """Seconds from the first generated token to the last (a stopping criterion sees each token)."""
    import transformers

    stamps: list[float] = []

    class Stamp(transformers.StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    ids = torch.tensor([prompt] * batch)
    with torch.inference_mode():
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, pad_token_id=hf.config.eos_token_id,
                    stopping_criteria=transformers.StoppingCriteriaList([Stamp()]))
    return stamps[-1] - stamps[0]


def _rate(batch: int, args: argparse.Namespace, seconds: list[float]) -> float:
    return batch * (args.new_tokens - 1) / min(seconds)


# ---- output ------------------------------------------------------------------------------
def _table(ttft: list[dict[str, Any]], decode: list[dict[str, Any]]) -> str:
    a = markdown_table(
        ["context (tokens)", "pin kept: TTFT (ms)", "computed / prompt", "pin evicted: TTFT (ms)",
         "computed / prompt", "speedup"],
        [[r["context"], r["kept_ms"], f"{r['kept_prefill']} / {r['kept_prompt']}", r["evicted_ms"],
          f"{r['evicted_prefill']} / {r['evicted_prompt']}", f"{r['speedup']:.1f}x"] for r in ttft])
    b = markdown_table(["batch", "native tok/s", "transformers tok/s", "native / transformers"],
                       [[r["batch"], round(r["native_tok_s"]), round(r["transformers_tok_s"]), f"{r['ratio']:.2f}x"]
                        for r in decode])
    return f"(a) continuation time to first token\n\n{a}\n\n(b) greedy decode throughput\n\n{b}"


def _plot(path: Path, ttft: list[dict[str, Any]], decode: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    xs = [r["context"] for r in ttft]
    left.plot(xs, [r["kept_ms"] for r in ttft], marker="o", label="pin kept")
    left.plot(xs, [r["evicted_ms"] for r in ttft], marker="o", label="pin evicted (re-prefill)")
    left.set(xscale="log", yscale="log", xlabel="context before the continuation (tokens)",
             ylabel="time to first token (ms)", title="(a) continuation TTFT")
    left.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    left.set_xticks(xs, [str(x) for x in xs])
    for r in ttft:
        left.annotate(f"{r['speedup']:.0f}x", (r["context"], (r["kept_ms"] * r["evicted_ms"]) ** 0.5), ha="center")
    batches = [str(r["batch"]) for r in decode]
    pos = range(len(batches))
    right.bar([p - 0.2 for p in pos], [r["native_tok_s"] for r in decode], width=0.4, label="native engine")
    right.bar([p + 0.2 for p in pos], [r["transformers_tok_s"] for r in decode], width=0.4,
              label="transformers generate")
    right.set(xticks=list(pos), xticklabels=batches, xlabel="batch size", ylabel="decode tokens/s",
              title="(b) greedy decode throughput")
    for p, r in zip(pos, decode):
        right.annotate(f"{r['ratio']:.2f}x", (p - 0.2, r["native_tok_s"]), ha="center", va="bottom")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
