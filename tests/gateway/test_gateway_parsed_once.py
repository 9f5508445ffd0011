"""A request body is parsed once: the edge's strict check (``gateway.strict_json.check_body``)
keeps the value, and a ``ParsedBodyRoute`` validates that value instead of parsing the bytes again."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import starlette.requests
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from gateway import errors
from gateway.limits import BodyLimitMiddleware
from gateway.strict_json import ParsedBodyRoute, check_body


class Body(BaseModel):
    name: str


def _app(route_class: type | None) -> FastAPI:
    app = FastAPI()
    errors.install(app)
    app.add_middleware(BodyLimitMiddleware, limit=1 << 16, check=check_body)
    router = APIRouter(route_class=route_class) if route_class else APIRouter()

    @router.post("/echo")
    async def echo(body: Body) -> dict[str, str]:
        return {"name": body.name}

    app.include_router(router)
    return app


class CountingLoads:
    """Counts the JSON parses the routes' request object makes (Starlette's ``Request.json``)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, data: bytes | str) -> object:
        self.calls += 1
        return json.loads(data)


@pytest.mark.parametrize(("route_class", "route_parses"), [(ParsedBodyRoute, 0), (None, 1)])
def test_a_body_the_edge_parsed_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch, route_class: type | None,
                                                    route_parses: int) -> None:
    loads = CountingLoads()
    monkeypatch.setattr(starlette.requests, "json", SimpleNamespace(loads=loads))  # what Request.json parses with
    with TestClient(_app(route_class)) as client:
        ok = client.post("/echo", json={"name": "a"})
        bad = client.post("/echo", json={"name": 1})
    assert ok.status_code == 200 and ok.json() == {"name": "a"}
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "name"  # validation as before
    assert loads.calls == 2 * route_parses
