"""Cluster fixtures: a real Valkey Cluster (3 masters, 3 replicas) per test module, and the stack on it.

The tool queues (arq) run on the shared plain embedded server (``queue_url``): the deployment
the README recommends.  Each test starts on flushed masters, and leaves the cluster as it found
it: after each test, dead nodes are restarted, the original masters take their slots back and
every node is checked to see that layout (``EmbeddedCluster.restore``), so that a test killing
masters or moving slots cannot leave the next one an orphaned master or a failed slot range.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from runtime import bus
from tests.conftest import Stack, make_stack
from turnstream.embedded_cluster import EmbeddedCluster


@pytest.fixture(scope="module")
def valkey_cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3, replicas=1, node_timeout_ms=1000) as c:
        yield c


@pytest.fixture(autouse=True)
def cluster_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Torn down after every other fixture of the test (its stacks stopped): put the layout back."""
    yield
    if "valkey_cluster" in request.fixturenames:
        request.getfixturevalue("valkey_cluster").restore()


@pytest.fixture
def cluster_url(valkey_cluster: EmbeddedCluster) -> str:
    valkey_cluster.wait_healthy()
    for node in valkey_cluster.masters():
        with redis.Redis(port=node.port) as c:
            c.flushall()
    return valkey_cluster.url


@pytest.fixture
async def rc(cluster_url: str):
    """An asyncio cluster client on the flushed cluster."""
    client = bus.connect(cluster_url)
    yield client
    await client.aclose()


@pytest.fixture
def cluster_stack(cluster_url: str, redis_url: str) -> Iterator:
    """``factory(**config)``: the whole pipeline on the cluster, its tool queues on the plain server."""
    made: list[Stack] = []

    def factory(**kw: object) -> Stack:
        s = make_stack(cluster_url, queue_url=redis_url, **kw)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.stop()
