"""Parser throughput: a long multi-call turn fed in 1- and 4-character deltas at 2k, 8k and 32k chars.

    turnstream bench parser [--out DIR] [--sizes 2000,8000,32000] [--deltas 1,4] [--formats hermes,...]

Flat throughput across sizes means the parser does linear total work; the reference is vLLM
0.32's hermes parser, which re-parses its buffer on every delta (measured 0.58 M chars/s at
2k falling to 0.08 at 33k in 4-char deltas).  Writes ``parser.json``, ``parser.md`` and
``parser.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import verdict as exit_status
from workers.parser import collect, make_parser

REFERENCE = {"name": "vLLM 0.32 hermes, 4-char deltas", "points": [(2_000, 0.58), (33_000, 0.08)]}
TARGET_FLAT = 1.5      # 32k throughput within this factor of 2k
TARGET_MCPS = 1.0      # hermes, 4-char deltas, 32k

PROSE = ("Let me look at that. The file has a < b comparisons, {braces} and [brackets] in prose, "
         "which are not calls. Next I will run the tests and read the output carefully.\n")
ARGS_TEXT = "def f(x):\\n    return {\\\"k\\\": [x, x * 2]}  # 漢字 é\\n" * 6


def _hermes(i: int) -> str:
    return (f'<tool_call>\n{{"name": "write_file", "arguments": {{"path": "src/m{i}.py", '
            f'"content": "{ARGS_TEXT}", "mode": 420}}}}\n</tool_call>\n')


def _qwen3_coder(i: int) -> str:
    body = ARGS_TEXT.replace("\\n", "\n").replace('\\"', '"')
    return (f"<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/m{i}.py\n</parameter>\n"
            f"<parameter=content>\n{body}\n</parameter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>\n")


def _kimi_k2(i: int) -> str:
    return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:{i}<|tool_call_argument_begin|>"
            f'{{"path": "src/m{i}.py", "content": "{ARGS_TEXT}", "mode": 420}}<|tool_call_end|><|tool_calls_section_end|>\n')


def _json_call(i: int, name_key: str = "name", args_key: str = "arguments") -> str:
    return f'{{"{name_key}": "write_file", "{args_key}": {{"path": "src/m{i}.py", "content": "{ARGS_TEXT}", "mode": 420}}}}'


def _xml_params(open_: str, close: str, i: int) -> str:
    body = ARGS_TEXT.replace("\\n", "\n").replace('\\"', '"')
    return "".join(f"{open_.format(k)}{v}{close}\n" for k, v in (("path", f"src/m{i}.py"), ("content", body), ("mode", "420")))


def _dsml(block: str) -> Callable[[int], str]:
    params = '<｜DSML｜parameter name="{}" string="true">'
    return lambda i: (f'<｜DSML｜{block}>\n<｜DSML｜invoke name="write_file">\n'
                      + _xml_params(params, "</｜DSML｜parameter>", i) + f"</｜DSML｜invoke>\n</｜DSML｜{block}>\n")


def _minimax_m3(i: int) -> str:
    ns, body = "]<]minimax[>[", ARGS_TEXT.replace("\\n", "\n").replace('\\"', '"')
    params = "".join(f"{ns}<{k}>{v}{ns}</{k}>" for k, v in (("path", f"src/m{i}.py"), ("content", body), ("mode", "420")))
    return f'{ns}<tool_call>\n{ns}<invoke name="write_file">{params}{ns}</invoke>\n{ns}</tool_call>\n'


def _py_call(i: int) -> str:
    return f"write_file(path='src/m{i}.py', content='{ARGS_TEXT.replace(chr(92) + chr(34), chr(34))}', mode=420)"


def _args_json(i: int) -> str:
    return f'{{"path": "src/m{i}.py", "content": "{ARGS_TEXT}", "mode": 420}}'


RENDER: dict[str, Callable[[int], str]] = {
    "hermes": _hermes, "qwen3_coder": _qwen3_coder, "kimi_k2": _kimi_k2,
    "glm45": lambda i: ("<tool_call>write_file\n" + _xml_params("<arg_key>{}</arg_key>\n<arg_value>", "</arg_value>", i)
                        + "</tool_call>\n"),
    "minimax_m2": lambda i: ('<minimax:tool_call>\n<invoke name="write_file">\n'
                             + _xml_params('<parameter name="{}">', "</parameter>", i) + "</invoke>\n</minimax:tool_call>\n"),
    "longcat": lambda i: f"<longcat_tool_call>{_json_call(i)}</longcat_tool_call>\n",
    "ernie45": lambda i: f"<tool_call>\n{_json_call(i)}\n</tool_call>\n",
    "internlm": lambda i: f"<|action_start|><|plugin|>\n{_json_call(i, args_key='parameters')}<|action_end|>\n",
    "jamba": lambda i: f"<tool_calls>[{_json_call(i)}]</tool_calls>\n",
    "hunyuan_a13b": lambda i: f"<tool_calls>[{_json_call(i)}]</tool_calls>\n",
    "minimax_m1": lambda i: f"<tool_calls>\n{_json_call(i)}\n</tool_calls>\n",
    "cohere_command": lambda i: f"<|START_ACTION|>[{_json_call(i, 'tool_name', 'parameters')}]<|END_ACTION|>\n",
    "granite": lambda i: f"<|tool_call|>[{_json_call(i)}]\n",
    "phi4_mini_json": lambda i: f"functools[{_json_call(i)}]\n",
    "seed_oss": lambda i: ("<seed:tool_call>\n<function=write_file>\n" + _xml_params("<parameter={}>", "</parameter>", i)
                          + "</function>\n</seed:tool_call>\n"),
    "deepseek_v32": _dsml("function_calls"),
    "deepseek_v4": _dsml("tool_calls"),
    "gigachat3": lambda i: f"<|function_call|>{_json_call(i)}\n",
    "step3": lambda i: ('<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="write_file">\n'
                        + _xml_params('<steptml:parameter name="{}">', "</steptml:parameter>", i)
                        + "</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>\n"),
    "apertus": lambda i: "<|tools_prefix|>[" + _json_call(i).replace('"name": "write_file", "arguments": ', '"write_file": ')
                         + "]<|tools_suffix|>\n",
    "xlam": lambda i: f"[{_json_call(i)}]\n",
    "olmo3": lambda i: (f"<function_calls>write_file(path='src/m{i}.py', content='{ARGS_TEXT.replace(chr(92) + chr(34), chr(34))}', "
                        "mode=420)</function_calls>\n"),
    "gemma4": lambda i: ('<|tool_call>call:write_file{path:<|"|>src/m' + str(i) + '.py<|"|>,content:<|"|>'
                         + ARGS_TEXT.replace("\\n", "\n").replace('\\"', '"') + '<|"|>,mode:420}<tool_call|>\n'),
    "lfm2": lambda i: (f"<|tool_call_start|>[write_file(path='src/m{i}.py', content='{ARGS_TEXT.replace(chr(92) + chr(34), chr(34))}', "
                       "mode=420)]<|tool_call_end|>\n"),
    "functiongemma": lambda i: (f"<start_function_call>call:write_file{{path:<escape>src/m{i}.py<escape>,content:<escape>"
                                f"{ARGS_TEXT.replace(chr(92) + 'n', chr(10)).replace(chr(92), '')}<escape>,mode:420}}"
                                "<end_function_call>\n"),
    "deepseek_v41": lambda i: ('<｜DSML｜ calls>\n<｜DSML｜ invoke name="write_file">\n'
                               + _xml_params('<｜DSML｜ parameter name="{}" string="true">', "</｜DSML｜ parameter>", i)
                               + "</｜DSML｜ invoke>\n</｜DSML｜ calls>\n"),
    "mimo": lambda i: ("<tool_call><function=write_file>" + _xml_params("<parameter={}>", "</parameter>", i).replace("</parameter>\n", "</parameter>")
                       + "</function></tool_call>\n"),
    "minimax_m3": _minimax_m3,
    "kimi_k3": lambda i: ('<|open|>tools<|sep|><|open|>call tool="write_file" index="1"<|sep|>'
                          + _xml_params('<|open|>argument key="{}" type="string"<|sep|>', "<|close|>argument<|sep|>", i)
                          .replace('key="mode" type="string"', 'key="mode" type="number"')
                          + "<|close|>call<|sep|><|close|>tools<|sep|>\n"),
}
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}}]


# Families whose calls cannot stand between stretches of prose: their calls open the turn or close it, as
# one section (a bare list, a marker that ends content, a channel of their own).  Their turn is the
# reasoning and a quarter of the size in prose, then one section of calls (name: prose -> section of n calls).
_DS_CALL = "<｜tool▁call▁begin｜>"
SECTION: dict[str, Callable[[str, int], str]] = {
    "llama3_json": lambda prose, n: "<|python_tag|>" + "; ".join(
        f'{{"name": "write_file", "parameters": {_args_json(i)}}}' for i in range(n)),
    "pythonic": lambda prose, n: "[" + ", ".join(_py_call(i) for i in range(n)) + "]",
    "mistral": lambda prose, n: prose + "[TOOL_CALLS][" + ", ".join(
        f'{{"name": "write_file", "arguments": {_args_json(i)}}}' for i in range(n)) + "]",
    "deepseek_v3": lambda prose, n: prose + "<｜tool▁calls▁begin｜>" + "".join(
        f"{_DS_CALL}function<｜tool▁sep｜>write_file\n```json\n{_args_json(i)}\n```<｜tool▁call▁end｜>"
        for i in range(n)) + "<｜tool▁calls▁end｜>",
    "deepseek_v31": lambda prose, n: prose + "<｜tool▁calls▁begin｜>" + "".join(
        f"{_DS_CALL}write_file<｜tool▁sep｜>{_args_json(i)}<｜tool▁call▁end｜>" for i in range(n)) + "<｜tool▁calls▁end｜>",
    "harmony": lambda prose, n: f"<|start|>assistant<|channel|>analysis<|message|>{prose}<|end|>" + "".join(
        f"<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{_args_json(i)}<|call|>"
        for i in range(n)),
}
BENCHED = (*RENDER, *SECTION)


def make_turn(fmt: str, size: int) -> tuple[str, int]:
    """A turn of about ``size`` chars: a think block, then prose and calls alternating (4 calls per 8k), or,
    for the ``SECTION`` families, the think block and prose, then one section of calls."""
    if fmt in SECTION:
        head = "<think>" + PROSE * 2 + "</think>\n" if fmt not in ("llama3_json", "pythonic", "harmony") else ""
        prose = PROSE * max(1, size // 4 // len(PROSE))
        per_call = len(SECTION[fmt](prose, 2)) - len(SECTION[fmt](prose, 1))
        rest = len(head) + len(SECTION[fmt](prose, 1)) - per_call  # the turn less its calls
        n = max(1, (size - rest) // per_call)
        return head + SECTION[fmt](prose, n), n
    parts, n, calls = ["<think>" + PROSE * 2 + "</think>\n"], 0, 0
    while n < size:
        piece = PROSE * 5 + RENDER[fmt](calls)
        calls += 1
        parts.append(piece)
        n += len(piece)
    return "".join(parts), calls


def run_once(fmt: str, text: str, step: int) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds) to stream ``text`` in ``step``-char deltas through a fresh parser; ready calls."""
    p = make_parser(fmt, tools=TOOLS, reasoning="think")
    events = []
    c0, w0 = time.thread_time(), time.perf_counter()
    for i in range(0, len(text), step):
        events += p.feed(text[i:i + step])
    events += p.finish()
    cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
    return cpu, wall, len(collect(events).calls)


