"""Chat-template rendering and incremental detokenisation over a ``tokenizers`` tokenizer.

``render`` does what transformers' ``apply_chat_template(tokenize=False)`` does: a sandboxed
jinja2 environment with ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, the ``tojson``
filter (no HTML escaping), ``raise_exception`` and ``strftime_now``, and the special tokens
(``bos_token``, ``eos_token`` ...) as variables.  Assistant messages that carry ``raw`` (the
exact text generated in that turn) are rendered from it: ``{"role": "assistant", "content": raw}``
(``template_messages``) -- except under a template that writes a tool's result only inside the
assistant message that called it (Gemma 4's: ``results_need_calls``), where a turn with calls is
rendered from its parsed content and calls, or its results would vanish from the prompt.

``TextStream`` turns one completion's token ids into text chunks that never split a UTF-8
character (``tokenizers.decoders.DecodeStream``), keep special tokens, and stop at stop
strings: text that could be the start of a stop string is held back until it cannot be.
"""

from __future__ import annotations

import json
import weakref
from datetime import datetime
from pathlib import Path
from collections.abc import Callable
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class ModelFilesError(ValueError):
    """A model directory lacks its tokenizer files or they cannot be read."""


class PromptError(ValueError):
    """The chat template could not render the conversation (it raised, or the model has none)."""


