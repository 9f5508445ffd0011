"""``bench serve`` figures: the goals against vLLM's own server, the markdown table and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import markdown_table, save_figure

REFERENCE = "vllm-server"
ENGINE_ALONE = "vllm-engine-alone"  # ``--split``: vLLM's AsyncLLM with no server around it (``bench.engine_alone``)
TTFT_FACTOR, TTFT_SLACK_MS, THROUGHPUT_FACTOR = 1.1, 5.0, 0.95

Summary = dict[str, dict[int, dict[str, Any]]]  # server -> concurrency -> figures


def goals(summary: Summary, levels: list[int]) -> dict[str, Any]:
    """Each goal against vLLM's server, met or not, with the figures it compares (empty without that server)."""
    ref = summary.get(REFERENCE)
    if not ref:
        return {}
    top = max(levels)
    out: dict[str, Any] = {}
    if "turnstream-vllm" in summary:
        ours = summary["turnstream-vllm"]
        out["turnstream-vllm"] = {
            "ttft": {c: ours[c]["ttft_p50_ms"] <= TTFT_FACTOR * ref[c]["ttft_p50_ms"] + TTFT_SLACK_MS for c in levels},
            "throughput": ours[top]["tok_s"] >= THROUGHPUT_FACTOR * ref[top]["tok_s"]}
    if "turnstream-native" in summary:
        ours = summary["turnstream-native"]
        out["turnstream-native"] = {
            "ttft": {c: ours[c]["ttft_p50_ms"] < ref[c]["ttft_p50_ms"] for c in levels},
            "throughput": ours[top]["tok_s"] > ref[top]["tok_s"]}
    for g in out.values():
        g["met"] = all(g["ttft"].values()) and g["throughput"]
    return out


def same_lengths(summary: Summary, name: str, level: int) -> str:
    """How many requests produced as many tokens as vLLM's server did for the same prompt (greedy)."""
    ref = summary.get(REFERENCE, {}).get(level)
    if name == REFERENCE or ref is None:
        return ""
    pairs = list(zip(summary[name][level]["lengths"], ref["lengths"]))
    return f"{sum(1 for a, b in pairs if a == b)}/{len(pairs)}"


PIPELINE = ("worker decode", "gateway", "worker parser", "valkey-server")  # around vLLM's engine, on its side
API_SERVER = "vllm api server"  # what surrounds the same engine in vLLM's own server
SPLIT_NAMES = {REFERENCE: "vLLM's API server", "turnstream-native": "the pipeline (its decoder runs the model)"}


def pipeline_parts(by_process: dict[str, float]) -> tuple[str, ...]:
    """``PIPELINE``'s processes in a run: no gateway process where the decoder's process serves the gateway
    (``gateway_in_decoder``; ``turnstream up`` does so on vLLM's engine)."""
    return tuple(k for k in PIPELINE if k != "gateway" or k in by_process)


def _shown(label: str, parts: tuple[str, ...]) -> str:
    return "worker decode (with the gateway)" if label == "worker decode" and "gateway" not in parts else label


def pipeline_line(summary: Summary, top: int) -> str:
    """The pipeline's CPU per token around vLLM's engine (decode shell, gateway, parser, Valkey)
    against vLLM's API server's, at ``top`` in flight, and whether it is within it; "" when the run
    lacks either side."""
    ours, ref = summary.get("turnstream-vllm", {}).get(top), summary.get(REFERENCE, {}).get(top)
    if ours is None or ref is None:
        return ""
    mine, theirs = ours["cpu_ms_per_token_by_process"], ref["cpu_ms_per_token_by_process"]
    names = pipeline_parts(mine)
    parts = {k: 1e3 * mine.get(k, 0.0) for k in names}
    total, api = sum(parts.values()), 1e3 * theirs.get(API_SERVER, 0.0)
    return (f"Pipeline CPU per token at {top}: turnstream-vllm {total:.0f} µs ("
            + ", ".join(f"{_shown(k, names)} {v:.0f}" for k, v in parts.items())
            + f") against vLLM's API server {api:.0f} µs: goal {'met' if total <= api else 'MISSED'}")


