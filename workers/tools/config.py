"""The tools configuration file (TOML) and ``format_registry`` for ``turnstream tools list``.

Every section is optional; an empty file gives the built-in and demo tools::

    [registry]
    max_output_bytes = 16384       # cap on a tool's output seen by the model
    builtins = true                # true, false, or a list of built-in tool names
    include_debug = false          # debug_sleep & co.

    [http_get]                     # the built-in http_get tool (denies every host by default)
    allow_hosts = ["api.example.com", "*.wikipedia.org"]

    [python.lookup_order]          # a Python function as tool "lookup_order"
    target = "shop.tools:lookup_order"
    pool = "shop"

    [mcp.files]                    # an MCP server; its tools become files__<tool>
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]
    # or: url = "https://mcp.example.com/mcp", headers = { Authorization = "Bearer ${TOKEN}" }

    [http.create_ticket]           # an HTTP endpoint tool
    url = "https://tickets.internal/api/create"
    description = "Open a support ticket."
    parameters = { type = "object", properties = { title = { type = "string" } }, required = ["title"] }

    [tools.get_weather]            # policy override for any tool, MCP ones included
    pool = "fast"
    timeout_s = 2.0
    idempotent = true
    retries = 1

``${NAME}`` in MCP ``command``/``args``/``env``/``url``/``headers`` and HTTP ``url``/``headers``
is replaced by the environment variable ``NAME`` (an unset one is an error).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Callable

import msgspec

from workers.tools.builtin import DEBUG_TOOLS, builtin_specs, default_registry
from workers.tools.http_tools import HttpToolConfig, add_http_tools
from workers.tools.mcp import McpServerConfig, add_mcp_server
from workers.tools.render import format_registry
from workers.tools.registry import DEFAULT_MAX_OUTPUT_BYTES, NAME_RE, Registry, ToolConfigError, ToolSpec, spec_of

__all__ = ["ToolConfigError", "ToolsConfig", "format_registry", "load_config", "load_registry_config",
           "open_registry"]

_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_FIELDS = {"mcp": ("command", "args", "env", "url", "headers"), "http": ("url", "headers")}


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class RegistrySection(_Section, kw_only=True):
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    threads: int = 32
    builtins: bool | list[str] = True
    include_debug: bool = False

    def __post_init__(self) -> None:
        if self.max_output_bytes < 256:
            raise ValueError(f"max_output_bytes must be >= 256, got {self.max_output_bytes!r}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads!r}")


class HttpGetSection(_Section):
    allow_hosts: list[str] = []
    max_bytes: int = 64 * 1024
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or not self.timeout_s > 0:
            raise ValueError(f"max_bytes and timeout_s must be > 0, got {self.max_bytes!r} and {self.timeout_s!r}")


class Policy(_Section):
    """Overrides of a tool's pool, timeout and retry policy; unset fields keep the tool's own."""

    pool: str | None = None
    timeout_s: float | None = None
    idempotent: bool | None = None
    retries: int | None = None

    def __post_init__(self) -> None:
        if self.pool is not None and not NAME_RE.match(self.pool):
            raise ValueError(f"pool {self.pool!r} must match {NAME_RE.pattern}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries!r}")

    def fields(self) -> dict[str, Any]:
        """The overriding fields that are set."""
        names = ("pool", "timeout_s", "idempotent", "retries")
        return {f: getattr(self, f) for f in names if getattr(self, f) is not None}


class PythonToolConfig(Policy, kw_only=True):
    target: str  # "package.module:function"
    description: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not re.fullmatch(r"[\w.]+:[\w.]+", self.target):
            raise ValueError(f"target {self.target!r} must look like 'package.module:function'")


class ToolsConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The whole file, validated."""

    registry: RegistrySection = RegistrySection()
    http_get: HttpGetSection = HttpGetSection()
    python: dict[str, PythonToolConfig] = {}
    mcp: dict[str, McpServerConfig] = {}
    http: dict[str, HttpToolConfig] = {}
    tools: dict[str, Policy] = {}


_SINGLE: dict[str, type] = {"registry": RegistrySection, "http_get": HttpGetSection}
_KEYED: dict[str, tuple[type, str | None]] = {
    "python": (PythonToolConfig, None), "mcp": (McpServerConfig, "prefix"),
    "http": (HttpToolConfig, "name"), "tools": (Policy, None),
}