class ChatTokenizer:
    def __init__(self, tokenizer: Tokenizer, templates: dict[str, str], specials: dict[str, str]) -> None:
        self.tokenizer, self.templates, self.specials = tokenizer, templates, specials
        self._compiled: dict[str, jinja2.Template] = {}

    @classmethod
    def from_dir(cls, path: str | Path) -> "ChatTokenizer":
        path = Path(path)
        if not (path / "tokenizer.json").exists():
            raise ModelFilesError(f"{path} has no tokenizer.json")
        templates, specials = model_templates(path)
        return cls(Tokenizer.from_file(str(path / "tokenizer.json")), templates, specials)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(self, text: str) -> int | None:
        return self.tokenizer.token_to_id(text)

    @property
    def eos_token_id(self) -> int | None:
        eos = self.specials.get("eos_token")
        return self.token_id(eos) if eos else None

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (and ``tools``), as the model's chat template writes it."""
        template = self._template("tool_use" if tools and "tool_use" in self.templates else "default")
        return _render(template, self.specials, messages, tools, add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens in the text are recognised, none are added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def stream(self, stop: tuple[str, ...] = ()) -> "TextStream":
        return TextStream(self.tokenizer, stop)

    def _template(self, name: str) -> jinja2.Template:
        if name not in self.templates:
            raise PromptError("the tokenizer has no chat template")
        if name not in self._compiled:
            self._compiled[name] = _environment().from_string(self.templates[name])
        return self._compiled[name]


def model_templates(path: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """A model directory's chat templates by name (``default``, ``tool_use`` ...) and its special
    tokens (``bos_token`` ...), as transformers reads them; empty where the files are missing."""
    path = Path(path)
    try:
        cfg = _read_json(path / "tokenizer_config.json")
        templates = _templates(path, cfg)
    except (OSError, ValueError) as exc:
        raise ModelFilesError(f"{path}: cannot read its tokenizer files ({exc})") from exc
    return templates, {k: _token_text(cfg[k]) for k in _SPECIAL_KEYS if cfg.get(k)}


def render_template(source: str, specials: dict[str, str], messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = True) -> str:
    """One rendering of a chat template's text (no tokenizer needed), as ``ChatTokenizer.render``."""
    try:
        template = _environment().from_string(source)
    except jinja2.TemplateError as exc:
        raise PromptError(f"the chat template does not compile: {exc}") from exc
    return _render(template, specials, messages, tools, add_generation_prompt)


def _render(template: jinja2.Template, specials: dict[str, str], messages: list[dict[str, Any]],
            tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str:
    """Calls' arguments as objects first; a template that concatenates them as text (DeepSeek's
    ``'...' + tool['function']['arguments']``) fails on an object, and gets them as JSON text instead."""
    structured = (any(m.get("raw") is not None and m.get("tool_calls") for m in messages)  # probe only then
                  and _results_need_calls(template, specials))

    def with_calls(call: Callable[[Any], Any]) -> str:
        return template.render(messages=template_messages(messages, call, structured), tools=tools,
                               add_generation_prompt=add_generation_prompt, **specials)

    try:
        try:
            return with_calls(_call_object)
        except TypeError:
            return with_calls(_call_text)
    except (jinja2.TemplateError, TypeError) as exc:
        raise PromptError(f"the chat template rejected the conversation: {exc}") from exc


SHORT_PROMPT_CHARS = 4096  # a prompt this short renders and tokenizes in ~1 ms: cheaper than a thread hop


def prompt_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, prefill: str = "") -> int:
    """About how many characters a prompt renders from (its parts' text; a template's own are few)."""
    n = len(prefill) + (len(json.dumps(tools)) if tools else 0)
    for m in messages:
        content = m.get("content")
        n += len(content) if isinstance(content, str) else len(json.dumps(content)) if content else 0
        if m.get("tool_calls"):
            n += len(json.dumps(m["tool_calls"]))
    return n


def first_stop(text: str, stops: tuple[str, ...] | list[str]) -> tuple[int, str] | None:
    """Start and text of the stop string complete first in ``text`` (smallest end; the longest on a tie)."""
    hits = [(i + len(s), i, s) for s in stops if s and (i := text.find(s)) >= 0]
    if not hits:
        return None
    _, start, s = min(hits)
    return start, s


class TextStream:
    """Text of one completion, token by token; ``stopped`` (and ``stop_sequence``, the string) once a
    stop string appeared.

    The concatenation of ``push`` outputs and ``flush`` equals ``decode(ids)`` cut before the
    first stop string (``flush`` also emits trailing bytes that never formed a character).
    """

    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...]) -> None:
        self.tokenizer, self.stop = tokenizer, tuple(s for s in stop if s)
        self.decoder = DecodeStream(skip_special_tokens=False)
        self.ids: list[int] = []
        self.decoded = ""  # everything the incremental decoder produced
        self.pending = ""  # decoded text held back: it may begin a stop string
        self.stopped = False
        self.stop_sequence: str | None = None

    def push(self, token_id: int) -> str:
        """Text that is now safe to emit (empty while a character or a stop string is incomplete)."""
        if self.stopped:
            return ""
        self.ids.append(token_id)
        piece = self.decoder.step(self.tokenizer, token_id) or ""
        self.decoded += piece
        return self._release(self.pending + piece, final=False)

    def flush(self) -> str:
        """The held-back text, at the end of the completion."""
        if self.stopped:
            return ""
        full = self.tokenizer.decode(self.ids, skip_special_tokens=False)
        tail = full[len(self.decoded):] if full.startswith(self.decoded) else ""
        return self._release(self.pending + tail, final=True)

    def _release(self, buf: str, final: bool) -> str:
        if not self.stop:
            return buf
        hit = first_stop(buf, self.stop)
        if hit is not None:
            cut, self.stop_sequence = hit
            self.stopped, self.pending = True, ""
            return buf[:cut]
        keep = 0 if final else self._holdback(buf)
        self.pending = buf[len(buf) - keep:]
        return buf[:len(buf) - keep]

    def _holdback(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        longest = max((len(s) for s in self.stop), default=1) - 1
        for k in range(min(longest, len(buf)), 0, -1):
            if any(s.startswith(buf[-k:]) for s in self.stop):
                return k
        return 0


def template_messages(messages: list[dict[str, Any]], call: Callable[[Any], Any] | None = None,
                      structured: bool = False) -> list[dict[str, Any]]:
    """The messages as the template should see them: an assistant turn with ``raw`` becomes that text (the
    new prompt then extends the old one byte for byte), unless ``structured`` (``results_need_calls``) and it
    called tools: then its parsed content and calls.  Each call goes through ``call`` (default
    ``_call_object``: a call's ``arguments`` sent as a JSON string, as OpenAI clients send them, become the
    object, which is what most chat templates render, ``tool_call.arguments | tojson``, and what the model
    wrote, as vLLM does; ``_call_text`` the other way round)."""
    call = call or _call_object
    out = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("raw") is not None:
            if not (structured and message.get("tool_calls")):
                out.append({"role": "assistant", "content": message["raw"]})
                continue
        plain = {k: v for k, v in message.items() if k != "raw"}
        if plain.get("tool_calls"):
            plain["tool_calls"] = [call(c) for c in plain["tool_calls"]]
        out.append(plain)
    return out


PROBE_RESULT = "turnstream-probe-result-7f3a"


PROBE_TOOLS = [{"type": "function", "function": {"name": "probe", "description": "probe",
                                                  "parameters": {"type": "object", "properties": {}}}}]


def results_need_calls(render: Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]) -> bool:
    """Whether a template (``render``: messages, tools -> text) writes a tool's result only after an
    assistant message with ``tool_calls``: it drops a ``tool`` message that follows plain assistant text
    (Gemma 4's template writes each response inside the turn that called it) or refuses one (MiniMax-M2's
    and M3's, gpt-oss's: "no previous assistant message with a tool call").  A template that does not
    write the result after a structured call either keeps the raw rendering."""
    user = {"role": "user", "content": "probe"}
    tool = {"role": "tool", "tool_call_id": "call00001", "name": "probe", "content": PROBE_RESULT}
    call = {"id": "call00001", "type": "function", "function": {"name": "probe", "arguments": {}}}
    try:  # a call id of 9 alphanumerics: Mistral's templates refuse any other
        if PROBE_RESULT not in render([user, {"role": "assistant", "content": "", "tool_calls": [call]}, tool],
                                      PROBE_TOOLS):
            return False
    except Exception:  # a template's own refusal (raise_exception), a type it did not expect: keep raw
        return False
    try:
        return PROBE_RESULT not in render([user, {"role": "assistant", "content": "probe"}, tool], PROBE_TOOLS)
    except Exception:  # the template refuses a result after plain assistant text
        return True