def split_lines(summary: Summary, split: dict[str, dict[str, Any]], top: int) -> str:
    """Each server's CPU per request (``--split``'s one-token requests) and per further token (the
    measured run at ``top`` less that, over its other tokens): around vLLM's engine, the API server
    against turnstream's pipeline, process by process; "" without a split."""
    lines: list[str] = []
    # name -> ms a request, µs a further token, the decoder's two, its pipeline's processes
    sides: dict[str, tuple[float, float, float, float, tuple[str, ...]]] = {}
    for name, one in split.items():
        if name == ENGINE_ALONE:
            continue
        main = summary.get(name, {}).get(top)
        if main is None or not one.get("requests") or main["tokens"] <= main["requests"]:
            continue  # nothing measured, or no further tokens to set apart
        tokens = main["tokens"] / main["requests"]  # a measured request's tokens, on average
        labels = (API_SERVER,) if name == REFERENCE else pipeline_parts(main["cpu_ms_per_token_by_process"])
        fixed = {k: one["cpu_ms_per_request_by_process"].get(k, 0.0) for k in labels}
        extra = {k: 1e3 * (main["cpu_ms_per_token_by_process"].get(k, 0.0) * tokens - fixed[k]) / max(tokens - 1, 1)
                 for k in labels}
        parts = ", ".join(f"{_shown(k, labels)} {fixed[k]:.2f} ms + {extra[k]:.0f} µs" for k in labels)
        sides[name] = (sum(fixed.values()), sum(extra.values()), fixed.get("worker decode", 0.0),
                       extra.get("worker decode", 0.0), labels)
        what = SPLIT_NAMES.get(name, "the pipeline")
        lines.append(f"- {name}: {what} {sum(fixed.values()):.2f} ms a request + {sum(extra.values()):.0f} µs a "
                     f"further token" + (f" ({parts})" if len(labels) > 1 else ""))
    if not lines:
        return ""
    if alone := split.get(ENGINE_ALONE):
        lines.append(f"- {ENGINE_ALONE}: vLLM's AsyncLLM with nothing around it (chat template, tokenising, "
                     f"streaming; `bench.engine_alone`), which the API server and turnstream's decoder both run: "
                     f"{alone['cpu_ms_per_request']:.2f} ms a request + {alone['cpu_us_per_further_token']:.0f} µs a "
                     f"further token ({alone['cpu_us_per_token']:.0f} µs a token over "
                     f"{alone['tokens_per_request']:.1f} tokens)")
        ms, us = alone["cpu_ms_per_request"], alone["cpu_us_per_further_token"]
        above = []
        if REFERENCE in sides:
            above.append(f"vLLM's API server {sides[REFERENCE][0] - ms:.2f} ms + {sides[REFERENCE][1] - us:.0f} µs")
        if "turnstream-vllm" in sides:
            fixed, extra, dec_fixed, dec_extra, labels = sides["turnstream-vllm"]
            its = "its decoder" + (" with the gateway" if "gateway" not in labels else "")
            above.append(f"turnstream-vllm's pipeline {fixed - ms:.2f} ms + {extra - us:.0f} µs ({its} "
                         f"{dec_fixed - ms:.2f} ms + {dec_extra - us:.0f} µs)")
        if above:
            lines.append("  - beyond it, per request and further token: " + "; ".join(above))
    return (f"CPU per request and per further token at {top} (`--split`: one-token requests, uncounted, beside "
            f"the measured ones):\n\n" + "\n".join(lines))


