"""Grammar libraries side by side: llguidance vs xgrammar on the same tool-call grammar.

    turnstream bench grammar_libs [--out DIR] [--batches 1,8,32] [--large-vocab 150000] [--repeats 3]

For each library and each tokenizer (the bundled model's 2k vocabulary and a synthetic
byte-level BPE of ~150k tokens, built offline like Qwen's), this measures
  * compile: building the matcher for a ``tool_choice: "required"`` hermes grammar over five
    tools with their JSON schemas (first build, and the per-request build once warm);
  * mask: the time to fill the next-token bitmask of B sequences at once, at every step of a
    real tool-call completion (B = 1, 8, 32; the sequences are at different positions).
The figures chose the library the engine uses (``workers/decode/constraints``); see the README.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from tokenizers import Tokenizer

from bench.common import markdown_table, progress, write_results
from workers.decode.synthetic import build_large_tokenizer

TOOLS = [
    ("get_weather", {"city": {"type": "string"}, "date": {"type": "string"}}, ["city"]),
    ("book_restaurant", {"restaurant": {"type": "string"}, "party_size": {"type": "integer", "minimum": 1},
                         "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}},
     ["restaurant", "party_size", "time"]),
    ("get_time", {"timezone": {"type": "string", "enum": ["Europe/Paris", "Asia/Tokyo", "America/New_York"]}},
     ["timezone"]),
    ("calculator", {"expression": {"type": "string"}}, ["expression"]),
    ("search", {"query": {"type": "string"}, "limit": {"type": "integer"}}, ["query"]),
]
COMPLETION = ('<tool_call>\n{"name": "book_restaurant", "arguments": {"restaurant": "Chez Nous", "party_size": 2, '
              '"time": "19:00"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "Paris", "date": "today"}}\n</tool_call>')


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


@dataclass
class Lib:
    """One library behind the three operations the benchmark needs."""

    name: str
    compile: Callable[[], Any]  # -> a fresh matcher
    fill: Callable[[list[Any], torch.Tensor], None]  # masks of all matchers into rows of the bitmask
    accept: Callable[[Any, int], None]


def llguidance_lib(tok: Tokenizer, eos: int) -> Lib:
    import llguidance
    import llguidance.torch as llt

    lltok = llguidance.LLTokenizer(tok.to_str(), n_vocab=tok.get_vocab_size(), eos_token=eos)
    opener, closer = (_lark_marker(tok, m) for m in ("<tool_call>", "</tool_call>"))
    alts = " | ".join(f"c{i}" for i in range(len(TOOLS)))
    rules = [f'c{i}: "{{\\"name\\": \\"{n}\\", \\"arguments\\": " %json {json.dumps(_schema(p, r))} "}}"'
             for i, (n, p, r) in enumerate(TOOLS)]
    lark = f'start: call ("\\n" call)*\ncall: {opener} "\\n" ({alts}) "\\n" {closer}\n' + "\n".join(rules)
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)

    def compile_() -> Any:
        m = llguidance.LLMatcher(lltok, grammar)
        assert not m.is_error(), m.get_error()
        return m

    def fill(ms: list[Any], bitmask: torch.Tensor) -> None:
        for i, m in enumerate(ms):  # one by one: LLExecutor's thread pool had 10x worse tails on 2 busy cores
            llt.fill_next_token_bitmask(m, bitmask, i)

    def accept(m: Any, t: int) -> None:
        assert m.consume_token(t), m.get_error()

    return Lib("llguidance", compile_, fill, accept)


def xgrammar_lib(tok: Tokenizer, eos: int) -> Lib:
    import xgrammar as xgr

    vocab = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]  # byte-level strings, as HF stores them
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.BYTE_LEVEL, stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    tags = [{"type": "tag", "begin": f'<tool_call>\n{{"name": "{n}", "arguments": ',
             "content": {"type": "json_schema", "json_schema": _schema(p, r)}, "end": "}\n</tool_call>"}
            for n, p, r in TOOLS]
    stag = {"type": "structural_tag", "format": {"type": "tags_with_separator", "tags": tags, "separator": "\n",
                                                 "at_least_one": True}}
    batch = xgr.BatchGrammarMatcher()

    def compile_() -> Any:
        return xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(stag)))

    def fill(ms: list[Any], bitmask: torch.Tensor) -> None:
        batch.batch_fill_next_token_bitmask(ms, bitmask)

    def accept(m: Any, t: int) -> None:
        assert m.accept_token(t)

    return Lib("xgrammar", compile_, fill, accept)


def _lark_marker(tok: Tokenizer, text: str) -> str:
    """An added token by id (llguidance matches added tokens only as tokens), else the literal."""
    ids = [t["id"] for t in json.loads(tok.to_str())["added_tokens"] if t["content"] == text]
    return f"<[{ids[0]}]>" if ids else json.dumps(text)


def _mask_us(lib: Lib, ids: list[int], batch: int, words: int) -> list[float]:
    """Microseconds to fill B masks at each step; sequence b starts b steps later than sequence 0."""
    ms = [lib.compile() for _ in range(batch)]
    bitmask = torch.zeros((batch, words), dtype=torch.int32)
    offsets = [b % max(1, len(ids) // 2) for b in range(batch)]
    pos = [0] * batch
    for m, off in zip(ms, offsets):
        for t in ids[:off]:
            lib.accept(m, t)
            pos[ms.index(m)] += 1
    times = []
    for _ in range(len(ids) - max(offsets) - 1):
        t0 = time.perf_counter()
        lib.fill(ms, bitmask)
        times.append((time.perf_counter() - t0) * 1e6)
        for i, m in enumerate(ms):
            lib.accept(m, ids[pos[i]])
            pos[i] += 1
    return times


def _measure(lib_factory: Callable[[Tokenizer, int], Lib], tok: Tokenizer, vocab_name: str,
             args: argparse.Namespace) -> dict[str, Any]:
    eos = tok.token_to_id("<|im_end|>")
    t0 = time.perf_counter()
    lib = lib_factory(tok, eos)
    lib.compile()
    first = time.perf_counter() - t0
    warm = statistics.median(_timed(lib.compile) for _ in range(args.repeats))
    ids = tok.encode(COMPLETION, add_special_tokens=False).ids
    words = (tok.get_vocab_size() + 31) // 32
    row: dict[str, Any] = {"lib": lib.name, "vocab": vocab_name, "vocab_size": tok.get_vocab_size(),
                           "setup_and_first_compile_ms": first * 1e3, "compile_ms": warm * 1e3}
    for b in args.batches:  # mean over the steps of the completion (string bodies and structure alike), best run
        runs = [_mask_us(lib, ids, b, words) for _ in range(args.repeats)]
        best = min(runs, key=statistics.mean)
        row[f"mask_us_b{b}"], row[f"mask_p95_us_b{b}"] = statistics.mean(best), sorted(best)[int(0.95 * len(best))]
    progress(f"{lib.name} on {vocab_name}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()
                                                         if isinstance(v, float)))
    return row


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="turnstream bench grammar_libs", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--large-vocab", type=int, default=150_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default="models/tiny-agent")
    args = p.parse_args(argv)
    args.batches = [int(x) for x in args.batches.split(",")]
    torch.set_num_threads(1)
    vocabs = {"tiny-agent": Tokenizer.from_file(f"{args.model}/tokenizer.json")}
    progress(f"building a {args.large_vocab}-token byte-level BPE tokenizer")
    vocabs[f"synthetic-{args.large_vocab // 1000}k"] = build_large_tokenizer(args.large_vocab)
    rows = [_measure(f, tok, name, args) for name, tok in vocabs.items() for f in (llguidance_lib, xgrammar_lib)]
    headers = ["library", "vocab", "first build ms", "compile ms"] + [f"mask µs B={b} (p95)" for b in args.batches]
    table = markdown_table(headers, [[r["lib"], r["vocab"], r["setup_and_first_compile_ms"], r["compile_ms"]]
                                     + [f"{r[f'mask_us_b{b}']:.1f} ({r[f'mask_p95_us_b{b}']:.0f})" for b in args.batches]
                                     for r in rows])
    write_results("grammar_libs", args.out, {"rows": rows, "batches": args.batches}, table)
    return 0
