"""Parts of the README generated from the code, so that they cannot drift from it.

    python -m turnstream.docs config     the configuration table (tests/turnstream/test_docs.py checks
                                         that README.md holds exactly this table)
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields

from runtime.config import KINDS, Config

_ALL = set(KINDS)


def _default(f) -> str:
    value = f.default_factory() if f.default is MISSING else f.default
    if isinstance(value, tuple):
        value = ",".join(value)
    if f.name == "model":
        return "`models/tiny-agent`"
    return f"`{value}`" if value != "" else "(empty)"


def config_table() -> str:
    """The README's configuration table: every key, its default, who reads it, what it does."""
    rows = ["| key | default | read by | meaning |", "|---|---|---|---|"]
    for f in fields(Config):
        kinds = f.metadata["kinds"]
        who = "all" if set(kinds) == _ALL else ", ".join(kinds)
        meaning = f.metadata["help"].replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        rows.append(f"| `{f.name}` | {_default(f)} | {who} | {meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if sys.argv[1:] != ["config"]:
        sys.exit("usage: python -m turnstream.docs config")
    print(config_table())
