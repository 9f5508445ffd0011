"""``turnstream bench routing``: KV-aware routing of follow-up requests across several decoders.

    turnstream bench routing [--model tiny|synthetic] [--decoders 2] [--conversations 8] [--turns 4]
                             [--concurrency 4] [--result-tokens 150] [--rounds 2] [--out DIR]

An OpenAI-API agent loop, as client-side agent frameworks run it: each conversation sends a
request, gets the model's tool calls, and sends the whole conversation again with the tool
results (a long result, as tools return) -- ``--turns`` requests per conversation, each a new
one-turn session.  The stack (``--decoders`` decode processes on the native engine, a parser, a
tool worker, the gateway) runs once with ``kv_routing=prefix`` and once with ``kv_routing=off``
(the shared queue alone), alternating for ``--rounds`` rounds.  ``--model tiny`` is the bundled
2M-parameter model, whose prefill is so cheap that routing shows in tokens computed more than
in latency; ``--model synthetic`` is a random-weight Qwen2 checkpoint (the engine benchmark's,
built on the spot) with costlier prefill: it calls no tools, so each follow-up carries the
data in a user message.

Printed per mode, over the follow-up requests (all but each conversation's first): the share
of prompt tokens found in the KV cache, prompt tokens computed, time to first token (streamed),
and how often the follow-up ran on the decoder that served the conversation's previous request.
Writes ``routing.json``, ``routing.md`` and ``routing.png`` (``routing-synthetic.*`` for that model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.common import DEFAULT_OUT, markdown_table, percentile, plot, progress, verdict, write_results
from schemas import keys
from bench.engine import MODEL as ENGINE_MODEL
from runtime.config import DEFAULT_MODEL_DIR, load_config
from workers.decode.synthetic import build_checkpoint
from turnstream.embedded import EmbeddedRedis, free_port
from turnstream.processes import stop_all
from turnstream.stack import start_processes, wait_for_decoders

MODES = ("prefix", "off")
CITIES = ("Paris", "Oslo", "Rome", "Lima", "Kyiv", "Bern", "Cairo", "Quito", "Dakar", "Hanoi", "Perth", "Tunis")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather and a detailed forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SERVED = "bench"
FORECAST = "Hour {h}: {t} degrees, wind {w} km/h, humidity {u} percent, visibility good. "


def _result(city: str, turn: int, tokens: int) -> str:
    """A tool result of about ``tokens`` tokens (the bundled tokenizer splits words, digits and spaces)."""
    parts, h = [f"{city}: "], 0
    while sum(len(p) for p in parts) < tokens * 2.2:
        parts.append(FORECAST.format(h=h % 24, t=(h * 7 + turn) % 30, w=(h * 3) % 40, u=40 + h % 50))
        h += 1
    return json.dumps({"city": city, "forecast": "".join(parts)})


async def _request(client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One streamed chat completion: the assembled message, usage, and time to first token."""
    body = {"model": SERVED, "messages": messages, "tools": TOOLS, "max_tokens": 48, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, ttft = time.perf_counter(), None
    content, calls, usage, cid = "", {}, {}, ""
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            cid = chunk["id"]
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                delta = choice["delta"]
                if ttft is None and (delta.get("content") or delta.get("tool_calls")):
                    ttft = time.perf_counter() - t0
                content += delta.get("content") or ""
                for c in delta.get("tool_calls") or []:
                    call = calls.setdefault(c["index"], {"id": c.get("id"), "name": "", "arguments": ""})
                    call["name"] += c.get("function", {}).get("name") or ""
                    call["arguments"] += c.get("function", {}).get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]
    return {"message": message, "usage": usage, "ttft": ttft if ttft is not None else time.perf_counter() - t0,
            "sid": cid.removeprefix("chatcmpl-")}


async def _conversation(client: httpx.AsyncClient, r: redis.Redis, city: str, args: argparse.Namespace) -> list[dict]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"What's the weather in {city} today?"}]
    rows, previous = [], None
    for turn in range(args.turns):
        out = await _request(client, messages)
        owner = r.hget(keys.session(out["sid"]), "owner")
        usage = out["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        rows.append({"turn": turn, "prompt": usage.get("prompt_tokens", 0), "cached": cached, "ttft": out["ttft"],
                     "completion": usage.get("completion_tokens", 0), "owner": owner is not None,
                     "same_decoder": previous is not None and owner == previous})
        previous = owner
        messages.append(out["message"])
        for i, call in enumerate(out["message"].get("tool_calls") or [{"id": f"none{turn}"}]):
            if "function" in call:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": _result(city, turn * 10 + i, args.result_tokens)})
        if not out["message"].get("tool_calls"):  # the model answered: ask on, with the data in the question
            messages.append({"role": "user", "content": f"And tomorrow? {_result(city, turn, args.result_tokens)}"})
    return rows


async def _run_mode(url: str, r: redis.Redis, args: argparse.Namespace) -> list[dict]:
    sem = asyncio.Semaphore(args.concurrency)

    async def one(city: str) -> list[dict]:
        async with sem:
            return await _conversation(client, r, city, args)

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        per = await asyncio.gather(*(one(f"{CITIES[i % len(CITIES)]}{i // len(CITIES) or ''}")
                                     for i in range(args.conversations)))
    return [row for rows in per for row in rows]


