"""The FastAPI application: state is all in Redis; one app (and one relay reader) per process.

Request path, outermost first: ``RequestMetrics`` (counts ``/v1/*`` by API and status) -> ``ErrorBoundary`` (an unexpected error: one log, a 500) ->
``HeaderLimitMiddleware`` (431) -> ``AuthMiddleware`` (``/v1/*``: API key, rate limit) ->
``BodyLimitMiddleware`` (413; JSON checked by ``gateway.strict_json``) -> routes
(``gateway.openai.api``, ``gateway.responses.api``, ``gateway.anthropic.api``, ``gateway.sessions.api``,
``gateway.sessions.streams``).
Open: ``/healthz`` (the process is up), ``/readyz`` (Redis answers and a decoder is alive),
``/metrics``, the playground (``/``, also ``HEAD``: Claude Code probes it), the OpenAPI schema.
Every error is in OpenAI's shape, Anthropic's on the ``/v1/messages`` routes (``gateway.errors``).
The process beats ``ts:gateway:hb:{id}`` like the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from gateway import errors, strict_json
from gateway.anthropic.api import router as anthropic_router
from gateway.auth import AuthMiddleware, KeyRing
from gateway.context import ContextCheck
from gateway.limits import BodyLimitMiddleware, HeaderLimitMiddleware, RateLimiter
from gateway.metrics import CONTENT_TYPE, Metrics, RequestMetrics
from gateway.openai.api import router as openai_router
from gateway.relay import Relay, RelayUnavailable
from gateway.responses.api import router as responses_router
from gateway.sessions.api import router as sessions_router
from gateway.sessions.ops import SessionOps
from gateway.sessions.streams import router as streams_router
from gateway.state import GatewayState, State
from gateway.validation import served_model
from runtime import aio, bus
from runtime.config import Config
from runtime.heartbeat import Heartbeat, live
from runtime.tool_catalog import ToolCatalog

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"


def create_app(cfg: Config) -> FastAPI:
    """The gateway app for ``cfg`` (keys are read now, so a bad key file fails at start)."""
    keyring = KeyRing.from_config(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis, metrics = bus.connect(cfg.redis_url), Metrics(served_model(cfg))
        reader = bus.connect(cfg.redis_url)
        batcher = bus.Batcher(redis)  # what requests send at once leaves in one round trip
        context = ContextCheck(redis, cfg.model)
        s = app.state.gateway = GatewayState(
            cfg, keyring, int(time.time()), redis, metrics, ToolCatalog(redis),
            RateLimiter(redis, cfg.rate_limit_rps, cfg.rate_limit_burst),
            SessionOps(cfg, redis, metrics, batcher=batcher, live=context.limits.live_now), context,
            Relay(redis, reader, queue_size=cfg.relay_queue_size, on_event=metrics.observe, batcher=batcher))
        await s.relay.start()
        s.heartbeat = Heartbeat(s.redis, "gateway", f"gateway-{s.relay.gateway_id}", cfg.heartbeat_ms,
                                cfg.heartbeat_ttl_ms, lambda: {"port": cfg.port, "subscribers": s.relay.subscribers})
        await s.heartbeat.beat()
        beats = asyncio.create_task(s.heartbeat.loop())
        shared = asyncio.create_task(_sync_metrics(metrics, s.relay)) if metrics.shared_dir else None
        log.info("gateway up on %s:%d (relay %s)", cfg.host, cfg.port, s.relay.gateway_id)
        try:
            yield
        finally:
            beats.cancel()
            if shared is not None:
                shared.cancel()
            with contextlib.suppress(Exception):
                await s.heartbeat.stop()
            await s.relay.stop()
            await reader.aclose()
            await s.redis.aclose()

    app = FastAPI(title="turnstream", version="0.1.0", lifespan=lifespan,
                  description="Serving runtime for multi-turn tool-calling agents: OpenAI-compatible chat "
                              "completions and a session API with resumable event streams.")
    errors.install(app)
    app.add_exception_handler(RelayUnavailable, _unavailable)
    app.add_middleware(BodyLimitMiddleware, limit=cfg.max_request_bytes, check=strict_json.check_body)
    app.add_middleware(AuthMiddleware)  # authenticate before reading the body
    app.add_middleware(HeaderLimitMiddleware, limit=cfg.max_header_bytes)
    app.add_middleware(errors.ErrorBoundary)
    app.add_middleware(RequestMetrics)  # added last = outermost: it sees every response's status
    app.include_router(openai_router)
    app.include_router(responses_router)
    app.include_router(anthropic_router)
    app.include_router(sessions_router)
    app.include_router(streams_router)
    _add_open_routes(app)
    return app


async def _unavailable(request: Request, exc: Exception) -> Response:
    return errors.ApiError(503, str(exc), type="server_error", code="unavailable",
                           headers={"Retry-After": "1"}).response(request.url.path)


async def _sync_metrics(metrics: Metrics, relay: Relay, every_s: float = 2.0) -> None:
    """With several processes on the port, a scrape reaches one: the others' relay figures are this old."""
    while True:
        await asyncio.sleep(every_s)
        metrics.sync(relay)


