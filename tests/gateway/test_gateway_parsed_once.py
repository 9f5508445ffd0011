"""A request body is parsed once: the edge's strict check (``gateway.strict_json.check_body``)
keeps the value, and a ``ParsedBodyRoute`` validates that value instead of parsing the bytes again."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Annotated

import pytest
import starlette.requests
from fastapi import APIRouter, Depends, FastAPI, Request, routing
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from pydantic import BaseModel
from starlette.requests import HTTPConnection

import gateway.anthropic.api
import gateway.openai.api
import gateway.responses.api
import gateway.sessions.api
from gateway import errors
from gateway.limits import BodyLimitMiddleware
from gateway.strict_json import ParsedBodyRoute, _direct_call, check_body


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


class Chat(BaseModel):
    model: str
    n: int = 1
    tags: list[str] = []


async def _caller(conn: HTTPConnection) -> str:
    return conn.headers.get("x-who", "nobody")


Who = Annotated[str, Depends(_caller)]


def _chat_app(route_class: type | None, seen: list[tuple[str, Chat]]) -> FastAPI:
    """A generation-like endpoint: a JSON object body, the request, a dependency that reads the
    connection (as ``Caller`` does), a ``Response`` back."""
    async def caller(conn: HTTPConnection) -> str:
        return conn.headers.get("x-who", "nobody")

    app = FastAPI()
    errors.install(app)
    app.add_middleware(BodyLimitMiddleware, limit=1 << 16, check=check_body)
    router = APIRouter(route_class=route_class) if route_class else APIRouter()

    @router.post("/chat", response_model=None)
    async def chat(body: Chat, request: Request, who: Who) -> JSONResponse:
        seen.append((who, body))
        return JSONResponse({"who": who, "model": body.model, "n": body.n, "path": request.url.path})

    app.include_router(router)
    app.state.chat_route = router.routes[0]
    return app


BODIES = [{"model": "m"}, {"model": "m", "n": "3", "tags": ["a"]}, {"model": 1}, {"n": 2}, {"model": "m", "n": "x"},
          [1, 2], "text", None, 5, {}, {"model": "m", "extra": {"deep": [1]}}]


def test_a_generation_endpoint_is_called_directly_and_answers_as_through_fastapi(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct call (``ParsedBodyRoute``: no dependency solver) gives, for every body, the answer
    FastAPI's own handler gives, errors included; FastAPI's handler runs only for the bodies it refuses."""
    solved: list[int] = []
    real = routing.solve_dependencies

    async def counting(*args: object, **kw: object) -> object:
        solved.append(1)
        return await real(*args, **kw)

    monkeypatch.setattr(routing, "solve_dependencies", counting)
    seen_direct: list[tuple[str, Chat]] = []
    seen_stock: list[tuple[str, Chat]] = []
    direct_app, stock_app = _chat_app(ParsedBodyRoute, seen_direct), _chat_app(None, seen_stock)
    assert _direct_call(direct_app.state.chat_route) is not None
    kinds = [{"content-type": "application/json"}, {"content-type": "application/vnd.api+json; charset=utf-8"},
             {}, {"content-type": "text/plain"}]  # undeclared or not JSON: FastAPI refuses to read it as JSON
    with TestClient(direct_app) as direct, TestClient(stock_app) as stock:
        for body in BODIES:
            for kind in kinds:
                solved.clear()
                sent = {"content": json.dumps(body), "headers": {"x-who": "alice", **kind}}
                a = direct.post("/chat", **sent)
                direct_solved = len(solved)
                b = stock.post("/chat", **sent)
                assert (a.status_code, a.json()) == (b.status_code, b.json()), (body, kind)
                assert direct_solved == (0 if a.status_code == 200 else 1), (body, kind)  # the solver: refusals only
    assert [(w, c.model_dump()) for w, c in seen_direct] == [(w, c.model_dump()) for w, c in seen_stock]
    assert len(seen_direct) == 3 * 2  # the three valid bodies, each once per JSON content type


def test_dependency_overrides_still_apply() -> None:
    """A test that overrides a dependency (``app.dependency_overrides``) gets FastAPI's handler, which applies it."""
    app = _chat_app(ParsedBodyRoute, seen := [])

    async def bob() -> str:
        return "bob"

    app.dependency_overrides[_caller] = bob
    with TestClient(app) as client:
        assert client.post("/chat", json={"model": "m"}, headers={"x-who": "alice"}).json()["who"] == "bob"
    assert [w for w, _ in seen] == ["bob"]


def test_only_endpoints_of_that_kind_are_called_directly() -> None:
    """Path or query parameters, a body that is not one model, an answer FastAPI serialises: its handler."""
    direct = {(r.path, m) for mod in (gateway.openai.api, gateway.anthropic.api, gateway.responses.api,
                                      gateway.sessions.api)
              for r in mod.router.routes for m in r.methods if _direct_call(r) is not None}
    assert direct == {("/v1/chat/completions", "POST"), ("/v1/messages", "POST"), ("/v1/responses", "POST")}
    echo = APIRouter(route_class=ParsedBodyRoute)

    @echo.post("/echo")
    async def answer(body: Body, request: Request) -> dict[str, str]:
        return {"name": body.name}

    assert _direct_call(echo.routes[0]) is None  # it answers a dict, which FastAPI serialises
