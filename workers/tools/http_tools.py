"""HTTP endpoint tools: a configured URL that receives the arguments as JSON and answers the result.

``POST``/``PUT``/``PATCH`` send the arguments as the JSON body; ``GET`` sends them as query
parameters.  A 2xx answer's body is the tool's output; a 4xx is a ``ToolError`` the model
sees; a 5xx, 429 or a connection failure is ``ToolUnavailable`` (retried when idempotent).
All endpoint tools of a registry share one ``httpx.AsyncClient``.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
import msgspec

from workers.tools.registry import NAME_RE, Registry, ToolError, ToolSpec, ToolUnavailable

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
_ERROR_BODY_CHARS = 300


class HttpToolConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    url: str
    description: str
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    method: Literal["POST", "PUT", "PATCH", "GET"] = "POST"
    headers: dict[str, str] = {}
    pool: str = "default"
    timeout_s: float = 30.0
    idempotent: bool = False
    retries: int = 0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise ValueError(f"name {self.name!r} must match {NAME_RE.pattern}")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if self.parameters.get("type") != "object":
            raise ValueError(f"parameters must be a JSON Schema with type 'object', got {self.parameters!r}")
        if self.max_response_bytes <= 0:
            raise ValueError(f"max_response_bytes must be > 0, got {self.max_response_bytes!r}")


class SharedClient:
    """One lazily created ``httpx.AsyncClient`` (created inside the running loop, closed by the registry)."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def http_tool_spec(config: HttpToolConfig, client: SharedClient) -> ToolSpec:
    """The ``ToolSpec`` of one endpoint tool."""

    async def handler(**arguments: Any) -> str:
        return await call_endpoint(client.get(), config, arguments)

    return ToolSpec(name=config.name, description=config.description, parameters=config.parameters,
                    handler=handler, pool=config.pool, timeout_s=config.timeout_s,
                    idempotent=config.idempotent, retries=config.retries, source="http")


async def call_endpoint(client: httpx.AsyncClient, config: HttpToolConfig, arguments: dict[str, Any]) -> str:
    """Send ``arguments`` to the endpoint; its body as text, or a ``ToolError``."""
    if config.method == "GET":
        request = client.build_request("GET", config.url, params=_query(arguments), headers=config.headers)
    else:
        request = client.build_request(config.method, config.url, json=arguments, headers=config.headers)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as e:
        raise ToolUnavailable(f"{config.method} {config.url} failed: {type(e).__name__}: {e}") from None
    try:
        body, cut = await _read_capped(response, config.max_response_bytes)
    finally:
        await response.aclose()
    _raise_for_status(response, body)
    more = f"\n[response cut at {config.max_response_bytes} bytes]" if cut else ""
    return body + more


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[str, bool]:
    data = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > max_bytes:
                break
    except httpx.HTTPError as e:
        raise ToolUnavailable(f"reading the response failed: {type(e).__name__}: {e}") from None
    text = bytes(data[:max_bytes]).decode(response.encoding or "utf-8", errors="replace")
    return text, len(data) > max_bytes


def _raise_for_status(response: httpx.Response, body: str) -> None:
    status = response.status_code
    if status < 300:
        return
    detail = f"HTTP {status} {response.reason_phrase}: {body[:_ERROR_BODY_CHARS]}".rstrip(": ")
    if status >= 500 or status == 429:
        raise ToolUnavailable(detail)
    raise ToolError(detail)


def _query(arguments: dict[str, Any]) -> dict[str, str]:
    """Query parameters: strings as they are, everything else as JSON."""
    return {k: v if isinstance(v, str) else msgspec.json.encode(v).decode() for k, v in arguments.items()}


def add_http_tools(registry: Registry, configs: list[HttpToolConfig]) -> None:
    """Register endpoint tools sharing one HTTP client that ``registry.aclose()`` closes."""
    if not configs:
        return
    client = SharedClient()
    registry.add_resource(client)
    for config in configs:
        registry.add(http_tool_spec(config, client))
