"""HTTP endpoint tools against a local server on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from workers.tools import ErrorKind, Registry
from workers.tools.http_tools import HttpToolConfig, add_http_tools

from .conftest import LocalServer
from .test_registry import assert_error

ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "items": {"type": "integer"}},
                "required": ["order_id"]}


def endpoint(server: LocalServer, path: str, **fields: Any) -> HttpToolConfig:
    fields.setdefault("name", "lookup_order")
    return HttpToolConfig(url=f"{server.url}{path}", description="Look up an order.",
                          parameters=ORDER_SCHEMA, **fields)


def registry(*configs: HttpToolConfig, **options: Any) -> Registry:
    reg = Registry(retry_delay_s=0.0, **options)
    add_http_tools(reg, list(configs))
    return reg


async def test_post_round_trip(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/echo", headers={"X-Api-Key": "k1"})) as reg:
        spec = reg.get("lookup_order")
        assert spec is not None and spec.source == "http" and spec.parameters == ORDER_SCHEMA
        out = await reg.run("lookup_order", '{"order_id": "A-17", "items": 2}')
        assert not out.is_error
        assert json.loads(out.content) == {"received": {"order_id": "A-17", "items": 2}}
        assert local_http.last_body == {"order_id": "A-17", "items": 2}
        assert local_http.last_headers["X-Api-Key"] == "k1"
        assert local_http.last_headers["Content-Type"] == "application/json"


async def test_get_sends_arguments_as_query(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/query", method="GET")) as reg:
        out = await reg.run("lookup_order", '{"order_id": "A 17", "items": 3}')
        assert json.loads(out.content) == {"order_id": ["A 17"], "items": ["3"]}


async def test_invalid_arguments_never_reach_the_endpoint(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/echo")) as reg:
        assert_error(await reg.run("lookup_order", '{"items": 2}'), ErrorKind.INVALID_ARGUMENTS, "order_id")
    assert local_http.hits == {}


async def test_client_error_is_shown_to_the_model(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/reject", idempotent=True, retries=2)) as reg:
        out = await reg.run("lookup_order", '{"order_id": "nope"}')
        assert_error(out, ErrorKind.TOOL_ERROR, "HTTP 422", "order not found")
    assert local_http.hits["/reject"] == 1  # a 4xx is the caller's fault: not retried


async def test_server_error_is_retried_only_when_idempotent(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/fail500", idempotent=True, retries=2),
                        endpoint(local_http, "/fail500", name="create_order")) as reg:
        assert_error(await reg.run("lookup_order", '{"order_id": "x"}'), ErrorKind.UNAVAILABLE,
                     "HTTP 500", "internal trouble")
        assert local_http.hits["/fail500"] == 3
        out = await reg.run("create_order", '{"order_id": "x"}')
        assert_error(out, ErrorKind.UNAVAILABLE)
        assert out.attempts == 1
        assert local_http.hits["/fail500"] == 4


async def test_unreachable_endpoint_is_unavailable() -> None:
    dead = HttpToolConfig(name="dead", url="http://127.0.0.1:9/x", description="d", parameters=ORDER_SCHEMA)
    async with registry(dead) as reg:
        assert_error(await reg.run("dead", '{"order_id": "x"}'), ErrorKind.UNAVAILABLE, "ConnectError")


async def test_timeout_and_response_size_cap(local_http: LocalServer) -> None:
    async with registry(endpoint(local_http, "/slow", timeout_s=0.3),
                        endpoint(local_http, "/big", name="big", max_response_bytes=1000),
                        endpoint(local_http, "/big", name="big_capped_by_registry"),
                        max_output_bytes=4096) as reg:
        assert_error(await reg.run("lookup_order", '{"order_id": "x"}'), ErrorKind.TIMEOUT, "0.3 s")
        big = await reg.run("big", '{"order_id": "x"}')
        assert big.content == "y" * 1000 + "\n[response cut at 1000 bytes]" and not big.truncated
        capped = await reg.run("big_capped_by_registry", '{"order_id": "x"}')
        assert capped.truncated and len(capped.content.encode()) <= 4096


@pytest.mark.parametrize("fields, fragment", [
    ({"url": "ftp://x/"}, "must start with http"),
    ({"name": "bad name"}, "must match"),
    ({"parameters": {"type": "string"}}, "type 'object'"),
    ({"method": "DELETE"}, "Invalid enum value 'DELETE'"),
    ({"max_response_bytes": 0}, "max_response_bytes"),
])
def test_config_validation(fields: dict[str, Any], fragment: str) -> None:
    raw = {"name": "t", "url": "http://127.0.0.1/x", "description": "d", **fields}
    with pytest.raises(msgspec.ValidationError, match=fragment):
        msgspec.convert(raw, HttpToolConfig)
