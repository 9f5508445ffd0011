"""The vLLM side of ``bench engine`` (b): run inside ``.venv-vllm``, driven over stdin/stdout.

    .venv-vllm/bin/python -m bench.vllm_decode --model DIR [--engine-args JSON]

Starts vLLM's ``AsyncLLM`` on the checkpoint (offline, prefix caching as turnstream runs it),
prints one line ``REPLY {"ready": ...}``, then answers each request line
``{"batch": B, "new_tokens": N, "prompt": [ids]}`` with ``REPLY {"seconds": S, "tokens": [n, ...]}``:
B concurrent greedy requests of exactly N tokens (``ignore_eos``), S the time from the last
request's first token to the last token of all (the same span as the native engine's timer),
and each request's token count.  An empty line or EOF stops it.  Replies carry the ``REPLY``
prefix because vLLM logs to stdout too.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from typing import Any

REPLY = "REPLY "
_ids = itertools.count()


async def _one(llm: Any, prompt: list[int], new_tokens: int) -> tuple[float, float, int]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA)
    first, count = None, 0
    async for out in llm.generate(TokensPrompt(prompt_token_ids=prompt), params, f"bench-{next(_ids)}"):
        count += len(out.outputs[0].token_ids)
        first = first or time.perf_counter()
    return first or 0.0, time.perf_counter(), count


async def _timed(llm: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    spans = await asyncio.gather(*(_one(llm, cmd["prompt"], cmd["new_tokens"]) for _ in range(cmd["batch"])))
    return {"seconds": max(s[1] for s in spans) - max(s[0] for s in spans), "tokens": [s[2] for s in spans]}


async def _serve(args: argparse.Namespace) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_args = {"enable_prefix_caching": True, "disable_log_stats": True, **json.loads(args.engine_args),
                   "model": args.model}
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))
    loop = asyncio.get_running_loop()
    _reply({"ready": True, "engine_args": engine_args})
    try:
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            _reply(await _timed(llm, json.loads(line)))
    finally:
        llm.shutdown()


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(REPLY + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.vllm_decode", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--engine-args", default="{}", help="JSON: AsyncEngineArgs fields")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