def measure(fmt: str, size: int, step: int, repeat: int) -> dict:
    """Best-of-``repeat`` throughput for one (format, size, delta) cell, by CPU time and by wall clock.

    CPU time (this thread's) is the headline figure: on a shared machine the wall clock of a
    longer run is more likely to include time spent descheduled, which is not parser work.
    """
    text, want = make_turn(fmt, size)
    runs = [run_once(fmt, text, step) for _ in range(repeat)]
    cpu, wall = min(r[0] for r in runs), min(r[1] for r in runs)
    return {"format": fmt, "size": size, "chars": len(text), "delta": step, "calls": want,
            "calls_parsed": [r[2] for r in runs],
            "cpu_seconds": cpu, "wall_seconds": wall,
            "mchars_per_s": len(text) / cpu / 1e6, "wall_mchars_per_s": len(text) / wall / 1e6}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="turnstream bench parser", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/", help="output directory (default bench/results/)")
    ap.add_argument("--sizes", default="2000,8000,32000", help="turn sizes in characters")
    ap.add_argument("--deltas", default="1,4", help="delta sizes in characters")
    ap.add_argument("--formats", default=",".join(BENCHED), help=f"formats ({', '.join(BENCHED)})")
    ap.add_argument("--repeat", type=int, default=5, help="best of N runs per cell")
    ap.add_argument("--check", action="store_true", help="exit 1 when the hermes targets are missed")
    return ap.parse_args(argv)


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def run_all(args: argparse.Namespace) -> list[dict]:
    """Measure every cell, printing progress as it goes."""
    rows = []
    for fmt in args.formats.split(","):
        for step in _ints(args.deltas):
            for size in _ints(args.sizes):
                print(f"  {fmt:<12} {step}-char deltas {size:>6} chars ...", end=" ", flush=True)
                row = measure(fmt, size, step, args.repeat)
                print(f"{row['mchars_per_s']:.2f} M chars/s CPU, {row['wall_mchars_per_s']:.2f} wall", flush=True)
                rows.append(row)
    return rows


