"""The FastAPI application: state is all in Redis; one app per gateway process."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI

from workers import bus
from workers.config import Config
from workers.session import Sessions
from workers.tools import default_registry

from gateway.sessions import router as sessions_router

log = logging.getLogger(__name__)


def create_app(cfg: Config) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.cfg = cfg
        app.state.redis = bus.connect(cfg.redis_url)
        app.state.sessions = Sessions(app.state.redis)
        app.state.registry = default_registry()
        log.info("gateway up on %s:%d", cfg.host, cfg.port)
        yield
        await app.state.redis.aclose()

    app = FastAPI(title="turnstream", version="0.1.0", lifespan=lifespan)
    app.include_router(sessions_router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        await app.state.redis.ping()
        return {"status": "ok"}

    return app
