"""``ReplayEngine``: a TEST AND BENCHMARK engine that streams scripted completions.

It is not a model.  Each turn's completion comes from a script (``metadata["replay"]``,
a list of jinja2 templates, one per assistant turn), rendered with the tool results that
precede the turn, then tokenised with a real tokenizer and streamed token by token at a
fixed rate.  It lets the pipeline, the benchmarks and the tests run without model compute.

A request's ``constraint`` is checked like a model's grammar would hold it: a script whose text
breaks it (a call no tool offers, arguments off their schema, a call when none may begin) is
refused with ``ReplayEngineError`` instead of being streamed.  A script's templates are compiled
once and each (constraint, text) is checked once (``CACHED`` of each kept): what the double does
for a turn is not the pipeline's cost, and the benchmarks run hundreds of identical turns at once.

Two ways to pace the tokens (``mode``):

* ``per_session`` (the default): every request runs its own timer, one token each ``1/rate`` s;
* ``batched``: ONE timer steps every running request together, as a batching engine (the
  native engine, vLLM) does: each step, ``rate`` times a second, gives one delta to every
  running request; a request that arrives between steps joins at the next one.

Template variables: ``results`` (contents of the tool messages that end the conversation),
``user`` (the last user message), ``turn`` (index of this assistant turn), ``tools`` (names of
the offered tools: a script that calls only what is offered, as a model under a grammar must).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from tokenizers import Tokenizer

from runtime.chat_template import first_stop
from runtime.mailbox import Mailbox
from workers.decode.constraints.guide import GrammarCompiler
from workers.decode.engine import GenerateDelta, GenerateRequest

NO_SCRIPT = "I have no scripted reply for this turn."
CACHED = 256  # compiled templates and grammar verdicts kept (least recently used out)

# The default script: one turn with two parallel calls, then an answer from their results.
DEMO_SCRIPT = [
    "I'll check the weather in Paris and book your table at the same time.\n"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"date\": \"today\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"book_restaurant\", \"arguments\": {\"restaurant\": \"Chez Nous\", "
    "\"party_size\": 2, \"time\": \"19:00\"}}\n</tool_call>",
    "Here is what I found. Weather: {{ results[0] }}. Booking: {{ results[1] }}. Enjoy your evening!",
]


class ReplayEngineError(ValueError):
    """The replay script is unusable (bad template, no tokenizer)."""


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    path = Path(model_dir) / "tokenizer.json"
    if not path.exists():
        raise ReplayEngineError(f"model: no tokenizer.json in {model_dir}")
    return Tokenizer.from_file(str(path))


class IncrementalDetokenizer:
    """Turns a growing token list into text deltas that never split a UTF-8 character.

    Special tokens are kept as text.  Work per token is bounded: only the ids since the
    last emitted boundary are decoded again.
    """

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.ids: list[int] = []
        self._start = 0  # ids before _start are fully emitted

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tok.decode(self.ids[self._start:], skip_special_tokens=False)
        if text.endswith("\ufffd"):
            return ""  # an incomplete character: wait for the next byte
        self._start = len(self.ids)
        return text


def _trailing_tool_results(messages: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        out.append(str(m.get("content", "")))
    return out[::-1]


MODES = ("per_session", "batched")


@dataclass
class _Run:
    """One request's scripted tokens and how far it got."""

    rid: str
    ids: list[int]
    finish: str
    prompt: int
    detok: IncrementalDetokenizer
    i: int = 0
    stop_sequence: str | None = None  # the stop string the script was cut at
    out: Mailbox[GenerateDelta] = field(default_factory=Mailbox)  # batched mode only

    def next_delta(self) -> GenerateDelta:
        """The delta of the next token (or the empty ending of an empty completion)."""
        if not self.ids:
            return GenerateDelta("", 0, True, "stop", self.prompt, 0, 0, self.stop_sequence)
        text = self.detok.push(self.ids[self.i])
        self.i += 1
        last = self.i == len(self.ids)
        return GenerateDelta(text, 1, last, self.finish if last else None, self.prompt, 0, self.i,
                             self.stop_sequence if last and self.finish == "stop" else None)

    def aborted(self) -> GenerateDelta:
        return GenerateDelta("", 0, True, "abort", self.prompt, 0, self.i)


