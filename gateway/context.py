"""Whether a prompt fits the model's context, checked before anything is queued.

The limit is a decoder fact: each decoder's heartbeat (``ts:decode:hb:{worker}``, JSON) carries
its engine's ``max_model_len`` -- the most tokens, prompt and completion together, one request
can hold there (none for the ReplayEngine, which computes nothing).  Any live decoder may take a
new turn, so the gateway uses the smallest limit among them, re-read at most every
``LIMIT_TTL_S`` (the live decoders are the fields of ``ts:decode:load``: one HKEYS and one MGET).
The same read says which decoders are alive, for routing (``SessionOps.route``).

A prompt is measured as the decoders measure it: the served model's own chat template
(``runtime.chat_template``, loaded once per process, on first use) rendered with the tools and
the forced opener, then tokenised, in a thread.  With no limit known (no live decoder reports
one) nothing is measured; a decoder that still gets a prompt it cannot hold ends the session
with an ``error`` event, code ``context_length_exceeded``.

    prompt >= limit                              -> 400 context_length_exceeded
    prompt + max_tokens > limit, max_tokens sent -> 400 context_length_exceeded
    otherwise                                    -> max_tokens, lowered to the room left when not sent

The rendered prompt is not tokenised when its length alone shows that it fits: an ASCII text of n
characters is at most n + ``BOUND_SLACK`` tokens, so when that plus max_tokens is within the limit
the answer is max_tokens, whatever the exact count.  Why it holds: every token spells at least one
character or byte; the tokenizer's added tokens are split out first and each of the pieces between
them is normalised and pre-tokenised alone, which may prefix it (SentencePiece's leading "▁": one
token more per piece), so the bound is taken only for a tokenizer whose added tokens are all two
characters or more (each absorbs the prefix of the piece after it) and whose normalizer never makes
ASCII longer (``bound_holds``); the slack covers the first piece's prefix.  A prompt with other text,
one this long, or another tokenizer is counted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any

import redis.asyncio as aioredis

from gateway.errors import ApiError
from runtime import bus
from runtime.chat_template import (
    SHORT_PROMPT_CHARS,
    ChatTokenizer,
    ModelFilesError,
    PromptError,
    prompt_chars,
)
from schemas import keys

log = logging.getLogger(__name__)
LIMIT_TTL_S = 2.0


class DecoderLimits:
    """The smallest ``max_model_len`` among the live decoders (None: none reports one), cached; and,
    read with it, ``live``: the decoders whose heartbeat was there (``live_now``: while fresh)."""

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r
        self.live: frozenset[str] | None = None
        self._value: int | None = None
        self._read_at = -math.inf
        self._lock = asyncio.Lock()

    async def get(self) -> int | None:
        async with self._lock:  # one reader refreshes; the others wait for its answer
            if time.monotonic() - self._read_at >= LIMIT_TTL_S:
                self._value = await self._read()
                self._read_at = time.monotonic()
        return self._value

    def live_now(self) -> frozenset[str] | None:
        """``live`` if it was read within ``LIMIT_TTL_S``, else None (the caller asks Redis)."""
        return self.live if time.monotonic() - self._read_at < LIMIT_TTL_S else None

    async def _read(self) -> int | None:
        workers = [w.decode() for w in await self.r.hkeys(keys.DECODE_LOAD)]
        beats = await bus.get_each(self.r, [keys.decoder_heartbeat(w) for w in workers])  # keys of many slots
        self.live = frozenset(w for w, b in zip(workers, beats, strict=True) if b)
        limits = [_limit(b) for b in beats if b]
        return min((n for n in limits if n), default=None)


def _limit(beat: bytes) -> int | None:
    try:
        value = json.loads(beat).get("max_model_len")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


BOUND_SLACK = 8  # tokens a tokenizer may add to an ASCII text beyond one per character (see the module doc)
_NEVER_LONGER = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "BertNormalizer", "Prepend"}


def bound_holds(tokenizer: Any) -> bool:
    """Whether an ASCII text of n characters is at most n + ``BOUND_SLACK`` tokens of ``tokenizer`` (a
    ``tokenizers.Tokenizer``; see the module doc): its added tokens all two characters or more, its
    normalizer of the kinds that never make ASCII longer (a ``Replace`` only by something no longer)."""
    if any(len(t.content) < 2 for t in tokenizer.get_added_tokens_decoder().values()):
        return False
    todo = [json.loads(tokenizer.to_str()).get("normalizer")]
    while todo:
        norm = todo.pop()
        if norm is None:
            continue
        kind = norm.get("type")
        if kind == "Sequence":
            todo += norm.get("normalizers", [])
        elif kind == "Replace":
            pattern = norm.get("pattern", {})
            if "String" not in pattern or len(norm.get("content", "")) > len(pattern["String"]):
                return False  # a regex may match one character; a longer replacement grows the text
        elif kind not in _NEVER_LONGER:
            return False  # a precompiled character map, or a kind not known here
    return True


class PromptMeter:
    """Prompt tokens as the decoders count them (None when the model has no tokenizer here)."""

    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir
        self._tokenizer: ChatTokenizer | None = None
        self._unavailable = False
        self._bound_holds = False  # ``bound_holds`` of the tokenizer, once loaded

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], prefill: str = "",
              enough: int | None = None) -> int | None:
        """Tokens of the rendered prompt; raises ``PromptError`` when the template rejects it.  With
        ``enough``: an upper bound instead, when one that is at most ``enough`` can be had without
        tokenising (see the module doc)."""
        tok = self._load()
        if tok is None:
            return None
        try:
            text = tok.render(messages, tools or None, add_generation_prompt=True) + prefill
        except PromptError:
            raise
        except Exception as exc:  # the model's template, run over the client's conversation, may raise anything
            raise PromptError(f"the chat template cannot render the conversation: {exc}") from exc
        if enough is not None and self._bound_holds and len(text) + BOUND_SLACK <= enough and text.isascii():
            return len(text) + BOUND_SLACK
        return len(tok.encode(text))

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer is loaded (or known to be missing): counting takes no loading now."""
        return self._tokenizer is not None or self._unavailable

    def _load(self) -> ChatTokenizer | None:
        if self._tokenizer is None and not self._unavailable:
            try:
                self._tokenizer = ChatTokenizer.from_dir(self.model_dir)
                self._bound_holds = bound_holds(self._tokenizer.tokenizer)
            except (ModelFilesError, OSError, ValueError) as exc:
                self._unavailable = True
                log.warning("gateway: cannot load the tokenizer of %s (%s); prompt lengths are not checked",
                            self.model_dir, exc)
        return self._tokenizer


