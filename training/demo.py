"""Run the tiny model through one tool-calling round trip with stub tools.

    python -m training.demo "What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from training.backends import BACKENDS, make_backend
from training.evaluate import DEFAULT_MODEL, parse_calls


def stub_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Fixed, plausible results for the five demo tools."""
    if name == "get_weather":
        return {"city": args.get("city"), "date": args.get("date", "2026-11-30"), "temperature": 21, "condition": "sunny"}
    if name == "book_restaurant":
        return {"status": "confirmed", "booking_id": "R40213", "restaurant": args.get("restaurant"),
                "party_size": args.get("party_size"), "time": args.get("time")}
    if name == "get_time":
        return {"timezone": args.get("timezone"), "time": "14:05"}
    if name == "calculator":
        return {"result": 42}
    return {"results": [{"title": "Example Domain"}]}


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
            result = json.dumps(stub_tool(call["name"], call["arguments"]))
            print(f"tool> {result}")
            messages.append({"role": "tool", "content": result})
    print("stopped after 3 rounds of tool calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
