"""Every error in OpenAI's shape, naming the client's own field; an unexpected failure is one
logged traceback and a 500 that leaves the keep-alive connection usable."""

from __future__ import annotations

import httpx
import pytest
from gateway_harness import MODEL, GwStack

from schemas import keys

GATEWAY_KINDS = ("gateway",)  # nothing here needs a turn to run
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def http(gw: GwStack):
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        yield client


def local_port(resp: httpx.Response) -> int | None:
    """The client-side port of the connection that carried ``resp`` (None once it is closed)."""
    try:
        return resp.extensions["network_stream"].get_extra_info("client_addr")[1]
    except OSError:
        return None


def test_a_500_logs_one_traceback_and_keeps_the_connection(gw: GwStack, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={"messages": USER}).json()["id"]
    gw.redis().hset(keys.session(sid), "tools", "{not json")  # a record the gateway cannot read
    before = gw.tracebacks()
    with httpx.Client(base_url=gw.url, timeout=10, limits=httpx.Limits(max_connections=1)) as one:
        port = local_port(one.get("/healthz"))
        failed = one.get(f"/v1/sessions/{sid}")
        assert failed.status_code == 500
        assert failed.json() == {"error": {"message": "internal server error", "type": "server_error",
                                           "param": None, "code": None}}
        assert "close" not in failed.headers.get("connection", "")
        after = one.get("/healthz")
        assert after.status_code == 200
        assert local_port(after) == port, "the keep-alive connection was dropped after the 500"
    assert gw.tracebacks() == before + 1