class ReplayEngine:
    """Streams scripted completions through a real tokenizer at ``rate`` tokens/s (see ``mode``)."""

    name = "replay"

    def __init__(self, model_dir: str | Path, rate: float = 50.0, script: list[str] | None = None,
                 mode: str = "per_session") -> None:
        if mode not in MODES:
            raise ReplayEngineError(f"mode: {mode!r}; expected one of {MODES}")
        self.model = str(model_dir)
        self.tok = load_tokenizer(model_dir)
        self.rate, self.mode = rate, mode
        self.script = DEMO_SCRIPT if script is None else script
        self._env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        self._aborted: set[str] = set()
        self._running = 0
        self._batch: dict[str, _Run] = {}  # batched mode: the requests the next step serves
        self._stepper: asyncio.Task | None = None
        self.tokens_out = 0
        self._grammars: GrammarCompiler | None = None
        self._templates: OrderedDict[str, jinja2.Template] = OrderedDict()
        self._verdicts: OrderedDict[tuple[str, str, int], str | None] = OrderedDict()
        self.steps = 0
        self.cpu_s = 0.0  # CPU time spent making completions (render, tokenize, detokenize): the engine's own

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        if self._stepper is not None:
            self._stepper.cancel()
            await asyncio.gather(self._stepper, return_exceptions=True)

    def completion(self, req: GenerateRequest) -> str:
        """The scripted completion text of this request's turn (what follows a forced prefill)."""
        script = req.metadata.get("replay") or self.script
        turn = sum(1 for m in req.messages if m.get("role") == "assistant")
        if turn >= len(script):
            return NO_SCRIPT
        user = next((str(m.get("content", "")) for m in reversed(req.messages) if m.get("role") == "user"), "")
        try:
            text = self._template(script[turn]).render(
                results=_trailing_tool_results(req.messages), user=user, turn=turn,
                tools=[(t.get("function") or t).get("name") for t in req.tools or ()])
        except jinja2.TemplateError as exc:
            raise ReplayEngineError(f"replay script turn {turn}: {exc}") from exc
        if not text.startswith(req.params.prefill):  # a model continues the prefill; a script must agree
            raise ReplayEngineError(f"replay script turn {turn} does not begin with the forced "
                                    f"{req.params.prefill[:40]!r}")
        self._check_grammar(req, text, turn)
        return text[len(req.params.prefill):]

    def _template(self, source: str) -> jinja2.Template:
        """``source`` compiled (once while it stays among the ``CACHED`` last used)."""
        template = self._templates.get(source)
        if template is None:
            template = self._templates[source] = self._env.from_string(source)
            if len(self._templates) > CACHED:
                self._templates.popitem(last=False)
        self._templates.move_to_end(source)
        return template

    def _check_grammar(self, req: GenerateRequest, text: str, turn: int) -> None:
        """Refuse a scripted turn that the request's constraint would not let a model write."""
        if req.constraint is None:
            return
        key = (req.constraint.key(), req.params.prefill + "\0" + text, req.params.max_tokens)
        if key in self._verdicts:
            why = self._verdicts[key]
            self._verdicts.move_to_end(key)
        else:
            why = self._verdicts[key] = self._violation(req, text)
            if len(self._verdicts) > CACHED:
                self._verdicts.popitem(last=False)
        if why is not None:
            raise ReplayEngineError(f"replay script turn {turn} breaks the request's grammar "
                                    f"({req.constraint.calls.value} calls, format {req.constraint.format}): {why}")

    def _violation(self, req: GenerateRequest, text: str) -> str | None:
        if self._grammars is None:
            eos = self.tok.token_to_id("<|im_end|>")
            self._grammars = GrammarCompiler(self.tok.to_str(), [eos] if eos is not None else [])
        ids = self.tok.encode(text, add_special_tokens=False).ids
        limit = len(self.tok.encode(req.params.prefill, add_special_tokens=False).ids) + req.params.max_tokens
        return self._grammars.violation(req.constraint, ids[:limit], complete=len(ids) <= limit)  # a cut text: a prefix

    def _run(self, req: GenerateRequest) -> _Run:
        t0 = time.thread_time()
        text, stop = _cut_at_stop(self.completion(req), req.params.stop)  # as a model's stop strings end it
        ids = self.tok.encode(text, add_special_tokens=False).ids
        finish = "length" if len(ids) > req.params.max_tokens or (stop is None and len(ids) == req.params.max_tokens) \
            else "stop"
        ids = ids[: req.params.max_tokens]
        prompt = sum(len(str(m.get("content") or "")) for m in req.messages) // 4
        self.cpu_s += time.thread_time() - t0
        return _Run(req.rid, ids, finish, prompt, IncrementalDetokenizer(self.tok), stop_sequence=stop)

    def generate(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]:
        """The request's deltas, paced by ``mode`` (one async generator: no layer per token in between)."""
        return self._timed(req) if self.mode == "per_session" else self._stepped(req)

    def _begin(self, req: GenerateRequest) -> _Run:
        run = self._run(req)
        self._running += 1
        return run

    def _done(self, run: _Run) -> None:
        self._running -= 1
        self._aborted.discard(run.rid)
        self._batch.pop(run.rid, None)

    async def _timed(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]:
        """``per_session``: this request's own timer."""
        run = self._begin(req)
        try:
            t0 = time.monotonic()
            while True:
                if run.rid in self._aborted:
                    yield run.aborted()
                    return
                await asyncio.sleep(max(0.0, t0 + run.i / self.rate - time.monotonic()))
                c0 = time.thread_time()
                delta = run.next_delta()
                self.cpu_s += time.thread_time() - c0
                self.tokens_out += delta.n_tokens
                yield delta
                if delta.finished:
                    return
        finally:
            self._done(run)

    async def _stepped(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]:
        """``batched``: join the shared step loop and take its deltas."""
        run = self._begin(req)
        try:
            self._batch[run.rid] = run
            if self._stepper is None or self._stepper.done():
                self._stepper = asyncio.create_task(self._step_loop(), name="replay-steps")
            while True:
                delta = await run.out.get()
                yield delta
                if delta.finished:
                    return
        finally:
            self._done(run)

    async def _step_loop(self) -> None:
        """Step every running request together, ``rate`` steps a second, until none is left."""
        t0, k = time.monotonic(), 0
        while self._batch:
            k += 1
            await asyncio.sleep(max(0.0, t0 + k / self.rate - time.monotonic()))
            self.step()

    def step(self) -> None:
        """One engine step: one delta for every running request; finished ones leave the batch."""
        t0 = time.thread_time()
        self.steps += 1
        for rid, run in list(self._batch.items()):
            delta = run.aborted() if rid in self._aborted else run.next_delta()
            self.tokens_out += delta.n_tokens
            run.out.put_nowait(delta)
            if delta.finished:
                del self._batch[rid]
        self.cpu_s += time.thread_time() - t0

    async def abort(self, rid: str) -> None:
        self._aborted.add(rid)

    def pin(self, session: str, seconds: float) -> None:
        return None  # no KV to keep

    def release(self, session: str) -> None:
        return None

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name, "running": self._running, "waiting": 0, "tokens_out": self.tokens_out,
                "mode": self.mode, "steps": self.steps, "cpu_s": round(self.cpu_s, 4)}


def _cut_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> tuple[str, str | None]:
    """``text`` before the stop string that completes first (the longest on a tie), and that string."""
    hit = first_stop(text, stop)
    return (text, None) if hit is None else (text[:hit[0]], hit[1])
