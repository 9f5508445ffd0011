"""The routing benchmark's figures come out of its rows as stated (pure part; the run itself is `turnstream bench routing`)."""

from __future__ import annotations

import json

from bench.routing import _result, summarize


def test_summary_counts_follow_ups_only() -> None:
    rows = [{"turn": 0, "prompt": 100, "cached": 0, "ttft": 0.1, "same_decoder": False},
            {"turn": 1, "prompt": 300, "cached": 100, "ttft": 0.2, "same_decoder": True},
            {"turn": 1, "prompt": 300, "cached": 0, "ttft": 0.4, "same_decoder": False},
            {"turn": 2, "prompt": 500, "cached": 300, "ttft": 0.3, "same_decoder": True}]
    s = summarize(rows)
    assert s["requests"] == 3 and s["prompt_tokens"] == 1100 and s["computed_tokens"] == 700
    assert abs(s["cached_share"] - 400 / 1100) < 1e-9 and abs(s["same_decoder"] - 2 / 3) < 1e-9
    assert s["by_turn"][1]["computed"] == 250 and s["by_turn"][0]["cached_share"] == 0


def test_tool_results_are_json_and_grow_with_the_token_budget() -> None:
    small, big = _result("Oslo", 1, 50), _result("Oslo", 1, 400)
    assert json.loads(small)["city"] == "Oslo" and len(big) > 4 * len(small) > 0
