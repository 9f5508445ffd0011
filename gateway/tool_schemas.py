"""A tool's ``parameters``, checked before it is stored: a JSON Schema the tool workers and the
chat template can use.

* bounded: at most ``MAX_SCHEMA_DEPTH`` nested JSON containers and ``MAX_SCHEMA_NODES`` values
  (jsonschema checks and validates recursively; a deeper schema would exhaust the stack);
* valid against its dialect's meta-schema (``$schema``, default draft 2020-12);
* every ``$ref`` resolves inside the schema (nothing is fetched: a remote reference is refused).

An agent sends the same tools with every turn, and checking one against its meta-schema costs about
a millisecond: ``check`` remembers the verdicts on the last ``CHECKED_MAX`` schemas it saw (keyed by
their canonical JSON, so key order does not matter), after bounding their size.

``normalise`` writes the implicit parts out (a function without ``parameters`` takes no
arguments; an object schema without ``properties`` has none), so that chat templates that read
``parameters.properties`` render every function.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import jsonschema
import referencing.jsonschema
from referencing import Registry
from referencing.exceptions import Unresolvable

MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_NODES = 4000
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}
_DATA_KEYWORDS = ("const", "enum", "default", "examples")  # values that are data, not subschemas
_ROOT = "urn:turnstream:tool-parameters"
CHECKED_MAX = 4096  # verdicts remembered (schemas are bounded: at most MAX_SCHEMA_NODES values each)
_checked: OrderedDict[str, str] = OrderedDict()  # canonical JSON -> "" (usable) or the problem


def check(schema: dict[str, Any]) -> None:
    """Raise ValueError (naming the problem) unless ``schema`` is usable (see the module doc)."""
    _check_size(schema)  # first: bounds what the key's encoding may recurse into
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=repr)  # repr: a TOML date
    problem = _checked.get(key)
    if problem is None:
        try:
            _check_uncached(schema)
            problem = ""
        except ValueError as exc:
            problem = str(exc)
        _checked[key] = problem
        if len(_checked) > CHECKED_MAX:
            _checked.popitem(last=False)
    else:
        _checked.move_to_end(key)
    if problem:
        raise ValueError(problem)


def _check_uncached(schema: dict[str, Any]) -> None:
    if not isinstance(schema.get("$schema", ""), str):
        raise ValueError("$schema must be a string: the URI of a JSON Schema dialect")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
    except RecursionError:  # a shape that recurses more per level than the bounds allow for
        raise ValueError(f"nested too deeply (at most {MAX_SCHEMA_DEPTH} levels)") from None
    _check_refs(schema)


def normalise(schema: dict[str, Any] | None) -> dict[str, Any]:
    """``schema`` with the implicit parts written out (a copy; no schema: no arguments)."""
    if schema is None:
        return dict(NO_ARGUMENTS)
    if schema.get("type") == "object" and "properties" not in schema:
        return {**schema, "properties": {}}
    return schema


def _check_size(schema: Any) -> None:
    stack, nodes = [(schema, 1)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"too large (more than {MAX_SCHEMA_NODES} values)")
        if not isinstance(node, (dict, list)):
            continue
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"nested too deeply (more than {MAX_SCHEMA_DEPTH} levels)")
        stack += [(c, depth + 1) for c in (node.values() if isinstance(node, dict) else node)]


def _check_refs(schema: dict[str, Any]) -> None:
    spec = referencing.jsonschema.specification_with(schema.get("$schema", ""), default=referencing.jsonschema.DRAFT202012)
    resolver = Registry().with_resource(_ROOT, spec.create_resource(schema)).resolver(base_uri=_ROOT)
    stack: list[tuple[Any, Any]] = [(schema, resolver)]
    while stack:
        node, resolver = stack.pop()
        if isinstance(node, list):
            stack += [(v, resolver) for v in node]
        if not isinstance(node, dict):
            continue
        if node is not schema and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(spec.create_resource(node))
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except (Unresolvable, LookupError, TypeError, AttributeError, ValueError):  # a pointer through a value: 1["x"]
                raise ValueError(f"$ref {ref[:200]!r} resolves to nothing in this schema") from None
        stack += [(v, resolver) for k, v in node.items() if k not in _DATA_KEYWORDS]
