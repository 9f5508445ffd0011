"""Overlap: end-to-end time of one agent scenario with tools dispatched the moment each call closes
(``dispatch = on_close``) and with tools dispatched when the turn ends (``after_turn``).

    turnstream bench overlap [--out DIR] [--rate 50] [--calls 3] [--tool-seconds 2] [--decode-seconds 6]
                             [--sessions 3]

The scenario: turn 0 streams ``--decode-seconds`` of text at ``--rate`` tokens/s (ReplayEngine)
with ``--calls`` calls of a tool that sleeps ``--tool-seconds``, closing within its first half;
turn 1 answers from the results.  The whole stack runs as processes on an embedded server (a
decoder, a tool worker, and one parser per mode).  Printed: each mode's end-to-end time (median
over ``--sessions`` concurrent sessions), their ratio, the time between turn 0's end and turn 1's
start, and the bounds: perfect overlap ``max(decode, tools) + final turn`` and no overlap
``decode + tools + final turn``.  Writes ``overlap.json``, ``overlap.md`` and ``overlap.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_OUT, markdown_table, mismatches, progress, verdict, write_results
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import StartTurn
from runtime import bus
from runtime.config import Config, load_config
from turnstream.embedded import EmbeddedRedis
from runtime.session import Sessions
from workers.parser import tools_called
from turnstream.processes import spawn, stop_all

MODES = ("on_close", "after_turn")
FILLER = "The plan is taking shape while the tools run in the background. "
FINAL = "Done: {{ results | join(' / ') }}."
TOOLS_TOML = "[registry]\nbuiltins = false\ninclude_debug = true\n"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench overlap", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--rate", type=float, default=50.0, help="ReplayEngine tokens per second")
    ap.add_argument("--calls", type=int, default=3, help="tool calls in turn 0")
    ap.add_argument("--tool-seconds", type=float, default=2.0, help="how long each tool sleeps")
    ap.add_argument("--decode-seconds", type=float, default=6.0, help="decode time of turn 0")
    ap.add_argument("--sessions", type=int, default=3, help="concurrent sessions per mode")
    ap.add_argument("--engine", default="replay", help=argparse.SUPPRESS)  # self-check: any other must fail
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- the scenario
def scenario(tokenizer: Any, args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """The replay script, and its shape: tokens per turn and the token at which each call closes."""
    def n(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    total = int(args.decode_seconds * args.rate)
    text, closes = "", []
    for i in range(args.calls):  # calls start at 5 %, then every 50 % / calls of the turn
        while n(text) < total * (0.05 + 0.5 * i / max(args.calls, 1)):
            text += FILLER
        call = {"name": "debug_sleep", "arguments": {"text": f"r{i}", "seconds": args.tool_seconds}}
        text += f"<tool_call>\n{json.dumps(call)}\n</tool_call>\n"
        closes.append(n(text))
    while n(text) < total or text.endswith("\n"):  # a template's last newline is dropped by jinja
        text += FILLER
    final = FINAL.replace("{{ results | join(' / ') }}", " / ".join(f"r{i}" for i in range(args.calls)))
    return [text, FINAL], {"tokens": [n(text), n(final)], "call_close_tokens": closes}


def bounds(shape: dict[str, Any], args: argparse.Namespace) -> dict[str, float]:
    """Ideal end-to-end times (s) of the scenario, overheads excluded."""
    d0, d1 = (t / args.rate for t in shape["tokens"])
    last_close = max(shape["call_close_tokens"], default=0) / args.rate
    s = args.tool_seconds
    return {"decode_s": d0 + d1, "tools_s": s, "perfect_overlap_s": max(d0, s) + d1,
            "on_close_ideal_s": max(d0, last_close + s) + d1, "no_overlap_s": d0 + s + d1}


# --------------------------------------------------------------------------- running
async def _session(r: Any, sid: str, script: list[str], max_tokens: int) -> float:
    await Sessions(r).create(sid, [{"role": "user", "content": "plan my trip"}], meta={"replay": script},
                             max_turns=4, params={"max_tokens": max_tokens}, tools=tools_called(script))
    t0 = time.time()
    await bus.add(r, keys.DECODE_JOBS, encode(StartTurn(sid=sid, turn=0)))
    return t0


async def _timeline(r: Any, sid: str, t0: float, timeout_s: float = 60.0) -> dict[str, Any]:
    """When each step of a session happened, in seconds after its StartTurn."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        evs = [decode_event(f[bus.FIELD]) for _, f in await r.xrange(keys.events(sid))]
        ended = [e for e in evs if type(e.body).__name__ == "SessionEnded"]
        if ended:
            e2e = ended[0].ts - t0
            return {"e2e": e2e, "turn0_start": _at(evs, t0, "TurnStarted", 0)[0],
                    "turn0_end": _at(evs, t0, "TurnEnded", 0)[0],
                    "turn1_start": (_at(evs, t0, "TurnStarted", 1) or [e2e])[0],
                    "tool_start": _at(evs, t0, "ToolStarted"), "tool_end": _at(evs, t0, "ToolResult"),
                    "tool_errors": sum(1 for e in evs if type(e.body).__name__ == "ToolResult" and e.body.is_error),
                    "turns": len(_at(evs, t0, "TurnEnded")), "reason": ended[0].body.reason,
                    "turn0_tokens": next((e.body.completion_tokens for e in evs
                                          if type(e.body).__name__ == "TurnEnded" and e.turn == 0), 0)}
        await asyncio.sleep(0.05)
    raise TimeoutError(f"session {sid} did not end")


