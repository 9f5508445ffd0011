"""The decode engine interface the worker shell drives, whatever is underneath.

The worker renders nothing and batches nothing itself: it hands the engine a conversation,
iterates the deltas of ``generate()``, and tells the engine how long to keep a session's KV
(``pin``) or that it is no longer needed (``release``).  Engines batch concurrent
``generate()`` calls internally (continuous batching).

Contract of ``generate``:
  * the first delta is yielded as soon as the first token exists and carries
    ``prompt_tokens`` and ``cached_tokens`` (prompt tokens whose KV was reused);
  * every delta's ``text`` is valid UTF-8 that never splits a character; special tokens
    are kept as text (the parser needs the markers);
  * with ``req.constraint``, the completion follows its grammar (a text cut by ``max_tokens`` is
    a prefix of a grammatical one);
  * the last delta has ``finished=True`` and a ``finish_reason`` in
    ``{"stop", "length", "abort"}``;
  * after it finishes, the session's KV stays cached; ``pin(session, seconds)`` protects it
    until the continuation comes, ``release(session)`` drops the protection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from workers.decode.constraints import Constraint


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling, mapped one to one from the OpenAI request."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    # Text the turn is forced to begin with: engines put it after the generation prompt and generate
    # what follows; their deltas do not repeat it.  (tool_choice no longer sets it: the request's
    # constraint forces a call's opener token by token.)  With a constraint, the prefill is the
    # grammar's first text (native, replay); vLLM refuses the pair.
    prefill: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SamplingParams":
        """Build from a JSON params dict, ignoring unknown keys."""
        d = dict(d or {})
        stop = d.get("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        known = {k: d[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "seed", "prefill")
                 if d.get(k) is not None}
        return cls(stop=tuple(stop), stop_token_ids=tuple(d.get("stop_token_ids") or ()), **known)


@dataclass(frozen=True)
class GenerateRequest:
    rid: str  # unique per (sid, turn, attempt)
    session: str  # the session id: pins are per session
    messages: list[dict[str, Any]]  # OpenAI-style conversation (assistant turns may carry "raw")
    tools: list[dict[str, Any]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    continuation: bool = False  # a pinned prefix is expected; admitted ahead of new work
    turn: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)  # engine-specific extras (e.g. a replay script)
    conversation: str = ""  # runtime.routing.conversation_key(messages, tools); "": not computed yet
    # What the completion may be (tool calls, JSON answer); every engine holds its text to it: the
    # native engine masks each step, vLLM uses its structured outputs, the ReplayEngine refuses a
    # script that breaks it.  None: unconstrained.
    constraint: "Constraint | None" = None


@dataclass(frozen=True)
class GenerateDelta:
    text: str
    n_tokens: int
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    stop_sequence: str | None = None  # the stop string that ended the completion (finish_reason "stop")
    host_cached_tokens: int = 0  # of ``cached_tokens``: restored from a host KV tier


@runtime_checkable
class Engine(Protocol):
    """What a decode worker needs from an engine (native, vLLM, or the ReplayEngine)."""

    name: str
    model: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]: ...

    async def abort(self, rid: str) -> None: ...

    def pin(self, session: str, seconds: float) -> None: ...

    def release(self, session: str) -> None: ...

    def stats(self) -> dict[str, Any]:
        """Load report for the heartbeat: running, waiting, free_blocks, pinned_blocks, ..."""
        ...
