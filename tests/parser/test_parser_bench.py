"""The parser benchmark runs end to end on tiny sizes and writes its three outputs."""

from __future__ import annotations

import json
from pathlib import Path

from bench.parser import main


def test_bench_parser_smoke(tmp_path: Path) -> None:
    rc = main(["--out", str(tmp_path), "--sizes", "500,1000", "--deltas", "4", "--formats", "hermes,kimi_k2", "--repeat", "1"])
    assert rc == 0
    data = json.loads((tmp_path / "parser.json").read_text())
    assert {(r["format"], r["size"]) for r in data["rows"]} == {("hermes", 500), ("hermes", 1000), ("kimi_k2", 500), ("kimi_k2", 1000)}
    assert "| hermes | 4 |" in (tmp_path / "parser.md").read_text()
    assert (tmp_path / "parser.png").stat().st_size > 1000
