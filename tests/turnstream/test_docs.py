"""The README cannot drift from the code where the code can say it."""

from __future__ import annotations

from pathlib import Path

from turnstream.docs import config_table

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_readme_configuration_table_is_the_codes() -> None:
    assert config_table() in README, "regenerate it: python -m turnstream.docs config"