_NEED_CALLS: "weakref.WeakKeyDictionary[jinja2.Template, bool]" = weakref.WeakKeyDictionary()


def _results_need_calls(template: jinja2.Template, specials: dict[str, str]) -> bool:
    """``results_need_calls`` of one compiled template, probed once."""
    if template not in _NEED_CALLS:
        _NEED_CALLS[template] = results_need_calls(
            lambda messages, tools: template.render(messages=messages, tools=tools, add_generation_prompt=False,
                                                    **specials))
    return _NEED_CALLS[template]


def _call_object(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call  # not JSON: rendered as sent
    return {**call, "function": {**fn, "arguments": _Arguments(args)}} if isinstance(args, dict) else call


class _Arguments(dict):
    """A call's arguments object that prints as JSON: templates that print it as it comes
    (InternLM's ``arguments|string``, Phi-4-mini's ``{{ arguments }}``) write what the model wrote,
    not Python's repr of a dict."""

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False)


def _call_text(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), dict):
        return call
    return {**call, "function": {**fn, "arguments": json.dumps(fn["arguments"], ensure_ascii=False)}}


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, _Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (assistant-mask markers) renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _templates(path: Path, cfg: dict[str, Any]) -> dict[str, str]:
    if (path / "chat_template.jinja").exists():
        return {"default": (path / "chat_template.jinja").read_text()}
    template = cfg.get("chat_template") or _read_json(path / "chat_template.json").get("chat_template")
    if isinstance(template, list):
        return {t["name"]: t["template"] for t in template}
    return {"default": template} if template else {}


def _token_text(value: Any) -> str:
    return value["content"] if isinstance(value, dict) else str(value)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}