def serve(cfg: Config) -> None:
    """Run the gateway under uvicorn until SIGINT/SIGTERM (``server``)."""
    aio.tune_gc(cfg.gc_young)
    server(cfg).run(sockets=sockets(cfg))


def server(cfg: Config, loop: str | None = None) -> Any:
    """The gateway's uvicorn server for ``cfg``, on ``loop`` (uvicorn's name; ``"none"``: the running one, for a
    process that serves the gateway beside other work).  Its ``serve()`` (or ``run()``) lasts until SIGINT/SIGTERM.

    On the signal every relayed stream is ended first (WebSocket close 1012, SSE end, a
    chat completion in flight gets an error), so open connections close and the process exits
    at once instead of waiting for them; clients resume on another replica.
    """
    import uvicorn

    app = create_app(cfg)
    srv = uvicorn.Server(uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level=cfg.log_level.lower(), log_config=None, ws="websockets-sansio",
        loop=loop or _loop(cfg), ws_max_size=cfg.max_request_bytes,
        ws_per_message_deflate=cfg.ws_compression == "deflate", timeout_graceful_shutdown=5))
    uvicorn_exit = srv.handle_exit

    def handle_exit(sig: int, frame: object) -> None:
        uvicorn_exit(sig, frame)  # type: ignore[arg-type]
        state = getattr(app.state, "gateway", None)
        if state is not None:
            state.relay.drain_threadsafe()

    srv.handle_exit = handle_exit  # type: ignore[method-assign]
    return srv


def sockets(cfg: Config) -> list[socket.socket] | None:
    """The sockets the gateway serves on: one shared with other processes (``reuse_port``), else uvicorn's own."""
    return [shared_socket(cfg.host, cfg.port)] if cfg.reuse_port == "on" else None


def shared_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT: the kernel spreads the port's new connections
    over every process that bound it so (same user), as vLLM's API servers share theirs."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    return sock


def _loop(cfg: Config) -> str:
    """uvicorn's name for the configured event loop (``runtime.aio``)."""
    if cfg.loop == "uvloop" and importlib.util.find_spec("uvloop") is not None:
        return "uvloop"
    return "asyncio"


def _add_open_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """200 while the process is up (liveness)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "not ready: why, in OpenAI's error shape"}})
    async def readyz(state: State) -> dict[str, object]:
        """200 when Redis answers and at least one decoder is alive (readiness); else 503 saying why."""
        try:
            await state.redis.ping()
            beats = await live(state.redis)
        except bus.REDIS_DOWN as exc:
            raise errors.ApiError(503, f"redis unavailable: {exc}", type="server_error", code="not_ready") from None
        counts = {k: sum(1 for b in beats.values() if b.get("kind") == k) for k in ("gateway", "decode", "parser",
                                                                                   "tools")}
        if not counts["decode"]:
            raise errors.ApiError(503, "no decode worker is alive", type="server_error", code="not_ready")
        return {"status": "ready", "live": counts}

    @app.get("/metrics", tags=["ops"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format"}})
    async def metrics(s: State) -> Response:
        """Prometheus metrics (see ``gateway.metrics``)."""
        await s.metrics.refresh(s.redis, await s.catalog.pools(), s.relay)
        return Response(s.metrics.render(), media_type=CONTENT_TYPE)

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def playground() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:  # browsers ask for it on any page, /docs included
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
