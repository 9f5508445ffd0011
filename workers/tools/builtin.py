"""Built-in tools: calculator, clock, allow-listed ``http_get``, demo travel tools, debug tools.

The demo tools (``get_weather``, ``book_restaurant``, ``search``) return deterministic fake
data derived from a hash of their arguments and say so in their descriptions; their names and
argument names match the schemas a model is trained on (``training/tools_spec.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import zoneinfo
from typing import Any, Callable, Iterable

import httpx

from workers.tools.calculator import evaluate, format_number
from workers.tools.registry import Registry, ToolError, ToolSpec, ToolUnavailable, spec_of, tool

HTTP_GET_MAX_BYTES = 64 * 1024
HTTP_GET_TIMEOUT_S = 10.0
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript", "+json", "+xml")


# --------------------------------------------------------------------------- utilities
@tool(timeout_s=2.0, idempotent=True)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, e.g. '2 * (3 + 4) ** 2' or 'sqrt(2) * pi'.

    Args:
        expression: numbers, + - * / // % **, parentheses, constants pi/e/tau and the
            functions sqrt, exp, log, log2, log10, sin, cos, tan, asin, acos, atan, atan2,
            hypot, degrees, radians, floor, ceil, abs, round, min, max, gcd, factorial
    """
    return format_number(evaluate(expression))


@tool(timeout_s=2.0, idempotent=True)
def get_time(timezone: str) -> dict[str, str]:
    """Current date and time in a time zone.

    Args:
        timezone: an IANA time zone name such as 'Europe/Paris', 'America/New_York' or 'UTC'
    """
    now = dt.datetime.now(_zone(timezone)).replace(microsecond=0)
    return {"timezone": timezone, "datetime": now.isoformat(), "weekday": now.strftime("%A"),
            "utc_offset": now.strftime("%z")}


@tool(timeout_s=2.0, idempotent=True)
def convert_time(time: str, from_timezone: str, to_timezone: str) -> dict[str, str]:
    """Convert a wall-clock time from one time zone to another.

    Args:
        time: 'HH:MM' (today) or an ISO date-time 'YYYY-MM-DDTHH:MM'
        from_timezone: IANA time zone of the given time
        to_timezone: IANA time zone to convert to
    """
    source, target = _zone(from_timezone), _zone(to_timezone)
    try:
        parsed = dt.datetime.fromisoformat(time)
    except ValueError:
        try:
            clock = dt.time.fromisoformat(time)
        except ValueError:
            raise ToolError(f"cannot read time {time!r}; use 'HH:MM' or 'YYYY-MM-DDTHH:MM'") from None
        parsed = dt.datetime.combine(dt.datetime.now(source).date(), clock)
    local = parsed.replace(tzinfo=source)
    return {"from": local.isoformat(), "to": local.astimezone(target).isoformat()}


def _zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {name!r}; use an IANA name such as "
                        f"'Europe/Paris', 'America/New_York' or 'UTC'") from None


def make_http_get(allow_hosts: Iterable[str] = (), *, max_bytes: int = HTTP_GET_MAX_BYTES,
                  timeout_s: float = HTTP_GET_TIMEOUT_S) -> ToolSpec:
    """The ``http_get`` tool, limited to ``allow_hosts`` ('host' or '*.domain'; empty = deny all)."""
    allowed = tuple(h.lower() for h in allow_hosts)

    async def check_host(request: httpx.Request) -> None:  # every request, redirects included
        _check_host(request.url, allowed)

    @tool(timeout_s=timeout_s + 1.0, idempotent=True, retries=1)
    async def http_get(url: str) -> str:
        """Fetch a web page or API response by HTTP GET (only allow-listed hosts).

        Args:
            url: an http:// or https:// URL
        """
        parsed = _parse_url(url)
        _check_host(parsed, allowed)
        async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=True, max_redirects=3,
                                     event_hooks={"request": [check_host]}) as client:
            try:
                return await _fetch(client, parsed, max_bytes)
            except httpx.HTTPError as e:
                raise ToolUnavailable(f"GET {url} failed: {type(e).__name__}: {e}") from None

    return spec_of(http_get)


