"""The request checks every API makes, in one place, so that the three APIs refuse the same
request with the same error: the model a request names, a field whose value this server does
not implement, tool names that collide, an output format the decoder cannot constrain to, and
a ``tool_choice`` that forces a call nobody can make.  Each raises an ``ApiError`` (a 4xx);
the Anthropic routes render it in Anthropic's shape (``gateway.errors``)."""

from __future__ import annotations

import functools
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gateway.errors import ApiError
from runtime.config import Config

DEFAULT_MAX_TOKENS = 1024  # a request that sends no limit: the APIs' common default (capped by the config)
FORMATS = ("text", "json_object", "json_schema")  # the output formats the decoder's grammar knows


def served_model(cfg: Config) -> str:
    """The model id this deployment serves (``served_model_name``, else the model directory's name)."""
    return _served(cfg.served_model_name, cfg.model)


def accepted_models(cfg: Config) -> frozenset[str]:
    """The ids a request may name the served model by: its served name, its directory's name, its path."""
    return _accepted(cfg.served_model_name, cfg.model)


@functools.lru_cache(maxsize=16)  # every request names its model: no path parsing each time
def _served(served_name: str, model: str) -> str:
    return served_name or Path(model).name or "turnstream"


@functools.lru_cache(maxsize=16)
def _accepted(served_name: str, model: str) -> frozenset[str]:
    return frozenset({_served(served_name, model), Path(model).name, model})


def check_model(cfg: Config, model: str) -> None:
    """A 404 unless a request's ``model`` names the served model."""
    if model not in accepted_models(cfg):
        raise ApiError(404, f"model {model[:80]!r} not found; this server serves {served_model(cfg)!r}",
                       param="model", code="model_not_found")


def unsupported(param: str, what: str) -> ApiError:
    """A 400 naming a request field whose value this server does not implement."""
    return ApiError(400, f"{param}: {what} is not supported by this server", param=param, code="unsupported_value")


def invalid(param: str, message: str) -> ApiError:
    """A 400 for a value that is wrong whatever the server (``param: message``)."""
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")


def unique_names(names: list[str], what: str = "tool names") -> None:
    """A 400 when two tools share a name: a call names one tool, so the model could not tell them apart."""
    if len(set(names)) != len(names):
        raise invalid("tools", f"{what} must be unique")


def check_format_type(param: str, kind: object) -> None:
    """A 400 unless an output format (``response_format``, ``text.format``) is one the decoder constrains to."""
    if kind not in FORMATS:
        raise unsupported(param, f"type {str(kind)[:40]!r}")


def forced_tool(required: bool, name: str | None, names: Collection[str]) -> str | None:
    """The function an OpenAI-shaped ``tool_choice`` names (``name``; None when it names none), after
    the checks all three OpenAI routes make: a choice that forces a call (``required``, or a named
    function) needs tools, and a named function must be one of ``names``."""
    if (required or name is not None) and not names:
        raise ApiError(400, "tool_choice: only allowed when tools are specified", param="tool_choice",
                       code="invalid_value")
    if name is not None and name not in names:
        raise ApiError(400, f"tool_choice: function {name[:64]!r} is not in tools", param="tool_choice",
                       code="invalid_value")
    return name


def type_tag(value: Any, kinds: Collection[str], missing: str | None = None) -> str:
    """The tag a union's discriminator reads off a body part: its ``type`` when it is one of ``kinds``,
    else "other" (the part's own model then refuses what it is not: a 400).  A ``type`` that is not a
    string -- a list, an object -- is "other" too: a set lookup would raise on it (a 500)."""
    kind = value.get("type", missing) if isinstance(value, dict) else getattr(value, "type", missing)
    return kind if isinstance(kind, str) and kind in kinds else "other"
