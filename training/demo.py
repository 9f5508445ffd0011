"""Run the tiny model through tool-calling round trips with the real demo tools (no server needed).

    python -m training.demo "What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from training.backends import BACKENDS, make_backend
from training.evaluate import DEFAULT_MODEL
from training.probes import run_tool
from training.scoring import parse_calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompt", nargs="?", default="What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--backend", default="torch", choices=sorted(BACKENDS))
    args = ap.parse_args(argv)
    backend = make_backend(args.backend, args.model)
    messages: list[dict[str, Any]] = [{"role": "user", "content": args.prompt}]
    for _ in range(3):
        text = backend.complete(messages, 200)
        print(f"assistant> {text}")
        calls, _ = parse_calls(text)
        if not calls:
            return 0
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": c} for c in calls]})
        for call in calls:
            result = run_tool(call)
            print(f"tool> {result}")
            messages.append({"role": "tool", "content": result})
    print("stopped after 3 rounds of tool calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
