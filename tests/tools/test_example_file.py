"""``examples/tools.toml`` loads with the real loader and shows every kind of section it accepts."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from workers.tools.config import ToolsConfig, load_config, load_registry_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example_env(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The variables the example's ``${...}`` name, and its Python tool's folder on the path."""
    monkeypatch.setenv("TOOLS_DATA_DIR", "/srv/data")
    monkeypatch.setenv("TICKETS_TOKEN", "t0ken")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "shop_tools", raising=False)
    return EXAMPLES / "tools.toml"


def test_the_example_has_one_section_of_every_kind() -> None:
    raw = tomllib.loads((EXAMPLES / "tools.toml").read_text())
    assert set(raw) == set(ToolsConfig.__struct_fields__)
    for keyed in ("python", "mcp", "http", "tools"):
        assert len(raw[keyed]) == 1, keyed


def test_the_example_builds_its_registry(example_env: Path) -> None:
    config = load_config(example_env)
    assert config.mcp["files"].args[-1] == "/srv/data"  # ${TOOLS_DATA_DIR} expanded
    assert config.http["create_ticket"].headers == {"Authorization": "Bearer t0ken"}
    reg = load_registry_config(example_env)
    assert set(reg.names()) >= {"calculator", "get_time", "http_get", "lookup_order", "create_ticket"}
    assert "get_weather" not in reg.names()  # builtins = [...] picks only those
    order = reg.get("lookup_order")
    assert order is not None and order.pool == "default" and order.idempotent and order.description.startswith("Look up an order's")


def test_the_example_names_the_variables_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.tools.config import ToolConfigError

    monkeypatch.delenv("TOOLS_DATA_DIR", raising=False)
    with pytest.raises(ToolConfigError, match="TOOLS_DATA_DIR is not set"):
        load_config(EXAMPLES / "tools.toml")