class ContextCheck:
    """``fits``: the gate every route that starts a turn passes (see the module doc)."""

    def __init__(self, r: aioredis.Redis, model_dir: str) -> None:
        self.limits, self.meter = DecoderLimits(r), PromptMeter(model_dir)
        self._meter_lock = asyncio.Lock()  # one thread renders at a time; the first loads the tokenizer

    async def fits(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int,
                   sent: bool, prefill: str = "") -> int:
        """The max_tokens to run with; a 400 ApiError when the request cannot fit the context."""
        limit = await self.limits.get()
        if limit is None:
            return max_tokens
        try:  # a bound suffices when the request fits with it (the answer is the same)
            n = await self.count(messages, tools, prefill, enough=limit - max(max_tokens, 1))
        except PromptError as exc:
            raise ApiError(400, f"messages: {exc}", param="messages", code="invalid_prompt") from None
        if n is None:
            return max_tokens
        if n >= limit or (sent and n + max_tokens > limit):
            raise too_long(limit, n, max_tokens if sent else None)
        return min(max_tokens, limit - n)

    async def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], prefill: str = "",
                    enough: int | None = None) -> int | None:
        """The prompt's tokens, or a bound of them at most ``enough`` (``PromptMeter.count``: None
        without a tokenizer here; ``PromptError`` when the template rejects the conversation).  A short
        prompt is measured right here: that takes less than handing it to a thread (~0.2 µs a
        character); a long one, or the first, which loads the tokenizer, off the event loop, one at a
        time."""
        short = prompt_chars(messages, tools, prefill) <= SHORT_PROMPT_CHARS
        if short and self.meter.loaded and not self._meter_lock.locked():
            return self.meter.count(messages, tools, prefill, enough)  # no await: no thread can start meanwhile
        async with self._meter_lock:
            return await asyncio.to_thread(self.meter.count, messages, tools, prefill, enough)


def tokenizer_unavailable(route: str) -> ApiError:
    """A 501: counting needs the served model's tokenizer, which this gateway cannot read."""
    return ApiError(501, f"{route} is unavailable: the gateway cannot read the model's tokenizer",
                    type="server_error", code="tokenizer_unavailable")


def too_long(limit: int, prompt: int, completion: int | None) -> ApiError:
    """OpenAI's ``context_length_exceeded`` error."""
    if completion is None:
        what = f"your messages resulted in {prompt} tokens. Please reduce the length of the messages."
    else:
        what = (f"you requested {prompt + completion} tokens ({prompt} in the messages, {completion} in the "
                "completion). Please reduce the length of the messages or completion.")
    return ApiError(400, f"This model's maximum context length is {limit} tokens. However, {what}",
                    param="messages", code="context_length_exceeded")
