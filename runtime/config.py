"""Typed configuration: one frozen object per process, from flags and ``TURNSTREAM_*`` variables.

Precedence: explicit flag > environment variable > default.  Invalid values raise
``ConfigError`` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO_ROOT / "models" / "tiny-agent"


def default_worker_id(kind: str) -> str:
    """``<kind>-<host>-<pid>``: unique per process, and tells an operator where it runs."""
    return f"{kind}-{socket.gethostname()}-{os.getpid()}"


class ConfigError(ValueError):
    """A configuration key has an invalid value."""


@dataclass(frozen=True)
class Config:
    redis_url: str = ""  # empty: `turnstream up` starts the embedded server; redis+cluster://h:p[,h:p] a cluster
    queue_url: str = ""  # arq's Redis (must be non-cluster); defaults to redis_url, required with a cluster
    worker_id: str = ""  # defaults to "<kind>-<host>-<pid>"
    # decode
    engine: str = "native"  # "native" | "vllm" | "replay" (the test/benchmark engine)
    model: str = str(DEFAULT_MODEL_DIR)
    device: str = "cpu"
    native_args: str = ""  # engine=native: JSON object of EngineConfig overrides, e.g. {"num_blocks": 4096}
    tool_format: str = "hermes"
    reasoning: str = ""  # "" | "think" | "think_forced"
    replay_rate: float = 50.0  # tokens per second of the ReplayEngine
    replay_script: str = ""  # JSON list of per-turn templates; default: the built-in demo script
    vllm_args: str = ""  # engine=vllm: JSON object of extra vLLM engine arguments, e.g. {"enforce_eager": true}
    coalesce_tokens: int = 4
    coalesce_ms: float = 15.0
    heartbeat_ms: int = 1000
    heartbeat_ttl_ms: int = 3000
    outage_s: float = 15.0  # a decoder retries its token-log writes this long while redis is unreachable
    # (a cluster failover, a restart) before it abandons the turn, which is then regenerated
    pin_default_s: float = 5.0
    pin_max_s: float = 60.0
    kv_routing: str = "prefix"  # "prefix": new turns go to the decoder holding their prefix | "off"
    route_ttl_s: int = 600  # how long a conversation's route is remembered
    route_max_imbalance: int = 1  # pass a route over when its decoder has more turns in flight than the least busy + this
    # parser / consumers
    reclaim_idle_ms: int = 3000
    block_ms: int = 1000
    # tools
    pool: str = "default"
    tools_config: str = ""
    tool_max_jobs: int = 16
    dispatch: str = "on_close"  # "on_close" | "after_turn" (for the overlap benchmark)
    # sessions
    max_turns: int = 8
    session_ttl_s: int = 3600
    sweep_after_s: float = 2.0
    client_tool_timeout_s: float = 300.0
    # gateway
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = field(default_factory=tuple)  # plaintext or "sha256:<hex>"; none = open
    api_keys_file: str = ""  # one key (plaintext or "sha256:<hex>") per line, '#' comments
    served_model_name: str = ""  # the model id of /v1/models; default: the model directory's name
    max_request_bytes: int = 1_048_576
    max_messages: int = 512
    max_tools: int = 128
    max_turns_limit: int = 64
    max_tokens_limit: int = 32_768
    rate_limit_rps: float = 10.0  # per API key (token bucket in Redis); <= 0 disables
    rate_limit_burst: int = 40
    relay_queue_size: int = 1024  # events buffered per subscriber before it is dropped
    log_level: str = "INFO"

    @property
    def arq_url(self) -> str:
        return self.queue_url or self.redis_url

    @property
    def lease_s(self) -> float:
        """How often a consumer renews its in-flight entries' leases (well inside ``reclaim_idle_ms``)."""
        return max(0.2, self.reclaim_idle_ms / 2000)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)


_CHOICES = {"engine": {"replay", "native", "vllm"}, "dispatch": {"on_close", "after_turn"}, "kv_routing": {"prefix", "off"},
            "reasoning": {"", "think", "think_forced"}}


def _coerce(name: str, typ: Any, raw: Any) -> Any:
    if isinstance(raw, str):
        raw = raw.strip()
    try:
        if typ in ("int", int):
            return int(raw)
        if typ in ("float", float):
            return float(raw)
        if "tuple" in str(typ):
            return tuple(x for x in (raw.split(",") if isinstance(raw, str) else raw) if x)
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: invalid value {raw!r} ({exc})") from exc


def load_config(**overrides: Any) -> Config:
    """Defaults, then ``TURNSTREAM_<KEY>`` environment variables, then non-None ``overrides``."""
    values: dict[str, Any] = {}
    for f in fields(Config):
        env = os.environ.get(f"TURNSTREAM_{f.name.upper()}")
        if env is not None:
            values[f.name] = _coerce(f.name, f.type, env)
        if overrides.get(f.name) is not None:
            values[f.name] = _coerce(f.name, f.type, overrides[f.name])
    unknown = set(overrides) - {f.name for f in fields(Config)}
    if unknown:
        raise ConfigError(f"unknown configuration keys: {sorted(unknown)}")
    cfg = Config(**values)
    _validate(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    for name, allowed in _CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(f"{name}: invalid value {value!r}; expected one of {sorted(allowed)}")
    for name in ("coalesce_tokens", "heartbeat_ms", "heartbeat_ttl_ms", "max_turns", "tool_max_jobs", "port",
                 "max_request_bytes", "max_messages", "max_tools", "max_turns_limit", "max_tokens_limit",
                 "rate_limit_burst", "relay_queue_size"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}: invalid value {getattr(cfg, name)!r}; must be > 0")
    if cfg.heartbeat_ttl_ms <= cfg.heartbeat_ms:
        raise ConfigError(f"heartbeat_ttl_ms: {cfg.heartbeat_ttl_ms} must exceed heartbeat_ms {cfg.heartbeat_ms}")
    _validate_urls(cfg)
    if cfg.replay_rate <= 0:
        raise ConfigError(f"replay_rate: invalid value {cfg.replay_rate!r}; must be > 0")


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
