"""The synchronous engine: requests in, deltas out, one ``step()`` at a time (no threads, no asyncio).

``step()`` is schedule -> run -> postprocess -> text.  ``NativeEngine`` drives it from a
background thread; tests drive it directly, with a fake clock for pin deadlines.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runtime import cpu
from runtime.config import ConfigError
from workers.decode.constraints import ConstraintError
from workers.decode.constraints.guide import GrammarCompiler
from workers.decode.native.block_manager import BlockManager
from workers.decode.native.config import EngineConfig
from workers.decode.native.guided import Guide
from workers.decode.native.host_tier import HostTier
from workers.decode.engine import GenerateDelta, GenerateRequest
from workers.decode.errors import DuplicateRequest, PromptError, RequestTooLarge
from workers.decode.native.loader import ModelArgs
from workers.decode.native.model_runner import ModelRunner
from workers.decode.native.models import load_model
from workers.decode.native.pins import PinTable
from workers.decode.prompts import SessionPrompts
from workers.decode.native.scheduler import Scheduler
from workers.decode.native.sequence import Sequence, SequenceStatus
from runtime import chat_template
from runtime.chat_template import ChatTokenizer, TextStream

log = logging.getLogger(__name__)


@dataclass
class _Request:
    seq: Sequence
    text: TextStream
    sent_first: bool = False
    unsent_tokens: int = 0


class EngineCore:
    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device: invalid value {config.device!r}; CUDA is not available here")
        self.tokenizer = ChatTokenizer.from_dir(config.model)
        args = ModelArgs.from_dir(config.model)
        self.max_model_len = config.max_model_len or args.max_position_embeddings
        self.dtype, self.dtype_reason = resolve_dtype(config.dtype, self.device, args.torch_dtype)
        self.model = load_model(config.model, self.device, self.dtype, self.max_model_len)
        host_blocks = host_kv_blocks(config, self.device)
        self.runner = ModelRunner(self.model, config.num_blocks, config.block_size, self.tokenizer.vocab_size,
                                  host_blocks)
        self.blocks = BlockManager(config.num_blocks, config.block_size, HostTier(host_blocks) if host_blocks else None)
        self.pins = PinTable(int(config.pin_max_share * config.num_blocks), config.pin_default_s,
                             config.pin_max_s, clock)
        self.scheduler = Scheduler(config, self.blocks, self.pins, self._eos_ids(args))
        self.grammars = GrammarCompiler(self.tokenizer.tokenizer.to_str(), sorted(self._eos_ids(args)))
        self.guide = Guide(self.grammars.vocab_size)
        self.prompts = SessionPrompts(self.tokenizer, config.max_session_records)
        self.requests: dict[str, _Request] = {}
        self.max_total_tokens = min(self.max_model_len, config.num_blocks * config.block_size)
        self._rng = random.Random(config.seed)

    # ---- requests --------------------------------------------------------------------------
    def add_request(self, req: GenerateRequest) -> Sequence:
        """Render, tokenise and queue ``req``.

        Raises ``PromptError`` (template), ``RequestTooLarge`` or ``DuplicateRequest``.
        """
        if req.rid in self.requests:
            raise DuplicateRequest(f"request {req.rid} is already running")
        try:
            text = self.tokenizer.render(req.messages, req.tools, add_generation_prompt=True) + req.params.prefill
        except chat_template.PromptError as exc:
            raise PromptError(str(exc)) from exc
        ids, _ = self.prompts.build(req.session, text)
        if len(ids) >= self.max_total_tokens:
            raise RequestTooLarge(f"prompt of {len(ids)} tokens; this engine fits at most "
                                  f"{self.max_total_tokens - 1} (model length / KV pool)")
        seq = Sequence(rid=req.rid, session=req.session, token_ids=ids, params=req.params,
                       block_size=self.config.block_size, max_total_tokens=self.max_total_tokens,
                       continuation=req.continuation, generator=self._generator(req), matcher=self._matcher(req))
        self.scheduler.add(seq)
        self.requests[req.rid] = _Request(seq, self.tokenizer.stream(req.params.stop))
        log.debug("session %s turn %d: queued %s, %d prompt tokens", req.session, req.turn, req.rid, len(ids))
        return seq

    def abort(self, rid: str) -> GenerateDelta | None:
        """Stop a live request; returns its final delta (None if it was not live)."""
        req = self.requests.pop(rid, None)
        if req is None:
            return None
        self.scheduler.abort(req.seq)
        return self._delta(req, "", finished=True)

    def pin(self, session: str, seconds: float) -> None:
        self.scheduler.pin(session, seconds)

    def release(self, session: str) -> None:
        self.scheduler.release(session)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def next_deadline(self) -> float | None:
        return self.pins.next_deadline()

    def expire_pins(self) -> None:
        self.scheduler.expire_pins()

    def reset_prefix_cache(self) -> int:
        """Forget all unpinned, unused cached KV, the host tier's too (benchmarks: a cold cache)."""
        return self.blocks.reset_prefix_cache()

    def spill_prefix_cache(self) -> int:
        """Move all unpinned, unused cached KV to the host tier now (benchmarks: a restore)."""
        spilled = self.blocks.spill()
        self.runner.copy_blocks(self.blocks.take_copies())
        return spilled

    # ---- the step --------------------------------------------------------------------------
    def step(self) -> list[tuple[str, GenerateDelta]]:
        """One batched forward pass; returns ``(rid, delta)`` for every request that produced one."""
        batch = self.scheduler.schedule()
        if self.blocks.copies:  # blocks evicted to the host tier or restored from it: before any is written
            self.runner.copy_blocks(self.blocks.take_copies())
        if not batch:
            return []
        appended = self.scheduler.postprocess(batch, self.runner.run(batch, self.guide))
        outputs = []
        for seq, token in appended:
            if not self.guide.advance(seq, token):
                log.error("session %s: %s sampled a token its grammar rejects (%s); stopping it", seq.session,
                          seq.rid, seq.matcher.get_error())
                self.scheduler.abort(seq)
            delta = self._on_token(self.requests[seq.rid], token)
            if delta is not None:
                outputs.append((seq.rid, delta))
        return outputs

    def _on_token(self, req: _Request, token: int) -> GenerateDelta | None:
        seq = req.seq
        req.unsent_tokens += 1
        stopped_by_token = seq.status is SequenceStatus.FINISHED and seq.finish_reason == "stop"
        text = "" if stopped_by_token else req.text.push(token)
        if req.text.stopped:
            self._stop_on_string(seq)
        finished = seq.status is SequenceStatus.FINISHED
        if finished:
            text += req.text.flush()
            if req.text.stopped:
                seq.finish_reason = "stop"
            self._on_finish(req)
        if text or finished or not req.sent_first:
            return self._delta(req, text, finished)
        return None

    def _stop_on_string(self, seq: Sequence) -> None:
        if seq.status is SequenceStatus.FINISHED:
            seq.finish_reason = "stop"  # the string ended the text before the length limit did
        else:
            self.scheduler.finish(seq, "stop")

    def _on_finish(self, req: _Request) -> None:
        seq = req.seq
        self.requests.pop(seq.rid, None)
        seq.matcher = None
        self.prompts.remember(seq.session, seq.token_ids, seq.num_prompt_tokens)
        log.debug("session %s: %s finished (%s), %d tokens", seq.session, seq.rid, seq.finish_reason,
                  seq.num_completion_tokens)

    def _delta(self, req: _Request, text: str, finished: bool) -> GenerateDelta:
        seq = req.seq
        delta = GenerateDelta(text=text, n_tokens=req.unsent_tokens, finished=finished,
                              finish_reason=seq.finish_reason if finished else None,
                              prompt_tokens=seq.num_prompt_tokens, cached_tokens=seq.num_cached_tokens,
                              host_cached_tokens=seq.num_host_cached_tokens,
                              completion_tokens=seq.num_completion_tokens,
                              stop_sequence=req.text.stop_sequence if finished else None)
        req.sent_first, req.unsent_tokens = True, 0
        return delta

    # ---- reporting -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Load report for heartbeats (plain ints, safe to read from another thread)."""
        s = self.scheduler
        return dict(running=len(s.running), waiting=s.num_waiting, max_model_len=self.max_total_tokens,
                    free_blocks=self.blocks.num_free,
                    total_blocks=self.blocks.num_blocks, block_size=self.config.block_size,
                    pinned_blocks=self.pins.num_blocks, pinned_sessions=len(self.pins),
                    cached_blocks=self.blocks.num_cached, prefill_tokens_computed=s.prefill_tokens_computed,
                    prefix_hit_tokens=s.prefix_hit_tokens, preemptions=s.num_preemptions,
                    host_blocks=self.blocks.host.num_blocks if self.blocks.host else 0,
                    host_cached_blocks=len(self.blocks.host) if self.blocks.host else 0,
                    host_offloaded_blocks=self.blocks.offloaded_blocks, host_restored_blocks=self.blocks.restored_blocks)

    def check_integrity(self) -> None:
        """Raise ``BlockIntegrityError`` unless blocks, sequences and pins agree."""
        self.blocks.check_integrity(self.scheduler.tables())
        self.pins.check_integrity()

    # ---- helpers ---------------------------------------------------------------------------
    def _generator(self, req: GenerateRequest) -> torch.Generator | None:
        if req.params.temperature <= 0:
            return None
        seed = req.params.seed if req.params.seed is not None else self._rng.getrandbits(63)
        return torch.Generator(device=self.device).manual_seed(seed)

    def _matcher(self, req: GenerateRequest) -> Any:
        """A grammar matcher for a constrained request, past its forced prefill; None if unconstrained."""
        if req.constraint is None:
            return None
        m = self.grammars.matcher(req.constraint)
        prefill = self.grammars.tokenizer.tokenize_str(req.params.prefill, parse_special=True)
        if prefill and not m.consume_tokens(prefill):
            raise ConstraintError(f"the forced prefill {req.params.prefill[:40]!r} breaks the request's grammar")
        return m

    def _eos_ids(self, args: ModelArgs) -> frozenset[int]:
        if self.config.ignore_eos:
            return frozenset()
        ids = set(args.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return frozenset(ids)


def host_kv_blocks(config: EngineConfig, device: torch.device) -> int:
    """The host tier's size: as configured, or (auto) twice the pool beside a GPU and none on a CPU,
    where the pool already is host memory."""
    if config.host_kv_blocks >= 0:
        return config.host_kv_blocks
    return 2 * config.num_blocks if device.type == "cuda" else 0


def resolve_dtype(name: str, device: torch.device, checkpoint: str | None,
                  flags: set[str] | None = None) -> tuple[torch.dtype, str]:
    """The dtype the engine computes in, and why (logged at start-up).

    ``auto``: on accelerators the checkpoint's half type, else bfloat16.  On a CPU, bfloat16 for a
    checkpoint published in half precision (bfloat16, float16: the hub's models) where the CPU computes
    bfloat16 natively (``runtime.cpu``: AVX-512 BF16, AMX), as vLLM's CPU backend computes them; float32
    for a float32 checkpoint (the bundled model, which was trained and evaluated in it) and wherever
    bfloat16 would be emulated (~9x slower than float32 there).  ``flags``: the CPU's, for tests.
    """
    if name != "auto":
        return getattr(torch, name), "set"
    if device.type != "cpu":
        return (torch.float16, "auto: the checkpoint's") if checkpoint == "float16" else (torch.bfloat16, "auto")
    if checkpoint not in ("bfloat16", "float16"):
        return torch.float32, f"auto: a {checkpoint or 'float32'} checkpoint"
    how = cpu.native_bf16(flags)
    if how is None:
        return torch.float32, f"auto: a {checkpoint} checkpoint on a CPU without native bfloat16"
    return torch.bfloat16, f"auto: a {checkpoint} checkpoint, native bfloat16 ({how})"
