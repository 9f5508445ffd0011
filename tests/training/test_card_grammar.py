"""The model card's grammar section comes from ``turnstream bench grammar``'s results and can be
refreshed in place."""

from __future__ import annotations

import json
from pathlib import Path

from training.card import grammar_section, refresh_grammar


def _row(unoffered: float, invalid: float) -> dict:
    return {"requests": 10, "calls": 9, "unoffered_rate": unoffered, "invalid_args_rate": invalid}


def _results(tmp_path: Path) -> Path:
    res = {label: {m: _row(0.5 if label == "before" else 0.0, 0.25 if label == "before" else 0.0)
                   for m in ("required", "named", "auto")} for label in ("before", "after")}
    res["heldout"] = {"before": _row(0.125, 0.0625), "after": _row(0.0, 0.0)}
    f = tmp_path / "grammar.json"
    f.write_text(json.dumps({"time": "2026-12-01T00:00:00Z", "max_tokens": 96, "results": res}))
    return f


def test_the_section_states_both_rates_before_and_after(tmp_path: Path) -> None:
    text = grammar_section(_results(tmp_path))
    assert "| held-out harder eval, call prompts, `auto` | before | 10 | 9 | 12.5 % | 6.2 % |" in text
    assert "| held-out harder eval, call prompts, `auto` | after | 10 | 9 | 0.0 % | 0.0 % |" in text
    assert text.count("| generated, unseen schemas,") == 6
    assert "no `turnstream bench grammar` run yet" in grammar_section(tmp_path / "missing.json")


def test_refresh_replaces_only_the_section(tmp_path: Path) -> None:
    card = tmp_path / "README.md"
    card.write_text("# card\n\nbefore\n" + grammar_section(tmp_path / "missing.json") + "\nafter\n")
    refresh_grammar(card, _results(tmp_path))
    text = card.read_text()
    assert text.startswith("# card\n\nbefore\n") and text.endswith("\nafter\n") and "12.5 %" in text
