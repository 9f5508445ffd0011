"""``redis+cluster://`` URLs and the configuration rules around them (no server needed)."""

from __future__ import annotations

import pytest

from runtime import cluster
from runtime.config import ConfigError, load_config


def test_cluster_url_lists_startup_nodes_and_credentials() -> None:
    nodes, opts = cluster.parse_url("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001/")
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert opts == {"ssl": False, "username": "app", "password": "s@cret"}
    assert cluster.parse_url("rediss+cluster://[::1]:7000")[1]["ssl"] is True
    assert cluster.is_cluster_url("redis+cluster://h:1") and not cluster.is_cluster_url("redis://h:1/0")


@pytest.mark.parametrize("url", ["redis+cluster://", "redis+cluster://host", "redis+cluster://h:1/3"])
def test_unusable_cluster_urls_are_refused(url: str) -> None:
    with pytest.raises(cluster.ClusterUrlError):
        cluster.parse_url(url)


def test_a_cluster_needs_a_plain_queue_server() -> None:
    with pytest.raises(ConfigError, match="queue_url: required"):
        load_config(redis_url="redis+cluster://h:7000")
    with pytest.raises(ConfigError, match="queue_url: invalid value"):
        load_config(redis_url="redis+cluster://h:7000", queue_url="redis+cluster://q:7000")
    with pytest.raises(ConfigError, match="redis_url: .*expected host:port"):
        load_config(redis_url="redis+cluster://nohost", queue_url="redis://q:6379/0")
    cfg = load_config(redis_url="redis+cluster://h:7000,h:7001", queue_url="redis://q:6379/0")
    assert cfg.arq_url == "redis://q:6379/0"


def test_keys_group_by_slot_only_on_a_cluster() -> None:
    ks = ["ts:s:{a}:ev", "ts:s:{a}:tok", "ts:s:{b}:ev"]
    assert sorted(map(len, cluster.by_slot(ks).values())) == [1, 2]
    assert cluster.read_groups(object(), ks) == [ks]  # one server: one read names them all


async def test_stream_reads_find_their_keys_without_asking_a_server() -> None:
    parser = cluster.connect("redis+cluster://127.0.0.1:1").commands_parser  # never connects
    assert await parser.get_keys("XREAD", "COUNT", 5, "BLOCK", 100, "STREAMS", "a", "b", "0-0", "1-0") == ("a", "b")
    assert await parser.get_keys("XREAD", b"COUNT", 5, b"STREAMS", "a", "0-0") == ("a",)  # as redis-py sends it
    assert await parser.get_keys("XREADGROUP", "GROUP", "g", "STREAMS", "COUNT", 1, "STREAMS", "s", ">") == ("s",)
