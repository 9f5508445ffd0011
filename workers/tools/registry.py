"""The tool registry: tools by name, and ``run``, which never raises for a tool's problems.

``Registry.run(name, arguments_json)`` validates the arguments against the tool's JSON Schema,
calls the tool under its timeout (sync handlers on the registry's thread pool, async handlers
directly), serialises and caps the output, and turns every tool problem into a ``ToolOutcome``
with ``is_error=True`` whose content the model can act on.

Retry policy: an idempotent tool is re-run up to ``retries`` more times after a timeout, an
unexpected exception or an unavailable backend; a non-idempotent tool runs exactly once per
``run`` call (and must not be re-dispatched by a worker after a crash).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Protocol

import msgspec
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from workers.tools.spec import (NAME_RE, ErrorKind, Source, ToolConfigError, ToolError, ToolOutcome, ToolSpec,
                                ToolUnavailable, spec_from_function, spec_of, tool)

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "NAME_RE", "ErrorKind", "Registry", "Source", "ToolConfigError",
           "ToolError", "ToolOutcome", "ToolSpec", "ToolUnavailable", "cap_output", "spec_from_function",
           "spec_of", "tool"]

log = logging.getLogger("turnstream.tools")

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024
_MAX_ERROR_CHARS = 500
_RETRYABLE = {ErrorKind.TIMEOUT, ErrorKind.UNAVAILABLE, ErrorKind.EXCEPTION}


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


class Registry:
    """Tools by name. Not thread-safe; use from one event loop."""

    def __init__(self, specs: Iterable[ToolSpec] = (), *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                 threads: int = 32, retry_delay_s: float = 0.1,
                 overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.max_output_bytes = max_output_bytes
        self.retry_delay_s = retry_delay_s
        self._overrides = dict(overrides or {})
        self._specs: dict[str, ToolSpec] = {}
        self._validators: dict[str, Any] = {}
        self._resources: list[_Closeable] = []
        self._starters: list[Callable[[Registry], Awaitable[None]]] = []
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="tool")
        for spec in specs:
            self.add(spec)

    # ------------------------------------------------------------------ building
    def add(self, spec: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Register a spec (or a ``@tool`` function), applying any configured override for its name."""
        if not isinstance(spec, ToolSpec):
            spec = spec_of(spec)
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} is already registered")
        if spec.name in self._overrides:
            try:
                spec = dataclasses.replace(spec, **self._overrides[spec.name])
            except ValueError as e:
                raise ToolConfigError(f"[tools.{spec.name}]: {e}") from None
        cls = validator_for(spec.parameters)
        cls.check_schema(spec.parameters)
        self._validators[spec.name] = cls(spec.parameters)
        self._specs[spec.name] = spec
        return spec

    def add_resource(self, resource: _Closeable) -> None:
        """Close ``resource`` (an MCP connection, an HTTP client) in ``aclose``."""
        self._resources.append(resource)

    def add_starter(self, starter: Callable[[Registry], Awaitable[None]]) -> None:
        """Run ``starter(self)`` in ``start`` (MCP servers list their tools there)."""
        self._starters.append(starter)

    async def start(self) -> None:
        """Run pending starters (connect MCP servers, register their tools); safe to call twice."""
        starters, self._starters = self._starters, []
        for starter in starters:
            await starter(self)
        self.check_overrides()

    def check_overrides(self) -> None:
        """Raise ``ToolConfigError`` if a policy override names no registered tool."""
        unknown = sorted(set(self._overrides) - set(self._specs))
        if unknown:
            raise ToolConfigError(f"[tools.{unknown[0]}]: no tool named {unknown[0]!r} is registered; "
                                  f"tools are {', '.join(self.names())}")

    async def aclose(self) -> None:
        """Close MCP sessions and HTTP clients; abandon running tool threads."""
        resources, self._resources = self._resources, []
        for resource in reversed(resources):
            await resource.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> Registry:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ queries
    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def pools(self) -> set[str]:
        return {spec.pool for spec in self._specs.values()}

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    def openai_tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries for ``names`` (default: all); unknown names raise ``KeyError``."""
        names = self.names() if names is None else list(names)
        missing = [n for n in names if n not in self._specs]
        if missing:
            raise KeyError(f"unknown tools {missing}; available: {', '.join(self.names())}")
        return [self._specs[n].openai() for n in names]

    def deadline_s(self, name: str) -> float:
        """The longest one ``run(name, ...)`` can take: every attempt's timeout plus the back-off between."""
        spec = self._specs[name]
        retries = spec.retries if spec.idempotent else 0
        return spec.timeout_s * (1 + retries) + self.retry_delay_s * retries * (retries + 1) / 2

    # ------------------------------------------------------------------ running
    async def run(self, name: str, arguments: str) -> ToolOutcome:
        """Run tool ``name`` with JSON ``arguments``; tool problems come back as error outcomes."""
        start = time.perf_counter()
        spec = self._specs.get(name)
        if spec is None:
            return _failure(ErrorKind.UNKNOWN_TOOL, f"unknown tool {name!r}; available: "
                            f"{', '.join(self.names())}", start)
        args = self._parse_arguments(spec, arguments)
        if isinstance(args, tuple):
            return _failure(*args, start)
        attempts = 1 + (spec.retries if spec.idempotent else 0)
        for attempt in range(1, attempts + 1):
            outcome = await self._attempt(spec, args, start, attempt)
            if outcome.error_kind not in _RETRYABLE or attempt == attempts:
                return outcome
            log.info("tool %s attempt %d failed (%s); retrying", name, attempt, outcome.error_kind)
            await asyncio.sleep(self.retry_delay_s * attempt)
        raise AssertionError("unreachable")

    def _parse_arguments(self, spec: ToolSpec, arguments: str) -> dict[str, Any] | tuple[ErrorKind, str]:
        """The decoded, schema-valid arguments, or ``(kind, message for the model)``."""
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return ErrorKind.INVALID_JSON, (f"arguments for {spec.name} are not valid JSON ({e}); "
                                            "send one JSON object")
        if not isinstance(args, dict):
            return ErrorKind.INVALID_ARGUMENTS, (f"invalid arguments for {spec.name}: "
                                                 f"expected a JSON object, got {type(args).__name__}")
        error = best_match(self._validators[spec.name].iter_errors(args))
        if error is not None:
            where = f" (at '{'.'.join(map(str, error.absolute_path))}')" if error.absolute_path else ""
            return ErrorKind.INVALID_ARGUMENTS, f"invalid arguments for {spec.name}: {error.message}{where}"
        return _integral(args, spec.parameters)

    async def _attempt(self, spec: ToolSpec, args: dict[str, Any], start: float, attempt: int) -> ToolOutcome:
        """One call of the tool; the single place where tool exceptions become outcomes."""
        try:
            async with asyncio.timeout(spec.timeout_s):
                result = await self._call(spec, args)
            content = _to_text(result)
        except TimeoutError:
            return _failure(ErrorKind.TIMEOUT, f"{spec.name} timed out after {spec.timeout_s:g} s", start, attempt)
        except ToolUnavailable as e:
            return _failure(ErrorKind.UNAVAILABLE, f"{spec.name} is unavailable: {e}", start, attempt)
        except ToolError as e:
            return _failure(ErrorKind.TOOL_ERROR, f"{spec.name}: {e}", start, attempt)
        except Exception as e:  # the boundary: a tool bug must not crash the worker
            log.warning("tool %s raised", spec.name, exc_info=True)
            return _failure(ErrorKind.EXCEPTION, f"{spec.name} failed: {type(e).__name__}: {e}", start, attempt)
        content, truncated = cap_output(content, self.max_output_bytes)
        return ToolOutcome(content=content, duration_ms=_ms(start), truncated=truncated, attempts=attempt)

    async def _call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        if spec.is_async:
            return await spec.handler(**args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(spec.handler, **args))


def cap_output(content: str, max_bytes: int) -> tuple[str, bool]:
    """``content`` cut to at most ``max_bytes`` UTF-8 bytes, marker included; and whether it was cut."""
    data = content.encode()
    if len(data) <= max_bytes:
        return content, False
    marker = f"\n[output truncated: {len(data)} bytes, showing the first {{kept}}]"
    kept = max(0, max_bytes - len(marker.format(kept=max_bytes).encode()))
    head = data[:kept].decode(errors="ignore")
    return head + marker.format(kept=len(head.encode())), True


def _integral(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Integer parameters sent as integral floats (``2.0``, valid JSON Schema integers) become ints."""
    props = schema.get("properties", {})
    return {k: int(v) if isinstance(v, float) and v.is_integer() and props.get(k, {}).get("type") == "integer"
            else v for k, v in args.items()}


def _to_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode(errors="replace")
    return msgspec.json.encode(result).decode()


def _failure(kind: ErrorKind, message: str, start: float, attempts: int = 1) -> ToolOutcome:
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "..."
    return ToolOutcome(content=f"error: {message}", is_error=True, duration_ms=_ms(start),
                       error_kind=kind.value, attempts=attempts)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0