def _parse_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise ToolError(f"invalid URL {url!r}: {e}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ToolError(f"invalid URL {url!r}: need an absolute http:// or https:// URL")
    return parsed


def _check_host(url: httpx.URL, allowed: tuple[str, ...]) -> None:
    host = url.host.lower()
    if not allowed:
        raise ToolError("disabled: no hosts are allow-listed in this deployment")
    if not any(host == h or (h.startswith("*.") and host.endswith(h[1:])) for h in allowed):
        raise ToolError(f"host {host!r} is not allowed; allowed hosts: {', '.join(allowed)}")


async def _fetch(client: httpx.AsyncClient, url: httpx.URL, max_bytes: int) -> str:
    async with client.stream("GET", url) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                break
        kind = response.headers.get("content-type", "unknown")
        head = f"HTTP {response.status_code} {response.reason_phrase}, {kind}"
        if not any(t in kind for t in _TEXT_TYPES):
            return f"{head}: {len(body)} bytes of binary content (not shown)"
        text = bytes(body[:max_bytes]).decode(response.encoding or "utf-8", errors="replace")
        more = f"\n[body cut at {max_bytes} bytes]" if len(body) > max_bytes else ""
        return f"{head}\n\n{text}{more}"


# --------------------------------------------------------------------------- demo travel tools
# The demo tools answer in the shapes the bundled model was trained on (training/datagen.py),
# so that its answers can quote them.
_CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "stormy", "clear", "partly cloudy", "drizzle")


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p).strip().lower() for p in parts).encode()).digest()


@tool(timeout_s=5.0, idempotent=True, retries=2)
def get_weather(city: str, date: str = "today") -> dict[str, Any]:
    """Weather forecast for a city (DEMO DATA: deterministic, not real weather).

    Args:
        city: the city name
        date: ISO date or 'today'
    """
    h = _digest(city, date)
    return {"city": city, "date": date, "temperature": h[0] % 41 - 5, "condition": _CONDITIONS[h[1] % len(_CONDITIONS)]}


@tool(timeout_s=5.0, idempotent=False)
def book_restaurant(restaurant: str, party_size: int, time: str) -> dict[str, Any]:
    """Book a table at a restaurant (DEMO: no real reservation is made).

    Args:
        restaurant: the restaurant's name
        party_size: number of guests, 1 to 20
        time: the reservation time, e.g. '19:30' or '2025-06-01T19:30'
    """
    if not 1 <= party_size <= 20:
        raise ToolError(f"party_size must be between 1 and 20, got {party_size}")
    booking_id = f"R{10000 + int.from_bytes(_digest(restaurant, party_size, time)[:4], 'big') % 90000}"
    return {"status": "confirmed", "booking_id": booking_id, "restaurant": restaurant, "party_size": party_size,
            "time": time}


@tool(timeout_s=5.0, idempotent=True, retries=2)
def search(query: str) -> dict[str, Any]:
    """Search the web (DEMO DATA: returns deterministic placeholder results, not real ones).

    Args:
        query: what to search for
    """
    h = _digest(query)
    slug = "-".join(query.lower().split())[:40] or "empty"
    results = [{"title": f"{query} - demo result {i + 1}",
                "url": f"https://example.{('com', 'org', 'net')[(h[i] + i) % 3]}/{slug}/{h[i + 3]:02x}",
                "snippet": f"Placeholder text about {query!r} (demo result {i + 1})."} for i in range(3)]
    return {"query": query, "results": results, "note": "demo results, not a real search"}


# --------------------------------------------------------------------------- debug tools
@tool(pool="default", timeout_s=30.0, idempotent=True)
async def debug_sleep(text: str, seconds: float = 0.0) -> str:
    """DEBUG: wait some seconds without blocking, then return the text (for tests and benchmarks).

    Args:
        text: returned unchanged
        seconds: how long to wait
    """
    if seconds < 0:
        raise ToolError(f"seconds must be >= 0, got {seconds}")
    await asyncio.sleep(seconds)
    return text


STANDARD_TOOLS: tuple[Callable[..., Any], ...] = (calculator, get_time, convert_time)
DEMO_TOOLS: tuple[Callable[..., Any], ...] = (get_weather, book_restaurant, search)
DEBUG_TOOLS: tuple[Callable[..., Any], ...] = (debug_sleep,)


def builtin_specs(*, include_debug: bool = False, http_allow_hosts: Iterable[str] = (),
                  http_max_bytes: int = HTTP_GET_MAX_BYTES,
                  http_timeout_s: float = HTTP_GET_TIMEOUT_S) -> dict[str, ToolSpec]:
    """Every built-in tool by name (debug tools only when asked)."""
    tools = [*STANDARD_TOOLS, *DEMO_TOOLS, *(DEBUG_TOOLS if include_debug else ())]
    specs = {spec.name: spec for spec in map(spec_of, tools)}
    specs["http_get"] = make_http_get(http_allow_hosts, max_bytes=http_max_bytes, timeout_s=http_timeout_s)
    return specs


def default_registry(*, include_debug: bool = False, http_allow_hosts: Iterable[str] = (),
                     **registry_options: Any) -> Registry:
    """A registry of the built-in and demo tools; ``http_get`` denies all hosts unless allowed."""
    specs = builtin_specs(include_debug=include_debug, http_allow_hosts=http_allow_hosts)
    return Registry(specs.values(), **registry_options)
