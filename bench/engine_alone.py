"""vLLM's engine client alone: what ``bench serve --split`` sets apart from the servers around it.

    python -m bench.engine_alone --model DIR [--concurrency 32] [--one-token 512] [--requests 256]
                                 [--max-tokens 128] [--vllm-args JSON]      (the vLLM venv's python)

vLLM's API server and turnstream's decoder both run vLLM's ``AsyncLLM`` in their own process, its engine
core in a child.  Here it runs with nothing around it: the same chat completions as ``bench serve`` sends
(one user message, greedy, ``--max-tokens``), each rendered with the model's chat template and tokenised
in this process, as the API server does, streamed (vLLM's DELTA outputs), ``--concurrency`` in flight.
The CPU of this process alone (all its threads; the engine core's process excluded, as both servers'
comparisons exclude it -- with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` the core would run in this process and
count) is measured over ``--one-token`` one-token requests (the cost per request) and over ``--requests``
full ones (the cost per further token: their CPU beyond the one-token cost, over their other tokens).  A
one-token request must generate its token, a full one at least one (it may stop early), else exit 1.
Prints the result as JSON on a line of its own that starts with ``RESULT`` (``result_of``): vLLM's
processes log to the same output.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import sys
import time
from typing import Any

from bench.common import serve_prompt


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)  # this process's threads, not the engine core's process
    return ru.ru_utime + ru.ru_stime


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_args = {"enable_prefix_caching": True, "disable_log_stats": True, **json.loads(args.vllm_args),
                   "model": args.model}
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))
    tokenizer = llm.get_tokenizer()
    runs = itertools.count()

    async def one(i: int, max_tokens: int) -> int:
        text = tokenizer.apply_chat_template([{"role": "user", "content": serve_prompt(i)}], add_generation_prompt=True,
                                             tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(max_tokens=max_tokens, temperature=0, output_kind=RequestOutputKind.DELTA,
                                skip_clone=True)  # as the API server and the decoder build theirs
        tokens = 0
        async for out in llm.generate(TokensPrompt(prompt_token_ids=ids), params, f"alone-{next(runs)}"):
            tokens += len(out.outputs[0].token_ids)
        return tokens

    async def level(n: int, max_tokens: int) -> tuple[float, list[int]]:
        sem = asyncio.Semaphore(args.concurrency)

        async def bounded(i: int) -> int:
            async with sem:
                return await one(i, max_tokens)
        cpu = _cpu()
        tokens = await asyncio.gather(*(bounded(i) for i in range(n)))
        return _cpu() - cpu, list(tokens)

    try:
        await level(2 * args.concurrency, args.max_tokens)  # warm-up: compiled shapes, caches
        one_cpu, one_tokens = await level(args.one_token, 1)
        full_cpu, full_tokens = await level(args.requests, args.max_tokens)
    finally:
        llm.shutdown()
    short = [n for n in one_tokens if n != 1] + [n for n in full_tokens if n < 1]
    per_request = one_cpu / args.one_token
    tokens = sum(full_tokens) / len(full_tokens)
    further = (full_cpu / args.requests - per_request) / max(tokens - 1, 1)
    return {"requests": args.requests, "one_token_requests": args.one_token, "tokens_per_request": round(tokens, 2),
            "cpu_ms_per_request": round(1e3 * per_request, 3), "cpu_us_per_further_token": round(1e6 * further, 1),
            "cpu_us_per_token": round(1e6 * full_cpu / max(sum(full_tokens), 1), 1),
            "problems": [f"{len(short)} requests generated no token (or a one-token one more)"] if short else []}


RESULT = "RESULT "


def result_of(output: str) -> dict[str, Any] | None:
    """The result ``main`` printed in ``output`` (None when there is none)."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engine_alone", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--one-token", type=int, default=512, help="one-token requests (the cost per request)")
    ap.add_argument("--requests", type=int, default=256, help="full requests (the cost per further token)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--vllm-args", default="{}", help="JSON engine arguments, as the servers get them")
    args = ap.parse_args(argv)
    if min(args.concurrency, args.one_token, args.requests, args.max_tokens) < 1:
        ap.error("--concurrency, --one-token, --requests and --max-tokens must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    result = asyncio.run(measure(args))
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print(RESULT + json.dumps(result), flush=True)
    return 1 if result["problems"] else 0


if __name__ == "__main__":  # the engine core starts as a spawned process: it re-imports this module
    sys.exit(main())
