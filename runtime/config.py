"""Typed configuration: one frozen object per process, from flags and ``TURNSTREAM_*`` variables.

Precedence: explicit flag > environment variable > default.  Invalid values raise
``ConfigError`` naming the key and the value; an unknown ``TURNSTREAM_*`` variable is reported.

Every key is declared once, below, with its default, its help text and the processes that
read it (``Config.keys_for``): the CLI offers each process exactly its own flags, with that
help and default, and docs/configuration.md (generated: ``python -m turnstream.docs configuration``)
lists the same keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import socket
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# The bundled model: models/ in a checkout; an installed wheel has its copy inside the package (package data).
_CHECKOUT_MODEL_DIR = REPO_ROOT / "models" / "tiny-agent"
_PACKAGED_MODEL_DIR = REPO_ROOT / "turnstream" / "models" / "tiny-agent"
DEFAULT_MODEL_DIR = _CHECKOUT_MODEL_DIR if _CHECKOUT_MODEL_DIR.is_dir() else _PACKAGED_MODEL_DIR
ENV_PREFIX = "TURNSTREAM_"
KINDS = ("gateway", "decode", "parser", "tools")  # the processes
WORKERS = ("decode", "parser", "tools")


def default_worker_id(kind: str) -> str:
    """``<kind>-<host>-<pid>``: unique per process, and tells an operator where it runs."""
    return f"{kind}-{socket.gethostname()}-{os.getpid()}"


class ConfigError(ValueError):
    """A configuration key has an invalid value."""


def opt(default: Any, help: str, *kinds: str) -> Any:
    """A configuration key: its default, what it does, and which processes read it (none: all)."""
    for k in kinds:
        assert k in KINDS, k
    meta = {"help": help, "kinds": kinds or KINDS}
    if isinstance(default, tuple):
        return dataclasses.field(default_factory=lambda: default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Config:
    # broker
    redis_url: str = opt("", "Redis/Valkey >= 7 URL; empty: `turnstream up` starts the embedded server")
    queue_url: str = opt("", "the tool queues' Redis (arq; must not be a cluster); empty: redis_url",
                         "parser", "tools")
    worker_id: str = opt("", "this process's id; empty: <kind>-<host>-<pid>", *WORKERS)
    # decode
    engine: str = opt("native", "decode engine: native | vllm | replay (a test/benchmark double that streams "
                                "scripted text)", "decode")
    model: str = opt(str(DEFAULT_MODEL_DIR), "a local model directory or a Hugging Face hub id (ORG/NAME: downloaded "
                     "once into the hub cache; the decoder fetches the weights, the others the tokenizer files)",
                     "decode", "gateway", "parser")
    revision: str = opt("", "the hub revision of a hub-id model: a branch, tag or commit; empty: main",
                        "decode", "gateway", "parser")
    device: str = opt("cpu", "torch device of the native engine (cpu, cuda, cuda:1)", "decode")
    native_args: str = opt("", 'JSON object of native engine settings, e.g. {"num_blocks": 4096}', "decode")
    vllm_args: str = opt("", 'JSON object of extra vLLM engine arguments, e.g. {"block_size": 32}', "decode")
    replay_rate: float = opt(50.0, "tokens per second of the replay engine", "decode")
    replay_script: str = opt("", "JSON file: a list of per-turn templates for the replay engine", "decode")
    replay_mode: str = opt("per_session", "replay engine pacing: per_session (a timer per request) | batched (one "
                           "step for every running request, as a batching engine; bench load)", "decode")
    tool_format: str = opt("auto", "the model's tool-call format (see `workers.parser.FORMATS`); auto: inferred "
                                   "from the checkpoint (docs/models.md)", "decode", "parser", "gateway")
    reasoning: str = opt("auto", "reasoning parser: empty | think | think_forced | auto (inferred from the "
                                 "checkpoint)", "decode", "parser", "gateway")
    grammar_auto: str = opt("on", "tool_choice auto with tools: a call's name and arguments are held to the offered "
                                  "tools (on) or free (off)", "decode")
    grammar_plain: str = opt("off", "requests without tools: on holds their text to no call markup (the model cannot "
                             "start a call); off decodes them freely, as other servers do (the parser returns "
                             "their text as content either way)", "decode")
    plain_turns: str = opt("decoder", "plain content, on a model with no reasoning parser: decoder publishes a "
                           "turn's content events itself (no parser hop per token) -- all of a turn that cannot call "
                           "a tool (not harmony), and of one that may, on a format whose calls open with a fixed "
                           "marker and unless a call is required, the text before its first markup, where a parser "
                           "takes over (a turn with none ends at its decoder); parser sends every turn through a "
                           "parser", "decode")
    coalesce_tokens: int = opt(8, "token-log chunking: a turn's buffered tokens leave at once (in the decoder's "
                                  "next write round) when it has this many (the clock, `coalesce_ms`, paces "
                                  "a turn slower than this many tokens per `coalesce_ms`)", "decode")
    coalesce_ms: float = opt(60.0, "token-log chunking: the longest a turn's buffered token waits for the decoder's "
                                   "write round (unless one is in flight); it leaves with the last engine step "
                                   "before, after which waiting for the turn's next token would pass this (each "
                                   "round one round trip for every turn due; such rounds at least a quarter of "
                                   "this apart; a turn's first token and the end of a call go at once)", "decode")
    heartbeat_ms: int = opt(1000, "how often a worker reports it is alive", *WORKERS)
    heartbeat_ttl_ms: int = opt(3000, "a worker silent this long is dead", *WORKERS)
    pin_default_s: float = opt(5.0, "KV pin deadline before a tool's duration is known", "decode")
    pin_max_s: float = opt(60.0, "KV pin deadline cap", "decode")
    kv_routing: str = opt("prefix", "prefix: a new turn goes to the decoder holding its prefix | off",
                          "decode", "gateway")
    route_ttl_s: int = opt(600, "how long a conversation's decoder is remembered", "decode", "gateway")
    route_max_imbalance: int = opt(1, "pass a route over when its decoder runs more turns than the least busy "
                                      "one plus this", "decode", "gateway")
    # consumers
    reclaim_idle_ms: int = opt(3000, "idle time before a dead consumer's jobs are taken over", "decode", "parser")
    block_ms: int = opt(1000, "longest blocking read of a job or token stream", "decode", "parser")
    # tools
    pool: str = opt("default", "the tool pool this tool worker serves", "tools")
    tools_config: str = opt("", "TOML tools file (MCP servers, HTTP tools, policies); empty: the built-ins",
                            "tools")
    tool_max_jobs: int = opt(16, "concurrent jobs of one tool worker", "tools")
    dispatch: str = opt("on_close", "on_close: a call runs when it closes | after_turn (for the overlap "
                                    "benchmark only)", "parser")
    # sessions
    max_turns: int = opt(8, "turns of a session when the request does not say", "gateway")
    session_ttl_s: int = opt(3600, "keys of ended sessions expire after this long")
    sweep_after_s: float = opt(2.0, "a completed turn not continued within this long is continued by the sweep",
                               "decode")
    client_tool_timeout_s: float = opt(300.0, "wait for a client-side tool's result", "decode")
    response_ttl_s: int = opt(86_400, "a stored /v1/responses response (its object, input items and "
                                      "conversation) expires this long after it ended", "gateway")
    # gateway
    host: str = opt("127.0.0.1", "gateway listen address", "gateway")
    port: int = opt(8000, "gateway listen port", "gateway")
    gateway_processes: str = opt("auto", "gateway processes serving the port together (SO_REUSEPORT, as vLLM's "
                                 "--api-server-count): a number, or auto: one per 8 usable CPU cores, 1 to 4 "
                                 "(docs/operations.md)", "gateway")
    gateway_in_decoder: str = opt("auto", "on: the decode worker serves the gateway too, in its process and event loop "
                                  "(as vLLM's API server hosts its engine client: less CPU a token; its HTTP "
                                  "connections end with it); auto: turnstream up does so on vLLM's engine when it starts "
                                  "one decoder and one gateway process on fewer than 8 usable CPU cores; off: "
                                  "separate processes "
                                  "(docs/architecture.md)", "decode")
    reuse_port: str = opt("off", "on: bind the port with SO_REUSEPORT, so that several gateway processes share it "
                          "(set for the processes gateway_processes starts; set it to run them under a process "
                          "manager of your own)", "gateway")
    api_keys: tuple[str, ...] = opt((), "comma-separated API keys (plaintext or sha256:<hex>); none: open mode",
                                    "gateway")
    api_keys_file: str = opt("", "file of API keys, one per line ('#' comments)", "gateway")
    served_model_name: str = opt("", "the model id of the OpenAI API; empty: the hub id, or the model directory's name",
                                 "gateway")
    max_request_bytes: int = opt(1_048_576, "largest request body (413 above)", "gateway")
    max_header_bytes: int = opt(32_768, "largest request header block, names and values together (431 above)",
                                "gateway")
    max_messages: int = opt(512, "most messages in one request", "gateway")
    max_tools: int = opt(128, "most tools in one request", "gateway")
    max_turns_limit: int = opt(64, "most max_turns a request may ask for", "gateway")
    max_tokens_limit: int = opt(32_768, "most max_tokens a request may ask for", "gateway")
    rate_limit_rps: float = opt(10.0, "per-key token bucket rate (<= 0 disables; off in open mode)", "gateway")
    rate_limit_burst: int = opt(40, "per-key token bucket size", "gateway")
    relay_queue_size: int = opt(1024, "events buffered per subscriber before it is dropped (close 4008)",
                                "gateway")
    # logs
    ws_compression: str = opt("off", "deflate: accept a WebSocket client's permessage-deflate (CPU for bandwidth) "
                              "| off", "gateway")
    log_level: str = opt("INFO", "DEBUG | INFO | WARNING | ERROR")
    loop: str = opt("uvloop", "every process's event loop: uvloop | asyncio (the standard library's)")
    gc_young: int = opt(200_000, "allocations between collections of Python's youngest generation, in every "
                        "process (Python's default, 700, collects every few streamed tokens)")
    log_format: str = opt("text", "text | json (one object per line, with the session id)")

    @property
    def arq_url(self) -> str:
        return self.queue_url or self.redis_url

    @property
    def lease_s(self) -> float:
        """How often a consumer renews its in-flight entries' leases (well inside ``reclaim_idle_ms``)."""
        return max(0.2, self.reclaim_idle_ms / 2000)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    @staticmethod
    def keys_for(*kinds: str) -> list[dataclasses.Field]:
        """The keys any of these processes reads, in declaration order."""
        return [f for f in fields(Config) if set(kinds) & set(f.metadata["kinds"])]