def check(rows: list[dict]) -> list[str]:
    """Every run parsed every call of its turn as ready."""
    return [f"{r['format']} {r['size']} chars in {r['delta']}-char deltas: parsed {n} calls, expected {r['calls']}"
            for r in rows for n in r["calls_parsed"] if n != r["calls"]]


def table(rows: list[dict], sizes: list[int], key: str = "mchars_per_s") -> str:
    """Markdown table: one line per (format, delta), M chars/s per size, and the last/first ratio."""
    head = "| format | delta | " + " | ".join(f"{s // 1000}k" for s in sizes) + " | last/first |"
    lines = [head, "|" + "---|" * (len(sizes) + 3)]
    keys = sorted({(r["format"], r["delta"]) for r in rows}, key=lambda k: (k[0] != "hermes", k))
    for fmt, step in keys:
        vals = [next(r[key] for r in rows if (r["format"], r["delta"], r["size"]) == (fmt, step, s)) for s in sizes]
        lines.append(f"| {fmt} | {step} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {vals[-1] / vals[0]:.2f} |")
    ref = REFERENCE["points"]
    lines.append(f"| {REFERENCE['name']} (reference) | 4 | {ref[0][1]:.2f} @2k | … | {ref[1][1]:.2f} @33k | "
                 f"{ref[1][1] / ref[0][1]:.2f} |" if len(sizes) == 3 else f"| reference | 4 | {ref} |")
    return "\n".join(lines) + "\n"


