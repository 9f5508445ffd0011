"""Every process runs on the configured event loop: uvloop by default, the stdlib loop on request."""

from __future__ import annotations

import asyncio

import pytest

from gateway.app import _loop
from runtime import aio
from runtime.config import ConfigError, load_config


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_processes_run_on_uvloop_unless_configured_otherwise() -> None:
    assert aio.run(_loop_module()).startswith("uvloop")
    assert aio.run(_loop_module(), "asyncio").startswith("asyncio")
    assert load_config().loop == "uvloop" and _loop(load_config()) == "uvloop"
    assert _loop(load_config(loop="asyncio")) == "asyncio"


def test_the_loop_and_websocket_compression_are_checked_choices() -> None:
    with pytest.raises(ConfigError, match="loop"):
        load_config(loop="trio")
    with pytest.raises(ConfigError, match="ws_compression"):
        load_config(ws_compression="gzip")
    assert load_config().ws_compression == "off"


def test_every_process_collects_its_youngest_generation_as_configured() -> None:
    import gc

    async def threshold() -> int:
        return gc.get_threshold()[0]

    before = gc.get_threshold()
    try:
        assert aio.run(threshold(), gc_young=load_config().gc_young) == 200_000
        assert gc.get_threshold()[1:] == before[1:]  # the older generations as they were
        assert aio.run(threshold(), gc_young=load_config(gc_young=5_000).gc_young) == 5_000
    finally:
        gc.set_threshold(*before)
    with pytest.raises(ConfigError, match="gc_young"):
        load_config(gc_young=0)