_CHOICES = {"engine": {"replay", "native", "vllm"}, "dispatch": {"on_close", "after_turn"},
            "kv_routing": {"prefix", "off"}, "reasoning": {"", "think", "think_forced", "auto"},
            "log_level": {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, "log_format": {"text", "json"},
            "replay_mode": {"per_session", "batched"}, "loop": {"uvloop", "asyncio"}, "ws_compression": {"off", "deflate"},
            "reuse_port": {"on", "off"}, "gateway_in_decoder": {"auto", "on", "off"},
            "grammar_auto": {"on", "off"}, "grammar_plain": {"on", "off"},
            "plain_turns": {"decoder", "parser"}}
_POSITIVE = ("coalesce_tokens", "heartbeat_ms", "heartbeat_ttl_ms", "max_turns", "tool_max_jobs", "port",
             "max_request_bytes", "max_header_bytes", "max_messages", "max_tools", "max_turns_limit",
             "max_tokens_limit", "rate_limit_burst", "relay_queue_size", "replay_rate", "session_ttl_s", "reclaim_idle_ms", "block_ms",
             "response_ttl_s", "gc_young")


def _coerce(name: str, typ: Any, raw: Any) -> Any:
    if isinstance(raw, str):
        raw = raw.strip()
    try:
        if typ in ("int", int):
            return int(raw)
        if typ in ("float", float):
            return float(raw)
        if "tuple" in str(typ):
            return tuple(x.strip() for x in (raw.split(",") if isinstance(raw, str) else raw) if x.strip())
        return str(raw).upper() if name == "log_level" else str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: invalid value {raw!r} ({exc})") from exc


def unknown_env(environ: dict[str, str] | None = None) -> list[str]:
    """``TURNSTREAM_*`` variables that name no key, each with the closest key if one is close."""
    names = [f.name for f in fields(Config)]
    out = []
    for var in sorted(environ if environ is not None else os.environ):
        key = var[len(ENV_PREFIX):].lower()
        if var.startswith(ENV_PREFIX) and key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            out.append(var + (f" (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else ""))
    return out


def load_config(settle: bool = True, **overrides: Any) -> Config:
    """Defaults, then ``TURNSTREAM_<KEY>`` environment variables, then non-None ``overrides``.

    ``settle``: an ``auto`` tool format or reasoning mode is inferred at once when the model is a local
    directory (``runtime.model_info``).  The CLI passes False and settles after resolving a hub id,
    printing the reasons.
    """
    values: dict[str, Any] = {}
    for f in fields(Config):
        env = os.environ.get(f"{ENV_PREFIX}{f.name.upper()}")
        if env is not None:
            values[f.name] = _coerce(f.name, f.type, env)
        if overrides.get(f.name) is not None:
            values[f.name] = _coerce(f.name, f.type, overrides[f.name])
    unknown = set(overrides) - {f.name for f in fields(Config)}
    if unknown:
        raise ConfigError(f"unknown configuration keys: {sorted(unknown)}")
    cfg = Config(**values)
    _validate(cfg)
    if settle and Path(cfg.model).is_dir():
        from runtime import model_info

        cfg, _ = model_info.settle(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    for name, allowed in _CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(f"{name}: invalid value {value!r}; expected one of {sorted(allowed)}")
    for name in _POSITIVE:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}: invalid value {getattr(cfg, name)!r}; must be > 0")
    if cfg.gateway_processes != "auto" and not (cfg.gateway_processes.isdigit() and int(cfg.gateway_processes) > 0):
        raise ConfigError(f"gateway_processes: invalid value {cfg.gateway_processes!r}; expected auto or a number > 0")
    if cfg.heartbeat_ttl_ms <= cfg.heartbeat_ms:
        raise ConfigError(f"heartbeat_ttl_ms: {cfg.heartbeat_ttl_ms} must exceed heartbeat_ms {cfg.heartbeat_ms}")
    _validate_urls(cfg)


def _validate_urls(cfg: Config) -> None:
    """A cluster ``redis_url`` must parse; the tool queues (arq) need a plain server of their own."""
    from runtime import cluster

    if cluster.is_cluster_url(cfg.redis_url):
        try:
            cluster.parse_url(cfg.redis_url)
        except cluster.ClusterUrlError as exc:
            raise ConfigError(f"redis_url: {exc}") from None
        if not cfg.queue_url:
            raise ConfigError(f"queue_url: required when redis_url names a cluster ({cfg.redis_url!r}): the tool "
                              "queues (arq) need one non-cluster Redis/Valkey, e.g. redis://queue-host:6379/0")
    if cluster.is_cluster_url(cfg.queue_url):
        raise ConfigError(f"queue_url: invalid value {cfg.queue_url!r}; the tool queues (arq) need a non-cluster "
                          "Redis/Valkey (redis:// or rediss://)")