def _at(evs: list[Any], t0: float, kind: str, turn: int | None = None) -> list[float]:
    """Times (after ``t0``) of the events of one kind (and turn)."""
    return [e.ts - t0 for e in evs if type(e.body).__name__ == kind and turn in (None, e.turn)]


async def _mode(cfg: Config, mode: str, script: list[str], n: int, max_tokens: int) -> list[dict[str, Any]]:
    r = bus.connect(cfg.redis_url)
    try:
        warm = f"warm-{mode}"
        await _timeline(r, warm, await _session(r, warm, ["ready."], 16))  # the new parser is up
        t0s = {f"{mode}-{i}": await _session(r, f"{mode}-{i}", script, max_tokens) for i in range(n)}
        return [await _timeline(r, sid, t0) for sid, t0 in t0s.items()]
    finally:
        await r.aclose()


def _run_modes(cfg: Config, script: list[str], n: int, max_tokens: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        parser = spawn(["worker", "parser"], cfg.replace(dispatch=mode))
        try:
            out[mode] = asyncio.run(_mode(cfg, mode, script, n, max_tokens))
        finally:
            stop_all([parser])
        progress(f"{mode}: median end-to-end {statistics.median(t['e2e'] for t in out[mode]):.2f} s")
    return out


def check_scenario(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace,
                   shape: dict[str, Any]) -> list[str]:
    """What did not happen as the scenario says: every session decoded the scripted turn 0, ran each
    call once without error, took two turns and stopped on its own.  Empty when the figures are valid."""
    want = {"turn 0 tokens": shape["tokens"][0], "tools started": args.calls, "tool results": args.calls,
            "tool errors": 0, "turns": 2 if args.calls else 1, "end": "stop"}
    problems = []
    for mode, timelines in runs.items():
        for i, t in enumerate(timelines):
            got = {"turn 0 tokens": t["turn0_tokens"], "tools started": len(t["tool_start"]), "tool results": len(t["tool_end"]),
                   "tool errors": t["tool_errors"], "turns": t["turns"], "end": t["reason"]}
            problems += mismatches(f"{mode} session {i}", got, want)
    return problems


# --------------------------------------------------------------------------- report
def _plot(path: Path, runs: dict[str, list[dict[str, Any]]], ideal: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.6 + 1.2 * len(runs)), dpi=110, sharex=True)
    for ax, (mode, timelines) in zip(axes, runs.items()):
        t = timelines[0]
        tools = zip(sorted(t["tool_start"]), sorted(t["tool_end"]))
        rows = [("decode", [(t["turn0_start"], t["turn0_end"]), (t["turn1_start"], t["e2e"])])]
        rows += [(f"tool {i}", [span]) for i, span in enumerate(tools)]
        for y, (_, spans) in enumerate(rows):
            ax.broken_barh([(a, b - a) for a, b in spans], (y - 0.35, 0.7),
                           color="tab:blue" if y == 0 else "tab:orange")
        ax.axvline(ideal["perfect_overlap_s"], color="grey", linestyle=":", linewidth=0.9)
        ax.set_yticks(range(len(rows)), [r[0] for r in rows])
        ax.set_title(f"dispatch = {mode}: end-to-end {t['e2e']:.2f} s (dotted: perfect overlap)", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds after the turn was enqueued")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]], ideal: dict[str, float],
            shape: dict[str, Any], problems: list[str]) -> None:
    med = {m: statistics.median(t["e2e"] for t in ts) for m, ts in runs.items()}
    gap = {m: statistics.median(t["turn1_start"] - t["turn0_end"] for t in ts) for m, ts in runs.items()}
    rows = [[m, med[m], gap[m], min(t["e2e"] for t in runs[m]), max(t["e2e"] for t in runs[m])] for m in MODES]
    rows += [["bound: perfect overlap max(decode, tools)", ideal["perfect_overlap_s"], "", "", ""],
             ["bound: calls as placed, dispatched on close", ideal["on_close_ideal_s"], "", "", ""],
             ["bound: no overlap (decode + tools)", ideal["no_overlap_s"], "", "", ""]]
    ratio = med["after_turn"] / med["on_close"]
    table = markdown_table(["mode", "end-to-end s (median)", "turn end -> next turn s", "min s", "max s"], rows)
    table += (f"\n\nafter_turn / on_close = {ratio:.2f}x; on_close - perfect overlap = "
              f"{med['on_close'] - ideal['perfect_overlap_s']:+.2f} s. Scenario: {args.calls} calls x "
              f"{args.tool_seconds:g} s tools, turn 0 {shape['tokens'][0]} tokens at {args.rate:g} tok/s "
              f"(calls close at tokens {shape['call_close_tokens']}), {args.sessions} concurrent sessions per mode.")
    out = write_results("overlap", args.out, {"settings": vars(args), "shape": shape, "bounds": ideal,
                                               "median_e2e_s": med, "ratio": ratio, "turn_gap_s": gap,
                                               "problems": problems, "timelines": runs}, table)
    _plot(out / "overlap.png", runs, ideal)
    progress(f"wrote {out}/overlap.{{json,md,png}}")


def main(argv: list[str] | None = None) -> int:
    from workers.decode.replay import load_tokenizer

    args = _args(argv)
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(prefix="ts-bench-") as tmp:
        toml = Path(tmp) / "tools.toml"
        toml.write_text(TOOLS_TOML)
        cfg = load_config(redis_url=server.url, tools_config=str(toml), engine=args.engine, replay_rate=args.rate,
                          log_level="WARNING")
        script, shape = scenario(load_tokenizer(cfg.model), args)
        ideal = bounds(shape, args)
        progress(f"server {server.url}; turn 0 = {shape['tokens'][0]} tokens, calls close at "
                 f"{shape['call_close_tokens']}; starting a decoder and a tool worker")
        procs = [spawn(["worker", "decode"], cfg), spawn(["worker", "tools"], cfg)]
        try:
            runs = _run_modes(cfg, script, args.sessions, 2 * max(shape["tokens"]) + 64)  # the script, with room
        finally:
            stop_all(procs)
    problems = check_scenario(runs, args, shape)
    _report(args, runs, ideal, shape, problems)
    return verdict("overlap", problems)
