"""Failover: a master is SIGKILLed while agent sessions stream (see tests/cluster/failover.py).

The reduced run (one kill) is part of ``make test``; the full one (three kills, each dead node
restarted as a replica) runs with ``make chaos-cluster``.
"""

from __future__ import annotations

import pytest

from tests.chaos import TOOLS_TOML
from tests.cluster.failover import run_failover


def _stack(cluster_stack, tmp_path):
    toml = tmp_path / "tools.toml"
    toml.write_text(TOOLS_TOML)
    stack = cluster_stack(replay_rate=60, tools_config=str(toml))
    for kind in ("decode", "parser", "tools"):
        stack.start(kind)  # two of each worker kind, one gateway
    return stack


async def test_failover_reduced(cluster_stack, valkey_cluster, tmp_path) -> None:
    stack = _stack(cluster_stack, tmp_path)
    verdict = await run_failover(stack, valkey_cluster, sessions=6, kills=1, start_over_s=3.0, timeout_s=150)
    print("failover reduced:", verdict.summary())
    assert len(verdict.kills) == 1 and verdict.kills[0].sessions
    assert verdict.problems == [], "\n".join(verdict.problems)


@pytest.mark.chaos
async def test_failover_full(cluster_stack, valkey_cluster, tmp_path) -> None:
    stack = _stack(cluster_stack, tmp_path)
    verdict = await run_failover(stack, valkey_cluster, sessions=24, kills=3, start_over_s=20.0, timeout_s=600,
                                 restart=True)
    print("failover full:", verdict.summary())
    assert len(verdict.kills) == 3
    assert verdict.problems == [], "\n".join(verdict.problems)