def measure(mode: str, server_url: str, db: int, model: str, args: argparse.Namespace) -> list[dict]:
    url = server_url.rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    cfg = load_config(redis_url=url, port=free_port(), engine="native", model=model, served_model_name=SERVED,
                      kv_routing=mode, log_level="WARNING")
    procs = start_processes(cfg, ["decode"] * args.decoders + ["parser", "tools", "gateway"])
    try:
        wait_for_decoders(url, args.decoders)
        r = redis.Redis.from_url(url)
        return asyncio.run(_run_mode(f"http://{cfg.host}:{cfg.port}", r, args))
    finally:
        stop_all([p for _, p in procs])


def summarize(rows: list[dict]) -> dict[str, Any]:
    follow = [x for x in rows if x["turn"] > 0]
    prompt, cached = sum(x["prompt"] for x in follow), sum(x["cached"] for x in follow)
    ttft = [x["ttft"] * 1000 for x in follow]
    by_turn = {}
    for t in sorted({x["turn"] for x in rows}):
        at = [x for x in rows if x["turn"] == t]
        by_turn[t] = {"cached_share": sum(x["cached"] for x in at) / max(1, sum(x["prompt"] for x in at)),
                      "computed": statistics.mean(x["prompt"] - x["cached"] for x in at),
                      "ttft_ms": statistics.median(x["ttft"] * 1000 for x in at)}
    return {"requests": len(follow), "cached_share": cached / max(1, prompt), "computed_tokens": prompt - cached,
            "prompt_tokens": prompt, "ttft_p50_ms": percentile(ttft, 50), "ttft_p90_ms": percentile(ttft, 90),
            "same_decoder": sum(x["same_decoder"] for x in follow) / max(1, len(follow)), "by_turn": by_turn}


def check(rows: dict[str, list[dict]], args: argparse.Namespace) -> list[str]:
    """Every request of every conversation was served: prompt and completion tokens, a known decoder."""
    want = args.rounds * args.conversations * args.turns
    problems = [f"kv_routing={m}: {len(rs)} requests answered, expected {want}" for m, rs in rows.items()
                if len(rs) != want]
    return problems + [f"kv_routing={m}, turn {x['turn']}: {x['prompt']} prompt and {x['completion']} completion "
                       f"tokens, decoder known: {x['owner']}" for m, rs in rows.items() for x in rs
                       if not (x["prompt"] > 0 and x["completion"] > 0 and x["owner"])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream bench routing", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("tiny", "synthetic"), default="tiny")
    ap.add_argument("--decoders", type=int, default=2)
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4, help="requests per conversation")
    ap.add_argument("--concurrency", type=int, default=4, help="conversations in flight at once")
    ap.add_argument("--result-tokens", type=int, default=150, help="approximate tokens of each tool result")
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each mode")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rows: dict[str, list[dict]] = {m: [] for m in MODES}
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(prefix="ts-bench-routing-") as tmp:
        model = str(DEFAULT_MODEL_DIR)
        if args.model == "synthetic":
            progress(f"routing: building a random Qwen2 checkpoint {ENGINE_MODEL}")
            model = str(build_checkpoint(Path(tmp) / "qwen2", "qwen2", **ENGINE_MODEL))
        db = 0
        for rnd in range(args.rounds):
            for mode in MODES:
                db += 1
                progress(f"routing: round {rnd + 1}/{args.rounds}, kv_routing={mode}: {args.conversations} "
                         f"conversations × {args.turns} requests on {args.decoders} decoders")
                rows[mode] += measure(mode, server.url, db, model, args)
                s = summarize(rows[mode])
                progress(f"  so far: cached {s['cached_share']:.1%} of follow-up prompt tokens, "
                         f"TTFT p50 {s['ttft_p50_ms']:.1f} ms, same decoder {s['same_decoder']:.0%}")
    res = {m: summarize(rows[m]) for m in MODES}
    on, off = res["prefix"], res["off"]
    headers = ["kv_routing", "follow-ups", "cached share", "prompt tokens computed", "TTFT p50 ms", "TTFT p90 ms",
               "same decoder"]
    table = markdown_table(headers, [[m, res[m]["requests"], f"{res[m]['cached_share']:.1%}",
                                      res[m]["computed_tokens"], res[m]["ttft_p50_ms"], res[m]["ttft_p90_ms"],
                                      f"{res[m]['same_decoder']:.0%}"] for m in MODES])
    table += (f"\n\nprefix vs off: {off['computed_tokens'] / max(1, on['computed_tokens']):.2f}× fewer prompt tokens "
              f"computed, TTFT p50 {off['ttft_p50_ms'] / on['ttft_p50_ms']:.2f}× lower "
              f"(model {args.model}, {args.decoders} decoders, {args.conversations} conversations × {args.turns} requests, "
              f"{args.rounds} rounds, concurrency {args.concurrency})")
    name = "routing" if args.model == "tiny" else f"routing-{args.model}"
    problems = check(rows, args)
    out = write_results(name, args.out, {"args": vars(args), "results": res, "problems": problems}, table)
    series = {f"{m}: prompt tokens computed": ([t + 1 for t in res[m]["by_turn"]],
                                               [v["computed"] for v in res[m]["by_turn"].values()]) for m in MODES}
    plot(out / f"{name}.png", f"Follow-ups across {args.decoders} decoders ({args.model} model): prompt tokens computed",
         "request in the conversation", "tokens computed (mean)", series)
    return verdict("routing", problems)


if __name__ == "__main__":
    raise SystemExit(main())
