"""Gateway fixtures: a module-scoped stack on its own Redis database (``GATEWAY_CONFIG`` and
``GATEWAY_KINDS`` in a test module override the defaults)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gateway_harness import ALL_KINDS, GwStack, start_stack


@pytest.fixture(scope="module")
def gw(redis_server, request) -> Iterator[GwStack]:
    overrides = getattr(request.module, "GATEWAY_CONFIG", {})
    kinds = getattr(request.module, "GATEWAY_KINDS", ALL_KINDS)
    stack = start_stack(redis_server.url, kinds, **overrides)
    yield stack
    stack.stop()
