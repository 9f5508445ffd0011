"""The registry as text, for ``turnstream tools list``."""

from __future__ import annotations

import json
from typing import Any

from workers.tools.registry import Registry
from workers.tools.spec import ToolSpec

def format_registry(reg: Registry, *, json_schema: bool = False) -> str:
    """The registry as text, by pool, with each tool's policy and parameters (or full JSON Schema)."""
    pools = sorted(reg.pools())
    lines = [f"{len(reg)} tools in {len(pools)} pool(s): {', '.join(pools)}"]
    for pool in pools:
        lines += ["", f"== pool {pool} =="]
        for name in reg.names():
            spec = reg.get(name)
            if spec is not None and spec.pool == pool:
                lines += ["", *_format_spec(spec, json_schema)]
    return "\n".join(lines)


def _format_spec(spec: ToolSpec, json_schema: bool) -> list[str]:
    policy = f"{spec.source}, timeout {spec.timeout_s:g}s, " + \
        (f"idempotent, retries {spec.retries}" if spec.idempotent else "not idempotent")
    lines = [f"{spec.name}  ({policy})", f"  {spec.description}"]
    if json_schema:
        return lines + ["  " + line for line in json.dumps(spec.parameters, indent=2).splitlines()]
    required = set(spec.parameters.get("required", []))
    for pname, schema in spec.parameters.get("properties", {}).items():
        default = f" = {json.dumps(schema['default'])}" if "default" in schema else ""
        need = ", required" if pname in required else ""
        about = f" - {schema['description']}" if schema.get("description") else ""
        lines.append(f"    {pname}: {type_label(schema)}{need}{default}{about}")
    return lines


def type_label(schema: dict[str, Any]) -> str:
    """A short human label for a JSON Schema: ``string``, ``integer | null``, ``array of number``."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(type_label(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {type_label(schema['items'])}"
    return kind