def verdict(rows: list[dict], sizes: list[int]) -> tuple[bool, str]:
    """Whether hermes at 4-char deltas is flat and fast enough."""
    h = {r["size"]: r["mchars_per_s"] for r in rows if r["format"] == "hermes" and r["delta"] == 4}
    if not h or sizes[0] not in h or sizes[-1] not in h:
        return True, "hermes 4-char deltas not measured: no verdict"
    first, last = h[sizes[0]], h[sizes[-1]]
    ok = first / last <= TARGET_FLAT and last >= TARGET_MCPS
    return ok, (f"hermes 4-char: {last:.2f} M chars/s at {sizes[-1]} (target >= {TARGET_MCPS}), "
                f"{sizes[0]}->{sizes[-1]} ratio {first / last:.2f} (target <= {TARGET_FLAT}): {'PASS' if ok else 'FAIL'}")


def plot(rows: list[dict], path: Path) -> None:
    """Throughput vs turn size, one panel per delta size: every family a thin line (the band they span
    shaded), hermes drawn out, the reference dashed; flat lines are linear work."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deltas = sorted({r["delta"] for r in rows})
    sizes = sorted({r["size"] for r in rows})
    fig, axes = plt.subplots(1, len(deltas), figsize=(5 * len(deltas), 4.2), sharey=True, squeeze=False)
    top = max(r["mchars_per_s"] for r in rows)
    for ax, step in zip(axes[0], deltas):
        at = [r for r in rows if r["delta"] == step]
        formats = sorted({r["format"] for r in at})
        for fmt in formats:
            pts = sorted((r["size"], r["mchars_per_s"]) for r in at if r["format"] == fmt)
            ax.plot(*zip(*pts), color="tab:blue" if fmt == "hermes" else "0.65", linewidth=2 if fmt == "hermes" else 0.8,
                    marker="o" if fmt == "hermes" else None, zorder=3 if fmt == "hermes" else 2,
                    label="turnstream hermes" if fmt == "hermes" else None)
        lo = [min(r["mchars_per_s"] for r in at if r["size"] == s) for s in sizes]
        hi = [max(r["mchars_per_s"] for r in at if r["size"] == s) for s in sizes]
        ax.fill_between(sizes, lo, hi, color="tab:blue", alpha=0.12, label=f"turnstream, {len(formats)} families")
        if step == 4:
            ax.plot(*zip(*REFERENCE["points"]), "k--", marker="x", label=REFERENCE["name"])
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s // 1000}k" for s in sizes])
        ax.minorticks_off()
        ax.set_ylim(0, top * 1.15)
        ax.set_xlabel("turn length (characters)")
        ax.set_title(f"{step}-character deltas")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="center left")
    axes[0][0].set_ylabel("throughput (M chars/s, CPU time)")
    fig.suptitle("Streaming tool-call parser throughput (higher and flatter is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(rows: list[dict], args: argparse.Namespace, md: str, note: str) -> Path:
    """Write JSON, markdown and PNG under ``--out``; return the directory."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    (out / "parser.json").write_text(json.dumps({"rows": rows, "reference": REFERENCE, "verdict": note, "env": env,
                                                 "problems": check(rows)}, indent=2))
    (out / "parser.md").write_text("# Parser throughput (M chars/s)\n\n" + md + f"\n{note}\n")
    plot(rows, out / "parser.png")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the results."""
    args = _parse_args(argv)
    sizes = _ints(args.sizes)
    print(f"parser throughput (best of {args.repeat}); reference: {REFERENCE['name']}: "
          f"{REFERENCE['points'][0][1]} M chars/s at 2k -> {REFERENCE['points'][1][1]} at 33k", flush=True)
    rows = run_all(args)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    md = ("By CPU time (headline):\n\n" + table(rows, sizes) + f"\nBy wall clock (load average {load:.1f} "
          f"on {os.cpu_count()} CPUs while measuring):\n\n" + table(rows, sizes, "wall_mchars_per_s"))
    ok, note = verdict(rows, sizes)
    print("\n" + md + "\n" + note)
    out = write(rows, args, md, note)
    print(f"wrote {out}/parser.json, parser.md, parser.png")
    return exit_status("parser", check(rows)) or (0 if ok or not args.check else 1)


if __name__ == "__main__":
    sys.exit(main())