def table(summary: Summary, levels: list[int], met: dict[str, Any],
          split: dict[str, dict[str, Any]] | None = None) -> str:
    top = max(levels)
    headers = ["server"] + [f"TTFT p50 / p90 ms @{c}" for c in levels]
    headers += [f"tok/s @{top}", "CPU ms / token (tree)", f"TTFT p50 vs vLLM server @{'/'.join(map(str, levels))}",
                f"tok/s vs vLLM server @{top}", "same token count as vLLM server"]
    ref = summary.get(REFERENCE)
    rows = []
    for name, s in summary.items():
        row = [name] + [f"{s[c]['ttft_p50_ms']:.1f} / {s[c]['ttft_p90_ms']:.1f}" for c in levels]
        row += [round(s[top]["tok_s"]), f"{s[top]['cpu_ms_per_token']:.2f}"]
        if ref:
            row += [" / ".join(f"{s[c]['ttft_p50_ms'] / ref[c]['ttft_p50_ms']:.2f}x" for c in levels),
                    f"{s[top]['tok_s'] / ref[top]['tok_s']:.2f}x", same_lengths(summary, name, top)]
        else:
            row += ["", "", ""]
        rows.append(row)
    text = markdown_table(headers, rows)
    for name, g in met.items():
        text += (f"\n\n{name}: TTFT goal {'met' if all(g['ttft'].values()) else 'MISSED'} "
                 f"({', '.join(f'@{c} ' + ('ok' if ok else 'missed') for c, ok in g['ttft'].items())}), "
                 f"throughput goal {'met' if g['throughput'] else 'MISSED'}")
    text += f"\n\nCPU ms per output token at concurrency {top}, by process:\n"
    for name, s in summary.items():
        text += f"\n- {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in s[top]["cpu_ms_per_token_by_process"].items()
                                            if v >= 0.0005)
    framed = {name: s[top] for name, s in summary.items() if "frames_per_request" in s[top]}
    if framed:
        text += (f"\n\nSSE frames a request at {top} (JSON chunks the client parsed, role, finish and usage included; "
                 f"turnstream's decoder sends a turn's tokens every `coalesce_ms` or once `coalesce_tokens` are buffered, "
                 f"vLLM's server every `--stream-interval` tokens): "
                 + ", ".join(f"{name} {s['frames_per_request']:.1f} ({s['tokens'] / max(s['requests'], 1):.1f} "
                             f"tokens)" for name, s in framed.items()))
    if line := pipeline_line(summary, top):
        text += "\n\n" + line
    if split and (lines := split_lines(summary, split, top)):
        text += "\n\n" + lines
    text += "\n\nThe other servers' CPU while each was measured (all levels; each level starts with every server quiet): "
    text += ", ".join(f"{name} {100 * max(s[c].get('background_cores', 0.0) for c in levels):.0f} % of a core at most"
                      for name, s in summary.items()) + "."
    text += (f"\n\nGoals: turnstream-vllm TTFT p50 <= {TTFT_FACTOR} x vLLM server + {TTFT_SLACK_MS:g} ms, tok/s >= "
             f"{THROUGHPUT_FACTOR} x; turnstream-native ahead of the vLLM server on both.  CPU per token: the "
             f"server's whole process tree at concurrency {top}.")
    return text


def plot(path: Path, summary: Summary, levels: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(16, 4.6), dpi=110)
    top = max(levels)
    for name, s in summary.items():
        left.plot(levels, [s[c]["ttft_p50_ms"] for c in levels], marker="o", label=name)
    left.set(xscale="log", xlabel="concurrent requests", ylabel="TTFT p50 (ms)", title="time to first token")
    left.set_xticks(levels, [str(c) for c in levels])
    names = list(summary)
    mid.bar(names, [summary[n][top]["tok_s"] for n in names], color=["tab:blue", "tab:orange", "tab:green"][:len(names)])
    mid.set(ylabel="output tokens/s", title=f"throughput at {top} concurrent")
    cpu_bars(right, summary, names, top)
    save_figure(fig, path, [left, mid, right])


def cpu_bars(ax: Any, summary: Summary, names: list[str], top: int) -> None:
    """Each server's CPU per token at ``top`` in flight, stacked by process (those of 1 µs or more)."""
    by = {n: {k: 1e3 * v for k, v in summary[n][top].get("cpu_ms_per_token_by_process", {}).items()} for n in names}
    procs = list(dict.fromkeys(k for n in names for k, v in by[n].items() if v >= 1.0))
    bottom = [0.0] * len(names)
    for k in procs:
        values = [by[n].get(k, 0.0) for n in names]
        ax.bar(names, values, bottom=bottom, label=k)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set(ylabel="CPU µs per output token", title=f"CPU per token at {top} concurrent, by process",
           ylim=(0, 1.7 * max(bottom, default=1.0)))  # room above the bars for the legend
