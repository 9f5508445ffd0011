"""Chaos: concurrent agent sessions survive SIGKILLs of every worker type (see tests/chaos.py).

The reduced variant runs in ``make test``; the full one with ``make chaos``.
"""

from __future__ import annotations

import pytest

from tests.chaos import TOOLS_TOML, run_chaos


def _stack(stack_factory, tmp_path, **kw):
    toml = tmp_path / "tools.toml"
    toml.write_text(TOOLS_TOML)
    stack = stack_factory(replay_rate=60, tools_config=str(toml), **kw)
    for kind in ("decode", "parser", "tools"):
        stack.start(kind)  # two of each worker kind, one gateway
    return stack


async def test_chaos_reduced(stack_factory, tmp_path) -> None:
    stack = _stack(stack_factory, tmp_path)
    verdict = await run_chaos(stack, sessions=6, start_over_s=8.0, interval=(1.0, 2.5), seed=7, timeout_s=150)
    assert len(verdict.kills) >= 3, verdict.kills
    assert verdict.problems == [], "\n".join(verdict.problems)


@pytest.mark.chaos
async def test_chaos_full(stack_factory, tmp_path) -> None:
    stack = _stack(stack_factory, tmp_path)
    verdict = await run_chaos(stack, sessions=30, start_over_s=40.0, interval=(0.5, 2.0), seed=11, timeout_s=600)
    print(f"chaos full: {len(verdict.kills)} kills, {verdict.reconnects} client reconnects, "
          f"{len(verdict.problems)} problems")
    assert len(verdict.kills) >= 15
    assert verdict.problems == [], "\n".join(verdict.problems)