# --------------------------------------------------------------------------- loading
def load_config(path: str | Path) -> ToolsConfig:
    """Read and validate a tools file; ``ToolConfigError`` names the file, key and value."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ToolConfigError(f"{path}: {e}") from None
    try:
        return parse_config(raw)
    except ToolConfigError as e:
        raise ToolConfigError(f"{path}: {e}") from None


def parse_config(raw: dict[str, Any]) -> ToolsConfig:
    """Validate an already-parsed TOML document."""
    unknown = sorted(set(raw) - set(_SINGLE) - set(_KEYED))
    if unknown:
        raise ToolConfigError(f"unknown section [{unknown[0]}]; expected one of {', '.join([*_SINGLE, *_KEYED])}")
    sections: dict[str, Any] = {k: _convert(raw[k], t, k) for k, t in _SINGLE.items() if k in raw}
    for key, (tp, name_field) in _KEYED.items():
        tables = _table(raw.get(key, {}), key)
        sections[key] = {name: _convert(_keyed(table, key, name, name_field), tp, f"{key}.{name}")
                         for name, table in tables.items()}
    return ToolsConfig(**sections)


def load_registry_config(path: str | Path) -> Registry:
    """A registry built from a tools file; ``await registry.start()`` then lists MCP tools."""
    config = load_config(path)
    try:
        return build_registry(config)
    except ToolConfigError as e:
        raise ToolConfigError(f"{path}: {e}") from None


async def open_registry(path: str | Path | None = None, **default_options: Any) -> Registry:
    """A started registry (MCP tools listed) from ``path``, or the default one when ``path`` is empty."""
    reg = load_registry_config(path) if path else default_registry(**default_options)
    try:
        await reg.start()
    except BaseException:
        await reg.aclose()
        raise
    return reg


def build_registry(config: ToolsConfig) -> Registry:
    """The registry a validated configuration describes."""
    reg = Registry(max_output_bytes=config.registry.max_output_bytes, threads=config.registry.threads,
                   overrides={name: policy.fields() for name, policy in config.tools.items()})
    for spec in _selected_builtins(config):
        _add(reg, spec, "registry.builtins")
    for name, entry in config.python.items():
        _add(reg, _python_spec(name, entry), f"python.{name}")
    for mcp_config in config.mcp.values():
        add_mcp_server(reg, mcp_config)
    add_http_tools(reg, list(config.http.values()))
    if not config.mcp:
        reg.check_overrides()
    return reg


def _selected_builtins(config: ToolsConfig) -> list[ToolSpec]:
    """The built-ins named by ``registry.builtins``, plus the debug tools if ``include_debug``."""
    section, http_get = config.registry, config.http_get
    specs = builtin_specs(include_debug=True, http_allow_hosts=http_get.allow_hosts,
                          http_max_bytes=http_get.max_bytes, http_timeout_s=http_get.timeout_s)
    debug = [spec_of(fn).name for fn in DEBUG_TOOLS]
    if isinstance(section.builtins, bool):
        names = [n for n in specs if n not in debug] if section.builtins else []
    else:
        names = list(section.builtins)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ToolConfigError(f"registry.builtins = {section.builtins!r}: no built-in tool {unknown[0]!r}; "
                              f"built-ins are {', '.join(specs)}")
    names += [n for n in debug if section.include_debug and n not in names]
    return [specs[n] for n in names]


def _python_spec(name: str, entry: PythonToolConfig) -> ToolSpec:
    fn = _import_target(entry.target, f"python.{name}.target")
    try:
        base = spec_of(fn)
    except TypeError as e:
        raise ToolConfigError(f"python.{name}.target = {entry.target!r}: {e}") from None
    fields = {**entry.fields(), "name": name}
    if entry.description is not None:
        fields["description"] = entry.description
    return _replace(base, fields, f"python.{name}")


def _import_target(target: str, key: str) -> Callable[..., Any]:
    module_name, _, attr_path = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as e:
        raise ToolConfigError(f"{key} = {target!r}: cannot import it ({e})") from None
    if not callable(obj):
        raise ToolConfigError(f"{key} = {target!r}: not a function")
    return obj


def _replace(spec: ToolSpec, fields: dict[str, Any], key: str) -> ToolSpec:
    try:
        return dataclasses.replace(spec, **fields)
    except ValueError as e:
        raise ToolConfigError(f"[{key}]: {e}") from None


def _add(reg: Registry, spec: ToolSpec, key: str) -> None:
    try:
        reg.add(spec)
    except ToolConfigError:
        raise
    except ValueError as e:
        raise ToolConfigError(f"[{key}]: {e}") from None


# --------------------------------------------------------------------------- validation helpers
def _table(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ToolConfigError(f"{key} = {value!r}: expected a table like [{key}.NAME]")
    return value


def _keyed(table: Any, section: str, name: str, name_field: str | None) -> Any:
    """The table of ``[section.name]``, with its name injected and ``${VAR}`` expanded."""
    where = f"{section}.{name}"
    if not isinstance(table, dict):
        raise ToolConfigError(f"{where} = {table!r}: expected a table")
    if name_field is None:
        return table
    if name_field in table:
        raise ToolConfigError(f"{where}.{name_field} = {table[name_field]!r}: the table name sets it; remove it")
    table = {**table, name_field: name}
    for field in _ENV_FIELDS.get(section, ()):
        if field in table:
            table[field] = _expand(table[field], f"{where}.{field}")
    return table


def _expand(value: Any, key: str) -> Any:
    """``value`` with ``${VAR}`` replaced in every string inside it."""
    if isinstance(value, str):
        def var(match: re.Match[str]) -> str:
            if match.group(1) not in os.environ:
                raise ToolConfigError(f"{key} = {value!r}: environment variable {match.group(1)} is not set")
            return os.environ[match.group(1)]
        return _ENV_VAR.sub(var, value)
    if isinstance(value, list):
        return [_expand(v, key) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{key}.{k}") for k, v in value.items()}
    return value


def _convert(table: Any, tp: type, where: str) -> Any:
    """``msgspec.convert`` whose errors name the TOML key and the offending value."""
    try:
        return msgspec.convert(table, tp)
    except msgspec.ValidationError as e:
        message, _, path = str(e).partition(" - at `$")
        keys = [k for k in re.split(r"[.\[\]`]+", path) if k]
        key = ".".join([where, *keys])
        value = _lookup(table, keys)
        shown = f" = {value!r}" if value is not _MISSING and not isinstance(value, dict) else ""
        raise ToolConfigError(f"{key}{shown}: {message}") from None


_MISSING = object()


def _lookup(table: Any, keys: list[str]) -> Any:
    for k in keys:
        if isinstance(table, dict) and k in table:
            table = table[k]
        elif isinstance(table, list) and k.isdigit() and int(k) < len(table):
            table = table[int(k)]
        else:
            return _MISSING
    return table
