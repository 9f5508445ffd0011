"""The workload of ``bench agent``: agent tasks drawn from a seed, stored as a trace file every side replays.

    trace = build_trace(Shape(tasks=8, seed=7), tokenizer)     # pure: same seed, same trace
    trace.save(path); Trace.load(path)

A task is a system prompt (instructions and the tools' descriptions, 1-4k tokens), a user request,
2-7 turns of 1-3 tool calls each (about one turn in five with parallel calls), then a final answer.
Each call has its arguments, its tool's latency and its result text (50-800 tokens), all fixed here.
Figures follow TraceLab's published statistics of Claude Code and Codex sessions (arXiv 2606.30560:
1.2 calls per step, ~20 % of steps with parallel calls, tool latency lognormal with p50 0.3 s), with the
latency tail cut to keep a run short (p90 ~3 s, at most ``max_latency_s``, where TraceLab has p90 13.6 s)
and one call in seven a ~1 ms lookup.

Same work on every side: each turn's whole text is held by a grammar of its exact token ids
(``structured_outputs``, the vLLM extension turnstream accepts too), so every engine computes the
same tokens whatever the weights; the calls come out of each server's own tool-call parser.  A turn's
text is what the model's chat template renders for that assistant message (``turn_text``), so the
conversation a client sends back renders to the tokens the model produced, and prefix caches hit.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

WORDS = ("module build test cache config parse token stream worker queue retry buffer index schema route "
         "handler client server session request result error state value field record batch commit merge "
         "branch patch file path line check deploy metric trace span event log the a of to and in for with "
         "on when from each after before every new old first last").split()
TOOL_NAMES = ("read_file", "search_code", "run_tests", "list_dir", "grep_logs", "edit_file", "web_fetch", "query_db")


@dataclass(frozen=True)
class Shape:
    """What to draw: counts and ranges (defaults: the issue's workload)."""

    tasks: int = 8
    seed: int = 7
    turns: tuple[int, int] = (2, 7)  # tool turns per task; with the answer 3-8 turns
    system_tokens: tuple[int, int] = (1000, 4000)
    result_tokens: tuple[int, int] = (50, 800)
    answer_tokens: tuple[int, int] = (20, 60)
    latency_p50_s: float = 0.3
    latency_sigma: float = 1.8  # lognormal: p90 = p50 * e^(1.28 sigma) ~ 3 s
    max_latency_s: float = 6.0
    fast_share: float = 0.15  # calls that are ~1 ms lookups
    parallel_share: float = 0.2  # turns with 2-3 calls


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]
    latency_s: float
    result: str

    @property
    def ref(self) -> str:
        return self.arguments["ref"]


@dataclass
class Turn:
    calls: list[Call] = field(default_factory=list)
    answer: str = ""  # the final turn: no calls
    ids: list[int] = field(default_factory=list)  # the turn's exact completion, end token excluded


@dataclass
class Task:
    id: str
    system: str
    user: str
    turns: list[Turn]

    def messages(self, run: str = "") -> list[dict[str, Any]]:
        """The opening messages; ``run`` tags the system prompt so that no two runs share a cached prefix."""
        return [{"role": "system", "content": f"[{run}] {self.system}" if run else self.system},
                {"role": "user", "content": self.user}]


@dataclass
class Trace:
    shape: dict[str, Any]
    tools: list[dict[str, Any]]  # OpenAI tool definitions, the same on every side
    tasks: list[Task]

    def calls(self) -> dict[str, Call]:
        return {c.ref: c for t in self.tasks for turn in t.turns for c in turn.calls}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> "Trace":
        d = json.loads(path.read_text())
        tasks = [Task(t["id"], t["system"], t["user"],
                      [Turn([Call(**c) for c in turn["calls"]], turn["answer"], turn["ids"]) for turn in t["turns"]])
                 for t in d["tasks"]]
        return cls(d["shape"], d["tools"], tasks)


def tool_definitions() -> list[dict[str, Any]]:
    """Every tool of the workload; its Python side is ``bench.agent_tools``, whose registry renders these."""
    from bench.agent_tools import registry

    return registry().openai_tools()


def call_text(call: Call) -> str:
    """One call as the hermes chat template renders it (``tojson``, keys in order, as transformers does)."""
    return '<tool_call>\n{"name": "' + call.name + '", "arguments": ' + json.dumps(call.arguments) \
        + "}\n</tool_call>"


def turn_text(turn: Turn) -> str:
    """What the model writes after ``<|im_start|>assistant\\n`` for ``turn``: its calls, or its answer."""
    return "\n".join(call_text(c) for c in turn.calls) if turn.calls else turn.answer


def grammar(turn: Turn) -> str:
    """A Lark grammar (llguidance) admitting exactly the turn's token ids."""
    return "start: " + " ".join(f"<[{i}]>" for i in turn.ids) + "\n"


def build_trace(shape: Shape, tokenizer: Tokenizer) -> Trace:
    rng = random.Random(shape.seed)
    tools = tool_definitions()
    tool_tokens = len(tokenizer.encode(json.dumps(tools)).ids)
    tasks = [_task(rng, shape, tokenizer, f"t{i:02d}", tool_tokens) for i in range(shape.tasks)]
    for task in tasks:
        for turn in task.turns:
            turn.ids = tokenizer.encode(turn_text(turn), add_special_tokens=False).ids
    return Trace(asdict(shape), tools, tasks)


def _task(rng: random.Random, s: Shape, tok: Tokenizer, tid: str, tool_tokens: int) -> Task:
    system = "You are a coding agent. " + _text(rng, tok, max(50, rng.randint(*s.system_tokens) - tool_tokens))
    user = "Task: " + _text(rng, tok, rng.randint(20, 60))
    turns = []
    for k in range(rng.randint(*s.turns)):
        n = rng.choice((2, 2, 3)) if rng.random() < s.parallel_share else 1
        turns.append(Turn([_call(rng, s, tok, f"{tid}.{k}.{j}") for j in range(n)]))
    turns.append(Turn(answer="Done. " + _text(rng, tok, rng.randint(*s.answer_tokens))))
    return Task(tid, system, user, turns)


def _call(rng: random.Random, s: Shape, tok: Tokenizer, ref: str) -> Call:
    name = rng.choice(TOOL_NAMES)
    target = "/".join(rng.choice(WORDS) for _ in range(2)) + rng.choice((".py", ".md", ".log", ""))
    if rng.random() < s.fast_share:
        latency = 0.001
    else:
        latency = min(s.max_latency_s, s.latency_p50_s * math.exp(rng.gauss(0.0, s.latency_sigma)))
    lo, hi = s.result_tokens
    size = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))  # log-uniform: many small, a few large
    return Call(name, {"ref": ref, "target": target}, round(latency, 4), _text(rng, tok, size))


def _text(rng: random.Random, tok: Tokenizer, tokens: int) -> str:
    """Words until ``tokens`` tokens (within a word) of ``tok``."""
    words: list[str] = []
    while True:
        words += [rng.choice(WORDS) for _ in range(max(1, (tokens - _count(tok, words)) // 8))]
        if _count(tok, words) >= tokens:
            return " ".join(words)


def _count(tok: Tokenizer, words: list[str]) -> int:
    return len(tok.encode(" ".join(words), add_special_tokens=False).ids) if words else 0
